"""Other tools' configuration: MCP config snippets and hook entries in their settings files.

`install_hooks` merges pmem's hook entries into a client's settings file and `uninstall_hooks`
takes exactly them out again: whatever else is there stays as it was, byte for byte (comments
too, in Gemini CLI's settings), a second run changes nothing, the file is written atomically
through any symbolic link with its mode kept, and the previous version is copied next to it
first. A file pmem cannot parse is left untouched.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..errors import UsageError
from .hooks import EVENT_NAMES

MCP_CLIENTS = ("claude-code", "claude-desktop", "cursor", "vscode", "codex")
# Where pmem's state is (pmem.paths): what a server started by a client needs to find it.
LOCATION_VARS = ("PMEM_HOME", "PMEM_DB", "PMEM_MODELS_DIR", "XDG_DATA_HOME", "XDG_CONFIG_HOME")
HOOK_CLIENTS = ("claude-code", "codex", "gemini")
MAX_SETTINGS_BYTES = 5_000_000  # a settings file is a few kB; refuse a stray large file early
HOOK_TIMEOUT_S = 10  # what the client allows the hook; pmem's own limit (hook_timeout) is lower


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def server_env(environ: Mapping[str, str] | None = None, db: str | os.PathLike | None = None) -> dict[str, str]:
    """The variables that make a server an MCP client starts open this store (absolute paths).

    Clients start a server with few of the user's variables (Claude Desktop and the SDK's
    stdio_client pass HOME, PATH and a handful), so a PMEM_HOME or PMEM_DB set in a shell would
    be lost and the server would open the default database."""
    environ = os.environ if environ is None else environ
    env = {}
    for name in LOCATION_VARS:
        value = environ.get(name, "")
        if value and not (name.startswith("XDG_") and environ.get("PMEM_HOME")):
            env[name] = str(Path(value).expanduser().absolute())
    if db:
        env["PMEM_DB"] = str(Path(db).expanduser().absolute())
    return env


def mcp_config(client: str, program: str = "pmem", env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(snippet, where it goes) for `pmem mcp --print-config CLIENT`; `env` (see server_env)
    goes into it in the client's own form."""
    env = dict(env or {})
    server: dict[str, Any] = {"command": program, "args": ["mcp"]}
    if env:
        server["env"] = env
    if client == "claude-code":
        flags = "".join(f" --env {_shell_word(f'{k}={v}')}" for k, v in env.items())  # options go before the name
        return (f"claude mcp add --scope user{flags} pmem -- {_shell_word(program)} mcp",
                "run this command (or put the claude-desktop JSON in .mcp.json for one project)")
    if client == "claude-desktop":
        return (json.dumps({"mcpServers": {"pmem": server}}, indent=2),
                ("merge into claude_desktop_config.json (Settings > Developer > Edit Config); "
                 "Claude Desktop does not read your shell's PATH, hence the full path"))
    if client == "cursor":
        return (json.dumps({"mcpServers": {"pmem": server}}, indent=2),
                "merge into ~/.cursor/mcp.json (all projects) or .cursor/mcp.json (one project)")
    if client == "vscode":
        return (json.dumps({"servers": {"pmem": {"type": "stdio", **server}}}, indent=2),
                "merge into .vscode/mcp.json (or run `MCP: Open User Configuration`)")
    if client == "codex":
        lines = ["[mcp_servers.pmem]", f"command = {_toml_string(program)}", "args = [\"mcp\"]"]
        if env:
            lines.append("env = { " + ", ".join(f"{k} = {_toml_string(v)}" for k, v in env.items()) + " }")
        flags = "".join(f" --env {_shell_word(f'{k}={v}')}" for k, v in env.items())
        from .hosts import user_dir, variable

        folder = str(user_dir("codex")) if variable("codex") else "~/.codex"  # where CODEX_HOME puts it
        return ("\n".join(lines),
                f"append to {folder}/config.toml "
                f"(or run: codex mcp add pmem{flags} -- {_shell_word(program)} mcp)")
    raise UsageError(f"unknown client {client!r}: use one of {', '.join(MCP_CLIENTS)}")


def settings_path(client: str, project: Path | None = None, home: Path | None = None, *,
                  local: bool = False, environ: Mapping[str, str] | None = None) -> Path:
    """The settings file `pmem hook install` edits: the user's, where the host's own variable
    puts it (pmem.integrations.hosts: CLAUDE_CONFIG_DIR, CODEX_HOME, GEMINI_CLI_HOME), or one
    project's with `project` (with `local`, Claude Code's per-user project file,
    .claude/settings.local.json)."""
    if project is None and client in HOOK_CLIENTS:
        from .hosts import settings_file

        return settings_file(client, home, environ)
    base = project if project is not None else (home or Path.home())
    if client == "claude-code":
        return base / ".claude" / ("settings.local.json" if local and project is not None else "settings.json")
    if client == "codex":
        return base / ".codex" / "hooks.json"
    if client == "gemini":
        return base / ".gemini" / "settings.json"
    raise UsageError(f"unknown client {client!r}: use one of {', '.join(HOOK_CLIENTS)}")


