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
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator

from ... import ownblocks, timeutil
from ...errors import UsageError
from ...records import Memory

# A memory's text limit is store.MAX_TEXT; longer messages are split below it, into at most
# MAX_PARTS parts: the rest of a longer one (a pasted log) is left out with a note, so that one
# message cannot turn into dozens of memories to embed (docs/decisions/0011-bad-input-imports.md).
PART_LIMIT = 90_000
MAX_PARTS = 3
MESSAGE_LIMIT = PART_LIMIT * MAX_PARTS
NAMED = 5  # records left out that an import names (the rest are counted)


Skip = Callable[[str, str], None]  # (where, why): a record left out, for Entry.skip


class BadRecord(Exception):
    """A record of an export (a conversation, a message, a line) whose fields do not have the
    types its format documents: left out and counted, never a traceback."""


@dataclass
class Skips:
    """Records an importer left out of one file: how many, and the first few with the reason."""

    count: int = 0
    named: list[str] = field(default_factory=list)

    def add(self, where: str, why: str) -> None:
        self.count += 1
        if len(self.named) < NAMED:
            self.named.append(f"{where}: {why}")


def kind_of(value: Any) -> str:
    """A JSON value's type, as a message names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


_NAMES = {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number", bool: "true/false"}


def _is(value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool) and bool not in types:
        return False  # JSON's true is no number
    return isinstance(value, types)


def need(obj: dict[str, Any], key: str, *types: type) -> Any:
    """`obj[key]` when it has one of `types`; None when it is absent or null; BadRecord when it
    is anything else (a field that decides what the record is: an id, a link, the text)."""
    value = obj.get(key)
    if value is None or _is(value, types):
        return value
    names = " or ".join(dict.fromkeys(_NAMES.get(t, t.__name__) for t in types))
    raise BadRecord(f"{key!r} is {kind_of(value)}, not {names}")


def optional(obj: dict[str, Any], key: str, *types: type) -> Any:
    """`obj[key]` when it has one of `types`, else None: a descriptive field (a title, a model
    name) of the wrong type is read as absent."""
    value = obj.get(key)
    return value if value is not None and _is(value, types) else None


def ident(value: Any, what: str) -> str | None:
    """An id as text: a string or a whole number; None when absent; BadRecord otherwise."""
    if value is None or value == "":
        return None
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return str(value)
    raise BadRecord(f"{what} is {kind_of(value)}, not a string")


def named(value: Any, fallback: str) -> str:
    """How a message names a record: its id when it has a short one, else its place."""
    if isinstance(value, (str, int)) and not isinstance(value, bool) and 0 < len(str(value)) <= 60:
        return repr(str(value)) if isinstance(value, str) else str(value)
    return fallback


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
    unreadable: str | None = None    # why it cannot be opened (an encrypted zip member), if so
    skips: Skips = field(default_factory=Skips)  # records its reader left out (BadRecord)
    nothing: str | None = None       # why its reader found nothing to import, with what it counted
    records_read: int | None = None  # set by a reader that counts what it read: lines, messages, rows
    why_none: str | None = None      # set by a reader that read records and kept none of them: why

    def counted(self, records: int, why_none: str | None = None) -> None:
        """What a reader read, and, should it keep nothing, why: an import that stores nothing
        from a file it recognised says so instead of a bare "imported 0"."""
        self.records_read = records
        if why_none is not None:
            self.why_none = why_none

    def skip(self, where: str, why: str) -> None:
        self.skips.add(where, why)

    def skipper(self, within: str) -> Skip:
        """`skip` for the parts of one record: their places prefixed with the record's."""
        return lambda where, why: self.skip(f"{within}, {where}", why)

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
            if self.name.endswith(".zst"):
                data = unzstd(f, self.name, MAX_UNZSTD)
            elif self.name.endswith(".gz"):
                data = gunzip(f, self.name, MAX_UNZSTD)
            else:
                data = f.read()
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
        except RecursionError:
            raise UsageError(f"{self.name}: JSON nested too deeply") from None

    def read_jsonl(self) -> Iterator[tuple[int, Any]]:
        """(line number, value) for each non-empty line. A line that is not JSON (a transcript
        still being written ends in half a line) is left out and counted, as a bad record is."""
        for n, line in enumerate(self.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                yield n, json.loads(line)
            except json.JSONDecodeError as exc:
                self.skip(f"line {n}", f"not valid JSON ({exc.msg})")
            except RecursionError:
                self.skip(f"line {n}", "JSON nested too deeply")


# A .zst or .gz file is decompressed up to this many bytes: a hostile one (a few KB that expand
# without end) is refused, not read into memory. Codex's own rollouts are far smaller (benchmarks/import_formats.py).
MAX_UNZSTD = 256 * 1024 * 1024
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _zstandard():
    try:
        import zstandard
    except ImportError:  # pragma: no cover - a declared dependency
        raise UsageError("reading .zst files needs the zstandard package: pip install zstandard") from None
    return zstandard


def unzstd(stream: IO[bytes], name: str, limit: int = MAX_UNZSTD) -> bytes:
    """A zstd stream's content, at most `limit` bytes: more is a usage error, found after reading
    `limit` + 1 bytes and no further. The decoder's window is bounded too (128 MiB, zstd's own
    default limit), so a frame cannot ask for more memory than that."""
    zstandard = _zstandard()
    out = bytearray()
    try:
        reader = zstandard.ZstdDecompressor(max_window_size=1 << 27).stream_reader(stream, read_across_frames=True)
        while chunk := reader.read(1 << 20):
            out += chunk
            if len(out) > limit:
                raise UsageError(f"{name}: decompresses to more than {limit:,} bytes; pmem reads no more "
                                 "(decompress it yourself if you trust it)")
    except zstandard.ZstdError as exc:
        raise UsageError(f"{name}: not a readable zstd file ({exc})") from None
    return bytes(out)


def gunzip(stream: IO[bytes], name: str, limit: int = MAX_UNZSTD) -> bytes:
    """A gzip stream's content (OpenMemory's memories.jsonl.gz), at most `limit` bytes, as unzstd."""
    import gzip
    import zlib

    out = bytearray()
    try:
        with gzip.GzipFile(fileobj=stream) as g:
            while chunk := g.read(1 << 20):
                out += chunk
                if len(out) > limit:
                    raise UsageError(f"{name}: decompresses to more than {limit:,} bytes; pmem reads no more "
                                     "(decompress it yourself if you trust it)")
    except (OSError, EOFError, zlib.error):
        raise UsageError(f"{name}: not a gzip file") from None
    return bytes(out)


def unzstd_head(head: bytes, n: int = 65536) -> bytes:
    """The first bytes a zstd file's first bytes decompress to, for telling its format; b"" when
    they are not zstd."""
    if not head.startswith(ZSTD_MAGIC):
        return b""
    zstandard = _zstandard()
    try:
        reader = zstandard.ZstdDecompressor(max_window_size=1 << 27).stream_reader(io.BytesIO(head))
        out = bytearray()
        while len(out) < n:
            chunk = reader.read(n - len(out))
            if not chunk:
                break
            out += chunk
        return bytes(out)
    except zstandard.ZstdError:
        return b""


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


def split_text(text: str, limit: int = PART_LIMIT, max_parts: int = MAX_PARTS) -> list[str]:
    """Parts of at most `limit` characters, cut at paragraph, line or word boundaries; at most
    `max_parts` of them: what is left after those ends the last part as a note of its length."""
    text = text.strip()
    if len(text) <= limit:
        return [text] if text else []
    parts: list[str] = []
    while len(text) > limit:
        if len(parts) == max_parts - 1:
            return [*parts, _cut(text, limit)]
        cut = max(text.rfind("\n\n", 0, limit), text.rfind("\n", 0, limit), text.rfind(" ", 0, limit))
        if cut < limit // 2:
            cut = limit
        parts.append(text[:cut].strip())
        text = text[cut:].strip()
    if text:
        parts.append(text)
    return [p for p in parts if p]


LEFT_OUT = "[pmem import: {n:,} more characters were left out]"


def _cut(text: str, limit: int) -> str:
    """The start of `text` with a note of how much was left out, within `limit` characters."""
    room = limit - len(LEFT_OUT.format(n=len(text))) - 2
    cut = max(text.rfind("\n", 0, room), text.rfind(" ", 0, room))
    if cut < room // 2:
        cut = room
    return text[:cut].rstrip() + "\n\n" + LEFT_OUT.format(n=len(text) - cut)


def left_out(part: str) -> bool:
    """Whether a part ends in the note `split_text` writes when it cut a message."""
    return part.endswith(" more characters were left out]") and "[pmem import: " in part[-80:]


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
    than a memory may hold becomes several consecutive parts. pmem's own blocks (a hook's, a
    recall's: pmem.ownblocks), which hosts store inside the user's message, are taken out: a
    turn that was only such a block is no memory."""
    thread = f"{fmt}:{conversation_id}"
    base_tags = {fmt, *tags}
    last = created_at
    pos = 0
    for n, turn in enumerate(turns):
        at = turn.created_at or last
        last = at
        parts = split_text(ownblocks.strip(turn.text))
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
    Raises UsageError naming `label` when the file holds no list; a conversation that is no
    object, or whose id is no id, is left out and counted (`entry.skips`)."""
    data = entry.read_json()
    if isinstance(data, dict):
        data = data.get("conversations", [data])
    if not isinstance(data, list):
        raise UsageError(f"{entry.name}: expected a list of {label} conversations")
    for n, conversation in enumerate(data, start=1):
        if not isinstance(conversation, dict):
            entry.skip(f"conversation {n}", f"is {kind_of(conversation)}, not an object")
            continue
        if key not in conversation:
            continue  # another kind of record (a project, a user) in the same list
        try:
            cid = next((ident(conversation.get(k), repr(k)) for k in ("uuid", "conversation_id", "id")
                        if conversation.get(k) not in (None, "")), None)
        except BadRecord as exc:
            entry.skip(f"conversation {n}", str(exc))
            continue
        if cid is None:
            entry.skip(f"conversation {n}", "no id (uuid, conversation_id or id)")
            continue
        yield cid, conversation


def export_threads(entry: Entry, key: str, label: str,
                   turns: Callable[[dict, Skip], list[Turn]]) -> Iterator[tuple[str, dict, list[Turn]]]:
    """export_conversations, with each conversation's kept turns (`turns(conversation, skip)`); a
    conversation whose turns cannot be read at all is left out and counted."""
    for cid, conversation in export_conversations(entry, key, label):
        where = f"conversation {named(cid, '?')}"
        try:
            kept = turns(conversation, entry.skipper(where))
        except BadRecord as exc:
            entry.skip(where, str(exc))
            continue
        yield cid, conversation, kept
