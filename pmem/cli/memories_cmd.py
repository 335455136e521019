"""Commands on memories: add, search, recall, list, show, edit, pin, unpin, expire, forget, restore."""

import contextlib
import os
import sys
from pathlib import Path
from typing import List, Optional

import typer

from .. import timeutil
from ..errors import NotFound, UsageError
from . import output as out
from .common import (
    AsOfOpt,
    IdsArg,
    JsonOpt,
    ScopeAllOpt,
    ScopeReadOpt,
    SinceOpt,
    TagOpt,
    TierOpt,
    UntilOpt,
    _filter,
    _meta,
    _when,
    check_count,
    open_store,
    read_stdin,
)


def register(app: typer.Typer) -> None:
    app.command()(add)
    app.command()(search)
    app.command()(recall)
    app.command("list")(list_)
    app.command()(show)
    app.command()(edit)
    app.command()(pin)
    app.command()(unpin)
    app.command()(expire)
    app.command()(forget)
    app.command()(restore)


def add(
    text: Optional[str] = typer.Argument(None, help="The memory; '-' or nothing reads stdin."),
    tag: List[str] = typer.Option(None, "--tag", "-t", help="Tag (repeatable)."),
    pin: bool = typer.Option(False, "--pin", help="Pin it: a core memory, always recalled first."),
    tier: str = typer.Option("archival", "--tier", help="core, archival or episodic."),
    ttl: Optional[str] = typer.Option(None, "--ttl", help="Expire after this long: 90m, 12h, 3d, 2w, 1y."),
    expires: Optional[str] = typer.Option(None, "--expires", help="Expire at DATE."),
    source: Optional[str] = typer.Option(None, "--source", help="Where it came from (a URL, a tool, a person)."),
    meta: List[str] = typer.Option(None, "--meta", help="key=value metadata (repeatable; values may be JSON)."),
    at: Optional[str] = typer.Option(None, "--at", help="When it happened (sets created_at), e.g. 2023-05-08."),
    allow_duplicate: bool = typer.Option(False, "--allow-duplicate", help="Store even if the same text is stored."),
    extract: bool = typer.Option(False, "--extract",
                                 help="Pull durable facts out of the text with the local chat model."),
    allow_secret: bool = typer.Option(False, "--allow-secret", help="Store it even if it holds what looks like a "
                                      "machine secret (an API key, a token, a private key)."),
    scope: str = typer.Option("global", "--scope", help="global (default), auto (the current project: "
                              "its git root or directory), or a project directory."),
    thread: Optional[str] = typer.Option(
        None, "--thread", help="Append it to this thread (a conversation, a chat, a notebook)."),
    as_json: bool = JsonOpt,
) -> None:
    """Store a memory. Text holding a machine secret (an API key, a token, a private key) is
    refused unless --allow-secret.

    \b
    Examples:
      pmem add "The wifi password at the cabin is hunter2" --tag home
      echo "Deploys need approval from Dana" | pmem add --tag work --ttl 30d
      pmem add "I am vegetarian" --pin
      pmem add "Tests run with make check" --scope auto
      pmem add "Dana: yes, Friday works" --thread standup
    """
    from ..scope import parse_scope
    from ..store import MAX_TEXT

    if text is None or text == "-":
        text = read_stdin(MAX_TEXT)
    if ttl and expires:
        raise UsageError("use --ttl or --expires, not both")
    expires_at = _when(expires, direction=1)
    if ttl:
        expires_at = timeutil.from_now(ttl)
    project = parse_scope(scope)
    if extract and project is not None:
        raise UsageError("--extract stores facts globally for now; leave out --scope")
    if extract:
        from .extract_cmd import run_extract

        run_extract(text, tags=tag or [], at=_when(at), source=source, dry_run=False, review=False,
                    as_json=as_json, allow_secret=allow_secret, thread=thread)
        return
    with open_store() as store:
        memory, created = store.add(text, tags=tag or [], tier=tier, pinned=pin, source=source,
                                    meta=_meta(meta or []), created_at=_when(at), expires_at=expires_at,
                                    allow_duplicate=allow_duplicate, allow_secret=allow_secret,
                                    scope=project, thread=thread)
    if as_json:
        out.print_json({**memory.to_dict(), "created": created})
    else:
        if not created:
            out.note(f"already stored as {memory.id} (use --allow-duplicate to store it again)")
        elif out.is_tty():
            out.note(f"stored {memory.id}")
        out.echo(memory.id)


