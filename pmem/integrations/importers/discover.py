"""The histories on this machine, where each tool itself keeps them (`pmem import --discover`).

Each tool has a place of its own and, most of them, a variable that moves it; pmem looks where
the tool would, with that variable honoured, and never starts the tool or imports its code:

| tool          | format      | where                                                                     |
| ------------- | ----------- | ------------------------------------------------------------------------- |
| Claude Code   | claude-code | $CLAUDE_CONFIG_DIR/projects, else ~/.claude/projects (*.jsonl)            |
| Codex         | codex       | $CODEX_HOME/sessions and archived_sessions, else ~/.codex/... (*.jsonl)    |
| Gemini CLI    | gemini      | $GEMINI_CLI_HOME/.gemini/tmp/*/chats, else ~/.gemini/tmp/*/chats          |
| llm           | llm         | $LLM_USER_PATH/logs.db, else click's app folder for io.datasette.llm      |
| aider         | aider       | $AIDER_CHAT_HISTORY_FILE, else .aider.chat.history.md in the git root,    |
|               |             | the current folder or the home folder                                     |
| Cursor        | cursor      | Cursor/User/globalStorage/state.vscdb in the platform's app-data folder   |
| MCP memory    | mcp-memory  | $MEMORY_FILE_PATH, else memory.jsonl next to the server's installed code  |

A format another importer has not registered yet is listed all the same, marked as not
importable, so the list says what is there before pmem can read it.

What was imported is remembered per file (size and modification time, and the import's
operation: `FileMarks`), so a second run reads only the files that changed or are new; one
whose import was undone counts as new again. Ids come from the sources, so even a file read
again adds nothing twice.

Bytes here come from other programs' folders: nothing is read but directory entries and
`lstat`; a symbolic link is not followed (a link to a history is named by its own path, with
`pmem import PATH`); each walk stops at MAX_FILES.
"""

from __future__ import annotations

import glob
import json
import os
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import UsageError

MAX_FILES = 20_000  # per history: more is not one tool's history (a home folder named by mistake)
MARKS_KEY = "import_files:"  # + the history's key, in the store's settings table
KEYS = ("claude-code", "codex", "gemini", "llm", "aider", "cursor", "mcp-memory")


@dataclass(frozen=True)
class HistoryFile:
    path: Path
    size: int
    mtime_ns: int


@dataclass
class History:
    """One tool's history on this machine: where, what files, in which format."""

    key: str                      # the name --pick takes
    tool: str                     # as people call it
    format: str                   # the importer's name (`pmem import --format`)
    root: Path                    # the folder (or file) the tool keeps it in
    variable: str | None = None   # the variable that put it there, when one is set
    files: list[HistoryFile] = field(default_factory=list)
    importable: bool = False      # whether this pmem has an importer for `format`
    truncated: bool = False       # more than MAX_FILES: only the first are listed

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def newest(self) -> str | None:
        """The newest file's modification time (ISO, UTC), or None."""
        from datetime import datetime, timezone

        from ... import timeutil

        if not self.files:
            return None
        ns = max(f.mtime_ns for f in self.files)
        return timeutil.iso(datetime.fromtimestamp(ns / 1e9, timezone.utc))

    def to_dict(self, new: list[HistoryFile] | None = None) -> dict[str, Any]:
        d: dict[str, Any] = {"key": self.key, "tool": self.tool, "format": self.format, "path": str(self.root),
                             "variable": self.variable, "files": len(self.files), "bytes": self.size,
                             "newest": self.newest, "importable": self.importable}
        if new is not None:
            d["new_files"] = len(new)
            d["new_bytes"] = sum(f.size for f in new)
        if self.truncated:
            d["truncated"] = True
        return d


@dataclass(frozen=True)
class Location:
    """One place a tool keeps its history: a file, or a folder whose files ending in one of
    `suffixes` are it (with `second`, only those under ROOT/*/`second`/, as Gemini CLI's chats)."""

    key: str
    tool: str
    format: str
    root: Path
    variable: str | None = None
    suffixes: tuple[str, ...] = ()  # none: `root` is the file
    second: str | None = None


# -- where each tool keeps its history ----------------------------------------------------------


