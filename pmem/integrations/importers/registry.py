"""Which importer reads what: inputs (a file, a folder, a zip) become entries, each entry's format
is told by its shape (or forced), and the memories read are stored in resumable batches.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import zipfile
import zlib
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator, Protocol, Sequence

from ... import timeutil, transfer
from ...errors import DatabaseError, UsageError
from ...records import TIERS, Memory
from ...store import MAX_TEXT, MAX_THREAD, Filter
from . import aider, chatgpt, claude_ai, claude_code, codex, cursor, gemini, llm_logs, markdown, mcp_memory, mem0
from .base import NAMED, Entry, Skips, bytes_entry, file_entry, left_out

Progress = Callable[[int, int], None]
READ_ERRORS = (OSError, zipfile.BadZipFile, zlib.error, EOFError)


class Importer(Protocol):
    NAME: str
    DESCRIPTION: str

    def accepts(self, name: str) -> bool: ...
    def sniff(self, name: str, head: bytes) -> bool: ...
    def read(self, entry: Entry) -> Iterator[Memory]: ...


class _Native:
    """pmem's own formats (`pmem export`), read by pmem.transfer."""

    def __init__(self, name: str, description: str, suffixes: tuple[str, ...]):
        self.NAME, self.DESCRIPTION, self._suffixes = name, description, suffixes

    def accepts(self, name: str) -> bool:
        return name.endswith(self._suffixes) or name == "-"

    def sniff(self, name: str, head: bytes) -> bool:
        text = head.lstrip()
        if self.NAME == "jsonl":
            return text.startswith(b"{") and b'"text"' in text.split(b"\n", 1)[0]
        return text.startswith(b"# pmem export") or b"<!-- pmem {" in head

    def read(self, entry: Entry) -> Iterator[Memory]:
        """Lossless, as written; read line by line, so a bad record stops the reading there."""
        with entry.open() as raw:
            yield from transfer.parse(io.TextIOWrapper(raw, encoding="utf-8-sig"), self.NAME, entry.name)


JSONL = _Native("jsonl", "pmem JSONL (pmem export; one {\"text\": ...} per line)", (".jsonl", ".json", ".ndjson"))
MD = _Native("md", "pmem Markdown (pmem export --format md)", (".md", ".markdown", ".txt"))

# Sniffing order: the most specific shapes first. codex, cursor and aider know their files by
# their first line's exact shape, so no other reader's file passes for theirs (nor theirs for
# pmem's JSONL, whose test is looser).
IMPORTERS: tuple[Importer, ...] = (llm_logs, chatgpt, claude_ai, codex, gemini, claude_code, cursor, mcp_memory,
                                   mem0, aider, JSONL, MD, markdown)  # type: ignore[assignment]
FORMATS: dict[str, Importer] = {i.NAME: i for i in IMPORTERS}


def known_formats() -> str:
    return ", ".join(FORMATS)


def get(name: str) -> Importer:
    try:
        return FORMATS[name]
    except KeyError:
        raise UsageError(f"unknown format {name!r}: use one of {known_formats()}") from None


# -- inputs -----------------------------------------------------------------------------------

# Hidden files that are a tool's history, not a folder's clutter: a folder import reads them.
KNOWN_HIDDEN = frozenset({aider.FILE_NAME})


def _hidden(parts: Sequence[str]) -> bool:
    *folders, name = parts or [""]
    return any(p.startswith(".") and p not in (".", "..") for p in folders) or (
        name.startswith(".") and name not in KNOWN_HIDDEN)


# What Python's zipfile can inflate; Windows Explorer writes large files with Deflate64 (9).
_ZIP_METHODS = {zipfile.ZIP_STORED: "", zipfile.ZIP_DEFLATED: "", zipfile.ZIP_BZIP2: "", zipfile.ZIP_LZMA: "",
                9: "compressed with Deflate64 (as Windows Explorer writes large files)"}


def _unopenable(info: zipfile.ZipInfo) -> str | None:
    """Why a zip member cannot be read here (encrypted, an unknown method), or None."""
    if info.flag_bits & 0x1:
        return "encrypted"
    method = _ZIP_METHODS.get(info.compress_type)
    if method is None:
        return f"compressed with method {info.compress_type}, which pmem cannot read"
    return method or None


