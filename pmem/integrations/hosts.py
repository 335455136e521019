"""Where the agent hosts keep their own files, as each host itself finds them.

Each host lets one variable move its user folder, and pmem must read and write where the host
does, or a hook installed under ~ never runs:

- Claude Code: CLAUDE_CONFIG_DIR is the folder itself (default ~/.claude): settings.json,
  projects/<project>/<session>.jsonl;
- Codex: CODEX_HOME is the folder itself (default ~/.codex): hooks.json, config.toml,
  sessions/YYYY/MM/DD/rollout-*.jsonl;
- Gemini CLI: GEMINI_CLI_HOME replaces the home folder, and .gemini is made inside it
  (google-gemini/gemini-cli at 5411f113: packages/core/src/utils/paths.ts `homedir()`,
  config/storage.ts `getGlobalGeminiDir()`; docs/reference/configuration.md says the same):
  settings.json, tmp/<project>/chats/session-*.jsonl. (One place, packages/cli/index.ts, reads
  $GEMINI_CLI_HOME/settings.json for a memory flag only; every setting and hook comes from
  $GEMINI_CLI_HOME/.gemini.)

A relative value is taken from the current folder, as the host would; "~" is not expanded
(a shell expands it before the host sees it, and the hosts do not).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

VARIABLES = {"claude-code": "CLAUDE_CONFIG_DIR", "codex": "CODEX_HOME", "gemini": "GEMINI_CLI_HOME"}


def _home(home: Path | None) -> Path:
    return home if home is not None else Path.home()


def variable(client: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The home variable of `client` when it is set (not empty), else None."""
    environ = os.environ if environ is None else environ
    name = VARIABLES.get(client)
    return name if name and environ.get(name) else None


def user_dir(client: str, home: Path | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """The host's user folder: ~/.claude, ~/.codex or ~/.gemini, or where its variable moves it."""
    environ = os.environ if environ is None else environ
    name = VARIABLES[client]
    value = environ.get(name, "")
    if client == "gemini":
        return (Path(value).absolute() if value else _home(home)) / ".gemini"
    if value:
        return Path(value).absolute()
    return _home(home) / (".claude" if client == "claude-code" else ".codex")


def settings_file(client: str, home: Path | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """The user settings file that holds the host's hooks."""
    folder = user_dir(client, home, environ)
    return folder / ("hooks.json" if client == "codex" else "settings.json")
