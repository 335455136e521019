"""Rewrite code comments that cite the old benchmark notebook to cite its decision record.

    python docs/decisions/cite.py          # rewrite pmem/, tests/ and benchmarks/ in place, list what is left
    python docs/decisions/cite.py --check  # only list the citations still pointing at the notebook

A citation names a section (`benchmarks/README.md, "Fusion, fourth round"`, or `benchmarks/README.md:
Threads`): INDEX maps every section name, and the short names comments used, to a record. A bare
`benchmarks/README.md` names no section: BARE maps those by the file and a phrase of the line. A
citation split over two comment lines gets its line break before the record's path. Run
`ruff check` afterwards (a line can grow past 120 characters) and `python -m pmem.cli.docs`
(docs/reference/ranking.md quotes comments).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
OLD = "benchmarks/README.md"
FOLDERS = ("pmem", "tests", "benchmarks")  # the benchmark scripts' docstrings cited it too

# (file, a phrase of the line holding a bare citation) -> record
BARE = {
    ("pmem/tui/app.py", "0.3 s first paint"): "0026-scale-sixth-round.md",
    ("pmem/tui/app.py", "the first frame had the other layout"): "0007-tui-first-paint.md",
    ("pmem/search.py", "beat reciprocal-rank fusion"): "0001-hybrid-fusion-convex.md",
    ("pmem/search.py", "Fusion constants (see"): "0015-fusion-follows-evidence.md",
    ("pmem/search.py", "both end together"): "0026-scale-sixth-round.md",
    ("pmem/dream/sameness.py", "reworded facts need it"): "0048-dedup-by-meaning.md",
    ("pmem/dream/__init__.py", "with the same proposals"): "0028-dream-what-changed.md",
    ("pmem/models/profiles.py", "(2 conversations,"): "0013-multilingual-e5-default.md",
    ("pmem/store/keywords.py", "keyword side faster"): "0027-keyword-merge-knn-bound.md",
    ("pmem/store/vectors.py", "    benchmarks/README.md)."): "0023-two-bit-codes.md",
    ("pmem/store/vectors.py", "it steps;"): "0026-scale-sixth-round.md",
    ("pmem/store/vectors.py", "approximate (recall in"): "0022-scale-bit-index.md",
    ("pmem/store/vectors.py", "cannot know how few pass"): "0032-date-filters-scale.md",
    ("pmem/store/vectors.py", "read again without it"): "0027-keyword-merge-knn-bound.md",
    ("pmem/store/memories.py", "in date order instead"): "0026-scale-sixth-round.md",
    ("pmem/autosync.py", "busy machine:"): "0047-sync-compact-auto.md",
    ("pmem/autosync.py", "just ended"): "0047-sync-compact-auto.md",
    ("pmem/db.py", "15 -> 13 ms"): "0026-scale-sixth-round.md",
    ("benchmarks/fit_fusion.py", "    benchmarks/README.md)."): "0016-one-prefix-both-sides.md",
    ("benchmarks/sync_bench.py", "Latency and bulk import"): "0003-latency-foundation.md",
}


def index() -> list[tuple[str, str]]:
    """(section name, record), longest name first so the fullest match wins."""
    rows = []
    for line in (HERE / "INDEX").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, record = line.split("\t")
            rows.append((name, record))
    return sorted(rows, key=lambda r: -len(r[0]))


def _name_pattern(name: str) -> str:
    """A section name as a regular expression that may break across comment lines."""
    words = [re.escape(w) for w in name.split()]
    return r"\s*\n\s*(?:#\s*)?".join(words).replace(r"\s*\n\s*(?:#\s*)?", r"(?:\s+|\s*\n\s*(?:#\s*)?)")


def rewrite(text: str, rel: str, rows: list[tuple[str, str]]) -> tuple[str, list[str]]:
    out, pos, left = [], 0, []
    for m in re.finditer(re.escape(OLD), text):
        if m.start() < pos:
            continue
        after = text[m.end():]
        record, length, broke = None, 0, False
        sep = re.match(r"(,\s*(?:#\s*)?|:\s*(?:#\s*)?|\s*\(\s*)", after)
        rest = after[sep.end():] if sep else ""
        quoted = re.match(r'"([^"]{1,200})"', rest) if sep else None
        said = " ".join(re.sub(r"\n\s*#?", " ", quoted.group(1)).split()).lower() if quoted else ""
        for name, rec in rows:
            if quoted:  # a quoted name is the start of a section's name
                q = quoted if said and name.lower().startswith(said) else None
            else:
                q = re.match(_name_pattern(name), rest, re.IGNORECASE) if sep else None
            if q and sep:
                record, length = rec, sep.end() + q.end()
                broke = "\n" in sep.group(0) + q.group(0)
                if sep.group(0).strip() == "(" and after[length:length + 1] == ")":
                    length += 1
                also = re.match(r'(\s+and\s+)"([^"]{1,200})"', after[length:]) if quoted else None
                if also:  # `..., "A" and "B"`: both sections
                    said2 = " ".join(re.sub(r"\n\s*#?", " ", also.group(2)).split()).lower()
                    second = next((r for n, r in rows if n.lower().startswith(said2)), None)
                    if second:
                        length += also.end()
                        record = f"{record} and docs/decisions/{second}"
                break
        if record is None:
            line_start = text.rfind("\n", 0, m.start()) + 1
            line = text[line_start:text.find("\n", m.end()) if "\n" in text[m.end():] else len(text)]
            for (path, phrase), rec in BARE.items():
                if path == rel and phrase in line:
                    record, length = rec, 0
                    break
        if record is None:
            left.append(f"{rel}:{text.count(chr(10), 0, m.start()) + 1}")
            continue
        new = f"docs/decisions/{record}"
        if broke:  # the name ran onto the next line: break before the path instead
            line_start = text.rfind("\n", 0, m.start()) + 1
            indent = re.match(r"\s*(#\s*)?", text[line_start:]).group(0)
            head = text[pos:m.start()].rstrip(" ")
            if head.endswith("("):  # keep the parenthesis with what it holds
                head, new = head[:-1].rstrip(" "), "(" + new
            out.append(head + "\n" + indent + new)
        else:
            out.append(text[pos:m.start()] + new)
        pos = m.end() + length
    out.append(text[pos:])
    return wrap("".join(out)), left


def wrap(text: str, width: int = 120) -> str:
    """Lines a record's path made longer than `width`, broken at a space and continued with the
    line's indent (and `# ` in a comment)."""
    lines = []
    for line in text.split("\n"):
        while len(line) > width and "docs/decisions/" in line:
            cut = line.rfind(" ", 0, width + 1)
            lead = re.match(r"\s*", line).group(0)
            if cut <= len(lead):
                break
            hash_at = line.find("#")
            comment = 0 <= hash_at < cut and not re.match(r"\s*\S", line[:hash_at]) or \
                (hash_at > 0 and line[:hash_at].strip() and line.lstrip()[:3] != '"""' and "#" in line[:cut])
            prefix = lead + ("# " if comment else "")
            lines.append(line[:cut].rstrip())
            line = prefix + line[cut + 1:]
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    rows = index()
    check = "--check" in argv
    left_all = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            text = path.read_text(encoding="utf-8")
            if OLD not in text:
                continue
            new, left = rewrite(text, rel, rows)
            left_all += left
            if not check and new != text:
                path.write_text(new, encoding="utf-8")
                print(f"rewrote {rel}")
    for where in left_all:
        print(f"left: {where} (add it to BARE or INDEX)", file=sys.stderr)
    return 1 if check and (left_all or any(OLD in p.read_text(encoding="utf-8") for f in FOLDERS
                                          for p in (ROOT / f).rglob("*.py"))) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