def search(
    query: str = typer.Argument(..., help="What to look for, in plain words."),
    limit: int = typer.Option(None, "--limit", "-k", "-n", help="How many results (default 10)."),
    tag: List[str] = TagOpt,
    tier: List[str] = TierOpt,
    since: Optional[str] = SinceOpt,
    until: Optional[str] = UntilOpt,
    as_of: Optional[str] = AsOfOpt,
    include_expired: bool = typer.Option(False, "--include-expired", help="Also expired memories."),
    mode: str = typer.Option("hybrid", "--mode", help="hybrid (words + meaning), semantic or keyword."),
    no_collapse: bool = typer.Option(False, "--no-collapse",
                                     help="List a fact and the memory it was derived from separately."),
    scope: str = ScopeReadOpt,
    context: int = typer.Option(0, "--context", "-C",
                                help="Also show N neighbours on each side of a result that is in a thread."),
    min_score: float = typer.Option(0.0, "--min-score",
                                    help="Leave out results scoring below this (0..1; 0.3 keeps clear matches)."),
    explain: bool = typer.Option(False, "--explain",
                                 help="Show each result's way through the ranking: keyword rank and BM25, dense "
                                      "rank and cosine, thread lift, question penalty, the keyword share and why, "
                                      "the fused score, a dense-first move (with --json: an `explain` key)."),
    as_json: bool = JsonOpt,
) -> None:
    """Find memories by meaning and by words (hybrid).

    A fact and the memory it was derived from (see `pmem why`) share one result: the better
    ranked one is shown. A memory in a thread is also found by its neighbours' words.

    The score is an absolute relevance from 0 to 1, comparable between queries: 0.6 of it from
    the words matched (half at a typical best match), 0.4 from the closeness of meaning.

    \b
    Examples:
      pmem search "cabin internet"
      pmem search "who approves deploys" --json --limit 5
      pmem search "moved" --as-of 2024-01-01 --mode keyword
      pmem search "sister" --context 2      # each result with the turns around it
      pmem search "deploys" --min-score 0.3 --json   # only clear matches, for a script
      pmem search "who approves deploys" --explain   # why each result ranks where it does
    """
    from ..search import search as run_search

    check_count(limit, "--limit", 1)
    check_count(context, "--context", 0)
    with open_store(read_only=True) as store:
        flt = _filter(tag, tier, since, until, as_of, include_expired, scope=scope)
        hits = run_search(store, query, flt, limit=limit or store.config.search_limit, mode=mode,
                          collapse=not no_collapse, min_score=min_score, explain=explain)
        around = [store.thread_neighbours(h.memory, context, context, flt) for h in hits] if context else []
    if as_json:
        out.print_json([{**h.to_dict(), **({"context": {"before": [m.to_dict() for m in around[i][0]],
                                                        "after": [m.to_dict() for m in around[i][1]]}}
                                           if context else {})} for i, h in enumerate(hits)])
    elif hits and explain:
        _hits_explained(hits)
    elif hits and context:
        _hits_in_context(hits, around)
    elif hits:
        out.memory_table([], hits=hits)
    elif out.is_tty():
        out.note("no memories match")


def _hits_explained(hits) -> None:
    """Each result with its way through the ranking in one line (pmem.ranking.explain.line),
    after a line naming the profile and the keyword share this query got, and why."""
    from ..ranking.explain import line

    first = hits[0].explain
    fusion = first["fusion"]
    head = f"profile {first['profile']['model']} v{first['profile']['version']}; {fusion['stage']}"
    if fusion.get("share") is not None:
        head += f"; keyword share {fusion['share']:.3f}: {fusion['why']}"
    if not out.is_tty():
        out.echo("# " + head)
        for hit in hits:
            m = hit.memory
            out.echo("\t".join([m.id, m.created_at[:10], m.tier, f"{hit.score:.4f}", ",".join(m.tags),
                                out.one_line(m.text)]))
            out.echo("\t" + line(hit.explain))
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(head), show_lines=False, expand=True, pad_edge=False)
    for name, kw in (("id", {"style": "cyan", "no_wrap": True}), ("score", {"justify": "right", "no_wrap": True}),
                     ("text", {"ratio": 2}), ("way through the ranking", {"ratio": 3, "style": "dim"})):
        table.add_column(name, **kw)
    for hit in hits:
        table.add_row(Text(hit.memory.id), Text(f"{hit.score:.3f}"), Text(out.visible(hit.memory.text)),
                      Text(line(hit.explain)))
    out.console().print(table)