def _zip_entries(path: Path, data: bytes | None = None) -> list[Entry]:
    origin = str(path.resolve()) if data is None else str(path)
    try:
        zf = zipfile.ZipFile(io.BytesIO(data) if data is not None else path)
    except (zipfile.BadZipFile, *READ_ERRORS, NotImplementedError, ValueError):
        raise UsageError(f"{path.name}: not a readable zip archive") from None
    out = []
    for info in zf.infolist():
        if info.is_dir() or _hidden(info.filename.split("/")) or "__MACOSX" in info.filename:
            continue
        try:
            mtime = timeutil.iso(datetime(*info.date_time, tzinfo=timezone.utc))
        except ValueError:
            mtime = None
        out.append(Entry(name=info.filename, opener=functools.partial(zf.open, info), size=info.file_size,
                         mtime=mtime, origin=origin, unreadable=_unopenable(info)))
    return out


MAX_FILES = 20_000  # a folder with more is not an export or a notes folder (a home, /tmp): refused
_SKIP_DIRS = {"node_modules", "__pycache__", "site-packages"}


def _folder_entries(p: Path) -> list[Entry]:
    root = str(p.resolve())
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(p):  # unreadable folders are passed over
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS)
        for name in filenames:
            if not name.startswith(".") or name in KNOWN_HIDDEN:
                found.append(Path(dirpath) / name)
                if len(found) > MAX_FILES:
                    raise UsageError(f"{p} holds more than {MAX_FILES:,} files; name the export's or the notes' "
                                     "own folder (or its zip)")
    out: list[Entry] = []
    for f in sorted(found):
        try:
            if not f.is_file():
                continue  # sockets, pipes, broken links
            if f.suffix.lower() == ".zip":
                out.extend(_zip_entries(f))
            else:
                out.append(file_entry(f, f.relative_to(p).as_posix(), origin=root))
        except (UsageError, *READ_ERRORS):
            continue  # gone since the walk, unreadable, or a broken archive: not part of the import
    return out


def entries(path: str | Path) -> list[Entry]:
    """The files an input names: itself, a folder's files (recursively, hidden ones left out),
    or a zip's members."""
    p = Path(path).expanduser()
    try:
        if p.is_dir():
            return _folder_entries(p)
        if not p.is_file():
            raise UsageError(f"no such file or folder: {path}")
        if zipfile.is_zipfile(p) and p.suffix.lower() not in (".db", ".sqlite", ".sqlite3"):
            return _zip_entries(p)
        return [file_entry(p)]
    except READ_ERRORS as exc:
        raise UsageError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None


def detect(entry: Entry, candidates: Sequence[Importer] = IMPORTERS, head: bytes | None = None) -> Importer | None:
    """The first importer that takes this file's name and recognises its first bytes."""
    head = entry.head() if head is None else head
    for imp in candidates:
        if imp.accepts(entry.name) and _sniff(imp, entry, head):
            return imp
    return None


def _sniff(imp: Importer, entry: Entry, head: bytes) -> bool:
    """`imp.sniff`, or its `sniff_entry` where it has one: a format whose marks need not be in
    the first bytes (a SQLite database's schema) looks at the file itself."""
    by_entry = getattr(imp, "sniff_entry", None)
    return bool(by_entry(entry, head)) if by_entry is not None else imp.sniff(entry.name, head)


# -- loading ----------------------------------------------------------------------------------

@dataclass
class ImportPlan:
    """What an input holds, read and checked, nothing stored yet."""

    records: list[Memory] = field(default_factory=list)
    formats: Counter = field(default_factory=Counter)   # files read per format
    kinds: Counter = field(default_factory=Counter)     # memories per kind (turn, observation...)
    skipped_files: list[str] = field(default_factory=list)
    duplicates: int = 0
    filtered: int = 0
    skipped_records: int = 0                            # records of the wrong shape, left out
    skipped_named: list[str] = field(default_factory=list)  # the first few, with the reason
    cut: int = 0                                        # messages past MESSAGE_LIMIT, their rest left out
    empty: list[str] = field(default_factory=list)      # files read in a format that gave no memory, and why

    def to_dict(self) -> dict[str, Any]:
        return {"read": len(self.records), "formats": dict(self.formats), "kinds": dict(self.kinds),
                "skipped_files": len(self.skipped_files), "duplicates": self.duplicates,
                "outside_dates": self.filtered, "skipped_records": self.skipped_records,
                "skipped_named": list(self.skipped_named), "cut_messages": self.cut,
                "empty_files": list(self.empty)}

    def add(self, memories: Iterable[Memory], seen: set[str], since: str | None, until: str | None,
            now: str) -> None:
        for m in memories:
            if m.id and m.id in seen:
                self.duplicates += 1
                continue
            if m.id:
                seen.add(m.id)
            at = m.created_at or now
            if (since and at < since) or (until and at > until):
                self.filtered += 1
                continue
            self.records.append(m)
            self.kinds[m.meta.get("kind", "memory")] += 1
            if left_out(m.text):
                self.cut += 1

    def add_skips(self, entry: Entry, several: bool) -> None:
        self.skipped_records += entry.skips.count
        room = NAMED - len(self.skipped_named)
        prefix = f"{entry.name}: " if several else ""
        self.skipped_named += [prefix + x for x in entry.skips.named[:max(room, 0)]]