def hook_command(client: str, event: str, program: str = "pmem") -> str:
    return f"{_shell_word(program)} hook {client} {event}"


def _shell_word(word: str) -> str:
    import shlex

    return shlex.quote(word)


def portable(program: str) -> bool:
    """Whether `program` runs pmem for anyone who has it on PATH (not one person's full path)."""
    return not os.path.isabs(program) and os.sep not in program


def _entry(client: str, event: str, program: str) -> dict[str, Any]:
    hook: dict[str, Any] = {"type": "command", "command": hook_command(client, event, program)}
    if client == "gemini":
        hook = {"name": f"pmem-{event}", **hook, "timeout": HOOK_TIMEOUT_S * 1000}  # milliseconds
    else:
        hook["timeout"] = HOOK_TIMEOUT_S
    group: dict[str, Any] = {"hooks": [hook]}
    if client == "gemini":
        group = {"matcher": "*", **group}
    return group


def pmem_event(hook: Any, client: str) -> str | None:
    """The pmem event a hook entry runs (`PROGRAM hook CLIENT EVENT`, PROGRAM a pmem), or None."""
    import shlex

    if not isinstance(hook, dict) or not isinstance(hook.get("command"), str):
        return None
    try:
        words = shlex.split(hook["command"])
    except ValueError:
        return None
    if len(words) >= 4 and words[-3:-1] == ["hook", client] and Path(words[-4]).name == "pmem" \
            and words[-1] in EVENT_NAMES[client]:
        return words[-1]
    return None


@dataclass
class InstallResult:
    path: Path
    changed: bool
    backup: Path | None
    added: list[str]
    updated: list[str]
    removed: list[str] = field(default_factory=list)
    elsewhere: Path | None = None  # Claude Code's other project file, when it holds pmem's hooks too


def merge_hooks(settings: dict[str, Any], client: str, program: str = "pmem") -> tuple[dict, list[str], list[str]]:
    """`settings` with pmem's hooks in it (a new dict; the input is not changed)."""
    merged = json.loads(json.dumps(settings))
    hooks = merged.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise UsageError("its \"hooks\" entry is not an object; fix it by hand first")
    added, updated = [], []
    for event, name in EVENT_NAMES[client].items():
        groups = hooks.setdefault(name, [])
        if not isinstance(groups, list):
            raise UsageError(f"its hooks.{name} entry is not a list; fix it by hand first")
        want = _entry(client, event, program)
        found = False
        for group in groups:
            if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
                continue
            for i, hook in enumerate(group["hooks"]):
                if pmem_event(hook, client) == event:
                    found = True
                    new = {**hook, **want["hooks"][0]}
                    if new != hook:
                        group["hooks"][i] = new
                        updated.append(name)
        if not found:
            groups.append(want)
            added.append(name)
    return merged, added, updated


def remove_hooks(settings: dict[str, Any], client: str) -> tuple[dict, list[str]]:
    """`settings` without pmem's hook entries (a new dict): a group, an event's list or the
    "hooks" object that held only pmem's goes with them; everything else stays as it is."""
    result = json.loads(json.dumps(settings))
    hooks = result.get("hooks")
    if not isinstance(hooks, dict):
        return result, []
    removed = []
    for name in list(hooks):
        groups = hooks[name]
        if not isinstance(groups, list):
            continue
        kept_groups = []
        for group in groups:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                kept = [h for h in group["hooks"] if pmem_event(h, client) is None]
                if len(kept) < len(group["hooks"]):
                    removed.append(name)
                    if not kept:
                        continue
                    group["hooks"] = kept
            kept_groups.append(group)
        if name in removed and not kept_groups:
            del hooks[name]
        else:
            hooks[name] = kept_groups
    if removed and not hooks:
        del result["hooks"]
    return result, sorted(set(removed), key=removed.index)


def read_settings(path: Path, *, comments: bool = False) -> tuple[str, dict[str, Any]]:
    """A settings file's text and the object it holds ("" and {} when it is missing or empty)."""
    from .jsonc import loads

    if not path.exists():
        return "", {}
    if path.is_file() and path.stat().st_size > MAX_SETTINGS_BYTES:
        raise UsageError(f"{path} is larger than {MAX_SETTINGS_BYTES:,} bytes; is it a settings file? "
                         "pmem changed nothing")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    if not text.strip():
        return text, {}
    try:
        data = loads(text, comments=comments)
    except ValueError as exc:
        raise UsageError(f"{path} is not valid JSON ({exc}); pmem changed nothing") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path} does not hold a JSON object; pmem changed nothing")
    return text, data


def _comments(client: str) -> bool:
    return client == "gemini"  # Gemini CLI strips comments before it parses; the others read plain JSON