def _hits_in_context(hits, around) -> None:
    """Each result between its thread neighbours, in thread order; blocks apart, as grep -C."""
    now = timeutil.now_iso()
    if not out.is_tty():
        for i, (hit, (before, after)) in enumerate(zip(hits, around)):
            if i:
                out.echo("--")
            for m in [*before, hit.memory, *after]:
                score = f"{hit.score:.4f}" if m is hit.memory else "-"
                out.echo("\t".join([m.id, m.created_at[:10], m.tier, score, ",".join(m.tags), out.one_line(m.text)]))
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(show_lines=False, expand=True, pad_edge=False)
    for name, kw in (("id", {"style": "cyan", "no_wrap": True}), ("date", {"no_wrap": True}),
                     ("score", {"justify": "right", "no_wrap": True}), ("text", {"ratio": 1}),
                     ("", {"style": "yellow", "no_wrap": True})):
        table.add_column(name, **kw)
    for i, (hit, (before, after)) in enumerate(zip(hits, around)):
        if i:
            table.add_section()
        for m in [*before, hit.memory, *after]:
            style = "" if m is hit.memory else "dim"
            score = f"{hit.score:.3f}" if m is hit.memory else ""
            table.add_row(Text(m.id), Text(m.created_at[:10]), Text(score), Text(out.visible(m.text)),
                          Text(out._flags(m, now)), style=style)
    out.console().print(table)


def recall(
    query: Optional[str] = typer.Argument(None, help="The topic; without it: core plus most recent."),
    budget: Optional[int] = typer.Option(None, "--budget", "-b", help="Token budget (default 1500)."),
    fmt: str = typer.Option("md", "--format", "-f", help="md, xml, json or text."),
    tag: List[str] = TagOpt,
    tier: List[str] = TierOpt,
    as_of: Optional[str] = AsOfOpt,
    scope: str = ScopeReadOpt,
    neighbours: Optional[int] = typer.Option(
        None, "--neighbours",
        help="Thread neighbours on each side of each of the best three matches (default: setting recall_neighbours)."),
) -> None:
    """Print what another LLM should know: core memories, then the most relevant, under a budget.

    The best three matches that are part of a thread (a conversation) bring their neighbours
    in the budget the matches leave, each as one block in thread order.

    \b
    Examples:
      pmem recall "plan dinner" --budget 800 | llm "suggest a recipe"
      pmem recall --format xml > context.xml
      pmem recall "the trip" --neighbours 0      # matches only, no surrounding turns
    """
    from ..recall import recall as run_recall
    from ..recall import render

    check_count(budget, "--budget", 1)
    check_count(neighbours, "--neighbours", 0)
    with open_store(read_only=True) as store:
        flt = _filter(tag, tier, None, None, as_of, scope=scope)
        result = run_recall(store, query, budget=budget, flt=flt, fmt=fmt, neighbours=neighbours)
    out.echo(render(result, fmt))
    if result.left_out and sys.stderr.isatty():
        out.note(f"{result.left_out} more memories did not fit in {result.budget} tokens")


def list_(
    limit: int = typer.Option(50, "--limit", "-n", help="How many (0 for all)."),
    offset: int = typer.Option(0, "--offset", help="Skip this many first."),
    tag: List[str] = TagOpt,
    tier: List[str] = TierOpt,
    since: Optional[str] = SinceOpt,
    until: Optional[str] = UntilOpt,
    as_of: Optional[str] = AsOfOpt,
    pinned: Optional[bool] = typer.Option(None, "--pinned/--unpinned", help="Only pinned, or only unpinned."),
    include_expired: bool = typer.Option(False, "--include-expired", help="Also expired memories."),
    include_forgotten: bool = typer.Option(False, "--include-forgotten", help="Also forgotten memories."),
    all_: bool = typer.Option(False, "--all", "-a", help="Everything: every tier and status."),
    sort: str = typer.Option("created", "--sort",
                             help="created, updated, accessed, expires (soonest first, never last) or id."),
    reverse: bool = typer.Option(False, "--reverse", "-r", help="Oldest first."),
    scope: str = ScopeAllOpt,
    as_json: bool = JsonOpt,
) -> None:
    """List memories, newest first.

    \b
    Examples:
      pmem list --tag work
      pmem list --all --json | jq '.[].text'
    """
    check_count(limit, "--limit", 0)
    check_count(offset, "--offset", 0)
    with open_store(read_only=True) as store:
        flt = _filter(tag, tier, since, until, as_of, include_expired, include_forgotten, pinned, all_,
                      scope=scope)
        memories = store.list_memories(flt, sort=sort, reverse=reverse, limit=limit or None, offset=offset)
    if as_json:
        out.print_json([m.to_dict() for m in memories])
    elif memories:
        out.memory_table(memories)
    elif out.is_tty():
        out.note("no memories")


