"""The `pmem dream` command."""

import sys
import time
from typing import List, Optional

import typer

from ..errors import PmemError, UsageError
from . import output as out
from .common import JsonOpt, open_store

PLAN_SHARE = 0.75  # of --max-seconds, what planning may take when the plan is applied after it


def register(app: typer.Typer) -> None:
    app.command()(dream)


def _kinds(only: Optional[str], purge: bool) -> Optional[set]:
    from ..dream import DEFAULT_KINDS, KINDS

    if only:
        kinds = {k.strip() for k in only.split(",") if k.strip()}
        unknown = kinds - set(KINDS)
        if unknown:
            raise UsageError(f"--only: unknown kind {sorted(unknown)[0]!r}; use {', '.join(KINDS)}")
    else:
        kinds = set(DEFAULT_KINDS)
    if purge:
        kinds.add("purge")
    return kinds


def _member_line(m) -> str:
    return f"{m.id} {out.one_line(m.text)}" if m is not None else "(gone)"


def _render_plan(plan, store) -> None:
    memories = {m.id: m for m in store.get_many({i for p in plan.proposals for i in p.members})}
    if not out.is_tty():
        for p in plan.proposals:
            result = out.one_line(p.result_text) if p.result_text else ""
            out.echo("\t".join([p.id, p.kind, ",".join(p.members), result, p.reason]))
        return
    from rich.table import Table
    from rich.text import Text

    counts = ", ".join(f"{n} {k}" for k, n in plan.counts().items() if n)
    title = f"dream plan: {counts or 'nothing to do'} ({plan.considered} memories considered)"
    table = Table(title=title, show_lines=True, expand=True, pad_edge=False)
    table.add_column("proposal", style="cyan", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("members", ratio=2)
    table.add_column("result", ratio=2)
    table.add_column("reason", ratio=1, style="dim")
    for p in plan.proposals:
        members = "\n".join(out.visible(_member_line(memories.get(i))) for i in p.members)
        result = p.result_text or ("(deleted)" if p.kind == "purge" else "(expired)" if p.kind == "expire" else "")
        table.add_row(Text(p.id), Text(p.kind), Text(members), Text(out.visible(result)), Text(out.visible(p.reason)))
    out.console().print(table)


def dream(
    apply: bool = typer.Option(False, "--apply", help="Apply the plan (asks once; see --yes)."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Apply without asking (for cron)."),
    only: Optional[str] = typer.Option(None, "--only", help="Only these kinds, comma-separated: "
                                       "dedup, merge, compress, expire, supersede, purge."),
    max_seconds: Optional[float] = typer.Option(None, "--max-seconds",
                                                help="Stop planning and applying after N seconds (with "
                                                "--apply, planning stops at three quarters of them)."),
    purge: bool = typer.Option(False, "--purge", help="Also delete expired memories past the grace period "
                               "(purge_grace_days), after an automatic backup."),
    include: List[str] = typer.Option(None, "--include", help="A pinned memory the dream may change (repeatable)."),
    no_model: bool = typer.Option(False, "--no-model", help="Use no chat model: no merges; extractive summaries."),
    no_upkeep: bool = typer.Option(False, "--no-upkeep", help="Skip the upkeep afterwards: merging the keyword "
                                   "index, and VACUUM when a fifth or more of the file is free space."),
    full: bool = typer.Option(False, "--full", help="Compare every memory, not only what changed since the "
                              "last applied dream (large stores)."),
    as_json: bool = JsonOpt,
) -> None:
    """Consolidate memory: dedup, merge, compress, expire, supersede. Prints the plan; --apply applies it.

    A whole applied dream is one operation: `pmem undo` takes it back. A backup of the database
    is taken before applying (in the backups folder, see `pmem path`). Afterwards, even when there
    was nothing to apply, the keyword index is merged into one segment (faster keyword search on
    large stores) and, when a fifth or more of the file is free space, the file is VACUUMed.

    On a store of 20,000 memories and more, a dream compares a slice at a time: once a dream has
    been applied, only the memories added since then or whose text, tier, pin, expiry or date
    changed (with those they resemble), so its cost follows the change; what you turned down
    stays turned down until a memory like it changes.
    The first dream of a large store (and --full) compares every memory, 20,000 at a time; with
    --max-seconds it stops between slices, and the next applied dream goes on from there.

    \b
    Examples:
      pmem dream
      pmem dream --json
      pmem dream --apply
      pmem dream --apply --yes --only dedup,expire --max-seconds 60
      pmem dream --full
    """
    from .. import dream as dreaming

    if max_seconds is not None and not max_seconds > 0:  # also refuses nan
        raise UsageError("--max-seconds must be positive")
    kinds = _kinds(only, purge)
    started = time.monotonic()
    with open_store() as store:
        # Applying needs time too: a plan that spent it all would leave every proposal to the next dream.
        planning = max_seconds * PLAN_SHARE if max_seconds is not None and apply else max_seconds
        with out.Progress("dreaming") as bar:
            plan = dreaming.plan(store, only=kinds, generator=False if no_model else None,
                                 max_seconds=planning, include=include or (), full=full, progress=bar)
        if not apply:
            if as_json:
                out.print_json(plan.to_dict())
            else:
                _render_plan(plan, store)
                _notes(plan)
                if out.is_tty() and plan.proposals:
                    out.note("review, then: pmem dream --apply")
            return
        if not as_json:
            _render_plan(plan, store)
            _notes(plan)
        asked = [p for p in plan.proposals if p.kind in dreaming.ASKED]
        if len(asked) == len(plan.proposals):
            # A nightly `dream --apply --yes` with nothing to consolidate still records that it
            # looked (dream.apply), and does its upkeep.
            result = dreaming.apply(store, plan)
            upkeep = None if no_upkeep else _upkeep(store, started, max_seconds)
            if as_json:
                out.print_json({"plan": plan.to_dict(), "result": result.to_dict(), "upkeep": upkeep})
            else:
                out.note("nothing to do")
            _upkeep_notes(upkeep, as_json)
            return
        if not yes:
            if sys.stdin is None or not sys.stdin.isatty():
                raise UsageError("refusing to apply without asking: add --yes (stdin is not a terminal)")
            if not typer.confirm(f"Apply {len(plan.proposals) - len(asked)} proposals?", default=False, err=True):
                out.note("nothing applied")
                raise typer.Exit(1)
        left = None if max_seconds is None else max(0.001, max_seconds - (time.monotonic() - started))
        with out.Progress("applying") as bar:
            result = dreaming.apply(store, plan, progress=bar, max_seconds=left)
        upkeep = None if no_upkeep else _upkeep(store, started, max_seconds)
    if as_json:
        out.print_json({"plan": plan.to_dict(), "result": result.to_dict(), "upkeep": upkeep})
        _upkeep_notes(upkeep, as_json)
        return
    out.note(f"applied {len(result.applied)} of {len(plan.proposals) - len(asked)} proposals"
             + (f" as operation {result.op_id}; `pmem undo` takes them back" if result.op_id else ""))
    for s in result.skipped:
        out.note(f"skipped {s['id']}: {s['reason']}")
    if result.backup:
        out.note(f"backup: {result.backup}")
    _upkeep_notes(upkeep)


def _upkeep(store, started: float, max_seconds: float | None) -> dict | None:
    """store.upkeep() when time is left; its failure, or Ctrl-C, is reported rather than raised
    (what the dream applied is committed, and the summary is still printed)."""
    if max_seconds is not None and time.monotonic() - started >= max_seconds:
        return None
    try:
        with out.Progress("upkeep") as bar:
            return store.upkeep(progress=bar)
    except PmemError as exc:
        return {"ran": False, "error": str(exc)}
    except KeyboardInterrupt:
        return {"ran": False, "error": "interrupted", "interrupted": True}


def _upkeep_notes(upkeep: dict | None, as_json: bool = False) -> None:
    """The upkeep's notes on stderr (with --json only an interruption's), and exit 130 when Ctrl-C stopped it."""
    if upkeep and upkeep.get("interrupted"):
        out.error("interrupted during upkeep: what the dream applied is committed; "
                  "the next `pmem dream --apply` does the upkeep")
        raise typer.Exit(130)
    if as_json:
        return
    if upkeep and upkeep.get("error"):
        out.note(f"upkeep not done: {upkeep['error']}")
    if upkeep and upkeep["ran"]:
        mb = (upkeep["bytes_before"] - upkeep["bytes_after"]) / 1e6
        out.note(f"database {upkeep['bytes_before'] / 1e6:.1f} -> {upkeep['bytes_after'] / 1e6:.1f} MB "
                 f"({mb:.1f} MB of free space given back)")


def _notes(plan) -> None:
    if plan.since is not None:
        changed = f"{plan.changed} {'memory' if plan.changed == 1 else 'memories'}"
        out.note(f"compared only what changed since the last dream: {changed}, with those like them "
                 f"({plan.considered} in all); --full compares every memory")
    asked = sum(1 for p in plan.proposals if p.kind == "review")
    if asked:
        out.note(f"{asked} {'pair' if asked == 1 else 'pairs'} may be one fact said twice, left for you to say: "
                 "`pmem tui`, then D (dream review); --apply never applies a review, and the next "
                 "dream asks again only about pairs that changed (`f` in the review, or --full, asks all)")
    for note in plan.notes:
        out.note(note)
    if plan.dropped:
        out.note(f"{len(plan.dropped)} proposals dropped (see --json 'dropped'), e.g. {plan.dropped[0]['reason']}")
    if not plan.complete:
        out.note("the time limit cut the plan short; run again to continue")
