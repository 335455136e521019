"""Which importer reads what: inputs (a file, a folder, a zip) become entries, each entry's format
is told by its shape (or forced), and the memories read are stored in resumable batches.
"""

from __future__ import annotations

import functools
import io
import os
import zipfile
import zlib
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol, Sequence

from ... import timeutil, transfer
from ...errors import DatabaseError, UsageError
from ...records import Memory
from ...store import Filter
from . import chatgpt, claude_ai, claude_code, llm_logs, markdown, mcp_memory, mem0
from .base import Entry, bytes_entry, file_entry

Progress = Callable[[int, int], None]


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
        yield from transfer.parse(io.StringIO(entry.read_text()), self.NAME, entry.name)  # lossless: as written


JSONL = _Native("jsonl", "pmem JSONL (pmem export; one {\"text\": ...} per line)", (".jsonl", ".json", ".ndjson"))
MD = _Native("md", "pmem Markdown (pmem export --format md)", (".md", ".markdown", ".txt"))

# Sniffing order: the most specific shapes first.
IMPORTERS: tuple[Importer, ...] = (llm_logs, chatgpt, claude_ai, claude_code, mcp_memory, mem0, JSONL, MD,
                                   markdown)  # type: ignore[assignment]
FORMATS: dict[str, Importer] = {i.NAME: i for i in IMPORTERS}


def known_formats() -> str:
    return ", ".join(FORMATS)


def get(name: str) -> Importer:
    try:
        return FORMATS[name]
    except KeyError:
        raise UsageError(f"unknown format {name!r}: use one of {known_formats()}") from None


# -- inputs -----------------------------------------------------------------------------------

def _hidden(parts: Sequence[str]) -> bool:
    return any(p.startswith(".") and p not in (".", "..") for p in parts)


def _zip_entries(path: Path, data: bytes | None = None) -> list[Entry]:
    origin = str(path.resolve()) if data is None else str(path)
    try:
        zf = zipfile.ZipFile(io.BytesIO(data) if data is not None else path)
    except zipfile.BadZipFile:
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
                         mtime=mtime, origin=origin))
    return out


MAX_FILES = 20_000  # a folder with more is not an export or a notes folder (a home, /tmp): refused
_SKIP_DIRS = {"node_modules", "__pycache__", "site-packages"}
READ_ERRORS = (OSError, zipfile.BadZipFile, zlib.error, EOFError)


def _folder_entries(p: Path) -> list[Entry]:
    root = str(p.resolve())
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(p):  # unreadable folders are passed over
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS)
        for name in filenames:
            if not name.startswith("."):
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
        if imp.accepts(entry.name) and imp.sniff(entry.name, head):
            return imp
    return None


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

    def to_dict(self) -> dict[str, Any]:
        return {"read": len(self.records), "formats": dict(self.formats), "kinds": dict(self.kinds),
                "skipped_files": len(self.skipped_files), "duplicates": self.duplicates,
                "outside_dates": self.filtered}


def load(source: str | Path | list[Entry], fmt: str | None = None, *, since: str | None = None,
         until: str | None = None, progress: Progress | None = None) -> ImportPlan:
    """Read an input into memories. `fmt` forces a format; otherwise each file's shape decides.

    A single file nobody recognises is a usage error naming the known formats; in a folder or
    archive such files are skipped and counted (an export also holds images, HTML, settings)."""
    items = source if isinstance(source, list) else entries(source)
    forced = get(fmt) if fmt else None
    if not items:
        raise UsageError(f"{source}: no files to import (hidden folders are skipped)")
    single = len(items) == 1 and items[0].standalone
    plan = ImportPlan()
    seen: set[str] = set()
    now = timeutil.now_iso()
    for n, entry in enumerate(items):
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
            imp = forced if single or (forced.accepts(entry.name) and forced.sniff(entry.name, head)) else None
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
        for m in memories:
            if m.id and m.id in seen:
                plan.duplicates += 1
                continue
            if m.id:
                seen.add(m.id)
            at = m.created_at or now
            if (since and at < since) or (until and at > until):
                plan.filtered += 1
                continue
            plan.records.append(m)
            plan.kinds[m.meta.get("kind", "memory")] += 1
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
        head = entry.head()
        imp = next((i for i in IMPORTERS if i.NAME not in ("llm", "markdown") and i.sniff(entry.name, head)), None)
        if imp is None:
            imp = JSONL if data.lstrip()[:1] == b"{" else MD
        fmt = imp.NAME
    return load([entry], fmt, **kw)


# -- storing ----------------------------------------------------------------------------------

@dataclass
class ImportResult:
    read: int
    imported: int
    skipped_existing: int
    operation: str | None
    skipped_secrets: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"read": self.read, "imported": self.imported, "skipped_existing": self.skipped_existing,
                "operation": self.operation, "skipped_secrets": self.skipped_secrets}


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
               progress: Progress | None = None, secrets: str = "refuse", merge: bool = True) -> ImportResult:
    """Store what is not stored yet, `batch` memories per transaction, all in one operation.

    One `pmem undo` takes the whole import back. An interrupted import keeps the batches it
    committed, and running it again stores only the rest (ids come from the source). A machine
    secret (pmem.secretscan) in a record refuses the whole import before anything is stored
    (`secrets="refuse"`), leaves that record out (`"skip"`, counted), or is stored (`"allow"`).
    With `merge`, the keyword index is merged at the end where `merge_due` (best effort: the
    import is committed, and another writer may hold the lock); without, the caller does it."""
    from ... import secretscan

    if secrets not in SECRET_POLICIES:
        raise ValueError(f"secrets must be one of {SECRET_POLICIES}")
    present = existing(store, records)
    todo = [m for m in records if not m.id or m.id not in present]
    skipped_secrets = 0
    if secrets != "allow":
        clean = []
        for i, m in enumerate(todo):
            if secretscan.first_secret(m.text) is None:
                clean.append(m)
            elif secrets == "refuse":
                where = f"record {i + 1} of {len(todo)}" + (f" ({m.source})" if m.source else "")
                secretscan.refuse(m.text, what=where)
            else:
                skipped_secrets += 1
        todo = clean
    op_id: str | None = None
    stored = 0
    if progress:
        progress(0, len(todo))
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
                        operation=op_id if stored else None, skipped_secrets=skipped_secrets)