def refuse_unopenable(entry: Entry, readers: Sequence[Importer] = IMPORTERS) -> None:
    """A zip member that cannot be opened (`entry.unreadable`) and that one of `readers` would
    take by its name refuses the import: importing the rest would leave that part out without a
    word. Others (an image) are skipped as files of no known format are."""
    if entry.unreadable and any(imp.accepts(entry.name) for imp in readers if imp is not markdown):
        raise UsageError(f"{Path(entry.origin).name or 'the archive'}: {entry.name} is {entry.unreadable}, "
                         "which pmem cannot open: unzip it with a tool that can and import the folder")


def nothing_kept(entry: Entry, fmt: str) -> str:
    """What an import says of a file it recognised and took nothing from: its reader's own words
    (`entry.nothing`), what it counted (`entry.counted`), or the records of the wrong shape."""
    if entry.nothing:
        return f"{entry.name}: {entry.nothing}"
    if entry.records_read is None and entry.why_none is None:
        if entry.skips.count:
            return f"{entry.name}: {entry.skips.count} records read, each of the wrong shape (left out)"
        return f"{entry.name}: no records in it"
    read = f"read {entry.records_read:,} records" if entry.records_read is not None else "read it"
    why = entry.why_none or (f"{entry.skips.count:,} records of the wrong shape were left out" if entry.skips.count
                             else "it holds no message or note pmem keeps")
    return f"{entry.name} ({fmt}): {read}, kept none: {why}"


def load(source: str | Path | list[Entry], fmt: str | None = None, *, since: str | None = None,
         until: str | None = None, progress: Progress | None = None) -> ImportPlan:
    """Read an input into memories. `fmt` forces a format; otherwise each file's shape decides.

    A single file nobody recognises is a usage error naming the known formats; in a folder or
    archive such files are skipped and counted (an export also holds images, HTML, settings).
    Records of the wrong shape are left out and counted (`skipped_records`) by each reader's
    rule; a file that is not its format's shape at all is a usage error."""
    forced = get(fmt) if fmt else None
    items = source if isinstance(source, list) else entries(source)
    if not items:
        raise UsageError(f"{source}: no files to import (hidden folders are skipped)")
    single = len(items) == 1 and items[0].standalone
    plan = ImportPlan()
    seen: set[str] = set()
    now = timeutil.now_iso()
    for entry in items:
        refuse_unopenable(entry, (forced,) if forced else IMPORTERS)
    for n, entry in enumerate(items):
        if entry.unreadable:
            plan.skipped_files.append(entry.name)
            continue
        try:
            head = entry.head()
        except READ_ERRORS as exc:
            if single:
                raise UsageError(f"cannot read {entry.name}: {getattr(exc, 'strerror', None) or exc}") from None
            plan.skipped_files.append(entry.name)
            continue
        if single and not head.strip():  # an empty file: valid, and nothing to import
            plan.formats[(forced or (JSONL if entry.name.endswith(JSONL._suffixes) else MD)).NAME] += 1
            continue
        if forced is not None:
            imp = forced if single or (forced.accepts(entry.name) and _sniff(forced, entry, head)) else None
        else:
            imp = detect(entry, head=head)
            if imp is markdown and single and not markdown.looks_like_note(head):
                imp = MD  # one plain Markdown file: pmem's reader (an item a memory, headings as tags)
        if imp is None:
            plan.skipped_files.append(entry.name)
            continue
        plan.formats[imp.NAME] += 1
        try:
            memories = list(imp.read(entry))
        except READ_ERRORS as exc:
            raise UsageError(f"cannot read {entry.name}: {getattr(exc, 'strerror', None) or exc}") from None
        plan.add(memories, seen, since, until, now)
        plan.add_skips(entry, several=not single)
        if not memories and imp not in (JSONL, MD):
            plan.empty.append(nothing_kept(entry, imp.NAME))
        if progress:
            progress(n + 1, len(items))
    if not plan.formats:
        what = items[0].name if len(items) == 1 else (str(source) if not isinstance(source, list) else "the input")
        raise UsageError(f"{what}: not a format pmem knows; known formats: {known_formats()} "
                         "(--format forces one)")
    return plan