def _backup(path: Path) -> Path | None:
    if not path.exists():
        return None
    stamp = time.strftime("%Y%m%dT%H%M%S")
    backup = path.with_name(f"{path.name}.bak-{stamp}")
    n = 1
    while backup.exists():
        backup = path.with_name(f"{path.name}.bak-{stamp}-{n}")
        n += 1
    shutil.copy2(path, backup)  # through a link: the contents, next to the link
    return backup


def _rewrite(client: str, path: Path, text: str, new: dict[str, Any], dry_run: bool) -> Path | None:
    """Write `new` into `path` as a minimal edit of `text` (comments and layout kept); the backup."""
    from .jsonc import edit
    from .textfiles import write_through

    try:
        updated = edit(text, new, comments=_comments(client))
    except ValueError as exc:
        raise UsageError(f"{path}: {exc}; pmem changed nothing") from None
    if dry_run:
        return None
    backup = _backup(path)
    write_through(path, updated.encode("utf-8"))
    return backup


def _check_client(client: str) -> None:
    if client not in HOOK_CLIENTS:
        raise UsageError(f"unknown client {client!r}: use one of {', '.join(HOOK_CLIENTS)}")


def install_hooks(client: str, *, program: str = "pmem", project: Path | None = None,
                  home: Path | None = None, dry_run: bool = False) -> InstallResult:
    """Merge pmem's hooks into the client's settings. In a project, Claude Code gets them in its
    per-user file (.claude/settings.local.json) when `program` is one person's full path: the
    shared .claude/settings.json is committed, and that path would be wrong for everyone else."""
    _check_client(client)
    local = client == "claude-code" and project is not None and not portable(program)
    path = settings_path(client, project, home, local=local)
    text, current = read_settings(path, comments=_comments(client))
    try:
        merged, added, updated = merge_hooks(current, client, program)
    except UsageError as exc:
        raise UsageError(f"{path}: {exc}") from None
    elsewhere = None
    if client == "claude-code" and project is not None:  # both files' hooks run: pmem's would run twice
        other = settings_path(client, project, home, local=not local)
        try:
            if remove_hooks(read_settings(other)[1], client)[1]:
                elsewhere = other
        except UsageError:
            pass  # not pmem's to judge here
    if merged == current:
        return InstallResult(path, False, None, [], [], elsewhere=elsewhere)
    backup = _rewrite(client, path, text, merged, dry_run)
    return InstallResult(path, True, backup, added, updated, elsewhere=elsewhere)


def uninstall_hooks(client: str, *, project: Path | None = None, home: Path | None = None,
                    dry_run: bool = False) -> list[InstallResult]:
    """Remove exactly pmem's hook entries from the client's settings (both of Claude Code's
    project files), keeping every other edit; one result per file looked at."""
    _check_client(client)
    paths = [settings_path(client, project, home)]
    if client == "claude-code" and project is not None:
        paths.append(settings_path(client, project, home, local=True))
    results = []
    for path in paths:
        text, current = read_settings(path, comments=_comments(client))
        cleaned, removed = remove_hooks(current, client)
        if not removed:
            results.append(InstallResult(path, False, None, [], []))
            continue
        backup = _rewrite(client, path, text, cleaned, dry_run)
        results.append(InstallResult(path, True, backup, [], [], removed))
    return results


def hook_checks(home: Path | None = None, environ: Mapping[str, str] | None = None) -> list:
    """`pmem doctor`'s findings about pmem's hooks in the hosts' user settings, read where each
    host reads them (its home variable honoured): which events are installed, which a newer pmem
    adds (`pmem hook install` again), and hooks left under ~ that the host no longer reads
    because its variable points elsewhere. Nothing for a host without pmem's hooks."""
    from ..doctor import Check
    from .hosts import VARIABLES, settings_file, variable

    checks = []
    for client in HOOK_CLIENTS:
        name = f"{client} hooks"
        path = settings_file(client, home, environ)
        try:
            installed = set(remove_hooks(read_settings(path, comments=_comments(client))[1], client)[1])
        except UsageError as exc:
            checks.append(Check(name, True, str(exc), level="info"))
            continue
        if installed:
            missing = [e for e in EVENT_NAMES[client].values() if e not in installed]
            detail = f"{', '.join(sorted(installed))} in {path}"
            if missing:
                checks.append(Check(name, True, detail + f"; not {', '.join(missing)}",
                                    f"pmem hook install {client} (adds {', '.join(missing)})", level="info"))
            else:
                checks.append(Check(name, True, detail))
        if variable(client, environ):
            default = settings_file(client, home, {})
            try:
                stale = remove_hooks(read_settings(default, comments=_comments(client))[1], client)[1]
            except UsageError:
                stale = []
            if stale and default != path:
                checks.append(Check(name, True, f"{default} holds pmem's hooks, but {VARIABLES[client]} is set: "
                                                f"the host reads {path} instead", f"{VARIABLES[client]}= pmem hook "
                                                f"uninstall {client}; pmem hook install {client}", level="info"))
    return checks
