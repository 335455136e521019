"""`pmem import --extract`: pmem's extraction run over each imported conversation.

Each conversation's user turns go to `pmem.extract.extract` as JSON messages with their dates, so
facts are grounded in what the person said (the assistant's words are context, not the person's
facts), reconciled against what is stored, and dated by the message. Relative dates in a fact are
resolved against the date it was said (`pmem.dates`): "last month", said on 2026-11-12, is stored
as "in October 2026".

Each conversation is its own extraction run (its own `pmem undo`); a conversation already
extracted (an extraction source with the conversation as its `source`) is skipped, so an
interrupted run resumes where it stopped.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ... import dates
from ...records import TIERS, Memory

if TYPE_CHECKING:
    from ...store import MemoryStore

Progress = Callable[[int, int], None]


def conversations(records: Sequence[Memory]) -> dict[str, list[Memory]]:
    """Imported turns grouped by conversation thread, in order."""
    threads: dict[str, list[Memory]] = defaultdict(list)
    for m in records:
        if m.meta.get("kind") == "turn" and m.thread:
            threads[m.thread].append(m)
    for turns in threads.values():
        turns.sort(key=lambda m: m.thread_pos or 0)
    return dict(threads)


def _messages(turns: list[Memory]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in turns:
        if m.meta.get("role") != "user":
            continue
        speaker = str(m.meta.get("speaker") or "")
        text = m.text[len(speaker) + 2:] if speaker and m.text.startswith(speaker + ": ") else m.text
        if out and out[-1]["_turn"] == m.meta.get("turn"):  # parts of one long message
            out[-1]["content"] += " " + text
            continue
        out.append({"role": "user", "content": text, "date": m.created_at, "_turn": m.meta.get("turn")})
    for msg in out:
        del msg["_turn"]
    return out


def extracted_already(store: "MemoryStore", thread: str) -> bool:
    from ...store import Filter

    for m in store.list(Filter(tiers=TIERS, source=thread, include_forgotten=True), limit=None):
        info = m.meta.get("extract")
        if isinstance(info, dict) and info.get("role") == "source":
            return True
    return False


def extract_conversations(store: "MemoryStore", records: Sequence[Memory], *, generator=None,
                          progress: Progress | None = None, allow_secret: bool = False) -> dict[str, Any]:
    """Extract facts from each imported conversation not extracted yet; returns counts and the
    relative dates resolved (each with the phrase, its replacement and the fact)."""
    from ... import extract as ex

    threads = conversations(records)
    counts: dict[str, int] = defaultdict(int)
    resolved: list[dict[str, str]] = []
    if generator is None and threads:
        from ...generate import load_generator

        generator = load_generator(settings=store.config)
    for n, (thread, turns) in enumerate(threads.items()):
        messages = _messages(turns)
        if not messages or extracted_already(store, thread):
            counts["conversations_skipped"] += 1
            if progress:
                progress(n + 1, len(threads))
            continue
        at = turns[0].created_at or None

        def review(fact, at=at) -> str:
            said = fact.date or at
            if not said:
                return fact.text
            text, changes = dates.resolve_relative(fact.text, said)
            for c in changes:
                resolved.append({"phrase": c.phrase, "resolved": c.text, "said": said, "fact": text})
            return text

        fmt = str(turns[0].meta.get("format") or thread.split(":", 1)[0])
        result = ex.extract(store, json.dumps(messages, ensure_ascii=False), generator=generator,
                            tags=[fmt, "imported"], at=at, source=thread, review=review, allow_secret=allow_secret)
        counts["conversations"] += 1
        for key, value in result.counts().items():
            counts[key] += value
        if progress:
            progress(n + 1, len(threads))
    return {"counts": dict(counts), "dates_resolved": len(resolved), "resolved": resolved}
