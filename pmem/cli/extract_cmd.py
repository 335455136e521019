"""`pmem extract` and `pmem why`: parse options, call pmem.extract, render.
`pmem add --extract` calls `run_extract`."""

from typing import List, Optional

import typer

from ..errors import UsageError
from . import output as out
from .common import JsonOpt, _when, open_store, read_text_file


def register(app: typer.Typer) -> None:
    app.command()(extract)
    app.command()(why)


def _read_file(path: str) -> str:
    from ..extract import MAX_INPUT

    return read_text_file(path, MAX_INPUT, " (split it)")


class _Reviewer:
    """Asks y/n/e for each fact on the terminal; reads /dev/tty because stdin may be the input."""

    def __init__(self):
        try:
            self.tty = open("/dev/tty", "r+", encoding="utf-8", errors="replace")
        except OSError:
            raise UsageError("--review needs a terminal to ask on") from None

    def __call__(self, fact) -> Optional[str]:
        while True:
            self.tty.write(out.visible(f"\n{fact.text}\n  from: {fact.span}\n  keep? [y]es / [n]o / [e]dit: "))
            self.tty.flush()
            answer = self.tty.readline()
            if not answer:
                raise KeyboardInterrupt  # the terminal went away: stop, store nothing
            answer = answer.strip().lower()
            if answer in ("", "y", "yes"):
                return fact.text
            if answer in ("n", "no"):
                return None
            if answer in ("e", "edit"):
                self.tty.write("  new text: ")
                self.tty.flush()
                new = self.tty.readline().strip()
                return new or fact.text

    def close(self) -> None:
        self.tty.close()


def run_extract(text: str, *, tags: List[str], at: Optional[str], source: Optional[str], dry_run: bool,
                review: bool, as_json: bool, model: Optional[str] = None, allow_secret: bool = False,
                thread: Optional[str] = None) -> None:
    """Shared by `pmem extract` and `pmem add --extract`."""
    from ..extract import extract
    from ..models.generate import load_generator

    reviewer = _Reviewer() if review else None
    try:
        with open_store() as store:
            generator = (load_generator(model, threads=store.config.threads, mode=store.config.extract_mode,
                                         cache=store.vectors.models)
                         if model else None)
            with out.Progress("extracting") as progress:
                result = extract(store, text, generator=generator, tags=tags, at=at, source=source,
                                 dry_run=dry_run, review=reviewer, progress=progress, allow_secret=allow_secret,
                                 thread=thread)
    finally:
        if reviewer:
            reviewer.close()
    if as_json:
        out.print_json(result.to_dict())
        return
    _print_facts(result.facts)
    c = result.counts()
    verb = "would store" if dry_run else "stored"
    where = f"source {', '.join(result.source_ids)}; " if result.source_ids else ""
    summary = (f"{where}{c['add']} added, {c['update']} updated, {c['supersede']} superseding, "
               f"{c['noop']} already known, {c['rejected']} rejected as ungrounded")
    if c["dropped"]:
        summary += f", {c['dropped']} dropped in review"
    if c["dates_resolved"]:
        summary += f", {c['dates_resolved']} relative dates resolved"
    if not result.facts:
        out.note(f"no facts found ({c['candidates']} sentences considered); {verb} the source only"
                 if not dry_run else f"no facts found ({c['candidates']} sentences considered)")
    out.note(f"{'dry run: ' if dry_run else ''}{summary}; model {result.model}"
             + (f"; undo with `pmem undo` (run {result.run})" if result.run else ""))


def _print_facts(facts) -> None:
    for f in facts:
        ref = f.id or f.target or "-"
        target = f" (was {f.target})" if f.action in ("update", "supersede") else ""
        out.echo(out.visible(f"{f.action:<9} {ref:<8} {f.text}{target}"))


def run_extract_export(records, *, tags: List[str], dry_run: bool, review: bool, as_json: bool,
                       model: Optional[str] = None, allow_secret: bool = False) -> None:
    """`pmem extract` given a chat export: each conversation's turns, as `pmem import --extract`."""
    from ..integrations.importers.facts import extract_conversations
    from ..models.generate import load_generator

    reviewer = _Reviewer() if review else None
    results: list = []
    try:
        with open_store() as store:
            generator = (load_generator(model, threads=store.config.threads, mode=store.config.extract_mode,
                                         cache=store.vectors.models)
                         if model else None)
            with out.Progress("extracting") as progress:
                summary = extract_conversations(store, records, generator=generator, progress=progress,
                                                allow_secret=allow_secret, tags=tags, dry_run=dry_run,
                                                review=reviewer, on_result=lambda thread, r: results.append(r))
    finally:
        if reviewer:
            reviewer.close()
    c = summary["counts"]
    if as_json:
        out.print_json({"dry_run": dry_run, "counts": {**c, "dates_resolved": summary["dates_resolved"]},
                        "runs": [r.run for r in results if r.run], "dates": summary["resolved"],
                        "facts": [f.to_dict() for r in results for f in r.facts],
                        "rejected": [f.to_dict() for r in results for f in r.rejected]})
        return
    for r in results:
        _print_facts(r.facts)
    verb = "would store" if dry_run else "stored"
    skipped = c.get("conversations_skipped", 0)
    out.note(f"{'dry run: ' if dry_run else ''}{c.get('conversations', 0)} conversations ({skipped} skipped: "
             f"extracted before or no user turns); {verb} {c.get('add', 0)} added, {c.get('update', 0)} updated, "
             f"{c.get('supersede', 0)} superseding, {c.get('noop', 0)} already known, "
             f"{c.get('rejected', 0)} rejected as ungrounded; {summary['dates_resolved']} relative dates resolved"
             + ("; one `pmem undo` per conversation" if results and not dry_run else ""))
    if c.get("messages_skipped_secrets"):
        out.note(f"left out {c['messages_skipped_secrets']} messages holding what looks like a machine secret "
                 "(--allow-secret keeps them)")
    if c.get("conversations_skipped_too_long"):
        from ..extract import MAX_INPUT

        out.note(f"left out {c['conversations_skipped_too_long']} conversations longer than one extraction "
                 f"takes ({MAX_INPUT:,} characters)")
    if c.get("messages_skipped_unstorable"):
        out.note(f"left out {c['messages_skipped_unstorable']} messages pmem cannot store (NUL characters, "
                 "text that is not UTF-8)")