def show(
    memory_id: str = typer.Argument(..., metavar="ID", help="Memory id or a unique prefix."),
    as_json: bool = JsonOpt,
) -> None:
    """Show one memory with all its fields.

    \b
    Example:
      pmem show 3f2a
    """
    with open_store(read_only=True) as store:
        memory = store.get(memory_id)
        _touch(store, memory.id)
    if as_json:
        out.print_json(memory.to_dict())
    else:
        out.memory_detail(memory)


def _touch(store, memory_id: str) -> None:
    """Count the access; a database the person may not write (a read-only file) is still shown."""
    from .. import db
    from ..errors import DatabaseError

    caught: tuple[type[BaseException], ...] = (DatabaseError, *db.errors())
    try:
        store.touch([memory_id])
    except caught as exc:
        if "readonly" not in str(exc):
            raise


def edit(
    memory_id: str = typer.Argument(..., metavar="ID", help="Memory id or a unique prefix."),
    text: Optional[str] = typer.Argument(None, help="New text; '-' reads stdin; none opens $EDITOR."),
    tag: List[str] = typer.Option(None, "--tag", "-t", help="Add this tag (repeatable)."),
    untag: List[str] = typer.Option(None, "--untag", help="Remove this tag (repeatable)."),
    tier: Optional[str] = typer.Option(None, "--tier", help="Move to tier core, archival or episodic."),
    meta: List[str] = typer.Option(None, "--meta", help="Set key=value metadata (repeatable)."),
    allow_secret: bool = typer.Option(False, "--allow-secret", help="Store it even if it holds what looks like a "
                                      "machine secret (an API key, a token, a private key)."),
    as_json: bool = JsonOpt,
) -> None:
    """Change a memory's text, tags, tier or metadata (recorded; `pmem undo` reverts).

    \b
    Examples:
      pmem edit 3f2a "The cabin wifi password is now hunter3"
      pmem edit 3f2a --tag travel --untag home
    """
    from ..store import MAX_TEXT

    with open_store() as store:
        memory = store.get(memory_id)
        if text == "-":
            text = read_stdin(MAX_TEXT)
        elif text is None and not (tag or untag or tier or meta):
            text = _edit_in_editor(memory.text)
            if text is None:
                out.note("no change")
                out.echo(memory.id)
                return
        memory = store.edit(memory.id, text=text, add_tags=tag or [], remove_tags=untag or [], tier=tier,
                            update_meta=_meta(meta) if meta else None, allow_secret=allow_secret)
    if as_json:
        out.print_json(memory.to_dict())
    else:
        out.echo(memory.id)


def _edit_in_editor(current: str) -> Optional[str]:
    import shlex
    import subprocess
    import tempfile

    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    with tempfile.NamedTemporaryFile("w+", suffix=".md", delete=False, encoding="utf-8") as f:
        f.write(current)
        name = f.name
    try:
        os.chmod(name, 0o600)
        try:
            rc = subprocess.call([*shlex.split(editor), name])
        except OSError as exc:
            raise UsageError(f"cannot run editor {editor!r}: {exc}") from None
        if rc != 0:
            raise UsageError(f"editor {editor!r} exited with {rc}; nothing changed")
        new = Path(name).read_text(encoding="utf-8").strip()
    finally:
        os.unlink(name)
    if not new:
        raise UsageError("empty text; nothing changed (use `pmem forget` to remove a memory)")
    return None if new == current.strip() else new


