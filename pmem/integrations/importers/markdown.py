"""Markdown notes: one file, or a folder read recursively (an Obsidian vault, a basic-memory project).

- YAML front matter (between `---` lines at the top) is not a memory: its `tags` become tags of
  every memory of the note, `title`, `created`/`date`, `type` and `permalink` go to meta, and the
  created date (else the file's modification time) dates the note.
- The body is split by headings: a section up to `SECTION_LIMIT` characters is one memory (with
  its heading), a longer one gives one memory per paragraph. Code fences stay with their paragraph.
- basic-memory observations, `- [category] text #tag (context)`, become memories of their own,
  tagged with the category and tags; relations, `- relation_type [[Target]]`, become sentences
  ("Note relates to Target").
- The note's path is the source; hidden folders (`.obsidian`, `.git`) are skipped.
"""

from __future__ import annotations

import re
from typing import Any, Iterator

from ...records import Memory
from .base import Entry, make_memory, slug, split_text, stable_id, when

NAME = "markdown"
DESCRIPTION = "Markdown notes (a file or folder; YAML front matter; basic-memory observations)"
FILES = re.compile(r"\.(md|markdown)$", re.I)
KIND = "note"
SECTION_LIMIT = 1500

_FRONT = re.compile(r"\A\ufeff?---[ \t]*\r?\n(.*?)\r?\n(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S)
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_OBSERVATION = re.compile(r"^\s*[-*+]\s+\[(?!\s*[xX ]?\s*\])([^\[\]]+)\]\s+(.+)$")
_RELATION = re.compile(r"^\s*[-*+]\s+([A-Za-z][\w -]{0,40}?)\s+\[\[([^\]|]+)(?:\|[^\]]*)?\]\]\s*(?:\((.*)\))?\s*$")
_TAGS = re.compile(r"(?<![\w&/])#([A-Za-z][\w/-]*)")
_CONTEXT = re.compile(r"\s*\(([^()]*)\)\s*$")


def accepts(name: str) -> bool:
    return bool(FILES.search(name))


def sniff(name: str, head: bytes) -> bool:
    return accepts(name)


def looks_like_note(head: bytes) -> bool:
    """Front matter, a basic-memory observation or relation, or a [[wiki link]]: a note from a notes
    app, rather than a plain list that pmem's own Markdown reader takes item by item."""
    text = head.decode("utf-8", "replace")
    if _FRONT.match(text) or "[[" in text:
        return True
    return any(_OBSERVATION.match(line) or _RELATION.match(line) for line in text.splitlines())


# -- front matter -----------------------------------------------------------------------------

def _scalar(value: str) -> Any:
    v = value.strip()
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
        return v[1:-1]
    if v.startswith("[") and v.endswith("]"):
        return [_scalar(x) for x in v[1:-1].split(",") if x.strip()]
    if v.lower() in ("true", "false"):
        return v.lower() == "true"
    if re.fullmatch(r"-?\d+", v):
        return int(v)
    return v


def front_matter(text: str) -> tuple[dict[str, Any], str]:
    """(the front matter's keys, the body). A small reader for the YAML notes use: `key: value`,
    `[a, b]` lists, `- item` lists; anything else is kept as text."""
    m = _FRONT.match(text)
    if not m:
        return {}, text
    data: dict[str, Any] = {}
    key = None
    for line in m.group(1).splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        item = re.match(r"^\s+-\s+(.*)$", line) or (re.match(r"^-\s+(.*)$", line) if key else None)
        if item and key is not None:
            if not isinstance(data.get(key), list):
                data[key] = []
            data[key].append(_scalar(item.group(1)))
            continue
        kv = re.match(r"^([\w][\w .-]*?)\s*:\s*(.*)$", line)
        if kv:
            key = kv.group(1).strip()
            data[key] = _scalar(kv.group(2)) if kv.group(2).strip() else None
    return data, text[m.end():]


def _tag_list(value: Any) -> list[str]:
    if value is None:
        return []
    items = value if isinstance(value, list) else re.split(r"[,\s]+", str(value))
    return [slug(str(t).lstrip("#")) for t in items if str(t).strip().lstrip("#")]


# -- body -------------------------------------------------------------------------------------

def _inline_tags(text: str) -> tuple[str, list[str]]:
    """Trailing #tags come off the text; tags inside a sentence stay there and are also tags."""
    tags = [slug(t) for t in _TAGS.findall(text)]
    trailing = re.search(r"(?:\s+#[A-Za-z][\w/-]*)+\s*$", text)
    if trailing:
        text = text[:trailing.start()]
    return text.strip(), tags


def _words(relation: str) -> str:
    return " ".join(relation.replace("_", " ").replace("-", " ").split()).lower()


def parse_note(text: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(front matter, pieces): each piece {kind, text, tags, heading, extra}."""
    fm, body = front_matter(text)
    title = fm.get("title")
    pieces: list[dict[str, Any]] = []
    heading: str | None = None
    section: list[str] = []
    in_fence = False

    def flush() -> None:
        lines = list(section)
        section.clear()
        body_text = "\n".join(lines).strip()
        if not body_text:
            return
        paragraphs = [p.strip() for p in re.split(r"\n[ \t]*\n", body_text) if p.strip()]
        if len(body_text) <= SECTION_LIMIT:
            chunks = [body_text]
        else:
            chunks, fence, current = [], False, []
            for p in paragraphs:  # keep a fenced block with blank lines in one piece
                current.append(p)
                fence ^= p.count("```") % 2 == 1
                if not fence:
                    chunks.append("\n\n".join(current))
                    current = []
            if current:
                chunks.append("\n\n".join(current))
        for chunk in chunks:
            clean, tags = _inline_tags(chunk)
            for part in split_text(clean):
                text_ = f"{heading}\n\n{part}" if heading and len(chunks) == 1 else part
                pieces.append({"kind": "note", "text": text_, "tags": tags, "heading": heading, "extra": {}})

    for line in body.splitlines():
        if line.strip().startswith(("```", "~~~")):
            in_fence = not in_fence
            section.append(line)
            continue
        if in_fence:
            section.append(line)
            continue
        h = _HEADING.match(line)
        if h:
            flush()
            heading = h.group(2).strip() or None
            if h.group(1) == "#" and title is None:
                title = heading
            continue
        obs = _OBSERVATION.match(line)
        if obs:
            category, rest = obs.group(1).strip(), obs.group(2).strip()
            context = None
            c = _CONTEXT.search(rest)
            if c and c.start() > 0:
                context, rest = c.group(1).strip(), rest[:c.start()]
            rest, tags = _inline_tags(rest)
            if rest:
                extra = {"category": category}
                if context:
                    extra["context"] = context
                pieces.append({"kind": "observation", "text": rest, "tags": [slug(category), *tags],
                               "heading": heading, "extra": extra})
                continue
        rel = _RELATION.match(line)
        if rel:
            relation, target = rel.group(1).strip(), rel.group(2).strip()
            pieces.append({"kind": "relation", "text": (relation, target), "tags": [slug(target)],
                           "heading": heading, "extra": {"relation": relation, "to": target,
                                                         **({"context": rel.group(3)} if rel.group(3) else {})}})
            continue
        section.append(line)
    flush()
    fm.setdefault("title", title)
    return fm, pieces


def read(entry: Entry) -> Iterator[Memory]:
    fm, pieces = parse_note(entry.read_text())
    stem = entry.name.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    title = str(fm.get("title") or stem)
    created = when(fm.get("created") or fm.get("date") or fm.get("created_at")) or entry.mtime
    note_tags = _tag_list(fm.get("tags")) + _tag_list(fm.get("tag"))
    path = entry.location
    note_meta: dict[str, Any] = {"format": NAME, "path": entry.name, "title": title}
    for key in ("type", "permalink", "aliases"):
        if fm.get(key):
            note_meta[key] = fm[key]
    other = {k: v for k, v in fm.items() if k not in ("title", "tags", "tag", "type", "permalink", "aliases")
             and v is not None and isinstance(v, (str, int, bool, list))}
    if other:
        note_meta["front_matter"] = other
    seen: set[str] = set()
    for piece in pieces:
        if piece["kind"] == "relation":
            relation, target = piece["text"]
            text = f"{title} {_words(relation)} {target}"
        else:
            text = piece["text"]
        mid = stable_id(NAME, path, piece["kind"], text)
        if mid in seen:
            continue
        seen.add(mid)
        meta = {**note_meta, "kind": piece["kind"], **piece["extra"]}
        if piece["heading"]:
            meta["heading"] = piece["heading"]
        yield make_memory(id=mid, text=text, tags={NAME, *note_tags, *piece["tags"]} - {""},
                          source=path, meta=meta, created_at=created)