def extract(
    file: str = typer.Argument("-", metavar="[FILE|-]", help="Text, chat log, JSON messages, or a chat export "
                               "(ChatGPT, Claude.ai, Claude Code); '-' reads stdin."),
    tag: List[str] = typer.Option(None, "--tag", "-t", help="Tag every stored fact and the source (repeatable)."),
    at: Optional[str] = typer.Option(None, "--at", help="When it was said (default: dates in the input, else now)."),
    source: Optional[str] = typer.Option(None, "--source", help="Where it came from (a URL, a tool, a person)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show what would be stored; store nothing."),
    review: bool = typer.Option(False, "--review", help="Confirm each fact (y/n/e) on the terminal."),
    model: Optional[str] = typer.Option(None, "--model", help="Chat model for this run: a known name or a GGUF path."),
    allow_secret: bool = typer.Option(False, "--allow-secret", help="Keep input that holds what looks like a "
                                      "machine secret (an API key, a token, a private key)."),
    thread: Optional[str] = typer.Option(None, "--thread",
                                         help="Append the kept text to this thread (default: the --source)."),
    as_json: bool = JsonOpt,
) -> None:
    """Pull durable facts out of text with the local chat model, grounded in the text.

    Input: "Speaker: text" lines (date lines such as "8 May, 2023" set the date), JSON messages
    ([{"role"|"speaker", "content"|"text"}]), or plain text. The text itself is kept as an
    episodic memory, appended to the thread of its --source (or --thread); each fact links to it
    (`pmem why ID`). Facts not grounded in the text are rejected. Relative dates in a fact are
    resolved against when it was said (the turn's date, else --at): "last month", said on
    2026-11-12, is stored as "in October 2026". One `pmem undo` reverts the whole run.

    A chat export (ChatGPT or Claude.ai conversations.json or zip, Claude Code transcripts) is
    told by its shape: each conversation's user turns are extracted as its own run and thread,
    as `pmem import FILE --extract` does (without storing the turns themselves).

    \b
    Examples:
      cat chat.txt | pmem extract
      pmem extract --dry-run --json < meeting.md
      pmem extract notes.txt --review --tag work
      pmem extract conversations.json --dry-run
    """
    from .. import secretscan

    at = _when(at)  # every option is checked before the input is read
    if not allow_secret:  # the tags, source and thread are stored with the text
        for option, value in [("--tag", t) for t in tag or []] + [("--source", source), ("--thread", thread)]:
            if value:
                secretscan.refuse(value, what=option)
    if review:
        _Reviewer().close()
    if file != "-":
        from ..integrations.importers.facts import chat_export

        records = chat_export(file)
        if records is not None:
            given = [name for name, value in (("--at", at), ("--source", source), ("--thread", thread)) if value]
            if given:
                raise UsageError(f"{', '.join(given)} does not apply to a chat export: each conversation "
                                 "keeps its own dates and is its own thread")
            run_extract_export(records, tags=tag or [], dry_run=dry_run, review=review, as_json=as_json,
                               model=model, allow_secret=allow_secret)
            return
    text = _read_file(file)
    run_extract(text, tags=tag or [], at=at, source=source, dry_run=dry_run, review=review,
                as_json=as_json, model=model, allow_secret=allow_secret, thread=thread)


def why(
    memory_id: str = typer.Argument(..., metavar="ID", help="Memory id or a unique prefix."),
    as_json: bool = JsonOpt,
) -> None:
    """Show where a memory came from: the source text, the model and the extraction run.

    \b
    Example:
      pmem why 3f2a
    """
    from ..extract import why as explain

    with open_store() as store:
        data = explain(store, memory_id)
    if as_json:
        out.print_json(data)
        return
    m = data["memory"]
    out.echo(out.visible(m["text"]))
    out.echo()
    if not data["extracted"]:
        how = "an extraction source" if data["model"] else "not extracted (added directly or imported)"
        out.echo(f"origin: {how}; source: {m.get('source') or '-'}; created {m['created_at']}")
    else:
        run = data["run"] or {}
        undone = " (undone)" if run.get("undone_at") else ""
        out.echo(out.visible(f"model: {data['model']}"))
        out.echo(f"run:   {run.get('id', '?')} at {run.get('at', '?')}{undone}")
        out.echo(out.visible(f"span:  {data['span']}"))
        if data.get("edited"):
            out.echo("edited in review")
    for s in data["sources"]:
        out.echo()
        out.echo(f"source {s['id']} ({s['tier']}, {s['created_at']}):")
        out.echo(out.visible(s["text"]))
    for missing in data["missing_sources"]:
        out.echo(f"source {missing}: no longer stored")
