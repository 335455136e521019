"""`pmem import --extract`: pmem's extraction run over each imported conversation.

Each conversation's user turns go to `pmem.extract.extract` as JSON messages with their dates, so
facts are grounded in what the person said (the assistant's words are context, not the person's
facts), reconciled against what is stored, and dated by the message. Relative dates in a fact are
resolved against the date it was said (`pmem.extract.resolve_dates`, as for any extraction): "last
month", said on 2026-11-12, is stored as "in October 2026".

Each conversation is its own extraction run (its own `pmem undo`); a conversation already
extracted (an extraction source with the conversation as its `source`) is skipped, so an
interrupted run resumes where it stopped.
"""

from __future__ import annotations

import json
import zipfile
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ...records import TIERS, Memory

if TYPE_CHECKING:
    from ...service import MemoryStore

Progress = Callable[[int, int], None]


CHAT_FORMATS = ("chatgpt", "claude-ai", "claude-code")


def chat_export(path: str | Path) -> list[Memory] | None:
    """The turns of a chat export (a ChatGPT or Claude.ai export, zipped or not, or Claude Code
    transcripts: a file or a folder), read by the importers and told by their shape; None when
    `path` holds no chat export (then it is text to extract from as it is)."""
    from . import registry

    p = Path(path).expanduser()
    if p.is_file() and p.suffix.lower() not in (".json", ".jsonl", ".zip") and not zipfile.is_zipfile(p):
        return None
    if not p.exists():
        return None
    chats = [registry.FORMATS[name] for name in CHAT_FORMATS]
    found = []
    for entry in registry.entries(p):
        registry.refuse_unopenable(entry, chats)
        if entry.unreadable:
            continue
        try:
            if registry.detect(entry, chats):
                found.append(entry)
        except registry.READ_ERRORS:
            continue
    if not found:
        return None
    return registry.load(found).records


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

    for m in store.list_memories(Filter(tiers=TIERS, source=thread, include_forgotten=True), limit=None):
        info = m.meta.get("extract")
        if isinstance(info, dict) and info.get("role") == "source":
            return True
    return False


def extract_conversations(store: "MemoryStore", records: Sequence[Memory], *, generator=None,
                          progress: Progress | None = None, allow_secret: bool = False, tags: Sequence[str] = (),
                          dry_run: bool = False, review=None,
                          on_result: Callable[[str, Any], None] | None = None) -> dict[str, Any]:
    """Extract facts from each conversation not extracted yet (`pmem import --extract`, and
    `pmem extract` given a chat export); returns counts and the relative dates resolved (each with
    the phrase, its replacement, when it was said and the fact). `on_result(thread, result)` sees
    each conversation's `pmem.extract.ExtractResult`; `review` is passed to `pmem.extract.extract`.
    Unless `allow_secret`, a turn holding a machine secret is left out (`messages_skipped_secrets`):
    one pasted key does not stop the run after the conversations before it were stored."""
    from ... import extract as ex
    from ... import secretscan
    from .registry import unstorable

    counts: dict[str, int] = defaultdict(int)
    kept = [m for m in records if unstorable(m) is None]  # what the store cannot hold stops no run either
    if len(kept) < len(records):
        counts["messages_skipped_unstorable"] = len(records) - len(kept)
    records = kept
    if not allow_secret:  # a message holding a key is left out and counted, as `pmem import` does
        kept = [m for m in records if secretscan.memory_secret(m) is None]
        if len(kept) < len(records):
            counts["messages_skipped_secrets"] = len(records) - len(kept)
        records = kept
    threads = conversations(records)
    resolved: list[dict[str, str]] = []
    if generator is None and threads:
        from ...models.generate import load_generator

        generator = load_generator(settings=store.config, cache=store.vectors.models)
    for n, (thread, turns) in enumerate(threads.items()):
        messages = _messages(turns)
        if not messages or extracted_already(store, thread):
            counts["conversations_skipped"] += 1
            if progress:
                progress(n + 1, len(threads))
            continue
        text = json.dumps(messages, ensure_ascii=False)
        if len(text) > ex.MAX_INPUT:  # refused by extract, after the conversations before it: left out here
            counts["conversations_skipped_too_long"] += 1
            if progress:
                progress(n + 1, len(threads))
            continue
        at = turns[0].created_at or None
        fmt = str(turns[0].meta.get("format") or thread.split(":", 1)[0])
        result = ex.extract(store, text, generator=generator,
                            tags=[fmt, "imported", *tags], at=at, source=thread, review=review, dry_run=dry_run,
                            allow_secret=allow_secret)
        resolved.extend(result.dates)
        if on_result:
            on_result(thread, result)
        counts["conversations"] += 1
        for key, value in result.counts().items():
            counts[key] += value
        if progress:
            progress(n + 1, len(threads))
    return {"counts": dict(counts), "dates_resolved": len(resolved), "resolved": resolved}
