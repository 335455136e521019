"""Import and export: JSONL (lossless, every field) and Markdown (for people).

Parsing validates everything first and reports `line N: problem`; only a clean file is stored,
as one operation. The limits a memory has in the store (its text's length, no NUL, a thread's
name) are checked here, line by line as the input streams in, so an oversized record is refused
before any of the file is embedded (docs/decisions/0011-bad-input-imports.md).
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import fields
from typing import IO, Any, Iterable, Iterator

from . import timeutil
from .errors import UsageError
from .records import TIERS, Memory
from .store import MAX_TEXT, MAX_THREAD

FORMATS = ("jsonl", "md")
_FIELDS = {f.name for f in fields(Memory)}
_TIME_FIELDS = ("created_at", "updated_at", "expires_at", "valid_from", "valid_to", "forgotten_at",
                "last_accessed_at")
_META_COMMENT = re.compile(r"\s*<!--\s*pmem\s+(\{.*\})\s*-->\s*$")
_TRAILING_TAGS = re.compile(r"(?:\s+#[\w/-]+)+\s*$")


_MAX_INT = 2**63 - 1  # SQLite's largest integer
# The longest line read: a record at the text limit, every character a 12-byte surrogate-pair
# escape, with room for its fields; a longer line is refused unread (a 1 GB line of garbage).
MAX_LINE = MAX_TEXT * 12 + 4_000_000


def _loads(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where}: not valid JSON ({exc.msg})") from None
    except RecursionError:
        raise UsageError(f"{where}: JSON nested too deeply") from None


def _check_utf8(obj: Any, where: str) -> None:
    """JSON escapes can smuggle lone surrogates ("\\udce9") that no UTF-8 database can store."""
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{where}: text is not valid UTF-8 (a lone surrogate escape)") from None
    except (RecursionError, ValueError):
        raise UsageError(f"{where}: JSON nested too deeply or not representable") from None


def _record(obj: Any, where: str) -> Memory:
    if not isinstance(obj, dict):
        raise UsageError(f"{where}: expected a JSON object with a 'text' field")
    text = obj.get("text")
    if not isinstance(text, str) or not text.strip():
        raise UsageError(f"{where}: 'text' must be a non-empty string")
    if len(text.strip()) > MAX_TEXT:
        raise UsageError(f"{where}: the text is {len(text.strip()):,} characters; the limit is {MAX_TEXT:,} "
                         "(use `pmem extract` for long text)")
    if "\x00" in text:
        raise UsageError(f"{where}: the text contains a NUL character")
    thread = obj.get("thread")
    if isinstance(thread, str) and ("\x00" in thread or len(thread) > MAX_THREAD):
        raise UsageError(f"{where}: 'thread' must be text of at most {MAX_THREAD} characters")
    _check_utf8(obj, where)
    values: dict[str, Any] = {"text": text}
    for key, value in obj.items():
        if key not in _FIELDS or key == "text" or value is None:
            continue  # unknown keys (e.g. 'score', 'forgotten') are ignored, not fatal
        if key in _TIME_FIELDS:
            if not isinstance(value, str):
                raise UsageError(f"{where}: {key!r} must be a date string")
            try:
                value = timeutil.parse_when(value)
            except UsageError as exc:
                raise UsageError(f"{where}: {key}: {exc}") from None
        elif key in ("tags", "derived_from"):
            if isinstance(value, str):
                value = [t.strip() for t in value.split(",") if t.strip()]
            if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
                raise UsageError(f"{where}: {key!r} must be a list of strings")
        elif key == "tier":
            if value not in TIERS:
                raise UsageError(f"{where}: tier must be one of {', '.join(TIERS)}")
        elif key == "pinned":
            if not isinstance(value, bool):
                raise UsageError(f"{where}: 'pinned' must be true or false")
        elif key == "meta":
            if not isinstance(value, dict):
                raise UsageError(f"{where}: 'meta' must be a JSON object")
        elif key in ("access_count", "thread_pos"):
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= _MAX_INT:
                raise UsageError(f"{where}: {key!r} must be a whole number, 0 or more")
        elif not isinstance(value, str):
            raise UsageError(f"{where}: {key!r} must be a string")
        values[key] = value
    values.setdefault("id", "")
    return Memory(**values)


def parse_jsonl(lines: Iterable[str]) -> list[Memory]:
    out = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        out.append(_record(_loads(line, f"line {n}"), f"line {n}"))
    return out


def parse_markdown(lines: Iterable[str]) -> list[Memory]:
    """List items and paragraphs become memories; trailing #tags become tags; a heading that is
    a date dates the items under it, any other heading becomes a tag of them."""
    out: list[Memory] = []
    heading_tag: str | None = None
    heading_date: str | None = None
    heading_tier: str | None = None
    para: list[str] = []
    para_start = para_chars = 0

    def emit(text: str, n: int) -> None:
        nonlocal heading_tier
        meta: dict[str, Any] = {}
        m = _META_COMMENT.search(text)
        if m:
            try:
                meta = json.loads(m.group(1))
            except (json.JSONDecodeError, RecursionError):
                raise UsageError(f"line {n}: broken pmem comment") from None
            if not isinstance(meta, dict):
                raise UsageError(f"line {n}: broken pmem comment")
            text = text[:m.start()]
        tags: list[str] = []
        t = _TRAILING_TAGS.search(text)
        if t:
            tags = [w[1:] for w in t.group(0).split()]
            text = text[:t.start()]
        record = {"text": text.strip(), **meta}
        record["tags"] = sorted(set(record.get("tags", [])) | set(tags) | ({heading_tag} if heading_tag else set()))
        if heading_tier and "tier" not in record:
            record["tier"] = heading_tier
        if heading_date and "created_at" not in record:
            record["created_at"] = heading_date
        if record["text"]:
            out.append(_record(record, f"line {n}"))

    def flush() -> None:
        nonlocal para
        if para:
            emit(" ".join(para), para_start)
            para = []

    in_fence = False
    for n, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        if line.strip().startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        stripped = line.strip()
        if stripped.startswith("#") and re.match(r"#+\s", stripped):
            flush()
            title = stripped.lstrip("#").strip()
            if title.lower() in TIERS:
                heading_tier, heading_tag = title.lower(), None
                continue
            try:
                heading_date, heading_tag = timeutil.parse_when(title), None
            except UsageError:
                heading_tag = (None if stripped.startswith("# ")
                               else re.sub(r"\W+", "-", title.lower()).strip("-") or None)
            continue
        item = re.match(r"^\s*(?:[-*+]|\d+\.)\s+(?:\[[ xX]\]\s+)?(.*)$", line)
        if item:
            flush()
            emit(item.group(1), n)
        elif not stripped:
            flush()
        else:
            if not para:
                para_start = n
                para_chars = 0
            para.append(stripped)
            para_chars += len(stripped) + 1
            if para_chars > MAX_TEXT:  # refused as it grows: 100 MB without a blank line is no memory
                raise UsageError(f"line {para_start}: a paragraph of more than {MAX_TEXT:,} characters; "
                                 "a memory holds at most that (use `pmem extract` for long text)")
    flush()
    return out


def _lines(stream: IO[str], name: str) -> Iterator[str]:
    """The stream's lines, read one at a time: text that is not UTF-8, NUL bytes, and a line
    longer than MAX_LINE are refused where they are met."""
    while True:
        try:
            line = stream.readline(MAX_LINE + 1)
        except UnicodeDecodeError:
            raise UsageError(f"{name or 'input'} is not UTF-8 text") from None
        if not line:
            return
        if "\x00" in line:
            raise UsageError(f"{name or 'input'} looks binary (NUL bytes); expected JSONL or Markdown")
        if len(line) > MAX_LINE:
            raise UsageError(f"{name or 'input'}: a line longer than {MAX_LINE:,} characters; a memory holds "
                             f"at most {MAX_TEXT:,}")
        yield line


def parse(stream: IO[str], fmt: str | None = None, name: str = "") -> list[Memory]:
    """Read a whole import file; `fmt` None guesses from the name, then from the content. The
    stream is read line by line: a bad line stops the reading there."""
    lines = _lines(stream, name)
    if fmt is None:
        if name.endswith((".md", ".markdown", ".txt")):
            fmt = "md"
        elif name.endswith((".jsonl", ".json", ".ndjson")):
            fmt = "jsonl"
        else:
            head: list[str] = []
            for line in lines:
                head.append(line)
                if line.strip():
                    break
            fmt = "jsonl" if "".join(head).lstrip().startswith("{") else "md"
            lines = itertools.chain(head, lines)
    if fmt == "jsonl":
        return parse_jsonl(lines)
    if fmt == "md":
        return parse_markdown(lines)
    raise UsageError(f"unknown format {fmt!r}: use {', '.join(FORMATS)}")


def export_jsonl(memories: Iterable[Memory]) -> Iterator[str]:
    for m in memories:
        yield json.dumps(m.to_dict(), ensure_ascii=False, sort_keys=True) + "\n"


def export_markdown(memories: Iterable[Memory], ordered: bool = False) -> Iterator[str]:
    """Markdown by tier, oldest first. `ordered`: the memories already come by tier and date
    (`pmem export` streams them so), so none is held in memory; else they are sorted here."""
    yield "# pmem export\n"
    tier = None
    if not ordered:
        memories = sorted(memories, key=lambda m: (TIERS.index(m.tier), m.created_at, m.id))
    for m in memories:
        if m.tier != tier:
            tier = m.tier
            yield f"\n## {tier}\n\n"
        meta = {"id": m.id, "created_at": m.created_at, "tier": m.tier}
        if m.expires_at:
            meta["expires_at"] = m.expires_at
        if m.thread is not None:
            meta["thread"], meta["thread_pos"] = m.thread, m.thread_pos
        text = " ".join(m.text.split())
        tags = "".join(f" #{t}" for t in m.tags if re.fullmatch(r"[\w/-]+", t))
        yield f"- {text}{tags} <!-- pmem {json.dumps(meta, ensure_ascii=False)} -->\n"
