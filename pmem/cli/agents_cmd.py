"""`pmem mcp`, `pmem hook` and `pmem context`: pmem for agents and LLM tools.

The work lives in pmem.integrations; these commands parse options and print.
"""

import shutil
import sys
from pathlib import Path
from typing import Optional

import typer

from ..errors import UsageError
from . import output as out
from .common import PmemGroup, db_override, open_store

ScopeHelp = "Project scope: auto (the project of the current directory), global, or a directory."


def _program(absolute: bool = False) -> str:
    """How other tools should start pmem: `pmem` when it is on PATH, else its full path."""
    found = shutil.which("pmem")
    if found and not absolute:
        return "pmem"
    if found:
        return str(Path(found).resolve())
    argv0 = Path(sys.argv[0])
    if argv0.name == "pmem" and argv0.exists():
        return str(argv0.resolve())
    return "pmem"


def register(app: typer.Typer) -> None:
    app.command()(mcp)
    hook_app = typer.Typer(cls=PmemGroup, help="Agent hooks: memories in front of the model at session "
                           "start and on every prompt (Claude Code, Codex, Gemini CLI).",
                           no_args_is_help=True, rich_markup_mode=None)
    hook_app.command("claude-code")(hook_claude)
    hook_app.command("codex")(hook_codex)
    hook_app.command("gemini")(hook_gemini)
    hook_app.command("install")(hook_install)
    hook_app.command("uninstall")(hook_uninstall)
    app.add_typer(hook_app, name="hook")
    app.command()(context)


def mcp(
    print_config: Optional[str] = typer.Option(
        None, "--print-config", metavar="CLIENT",
        help="Print the config snippet for claude-code, claude-desktop, cursor, vscode or codex, and exit."),
    scope: str = typer.Option("auto", "--scope", help=ScopeHelp + " Reads see global memories "
                              "plus this project's; remember(project=true) stores into it."),
) -> None:
    """Serve your memories to an MCP client over stdio (Claude, Cursor, VS Code, Codex...).

    Tools: recall, search, remember (optionally extracting facts), update (a correction that supersedes),
    pin and forget (undoable). Every result is bounded. Needs the extra: pip install "pmem-cli[mcp]".
    Memories it writes carry the source mcp:CLIENT-NAME. With PMEM_HOME, PMEM_DB or --db set,
    --print-config puts them in the snippet's env, so the server opens the same database.

    \b
    Examples:
      pmem mcp --print-config claude-desktop
      claude mcp add --scope user pmem -- pmem mcp
    """
    from ..integrations import clients, mcp_server

    if print_config is not None:
        if print_config not in clients.MCP_CLIENTS:
            raise UsageError(f"unknown client {print_config!r}: use one of {', '.join(clients.MCP_CLIENTS)}")
        env = clients.server_env(db=db_override())  # a client passes few variables on to the server
        snippet, where = clients.mcp_config(print_config, _program(absolute=print_config == "claude-desktop"), env)
        out.echo(snippet)
        out.note(where)
        return
    if sys.stdin is not None and sys.stdin.isatty():
        out.note("pmem mcp speaks MCP on stdin/stdout; an MCP client starts it "
                 "(see `pmem mcp --print-config CLIENT`). Ctrl-C to quit.")
    db = db_override()
    mcp_server.run(scope, db=str(db) if db else None)


def _hook(client: str, event: str) -> None:
    """The body of every `pmem hook CLIENT EVENT`: never fails, never prints an error."""
    from .hook_run import run

    run(client, event, db_override())  # --db read here: the work runs in another thread, outside typer's context
    raise typer.Exit(0)


event_help = "session-start, user-prompt or subagent-start (a subagent gets what a session start gives)"
codex_help = ("session-start, user-prompt, compact (after a compaction: memories may be given again) "
              "or subagent-start (a subagent gets what a session start gives)")
compact_help = "session-start, user-prompt or compact (after a compaction: memories may be given again)"


def hook_claude(event: str = typer.Argument(..., help=event_help)) -> None:
    """Claude Code hook: reads its JSON on stdin, prints memories for the context.

    session-start prints the core memories and those relevant to the project;
    user-prompt prints those relevant to the prompt, each once per session, and nothing when
    nothing is relevant; subagent-start (SubagentStart) gives a subagent, which starts with a
    context of its own, what a session start gives, as Claude Code's JSON (additionalContext).
    Within hook_budget characters and hook_timeout seconds; on any error it prints nothing,
    exits 0 and logs to hook-errors.log (see `pmem doctor`).

    \b
    Examples:
      pmem hook install claude-code
      echo '{"prompt": "plan dinner", "session_id": "s1"}' | pmem hook claude-code user-prompt
    """
    _hook("claude-code", event)

def hook_codex(event: str = typer.Argument(..., help=codex_help)) -> None:
    """Codex hook: like the claude-code one, printing Codex's JSON (additionalContext).

    compact runs after a compaction (PostCompact) and prints nothing; subagent-start
    (SubagentStart) gives a subagent what a session start gives. No PreCompact hook: what it
    prints never reaches the model.

    \b
    Example:
      pmem hook install codex
    """
    _hook("codex", event)

