"""Other tools' configuration: MCP config snippets and hook entries in their settings files.

`install_hooks` merges pmem's hook entries into a client's settings file: whatever else is there
stays as it was, a second run changes nothing, the file is written atomically with its mode kept,
and the previous version is copied next to it first. A file pmem cannot parse is left untouched.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .hooks import EVENT_NAMES

MCP_CLIENTS = ("claude-code", "claude-desktop", "cursor", "vscode", "codex")
HOOK_CLIENTS = ("claude-code", "codex", "gemini")
HOOK_TIMEOUT_S = 10  # what the client allows the hook; pmem's own limit (hook_timeout) is lower


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def mcp_config(client: str, program: str = "pmem") -> tuple[str, str]:
    """(snippet, where it goes) for `pmem mcp --print-config CLIENT`."""
    server = {"command": program, "args": ["mcp"]}
    if client == "claude-code":
        return (f"claude mcp add --scope user pmem -- {program} mcp",
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
        return (f"[mcp_servers.pmem]\ncommand = {_toml_string(program)}\nargs = [\"mcp\"]",
                "append to ~/.codex/config.toml (or run: codex mcp add pmem -- " + program + " mcp)")
    raise UsageError(f"unknown client {client!r}: use one of {', '.join(MCP_CLIENTS)}")


def settings_path(client: str, project: Path | None = None, home: Path | None = None) -> Path:
    """The settings file `pmem hook install` edits: the user's, or one project's with `project`."""
    base = project if project is not None else (home or Path.home())
    if client == "claude-code":
        return base / ".claude" / "settings.json"
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


def _is_ours(hook: Any, client: str, event: str) -> bool:
    return (isinstance(hook, dict) and isinstance(hook.get("command"), str)
            and hook["command"].rstrip().endswith(f" hook {client} {event}"))


@dataclass
class InstallResult:
    path: Path
    changed: bool
    backup: Path | None
    added: list[str]
    updated: list[str]


def merge_hooks(settings: dict[str, Any], client: str, program: str = "pmem") -> tuple[dict, list[str], list[str]]:
    """`settings` with pmem's two hooks in it (a new dict; the input is not changed)."""
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
                if _is_ours(hook, client, event):
                    found = True
                    new = {**hook, **want["hooks"][0]}
                    if new != hook:
                        group["hooks"][i] = new
                        updated.append(name)
        if not found:
            groups.append(want)
            added.append(name)
    return merged, added, updated


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json_file(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{path} is not valid JSON ({exc}); pmem changed nothing") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path} does not hold a JSON object; pmem changed nothing")
    return data


def install_hooks(client: str, *, program: str = "pmem", project: Path | None = None,
                  home: Path | None = None, dry_run: bool = False) -> InstallResult:
    if client not in HOOK_CLIENTS:
        raise UsageError(f"unknown client {client!r}: use one of {', '.join(HOOK_CLIENTS)}")
    path = settings_path(client, project, home)
    current = read_json_file(path)
    try:
        merged, added, updated = merge_hooks(current, client, program)
    except UsageError as exc:
        raise UsageError(f"{path}: {exc}") from None
    if merged == current:
        return InstallResult(path, False, None, [], [])
    backup = None
    if not dry_run:
        if path.exists():
            backup = path.with_name(f"{path.name}.bak-{time.strftime('%Y%m%dT%H%M%S')}")
            n = 1
            while backup.exists():
                backup = path.with_name(f"{path.name}.bak-{time.strftime('%Y%m%dT%H%M%S')}-{n}")
                n += 1
            shutil.copy2(path, backup)
        _atomic_write(path, json.dumps(merged, indent=2, ensure_ascii=False) + "\n")
    return InstallResult(path, True, backup, added, updated)