def _env(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def app_data_dir(environ: Mapping[str, str], home: Path, platform: str) -> Path:
    """Electron's and click's user app-data folder: %APPDATA% on Windows, ~/Library/Application
    Support on macOS, $XDG_CONFIG_HOME or ~/.config elsewhere."""
    if platform.startswith("win"):
        return Path(environ.get("APPDATA") or home)
    if platform == "darwin":
        return home / "Library" / "Application Support"
    return Path(environ.get("XDG_CONFIG_HOME", str(home / ".config")))


def llm_user_dir(environ: Mapping[str, str] | None = None, home: Path | None = None,
                 platform: str | None = None) -> tuple[Path, str | None]:
    """The folder `llm logs path` names the logs.db of (llm.user_dir), and the variable that
    set it: LLM_USER_PATH, else click.get_app_dir("io.datasette.llm"), computed here without
    importing either (click keeps an XDG_CONFIG_HOME that is set but empty, so this does too)."""
    environ = _env(environ)
    home = home or Path.home()
    platform = platform or sys.platform
    if environ.get("LLM_USER_PATH"):
        return Path(environ["LLM_USER_PATH"]), "LLM_USER_PATH"
    return app_data_dir(environ, home, platform) / "io.datasette.llm", None


def _git_root(cwd: Path) -> Path | None:
    for folder in (cwd, *cwd.parents):
        if (folder / ".git").exists():
            return folder
    return None


def _mcp_memory_dirs(environ: Mapping[str, str], home: Path) -> list[Path]:
    """Where the reference MCP memory server's code is (its memory.jsonl is kept beside it when
    MEMORY_FILE_PATH is not set): npx's cache, a global npm install, nvm's."""
    package = Path("node_modules") / "@modelcontextprotocol" / "server-memory" / "dist"
    cache = Path(environ["npm_config_cache"]) if environ.get("npm_config_cache") else home / ".npm"
    out = sorted(Path(p) for p in glob.glob(glob.escape(str(cache / "_npx")) + "/*/" + str(package)))
    prefixes = [Path(environ[v]) for v in ("NPM_CONFIG_PREFIX", "npm_config_prefix") if environ.get(v)]
    out += [p / "lib" / package for p in (*prefixes, home / ".npm-global", Path("/usr/local"), Path("/usr"))]
    nvm = glob.escape(str(home / ".nvm" / "versions" / "node")) + "/*/lib/" + str(package)
    out += sorted(Path(p) for p in glob.glob(nvm))
    return list(dict.fromkeys(out))


def locations(environ: Mapping[str, str] | None = None, home: Path | None = None, cwd: Path | None = None,
              platform: str | None = None) -> list[Location]:
    """Every place a tool may keep its history, its variables honoured. An aider or MCP memory
    history may be in one of several places: one Location each."""
    from ..hosts import user_dir, variable

    environ = _env(environ)
    home = home or Path.home()
    cwd = cwd or Path.cwd()
    platform = platform or sys.platform
    out = [Location("claude-code", "Claude Code", "claude-code", user_dir("claude-code", home, environ) / "projects",
                    variable("claude-code", environ), (".jsonl",))]
    codex = user_dir("codex", home, environ)
    out += [Location("codex", "Codex", "codex", codex / sub, variable("codex", environ), (".jsonl",))
            for sub in ("sessions", "archived_sessions")]
    out.append(Location("gemini", "Gemini CLI", "gemini", user_dir("gemini", home, environ) / "tmp",
                        variable("gemini", environ), (".json", ".jsonl"), second="chats"))
    llm_dir, llm_var = llm_user_dir(environ, home, platform)
    out.append(Location("llm", "llm", "llm", llm_dir / "logs.db", llm_var))
    if environ.get("AIDER_CHAT_HISTORY_FILE"):
        out.append(Location("aider", "aider", "aider", Path(environ["AIDER_CHAT_HISTORY_FILE"]).expanduser(),
                            "AIDER_CHAT_HISTORY_FILE"))
    else:  # aider's default is the git root's, else the current folder's
        out += [Location("aider", "aider", "aider", p / ".aider.chat.history.md")
                for p in dict.fromkeys(x for x in (_git_root(cwd), cwd, home) if x)]
    out.append(Location("cursor", "Cursor", "cursor",
                        app_data_dir(environ, home, platform) / "Cursor" / "User" / "globalStorage" / "state.vscdb"))
    mcp = "MCP memory server"
    value = environ.get("MEMORY_FILE_PATH", "")
    if value.startswith("~/") or value == "~":  # the server expands a leading ~ itself
        value = str(home / value[2:])
    if value and os.path.isabs(value):
        out.append(Location("mcp-memory", mcp, "mcp-memory", Path(value), "MEMORY_FILE_PATH"))
    elif value:  # relative to the server's own folder, wherever it is installed
        out += [Location("mcp-memory", mcp, "mcp-memory", d / value, "MEMORY_FILE_PATH")
                for d in _mcp_memory_dirs(environ, home)]
    else:  # memory.json: its name before the server moved to JSONL
        out += [Location("mcp-memory", mcp, "mcp-memory", d / name)
                for d in _mcp_memory_dirs(environ, home) for name in ("memory.jsonl", "memory.json")]
    return out


# -- what is there ----------------------------------------------------------------------------


def _regular(path: Path) -> HistoryFile | None:
    """The file's size and time when it is a regular file (not a link, not a folder)."""
    try:
        st = path.lstat()
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return HistoryFile(path, st.st_size, st.st_mtime_ns)


def _walk(loc: Location, limit: int) -> tuple[list[HistoryFile], bool]:
    """The regular files of a folder location, without following a link; (files, cut short)."""
    try:
        if not stat.S_ISDIR(loc.root.lstat().st_mode):
            return [], False
    except OSError:
        return [], False
    found: list[HistoryFile] = []
    for dirpath, dirnames, filenames in os.walk(loc.root, followlinks=False):
        dirnames.sort()
        parts = Path(dirpath).relative_to(loc.root).parts
        if loc.second is not None and (len(parts) < 2 or parts[1] != loc.second):
            if len(parts) >= 2:
                dirnames.clear()  # ROOT/project/other: not a chats folder, nothing below it either
            continue
        for name in sorted(filenames):
            if not name.endswith(loc.suffixes):
                continue
            f = _regular(Path(dirpath) / name)
            if f is not None:
                found.append(f)
                if len(found) >= limit:
                    return found, True
    return found, False


def discover(environ: Mapping[str, str] | None = None, home: Path | None = None, cwd: Path | None = None,
             platform: str | None = None, formats: Mapping[str, Any] | None = None,
             limit: int = MAX_FILES) -> list[History]:
    """Every tool's history found on this machine (tools with nothing there are left out), in
    the order of KEYS. `formats`: the importers there are (default: the registry's)."""
    if formats is None:
        from .registry import FORMATS as formats
    found: dict[str, History] = {}
    seen: set[Path] = set()
    for loc in locations(environ, home, cwd, platform):
        if loc.suffixes:
            files, truncated = _walk(loc, limit)
        else:
            one = _regular(loc.root)
            files, truncated = ([one] if one else []), False
        files = [f for f in files if f.path not in seen]
        if not files:
            continue
        seen.update(f.path for f in files)
        h = found.get(loc.key)
        if h is None:
            found[loc.key] = History(loc.key, loc.tool, loc.format, loc.root, loc.variable, files,
                                     loc.format in formats, truncated)
        else:  # a second place of the same tool (Codex's archived sessions): one history
            h.files += files
            h.truncated = h.truncated or truncated
    return [found[k] for k in KEYS if k in found]


def parse_picks(value: str, histories: list[History]) -> list[History]:
    """The histories a --pick names: keys or list numbers (1-based), comma-separated, or "all"."""
    words = [w.strip() for w in value.replace(" ", ",").split(",") if w.strip()]
    if not words:
        return []
    if words == ["all"]:
        return list(histories)
    by_key = {h.key: h for h in histories}
    picked: list[History] = []
    for w in words:
        if w.isdigit() and 1 <= int(w) <= len(histories):
            h = histories[int(w) - 1]
        elif w in by_key:
            h = by_key[w]
        elif w in KEYS:
            raise UsageError(f"--pick {w}: no {w} history on this machine (see `pmem import --discover`)")
        else:
            raise UsageError(f"--pick {w!r}: use names from {', '.join(KEYS)}, list numbers, or all")
        if h not in picked:
            picked.append(h)
    return picked


# -- what was imported before -----------------------------------------------------------------


class FileMarks:
    """Per history, the files an import read: {path: [size, mtime_ns, operation id]}, kept as
    JSON in the store's settings table (no migration: a key like the dream's mark)."""

    def __init__(self, store):
        self.store = store

    def get(self, key: str) -> dict[str, list]:
        raw = self.store.setting(MARKS_KEY + key)
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            return {}
        return {p: v for p, v in data.items() if isinstance(v, list) and len(v) == 3} if isinstance(data, dict) else {}

    def new_files(self, history: History) -> list[HistoryFile]:
        """The files not read since they last changed, or whose import was undone since."""
        marks = self.get(history.key)
        undone: dict[str, bool] = {}

        def was_undone(op: Any) -> bool:
            if not isinstance(op, str):
                return False
            if op not in undone:
                got = self.store.get_operation(op)
                undone[op] = got is not None and got.undone_at is not None
            return undone[op]

        out = []
        for f in history.files:
            m = marks.get(str(f.path))
            if m is None or m[0] != f.size or m[1] != f.mtime_ns or was_undone(m[2]):
                out.append(f)
        return out

    def record(self, key: str, files: list[HistoryFile], operation: str | None) -> None:
        marks = self.get(key)
        for f in files:
            marks[str(f.path)] = [f.size, f.mtime_ns, operation]
        self.store.set_setting(MARKS_KEY + key, json.dumps(marks, sort_keys=True))


def entries(history: History, files: list[HistoryFile]) -> list:
    """The importer's entries for `files` of `history`: named from its folder, as
    `pmem import FOLDER` names them (a one-file history: the file itself)."""
    from .base import file_entry

    if len(history.files) == 1 and history.files[0].path == history.root:
        return [file_entry(history.root)]
    out = []
    for f in files:
        try:
            rel = f.path.relative_to(history.root).as_posix()
        except ValueError:  # Codex's archived sessions, beside its sessions
            rel = f.path.name
        out.append(file_entry(f.path, rel, origin=str(history.root)))
    return out