def hook_gemini(event: str = typer.Argument(..., help=compact_help)) -> None:
    """Gemini CLI hook (SessionStart, BeforeAgent, PreCompress): prints Gemini's JSON (additionalContext).

    compact runs before a compression (PreCompress) and prints {}; Gemini sends it before every
    turn's check, so only a manual /compress lets memories come back at once, and otherwise a
    memory may be given again 20 prompts after it last was.

    \b
    Example:
      pmem hook install gemini
    """
    _hook("gemini", event)

def hook_install(
    client: str = typer.Argument(..., help="claude-code, codex or gemini."),
    project: Optional[Path] = typer.Option(None, "--project", help="Write this project's settings "
                                           "file instead of your user one."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would change; write nothing."),
) -> None:
    """Add pmem's hooks to a client's settings file (merged, idempotent, with a backup).

    Files: ~/.claude/settings.json, ~/.codex/hooks.json, ~/.gemini/settings.json, or where the
    host's own variable moves them (CLAUDE_CONFIG_DIR, CODEX_HOME, GEMINI_CLI_HOME); or the
    project's with --project (for Claude Code that is .claude/settings.local.json when pmem is
    not on PATH, since the hook then names your own copy of pmem). Everything else in the file
    stays as it was, comments included; running it again changes nothing; the previous file is
    kept as FILE.bak-TIMESTAMP; a symbolic link stays a link. `pmem hook uninstall` undoes it.

    \b
    Examples:
      pmem hook install claude-code
      pmem hook install codex --project .
    """
    from ..integrations import clients

    program = _program()
    result = clients.install_hooks(client, program=program, project=project, dry_run=dry_run)
    if result.elsewhere is not None:
        out.note(f"{result.elsewhere} holds pmem's hooks too, so they would run twice: "
                 f"`pmem hook uninstall {client} --project {project}` removes both, then install again")
    if not result.changed:
        out.note(f"{result.path}: pmem's hooks are already there; nothing changed")
        return
    what = ", ".join(result.added + result.updated)
    verb = "would add" if dry_run else "added"
    out.note(f"{result.path}: {verb} {what}" + (f" (backup: {result.backup})" if result.backup else ""))
    if project is not None and not clients.portable(program):
        if client == "claude-code":
            out.note(f"pmem is not on PATH, so the hooks name {program}: they went to your own project file; "
                     "keep .claude/settings.local.json out of git")
        else:
            out.note(f"pmem is not on PATH, so the hooks name {program}: do not commit {result.path.name} "
                     "as it is (put pmem on PATH and install again for a file others can use)")
    if client == "codex":
        out.note("Codex runs a new or changed hook only once you trust it: open /hooks in Codex and trust "
                 "pmem's" + (" (and trust the project, for its .codex folder)" if project is not None else ""))


def hook_uninstall(
    client: str = typer.Argument(..., help="claude-code, codex or gemini."),
    project: Optional[Path] = typer.Option(None, "--project", help="Edit this project's settings "
                                           "files instead of your user one."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would change; write nothing."),
) -> None:
    """Remove pmem's hooks from a client's settings file, and nothing else.

    Only the entries that run `pmem hook CLIENT ...` go (with a group or list they leave
    empty); every other setting, hook and comment stays, edits made since the install included.
    The previous file is kept as FILE.bak-TIMESTAMP.

    \b
    Examples:
      pmem hook uninstall claude-code
      pmem hook uninstall gemini --project . --dry-run
    """
    from ..integrations import clients

    results = clients.uninstall_hooks(client, project=project, dry_run=dry_run)
    for r in results:
        if r.changed:
            verb = "would remove" if dry_run else "removed"
            out.note(f"{r.path}: {verb} pmem's {', '.join(r.removed)}"
                     + (f" (backup: {r.backup})" if r.backup else ""))
    if not any(r.changed for r in results):
        out.note(f"{', '.join(str(r.path) for r in results)}: no pmem hooks there; nothing changed")


def context(
    write: Optional[Path] = typer.Option(None, "--write", "-w", metavar="FILE",
                                         help="Keep the block inside FILE (AGENTS.md, CLAUDE.md, GEMINI.md...)."),
    budget: int = typer.Option(4000, "--budget", help="Characters of memories at most."),
    scope: str = typer.Option("auto", "--scope", help=ScopeHelp),
) -> None:
    """Core memories for tools that only read a conventions file (AGENTS.md and the like).

    With --write, pmem keeps them in a block between two marker lines that it owns, and leaves
    the rest of the file exactly as it was; without it, prints the block.

    \b
    Examples:
      pmem context --write AGENTS.md
      pmem context --write CLAUDE.md --scope global
    """
    from ..integrations import context as ctx
    from ..scope import parse_scope, read_filter

    if budget < 100:
        raise UsageError("--budget must be at least 100 characters")
    flt = read_filter(parse_scope(scope))
    with open_store() as store:
        body = ctx.render_block(store, budget=budget, flt=flt)
    if write is None:
        out.echo(body)
        return
    changed = ctx.write_block(write, body)
    out.note(f"{write}: " + ("pmem block written" if changed else "already up to date"))