def _each(ids: List[str], action: str, fn_name: str, min_prefix: int = 1, **kw) -> None:
    with open_store() as store:
        full = [store.resolve(i, min_prefix=min_prefix) for i in ids]
        with store.operation(action, f"{action} {' '.join(full)}"):
            for mid in full:
                getattr(store, fn_name)(mid, **kw)
    for mid in full:
        out.echo(mid)


def pin(ids: List[str] = IdsArg) -> None:
    """Pin memories: core, always recalled first.

    \b
    Example:
      pmem pin 3f2a
    """
    _each(ids, "pin", "pin")


def unpin(ids: List[str] = IdsArg) -> None:
    """Unpin memories (they become archival).

    \b
    Example:
      pmem unpin 3f2a
    """
    _each(ids, "unpin", "unpin")


def expire(
    ids: List[str] = IdsArg,
    in_: Optional[str] = typer.Option(None, "--in", help="Expire after this long (3d, 2w...)."),
    at: Optional[str] = typer.Option(None, "--at", help="Expire at DATE."),
    now: bool = typer.Option(False, "--now", help="Expire now (the default)."),
) -> None:
    """Set when memories expire; expired ones leave search and recall but can be restored.
    Ids need at least 4 characters (a whole id may be shorter).

    \b
    Examples:
      pmem expire 3f2a --in 3d
      pmem expire 3f2a --now
    """
    if sum(bool(x) for x in (in_, at, now)) > 1:
        raise UsageError("use one of --in, --at, --now")
    when = None
    if in_:
        when = timeutil.from_now(in_)
    elif at:
        when = _when(at, direction=1)
    from ..store import SAFE_PREFIX

    _each(ids, "expire", "expire", min_prefix=SAFE_PREFIX, at=when)


def forget(
    ids: List[str] = IdsArg,
    purge: bool = typer.Option(False, "--purge", help="Erase for good: text and vector leave every table, the "
                               "history and the file (cannot be undone; asks first, see --yes)."),
    backups: str = typer.Option("rewrite", "--backups", help="With --purge: rewrite (erase from the backups "
                                "that hold them), remove (delete those backups) or keep them."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Purge without asking."),
) -> None:
    """Forget memories (a soft delete: `pmem restore` or `pmem undo` brings them back), or with
    --purge erase them for good, from the database file, its history and the backups. Ids need
    at least 4 characters (a whole id may be shorter), so a typo cannot name a memory by chance.

    \b
    Examples:
      pmem forget 3f2a
      pmem forget --purge 3f2a --yes
    """
    from ..store import SAFE_PREFIX

    if not purge:  # the verbs that take memories out of recall need SAFE_PREFIX characters of an id
        _each(ids, "forget", "forget", min_prefix=SAFE_PREFIX)
        return
    from ..backup import backups_holding, purge_backups

    if backups not in ("rewrite", "remove", "keep"):
        raise UsageError(f"unknown --backups {backups!r}: use rewrite, remove or keep")
    with open_store() as store:
        for i in ids:  # checked before asking; an id only the history still holds is the store's to find
            with contextlib.suppress(NotFound):
                store.resolve(i, min_prefix=SAFE_PREFIX)
        if not yes:
            if sys.stdin is None or not sys.stdin.isatty():
                raise UsageError("refusing to purge without asking: add --yes (stdin is not a terminal)")
            if not typer.confirm(f"Erase {len(ids)} memories for good? This cannot be undone.",
                                 default=False, err=True):
                out.note("nothing purged")
                raise typer.Exit(1)
        result = store.purge(ids)
        config = store.config
    touched = [] if backups == "keep" else purge_backups(result["purged"], mode=backups, config=config)
    for mid in result["purged"]:
        out.echo(mid)
    if touched:
        out.note(f"{'rewrote' if backups == 'rewrite' else 'removed'} {len(touched)} backups that held them")
    elif backups == "keep":
        held = backups_holding(result["purged"])
        if held:
            out.note(f"{len(held)} backups still hold them (in {held[0].parent}); "
                     "purge again with --backups rewrite to erase them there")
    if result["derived"]:
        out.note("memories derived from them keep their own text: " + ", ".join(result["derived"]))
    if not result["checkpointed"]:
        out.note("another pmem process kept the -wal file open: old pages stay in it until the next "
                 "purge or checkpoint when pmem is idle")


def restore(ids: List[str] = IdsArg) -> None:
    """Bring back forgotten, expired or merged memories.

    \b
    Example:
      pmem restore 3f2a
    """
    _each(ids, "restore", "restore")
