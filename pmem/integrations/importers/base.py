"""What the importers share: where their input comes from, stable ids, dates, and how a
conversation turns into episodic memories.

Every importer reads `Entry` objects (a file on disk, a member of a zip) and yields
`pmem.records.Memory` objects whose ids derive from the source's own ids, so importing the same
export twice stores nothing new and a newer export adds only what is new.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator

from ... import timeutil
from ...errors import UsageError
from ...records import Memory

# A memory's text limit is store.MAX_TEXT; longer messages are split (never cut) below it.
PART_LIMIT = 90_000


@dataclass
class Entry:
    """One file of the input: on disk, or a member of a zip archive."""

    name: str                        # path relative to what the user named (or the file name)
    opener: Callable[[], IO[bytes]]
    size: int = 0
    mtime: str | None = None         # ISO time of the file (or zip member)
    path: Path | None = None         # set when the entry is a real file (sqlite needs one)
    origin: str = ""                 # what the user named: the file, folder or zip, absolute
    standalone: bool = False         # the user named this very file (not a folder or archive)

    @property
    def location(self) -> str:
        """Where the file is, for a source: its absolute path, or the archive's path / member."""
        if self.path is not None:
            return str(self.path.resolve())
        return f"{self.origin}/{self.name}" if self.origin else self.name

    def open(self) -> IO[bytes]:
        return self.opener()

    def head(self, n: int = 65536) -> bytes:
        with self.open() as f:
            return f.read(n)

    def read_text(self) -> str:
        with self.open() as f:
            data = f.read()
        if self.name.endswith(".gz"):
            import gzip

            try:
                data = gzip.decompress(data)
            except OSError:
                raise UsageError(f"{self.name}: not a gzip file") from None
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise UsageError(f"{self.name} is not UTF-8 text") from None

    def read_json(self) -> Any:
        text = self.read_text()
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{self.name}: not valid JSON (line {exc.lineno}: {exc.msg})") from None

    def read_jsonl(self) -> Iterator[tuple[int, Any]]:
        """(line number, object) for each non-empty line; a broken line is a usage error."""
        for n, line in enumerate(self.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                yield n, json.loads(line)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{self.name}: line {n}: not valid JSON ({exc.msg})") from None


def file_entry(path: Path, name: str | None = None, origin: str = "") -> Entry:
    st = path.stat()
    return Entry(name=name or path.name, opener=lambda: open(path, "rb"), size=st.st_size,
                 mtime=timeutil.iso(datetime.fromtimestamp(st.st_mtime, timezone.utc)), path=path,
                 origin=origin or str(path.resolve()), standalone=not origin)


def bytes_entry(name: str, data: bytes, mtime: str | None = None, origin: str = "") -> Entry:
    return Entry(name=name, opener=lambda: io.BytesIO(data), size=len(data), mtime=mtime, origin=origin,
                 standalone=True)


def stable_id(*parts: Any) -> str:
    """16 hex digits from the source's own ids: the same message always gets the same id."""
    key = "\x1f".join(str(p) for p in parts)
    return hashlib.sha1(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def when(value: Any) -> str | None:
    """A source's timestamp as pmem stores it: epoch seconds (or milliseconds) or an ISO string.
    None when there is none or it cannot be read (the caller falls back to a coarser date)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        if value <= 0:
            return None
        seconds = value / 1000 if value > 1e11 else value
        try:
            return timeutil.iso(datetime.fromtimestamp(seconds, timezone.utc))
        except (OverflowError, OSError, ValueError):
            return None
    if isinstance(value, str) and value.strip():
        text = value.strip()
        if re.fullmatch(r"\d+(\.\d+)?", text):
            return when(float(text))
        try:
            return timeutil.parse_when(text.replace(" UTC", "Z"))
        except UsageError:
            return None
    return None


def split_text(text: str, limit: int = PART_LIMIT) -> list[str]:
    """Parts of at most `limit` characters, cut at paragraph, line or word boundaries."""
    text = text.strip()
    if len(text) <= limit:
        return [text] if text else []
    parts: list[str] = []
    while len(text) > limit:
        cut = max(text.rfind("\n\n", 0, limit), text.rfind("\n", 0, limit), text.rfind(" ", 0, limit))
        if cut < limit // 2:
            cut = limit
        parts.append(text[:cut].strip())
        text = text[cut:].strip()
    if text:
        parts.append(text)
    return [p for p in parts if p]


def make_memory(*, id: str, text: str, tier: str = "archival", tags: Iterable[str] = (),
                source: str | None = None, meta: dict[str, Any] | None = None,
                created_at: str | None = None, updated_at: str | None = None,
                thread: str | None = None, thread_pos: int | None = None,
                scope: str | None = None) -> Memory:
    """A Memory as an importer hands it over: unsorted tags sorted, dates defaulted, and the
    conversation's thread and the project's scope in their fields."""
    return Memory(id=id, text=text, tier=tier, tags=sorted(set(tags)), source=source, meta=dict(meta or {}),
                  created_at=created_at or "", updated_at=updated_at or created_at or "",
                  thread=thread, thread_pos=thread_pos if thread is not None else None, scope=scope)


@dataclass
class Turn:
    """One message of a conversation, as an importer reads it."""

    message_id: str
    role: str                 # user | assistant
    speaker: str              # the label written before the text: "User", "ChatGPT", a model name
    text: str
    created_at: str | None = None
    extra: dict[str, Any] | None = None


def conversation_memories(fmt: str, conversation_id: str, turns: list[Turn], *,
                          title: str | None = None, created_at: str | None = None,
                          tags: Iterable[str] = (), scope: str | None = None,
                          meta: dict[str, Any] | None = None) -> Iterator[Memory]:
    """One episodic memory per turn ("Speaker: text"), in order, threaded by the conversation.

    A turn without its own time takes the one before it (or the conversation's); a turn longer
    than a memory may hold becomes several consecutive parts."""
    thread = f"{fmt}:{conversation_id}"
    base_tags = {fmt, *tags}
    last = created_at
    pos = 0
    for n, turn in enumerate(turns):
        at = turn.created_at or last
        last = at
        parts = split_text(turn.text)
        for k, part in enumerate(parts):
            m_meta: dict[str, Any] = {"kind": "turn", "format": fmt, "conversation": conversation_id,
                                      "message_id": turn.message_id, "role": turn.role,
                                      "speaker": turn.speaker, "turn": n}
            if title:
                m_meta["title"] = title
            if len(parts) > 1:
                m_meta["part"] = k
            if meta:
                m_meta.update(meta)
            if turn.extra:
                m_meta.update(turn.extra)
            yield make_memory(id=stable_id(fmt, conversation_id, turn.message_id, k if len(parts) > 1 else ""),
                              text=f"{turn.speaker}: {part}", tier="episodic", tags=base_tags,
                              source=thread, meta=m_meta, created_at=at, thread=thread, thread_pos=pos,
                              scope=scope)
            pos += 1


def slug(text: str) -> str:
    """A tag from a name: lower case, words joined by '-'."""
    return re.sub(r"[^\w/]+", "-", text.strip().lower()).strip("-")


def export_conversations(entry: Entry, key: str, label: str) -> Iterator[tuple[str, dict]]:
    """(id, conversation) for each conversation of a chat export file (a list, or an object with
    `conversations`) that has the field `key`; the id is `uuid`, `conversation_id` or `id`.
    Raises UsageError naming `label` when the file holds no list."""
    data = entry.read_json()
    if isinstance(data, dict):
        data = data.get("conversations", [data])
    if not isinstance(data, list):
        raise UsageError(f"{entry.name}: expected a list of {label} conversations")
    for conversation in data:
        if not isinstance(conversation, dict) or key not in conversation:
            continue
        cid = conversation.get("uuid") or conversation.get("conversation_id") or conversation.get("id")
        if cid:
            yield str(cid), conversation