def load_bytes(name: str, data: bytes, fmt: str | None = None, **kw) -> ImportPlan:
    """`load` for stdin: with no format and no recognisable shape, pmem JSONL or Markdown."""
    if data[:4] == b"PK\x03\x04":
        return load(_zip_entries(Path(name or "stdin.zip"), data), fmt, **kw)
    entry = bytes_entry(name or "-", data)
    if fmt is None:
        fmt = _stdin_format(entry.head(), data)
    return load([entry], fmt, **kw)


def _stdin_format(head: bytes, data: bytes | None = None) -> str:
    imp = next((i for i in IMPORTERS if i.NAME not in ("llm", "markdown") and i.sniff("-", head)), None)
    if imp is None:
        imp = JSONL if (data if data is not None else head).lstrip()[:1] == b"{" else MD
    return imp.NAME


MAX_STDIN = 2_000_000_000  # bytes of another tool's export read from stdin (pmem's own formats stream)


class _Prefixed(io.RawIOBase):
    """A stream's first bytes, already read to tell its format, then the rest of it."""

    def __init__(self, head: bytes, rest: IO[bytes]):
        self._head, self._rest = memoryview(head), rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        read = getattr(self._rest, "read1", self._rest.read)  # what has arrived: a pipe may stay open
        data = read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


def load_stream(stream: IO[bytes], fmt: str | None = None, *, name: str = "-", since: str | None = None,
                until: str | None = None) -> ImportPlan:
    """`load` for a stream (stdin). pmem's own JSONL and Markdown are parsed as they arrive, so
    a bad or oversized record is refused without reading what follows it; another tool's
    export is read whole (at most MAX_STDIN bytes) and loaded as `load_bytes` does."""
    forced = get(fmt) if fmt else None
    head = stream.read(65536)
    native = forced.NAME if forced in (JSONL, MD) else None
    if forced is None and head[:4] != b"PK\x03\x04":
        guess = _stdin_format(head)
        native = guess if guess in (JSONL.NAME, MD.NAME) else None
    if native is None:
        rest = stream.read(MAX_STDIN - len(head) + 1)
        if len(head) + len(rest) > MAX_STDIN:
            raise UsageError(f"stdin holds more than {MAX_STDIN:,} bytes; import the file itself")
        return load_bytes("" if name == "-" else name, head + rest, fmt, since=since, until=until)
    if not head.strip():
        plan = ImportPlan()
        plan.formats[native] += 1
        return plan
    text = io.TextIOWrapper(io.BufferedReader(_Prefixed(head, stream)), encoding="utf-8-sig")
    plan = ImportPlan()
    plan.formats[native] += 1
    plan.add(transfer.parse(text, native, "stdin" if name == "-" else name), set(), since, until, timeutil.now_iso())
    return plan


# -- storing ----------------------------------------------------------------------------------

@dataclass
class ImportResult:
    read: int
    imported: int
    skipped_existing: int
    operation: str | None
    skipped_secrets: int = 0
    skipped_unstorable: int = 0
    unstorable_named: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"read": self.read, "imported": self.imported, "skipped_existing": self.skipped_existing,
                "operation": self.operation, "skipped_secrets": self.skipped_secrets,
                "skipped_unstorable": self.skipped_unstorable, "unstorable_named": list(self.unstorable_named)}


