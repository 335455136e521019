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
    from ..generate import load_generator

    reviewer = _Reviewer() if review else None
    try:
        with open_store() as store:
            generator = (load_generator(model, threads=store.config.threads, mode=store.config.extract_mode)
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
    for f in result.facts:
        ref = f.id or f.target or "-"
        target = f" (was {f.target})" if f.action in ("update", "supersede") else ""
        out.echo(out.visible(f"{f.action:<9} {ref:<8} {f.text}{target}"))
    c = result.counts()
    verb = "would store" if dry_run else "stored"
    where = f"source {', '.join(result.source_ids)}; " if result.source_ids else ""
    summary = (f"{where}{c['add']} added, {c['update']} updated, {c['supersede']} superseding, "
               f"{c['noop']} already known, {c['rejected']} rejected as ungrounded")
    if c["dropped"]:
        summary += f", {c['dropped']} dropped in review"
    if not result.facts:
        out.note(f"no facts found ({c['candidates']} sentences considered); {verb} the source only"
                 if not dry_run else f"no facts found ({c['candidates']} sentences considered)")
    out.note(f"{'dry run: ' if dry_run else ''}{summary}; model {result.model}"
             + (f"; undo with `pmem undo` (run {result.run})" if result.run else ""))


def extract(
    file: str = typer.Argument("-", metavar="[FILE|-]", help="Text, chat log or JSON messages; '-' reads stdin."),
    tag: List[str] = typer.Option(None, "--tag", "-t", help="Tag every stored fact and the source (repeatable)."),
    at: Optional[str] = typer.Option(None, "--at", help="When it was said (default: dates in the input, else now)."),
    source: Optional[str] = typer.Option(None, "--source", help="Where it came from (a URL, a tool, a person)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show what would be stored; store nothing."),
    review: bool = typer.Option(False, "--review", help="Confirm each fact (y/n/e) on the terminal."),
    model: Optional[str] = typer.Option(None, "--model", help="Chat model for this run: a known name or a GGUF path."),
    allow_secret: bool = typer.Option(False, "--allow-secret", help="Keep input that holds what looks like a "
                                      "machine secret (an API key, a token, a private key)."),
    thread: Optional[str] = typer.Option(None, "--thread", help="Append the kept text to this thread (default: the --source)."),
    as_json: bool = JsonOpt,
) -> None:
    """Pull durable facts out of text with the local chat model, grounded in the text.

    Input: "Speaker: text" lines (date lines such as "8 May, 2023" set the date), JSON messages
    ([{"role"|"speaker", "content"|"text"}]), or plain text. The text itself is kept as an
    episodic memory, appended to the thread of its --source (or --thread); each fact links to it
    (`pmem why ID`). Facts not grounded in the text are rejected. One `pmem undo` reverts the
    whole run.

    \b
    Examples:
      cat chat.txt | pmem extract
      pmem extract --dry-run --json < meeting.md
      pmem extract notes.txt --review --tag work
    """
    text = _read_file(file)
    run_extract(text, tags=tag or [], at=_when(at), source=source, dry_run=dry_run, review=review,
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
