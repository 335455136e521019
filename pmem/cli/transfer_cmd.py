"""Moving memories in and out: import, export."""

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import typer

from ..errors import PmemError, UsageError
from . import output as out
from .common import JsonOpt, ScopeAllOpt, open_store


def register(app: typer.Typer) -> None:
    app.command("import")(import_)
    app.command()(export)


def import_(
    file: Optional[str] = typer.Argument(None, metavar="[PATH|-]",
                                         help="A file, folder or zip archive; '-' reads stdin. Not with --discover."),
    fmt: Optional[str] = typer.Option(
        None, "--format", "-f",
        help="chatgpt, claude-ai, claude-code, codex, gemini, cursor, aider, llm, mcp-memory, mem0, markdown, jsonl "
             "or md (default: told by each file's shape)."),
    tag: List[str] = typer.Option(None, "--tag", "-t", help="Add this tag to every imported memory."),
    tier: Optional[str] = typer.Option(None, "--tier", help="Tier for records that do not name one."),
    since: Optional[str] = typer.Option(None, "--since", help="Only what was said or written from DATE on."),
    until: Optional[str] = typer.Option(None, "--until", help="Only what was said or written up to DATE."),
    extract: bool = typer.Option(False, "--extract",
                                 help="Also extract facts from imported conversations (local chat model); "
                                      "relative dates are resolved against each message's date."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Read and count (per kind, with a sample); store nothing."),
    allow_secret: bool = typer.Option(False, "--allow-secret", help="Import records that hold what looks like a "
                                      "machine secret (an API key, a token, a private key)."),
    discover: bool = typer.Option(False, "--discover",
                                  help="List the histories other tools keep on this machine (Claude Code, Codex, "
                                       "Gemini CLI, llm, aider, Cursor, the MCP memory server), where each tool "
                                       "keeps them, its variables honoured (CODEX_HOME...); on a terminal, ask "
                                       "which to import. Example: pmem import --discover"),
    pick: Optional[str] = typer.Option(None, "--pick", metavar="NAMES",
                                       help="Import these discovered histories: names (claude-code, codex, gemini, "
                                            "llm, aider, cursor, mcp-memory) or list numbers, comma-separated, or "
                                            "all; run again, it reads only files new or changed since. "
                                            "Example: pmem import --discover --pick codex,gemini"),
    as_json: bool = JsonOpt,
) -> None:
    """Import memories: pmem's JSONL or Markdown, or what other tools keep: ChatGPT and Claude.ai
    exports, Claude Code transcripts, Codex CLI sessions (.jsonl and .jsonl.zst), Cursor's
    state.vscdb and CLI transcripts, aider's .aider.chat.history.md, llm's logs.db, the MCP
    memory server's memory.jsonl, mem0 and OpenMemory exports, Markdown notes (a folder is read
    recursively, a zip as its files).
    pmem JSONL carries every field (thread and thread_pos too; a record with a thread and no
    thread_pos is appended to that thread). Conversations become episodic memories, one per turn,
    threaded by conversation. Importing again adds only what is new;
    an interrupted import resumes; one `pmem undo` reverts one import. A pmem JSONL or Markdown file
    with a machine secret in any record imports nothing unless --allow-secret; from other tools'
    files, the messages holding one are left out (and counted) unless --allow-secret. Records of
    the wrong shape in other tools' files, and messages pmem cannot store, are left out and
    counted (the first few named); a message is imported up to 270,000 characters.

    --discover lists what other tools keep on this machine (files, size, newest, and how many
    files are new since the last import); --pick imports some of them, each tool's history one
    undoable import. pmem remembers each file's size and time, so the next --pick reads only
    the files that changed (a format pmem cannot read yet is listed, not imported).

    \b
    Examples:
      pmem import ~/Downloads/chatgpt-export.zip
      pmem import ~/.claude/projects/ --format claude-code --since 2025-01-01
      pmem import ~/.codex/sessions/
      pmem import "$(llm logs path)" --dry-run
      pmem export | pmem --db other.db import -
      pmem import --discover
      pmem import --discover --pick codex,gemini
    """
    from .. import secretscan, timeutil
    from ..integrations import importers
    from ..records import TIERS

    # every option is checked before the input is read (a bad --tier found after an hour's read)
    discovering = discover or pick is not None
    if discovering and file is not None:
        raise UsageError("--discover finds the histories itself: name no PATH with it")
    if discovering and fmt is not None:
        raise UsageError("--discover knows each history's format: no --format with it")
    if not discovering and file is None:
        raise UsageError("name a file, folder or zip archive to import ('-' for stdin), or use --discover")
    if fmt is not None:
        importers.get(fmt)
    if tier is not None and tier not in TIERS:
        raise UsageError(f"unknown tier {tier!r}: use one of {', '.join(TIERS)}")
    tags = [t.strip() for t in tag or []]
    if any(not t or "\x00" in t for t in tags):
        raise UsageError("--tag needs a name (no NUL characters)")
    since_at = timeutil.parse_when(since) if since else None
    until_at = timeutil.parse_when(until) if until else None
    if until_at and until and len(until.strip()) == 10:  # a day: up to its end
        until_at = until_at[:11] + "23:59:59Z"
    if not allow_secret:
        for t in tags:
            secretscan.refuse(t, what="--tag")
    how = _How(tags=tags, tier=tier, extract=extract, dry_run=dry_run, allow_secret=allow_secret, quiet=as_json)
    if discovering:
        _import_discovered(pick, how, since_at, until_at, as_json)
        return
    assert file is not None
    if file == "-":
        if sys.stdin is None or sys.stdin.isatty():
            raise UsageError("no input given: name a file, or pipe one on stdin")
        plan = importers.load_stream(sys.stdin.buffer, fmt, since=since_at, until=until_at)
        name = "stdin"
    else:
        with out.Progress("reading") as progress:
            plan = importers.load(file, fmt, since=since_at, until=until_at, progress=progress)
        name = Path(file).name or file
    with open_store() as store:
        result, merge_stopped = _import_plan(store, plan, name, how)
    if as_json:
        out.print_json(result)
    _stopped(merge_stopped, extract)


@dataclass(frozen=True)
class _How:
    """What an import does with what it read (the options of `pmem import`)."""

    tags: list
    tier: Optional[str]
    extract: bool
    dry_run: bool
    allow_secret: bool
    quiet: bool  # --json: no notes, the caller prints the result


def _import_plan(store, plan, name: str, how: _How) -> tuple[dict, bool]:
    """Store what `plan` holds (or count it, with --dry-run); notes on stderr unless `how.quiet`.
    Returns the result (`--json`'s keys) and whether Ctrl-C stopped the keyword index's merge."""
    from dataclasses import replace

    from .. import secretscan
    from ..integrations import importers
    from ..integrations.importers.registry import existing as existing_ids
    from ..integrations.importers.registry import secrets_policy, unstorable

    records = plan.records
    if how.tags or how.tier:
        records = [replace(r, tags=list(r.tags) + how.tags, tier=r.tier if how.tier is None or
                           r.tier != "archival" else how.tier) for r in records]
    formats = ", ".join(sorted(plan.formats))
    secrets = secrets_policy(list(plan.formats), how.allow_secret)
    result: dict = {"read": len(records), "imported": 0, "skipped_existing": 0, "dry_run": how.dry_run,
                    "formats": dict(plan.formats), "kinds": dict(plan.kinds),
                    "skipped_files": len(plan.skipped_files), "outside_dates": plan.filtered,
                    "skipped_records": plan.skipped_records, "skipped_named": plan.skipped_named,
                    "cut_messages": plan.cut, "empty_files": plan.empty, "english_fill": 0}
    merge_stopped = False
    shown: list = []
    if how.dry_run:
        present = existing_ids(store, records)
        todo = [r for r in records if r.id not in present]
        bad = [(i, r, why) for i, r in enumerate(todo) if (why := unstorable(r))]
        if bad:  # never stored: not counted as what would be imported
            left = {id(r) for _, r, _ in bad}
            todo = [r for r in todo if id(r) not in left]
        result.update(skipped_unstorable=len(bad), unstorable_named=[
            f"record {i + 1}" + (f" ({r.source})" if r.source else "") + f": {why}" for i, r, why in bad[:5]])
        if secrets != "allow":  # count them, and never show one in the sample
            held = [r for r in todo if secretscan.memory_secret(r)]
            marked = {id(r) for r in held}
            shown = [r for r in todo if id(r) not in marked][:5]
        else:
            held, shown = [], todo[:5]
        result.update(skipped_existing=len(present & {r.id for r in records}), would_import=len(todo),
                      secrets=len(held),
                      sample=[r.to_dict() for r in shown])
    else:
        with out.Progress("importing") as progress:
            done = importers.run_import(store, records, summary=f"import {name} ({formats}): {len(records)}",
                                        progress=progress, secrets=secrets, merge=False, english_later=True)
        result.update(imported=done.imported, skipped_existing=done.skipped_existing, operation=done.operation,
                      skipped_secrets=done.skipped_secrets, skipped_unstorable=done.skipped_unstorable,
                      unstorable_named=done.unstorable_named)
        merge_stopped = not _merge_keyword_index(store, done.imported)
        english = store.english_missing() if done.imported else 0
        if english or (done.imported and store.int8_vectors()):  # after the import (pmem/fill.py): their
            from .. import fill  # second vectors, and their int8 vectors again in float32

            result["english_fill"] = english if fill.kick(store.path, by="import") else 0
        if how.extract and not merge_stopped:
            from ..integrations.importers.facts import extract_conversations

            with out.Progress("extracting") as progress:
                facts = extract_conversations(store, records, progress=progress, allow_secret=secrets == "allow")
            result["extract"] = {**facts["counts"], "dates_resolved": facts["dates_resolved"]}
    if how.quiet:
        return result, merge_stopped
    if how.dry_run:
        out.note(f"would import {result['would_import']} memories from {formats}"
                 + (f"; {result['skipped_existing']} already present" if result["skipped_existing"] else ""))
        for kind, n in sorted(plan.kinds.items()):
            out.note(f"  {kind}: {n}")
        if plan.skipped_files:
            out.note(f"  files of no known format, skipped: {len(plan.skipped_files)}")
        _note_left_out(plan.skipped_records, plan.skipped_named, plan.cut, result["skipped_unstorable"],
                       result["unstorable_named"], "would be ")
        _note_nothing(plan, result["would_import"])
        if result["secrets"]:
            out.note(f"  holding what looks like a machine secret: {result['secrets']} "
                     + ("(the import would be refused)" if secrets == "refuse" else "(would be left out)"))
        for r in shown:
            out.echo(out.visible(f"{r.created_at[:10] or '-':<10}  {r.source or '-'}  {out.one_line(r.text)[:100]}"))
        return result, merge_stopped
    out.note(f"imported {result['imported']} memories from {formats}"
             + (f"; {result['skipped_existing']} already present" if result["skipped_existing"] else ""))
    if result.get("skipped_secrets"):
        out.note(f"left out {result['skipped_secrets']} messages holding what looks like a machine secret "
                 "(--allow-secret keeps them)")
    _note_left_out(plan.skipped_records, plan.skipped_named, plan.cut, result.get("skipped_unstorable", 0),
                   result.get("unstorable_named", []))
    _note_nothing(plan, result["imported"])
    if result.get("english_fill"):
        out.note(f"their English vectors for search ({result['english_fill']:,}) are being filled in the "
                 "background; `pmem doctor` shows how far")
    if how.extract and not merge_stopped:
        x = result["extract"]
        out.note(f"extracted {x.get('add', 0)} facts from {x.get('conversations', 0)} conversations "
                 f"({x.get('dates_resolved', 0)} relative dates resolved)")
    return result, merge_stopped


def _size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000  # type: ignore[assignment]
    return f"{n} B"


def _list_histories(histories, news) -> None:
    """The discovered histories, one line each, numbered for --pick (stdout: the command's output)."""
    if not histories:
        out.note("no other tool's history found here (see `pmem import --help` for where pmem looks)")
        return
    for n, h in enumerate(histories, start=1):
        new = news[h.key]
        state = (f"{len(new)} new" if new else "nothing new") if h.importable else \
            f"not importable yet (no {h.format} importer in this pmem)"
        where = str(h.root) + (f" (${h.variable})" if h.variable else "")
        files = f"{len(h.files)} file" + ("" if len(h.files) == 1 else "s")
        out.echo(out.visible(f"{n:>2}. {h.key:<12} {files:>12} {_size(h.size):>9}  "
                             f"newest {(h.newest or '-')[:10]}  {state}"))
        out.echo(out.visible(f"    {where}" + (" (first files only)" if h.truncated else "")))


def _import_discovered(pick: Optional[str], how: _How, since_at: Optional[str], until_at: Optional[str],
                       as_json: bool) -> None:
    """`pmem import --discover [--pick NAMES]`: list the histories; import the picked ones, each
    its own undoable import, reading only the files new or changed since the last (FileMarks)."""
    from ..integrations import importers
    from ..integrations.importers import discover as disc

    histories = disc.discover()
    with open_store() as store:
        marks = disc.FileMarks(store)
        news = {h.key: marks.new_files(h) for h in histories}
        if pick is None:
            if as_json:
                out.print_json({"histories": [h.to_dict(news[h.key]) for h in histories]})
                return
            _list_histories(histories, news)
            if not histories or not (out.is_tty() and sys.stdin is not None and sys.stdin.isatty()):
                if histories:
                    out.note("import some with --pick NAMES (or list numbers, or all)")
                return
            pick = typer.prompt("Import which? (names or numbers, comma-separated; all; Enter for none)",
                                default="", show_default=False, err=True)
        picked = disc.parse_picks(pick, histories)
        done: list[dict] = []
        stopped = False
        for h in picked:
            entry: dict = h.to_dict(news[h.key])
            done.append(entry)
            files = news[h.key]
            if not h.importable:
                entry["skipped"] = f"no {h.format} importer in this pmem yet"
                if not as_json:
                    out.note(f"{h.tool}: not imported: pmem cannot read the {h.format} format yet")
                continue
            if not files:
                entry["skipped"] = "nothing new since the last import"
                if not as_json:
                    out.note(f"{h.tool}: nothing new since the last import")
                continue
            if not as_json:
                out.note(f"{h.tool}: {len(files)} files ({_size(sum(f.size for f in files))}) from {h.root}")
            try:
                with out.Progress(f"reading {h.tool}") as progress:
                    plan = importers.load(disc.entries(h, files), h.format, since=since_at, until=until_at,
                                          progress=progress)
            except PmemError as exc:  # one history pmem cannot read stops only itself
                entry["error"] = str(exc)
                if not as_json:
                    out.note(f"{h.tool}: not imported: {exc}")
                continue
            entry["result"], stopped = _import_plan(store, plan, h.tool, how)
            if stopped:
                break
            if not how.dry_run and since_at is None and until_at is None:  # a date filter read only a part
                marks.record(h.key, files, entry["result"].get("operation"))
    if as_json:
        out.print_json({"histories": done})
    _stopped(stopped, how.extract)
    if any("error" in d for d in done):
        raise typer.Exit(1)


def _note_left_out(bad: int, bad_named: list, cut: int, unstorable: int, unstorable_named: list,
                   would: str = "") -> None:
    """What an import left out and why, on stderr: records of the wrong shape and records the
    store cannot hold (the first few named), and messages cut at the length limit (the files
    that gave nothing: _note_nothing)."""
    from ..integrations.importers.base import MESSAGE_LIMIT

    for count, named, what in ((bad, bad_named, "records of the wrong shape"),
                               (unstorable, unstorable_named, "records pmem cannot store")):
        if count:
            out.note(f"{would or ''}left out {count} {what}" + (", first: " if named else "")
                     + "; ".join(out.visible(x) for x in named[:3]) + (" …" if count > 3 else ""))
    if cut:
        out.note(f"{cut} messages longer than {MESSAGE_LIMIT:,} characters {would or ''}imported up to "
                 "that, with a note of the rest's length")


def _note_nothing(plan, stored: int) -> None:
    """When nothing is stored, why: what each recognised file held (its reader counts), and
    the records outside --since/--until."""
    if stored:
        return
    if not plan.records:
        for line in plan.empty[:3]:
            out.note("  " + out.visible(line))
        if len(plan.empty) > 3:
            out.note(f"  … and {len(plan.empty) - 3} more files with nothing to import")
    if plan.filtered:
        out.note(f"  {plan.filtered} records read fell outside --since/--until")


def _merge_keyword_index(store, imported: int) -> bool:
    """After a large import, the keyword index merged into one segment (importers.merge_due),
    with its own progress bar. False when Ctrl-C stopped it: what the import stored is
    committed, and the merge is an optimisation (each step its own transaction), so the summary
    is still printed. A lock held by another writer leaves it to the next `pmem dream --apply`."""
    from ..errors import DatabaseError
    from ..integrations import importers

    if not importers.merge_due(store, imported):
        return True
    try:
        with out.Progress("merging the keyword index") as progress:
            store.merge_keyword_index(progress=progress)
    except DatabaseError:
        pass
    except KeyboardInterrupt:
        return False
    return True


def _stopped(merge_stopped: bool, extract: bool) -> None:
    if merge_stopped:
        out.error("interrupted while merging the keyword index: the import is complete"
                  + (" but facts were not extracted (the same `pmem import --extract` again extracts them)"
                     if extract else "") + "; `pmem dream --apply` merges the index later")
        raise typer.Exit(130)


def export(
    fmt: str = typer.Option("jsonl", "--format", "-f", help="jsonl (lossless) or md."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write to FILE instead of stdout."),
    active: bool = typer.Option(False, "--active", help="Only active memories (default: everything but forgotten)."),
    include_forgotten: bool = typer.Option(False, "--include-forgotten", help="Also forgotten memories."),
    scope: str = ScopeAllOpt,
) -> None:
    """Export memories: JSONL keeps every field (import round-trips it); Markdown is for reading.
    Forgotten memories stay out unless --include-forgotten: an export is a file that travels.

    \b
    Examples:
      pmem export > backup.jsonl
      pmem export --format md -o memories.md
    """
    from collections.abc import Iterable, Iterator
    from dataclasses import replace

    from .. import transfer
    from ..records import TIERS, Memory
    from ..scope import filter_scope, in_scope
    from ..store import Filter

    if fmt not in transfer.FORMATS:
        raise UsageError(f"unknown format {fmt!r}: use {', '.join(transfer.FORMATS)}")
    if output is not None:
        _check_writable(output)
    wanted = filter_scope(scope)
    written = 0

    def counted(memories: Iterable[Memory]) -> Iterator[Memory]:
        nonlocal written
        for m in memories:
            written += 1
            yield m

    # Streamed from one snapshot of the store, in batches: an export of 1,000,000 memories held
    # them all (1.2 GB) before writing the first line.
    with open_store(read_only=True) as store, store.snapshot():
        if fmt == "md":  # by tier, oldest first
            flt = Filter(include_expired=True, include_superseded=True, include_merged=True,
                         include_forgotten=include_forgotten, scope=wanted)
            memories: Iterable[Memory] = (m for tier in TIERS for m in store.iter_list(
                replace(flt, tiers=(tier,)) if not active else Filter(tiers=(tier,), scope=wanted)))
            lines = transfer.export_markdown(counted(memories), ordered=True)
        else:
            memories = store.iter_list(Filter(tiers=TIERS, scope=wanted)) if active else (
                m for m in store.iter_all() if (include_forgotten or m.forgotten_at is None)
                and in_scope(m.scope, wanted))
            lines = transfer.export_jsonl(counted(memories))
        if output is not None:
            try:
                fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            except OSError as exc:
                raise UsageError(f"cannot write {output}: {exc.strerror}") from None
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.writelines(lines)
            except OSError as exc:
                raise PmemError(f"writing {output} failed: {exc.strerror}") from None
            out.note(f"wrote {written} memories to {output}")
        else:
            out.write_lines(lines)  # as stored to a pipe; escapes shown, not acted on, on a terminal


def _check_writable(output: Path) -> None:
    """Refuse an -o that cannot be a file before reading the store."""
    if output.is_dir():
        raise UsageError(f"-o {output} is a folder: give a file name")
    if not output.parent.is_dir():
        raise UsageError(f"-o {output}: the folder {output.parent} does not exist")