def unstorable(m: Memory) -> str | None:
    """Why the store would refuse `m`, or None. Checked for every record before the first is
    embedded, so that one message pmem cannot store (a NUL, a lone surrogate escape, a thread
    name past its limit) is left out instead of stopping an import half-way, every time."""
    text = m.text.strip() if isinstance(m.text, str) else ""
    if not text:
        return "no text"
    if "\x00" in text:
        return "the text holds a NUL character"
    if len(text) > MAX_TEXT:
        return f"the text is {len(text):,} characters (the limit is {MAX_TEXT:,})"
    if m.tier not in TIERS:
        return f"unknown tier {m.tier!r}"
    if m.thread is not None and (not isinstance(m.thread, str) or "\x00" in m.thread or len(m.thread) > MAX_THREAD):
        return f"the thread name is not text of at most {MAX_THREAD} characters"
    if not all(isinstance(t, str) for t in m.tags) or not all(
            v is None or isinstance(v, str) for v in (m.source, m.scope)):
        return "a tag, the source or the scope is not text"
    try:
        json.dumps(m.to_dict(), ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return "text that is not valid UTF-8 (a lone surrogate escape)"
    except (TypeError, ValueError, RecursionError):
        return "meta that JSON cannot hold"
    return None


def existing(store, records: Sequence[Memory]) -> set[str]:
    ids = [m.id for m in records if m.id]
    found: set[str] = set()
    for start in range(0, len(ids), 20_000):
        found |= store.existing_ids(ids[start:start + 20_000])
    return found


SECRET_POLICIES = ("refuse", "skip", "allow")
MERGE_AFTER = 1000  # memories an import stores, and a tenth of the store, from which it merges the keyword index


def secrets_policy(formats: Sequence[str], allow: bool) -> str:
    """pmem's own files are refused whole when a record holds a machine secret (as `pmem add`
    would); other tools' histories, where a pasted key is common, lose only those messages."""
    if allow:
        return "allow"
    return "refuse" if set(formats) <= {JSONL.NAME, MD.NAME} else "skip"


def merge_due(store, stored: int) -> bool:
    """Should an import that stored `stored` memories merge the keyword index? A large import
    leaves it in many segments, each read by every keyword search: merged then (~1.3 s at
    100,000 memories), not at the next dream."""
    return stored >= MERGE_AFTER and stored * 10 >= store.count(Filter.everything())


def run_import(store, records: Sequence[Memory], *, summary: str = "import", batch: int = 512,
               progress: Progress | None = None, secrets: str = "refuse", merge: bool = True,
               english_later: bool = False) -> ImportResult:
    """Store what is not stored yet, `batch` memories per transaction, all in one operation.

    One `pmem undo` takes the whole import back. An interrupted import keeps the batches it
    committed, and running it again stores only the rest (ids come from the source). A record
    the store cannot hold (`unstorable`) is left out and counted. A machine secret
    (pmem.secretscan) in any field a record stores refuses the whole import before anything is
    stored (`secrets="refuse"`), leaves that record out (`"skip"`, counted), or is stored (`"allow"`).
    With `merge`, the keyword index is merged at the end where `merge_due` (best effort: the
    import is committed, and another writer may hold the lock); without, the caller does it.
    With `english_later`, English memories get no second vector here: the caller fills them after
    (pmem.fill.kick; docs/decisions/0060-import-speed-second-vector.md)."""
    from ... import secretscan

    if secrets not in SECRET_POLICIES:
        raise ValueError(f"secrets must be one of {SECRET_POLICIES}")
    present = existing(store, records)
    todo = [m for m in records if not m.id or m.id not in present]
    skipped_secrets = 0
    bad = Skips()
    storable = []
    for i, m in enumerate(todo):
        why = unstorable(m)
        if why is None:
            storable.append(m)
        else:
            bad.add(f"record {i + 1} of {len(todo)}" + (f" ({m.source})" if m.source else ""), why)
    todo = storable
    if secrets != "allow":
        clean = []
        for i, m in enumerate(todo):
            if secretscan.memory_secret(m) is None:
                clean.append(m)
            elif secrets == "refuse":
                where = f"record {i + 1} of {len(todo)}" + (f" ({m.source})" if m.source else "")
                secretscan.refuse_memory(m, what=where)
            else:
                skipped_secrets += 1
        todo = clean
    op_id: str | None = None
    stored = 0
    if progress:
        progress(0, len(todo))
    later = store.english_later() if english_later else contextlib.nullcontext()
    with store.bulk_embedding(len(todo)), later:  # every batch in this process, the last small one too
        for start in range(0, len(todo), batch):
            chunk = todo[start:start + batch]
            blobs = store.embed([m.text.strip() for m in chunk])
            with store.operation("import", summary, op_id=op_id) as op_id:
                again = existing(store, chunk)  # another process may have stored some meanwhile
                keep = [(m, b) for m, b in zip(chunk, blobs) if not m.id or m.id not in again]
                if keep:
                    stored += len(store.insert([m for m, _ in keep], kind="import", summary=summary,
                                               vectors=[b for _, b in keep], allow_secret=True))  # scanned above
            if progress:
                progress(min(start + batch, len(todo)), len(todo))
    if merge and merge_due(store, stored):
        try:
            store.merge_keyword_index()
        except DatabaseError:
            pass
    return ImportResult(read=len(records), imported=stored, skipped_existing=len(present & {m.id for m in records}),
                        operation=op_id if stored else None, skipped_secrets=skipped_secrets,
                        skipped_unstorable=bad.count, unstorable_named=bad.named)
