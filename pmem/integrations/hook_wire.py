"""What an agent hook's own process needs when `pmem serve` does the hook's work.

A hook runs before every prompt a person types. With a server answering, its process only reads
its input, finds the socket, asks, and prints the reply (`pmem.cli.hook_run.run_direct`), so it
imports no dataclasses (inspect), pathlib, typing, json package, socket module or threads: the
clients and events, the time limits, the settings the process itself needs (`choose`), stdin
read by a deadline, and the request (`ask_server`). Everything else, the settings included, is
the server's: `hooks.serve_hook` loads the hook's config with the variables sent here. Without a
server, or past its wait, `pmem.integrations.hooks` does the work in the process, as before.
Figures: docs/decisions/0041-hook-process-lean.md.
"""

import os

from .. import dirs, leanjson
from ..models import serve_client

CLIENTS = ("claude-code", "codex", "gemini")
EVENTS = ("session-start", "user-prompt", "compact", "subagent-start")
# Each client's names for the events pmem installs (Gemini calls the prompt hook BeforeAgent).
# Claude Code needs no compact hook: it runs SessionStart with source "compact" after one.
# A subagent starts with a context of its own and no SessionStart (Claude Code, and Codex since
# its SubagentStart): SubagentStart gives it what a session start would. Codex's PreCompact is
# not installed: its output carries no additionalContext, and PostCompact tells pmem that the
# compaction did happen (docs in pmem.integrations.hooks).
EVENT_NAMES = {
    "claude-code": {"session-start": "SessionStart", "user-prompt": "UserPromptSubmit",
                    "subagent-start": "SubagentStart"},
    "codex": {"session-start": "SessionStart", "user-prompt": "UserPromptSubmit", "compact": "PostCompact",
              "subagent-start": "SubagentStart"},
    "gemini": {"session-start": "SessionStart", "user-prompt": "BeforeAgent", "compact": "PreCompress"},
}
# Claude Code adds plain stdout to the context for these events only; any other needs its JSON.
PLAIN_STDOUT = {"claude-code": ("session-start", "user-prompt")}
MAX_STDIN = 1_000_000  # characters of hook JSON read; a prompt longer than this is cut
# Seconds a hook gives `pmem serve` to answer on an idle machine (stretched by the load, as
# serve.first_wait is) before it does the work itself; a served prompt takes ~60 ms there.
SERVER_WAIT = 0.25
SERVER_WAIT_MAX = 1.5
SERVER_MARGIN = 0.05  # the server keeps nothing it finishes this close to the hook giving up
SUPPORTED = serve_client.SUPPORTED

# The settings' variables (config.env_name of config.KEYS; a test holds the two equal): the ones
# sent to the server, which reads the hook's settings with them. No other variable leaves the
# process (PMEM_SYNC_PASSPHRASE, say).
SETTINGS_ENV = (
    "PMEM_EMBED_MODEL", "PMEM_EMBED_ENGLISH", "PMEM_EMBED_BULK", "PMEM_CHAT_MODEL", "PMEM_EXTRACT_MODE",
    "PMEM_RECALL_BUDGET", "PMEM_RECALL_NEIGHBOURS", "PMEM_RECALL_MIN_SCORE", "PMEM_SEARCH_LIMIT", "PMEM_SERVER",
    "PMEM_SERVER_IDLE_MINUTES", "PMEM_THREADS", "PMEM_DEDUP_THRESHOLD", "PMEM_DEDUP_LEXICAL",
    "PMEM_MERGE_THRESHOLD", "PMEM_COMPRESS_AFTER_DAYS", "PMEM_PURGE_GRACE_DAYS", "PMEM_BACKUP_KEEP",
    "PMEM_EXTRACT_MIN_SUPPORT", "PMEM_HOOK_BUDGET", "PMEM_HOOK_TIMEOUT", "PMEM_SYNC_AUTO",
)
# What config.py says of the two settings this process reads itself (a test holds them equal).
SERVER_DEFAULT = "auto"
SERVER_CHOICES = ("auto", "always", "never")
SERVER_ALIASES = {"off": "never", "start": "auto"}
TIMEOUT_DEFAULT = 4.0
TIMEOUT_RANGE = (0.1, 600.0)


def settings_env(environ=None) -> dict[str, str]:
    """The settings' PMEM_* variables that are set (not empty), and nothing else."""
    environ = os.environ if environ is None else environ
    return {name: environ[name] for name in SETTINGS_ENV if environ.get(name, "") != ""}


def choose(environ=None) -> tuple[str, float] | None:
    """(server, hook_timeout) as config.load would give them, read without it; None when only
    config.load can say: a variable it would refuse, or a config.toml that may set either.

    config.toml is read as bytes only: a file that names neither setting (nor holds a backslash,
    which could spell one in a quoted key) leaves both at their defaults, and the server reads
    the whole file for the rest (a file it cannot read fails there, and then here, as before)."""
    environ = os.environ if environ is None else environ
    server, timeout = environ.get("PMEM_SERVER", ""), environ.get("PMEM_HOOK_TIMEOUT", "")
    if not server or not timeout:
        try:
            with open(dirs.config_path(), "rb") as f:
                text = f.read()
        except FileNotFoundError:
            text = b""
        except (OSError, RuntimeError):
            return None
        if b"\\" in text or (not server and b"server" in text) or (not timeout and b"hook_timeout" in text):
            return None
    server = SERVER_ALIASES.get(server, server) or SERVER_DEFAULT
    if server not in SERVER_CHOICES:
        return None
    try:
        seconds = float(timeout.strip()) if timeout else TIMEOUT_DEFAULT
    except ValueError:
        return None
    if not TIMEOUT_RANGE[0] <= seconds <= TIMEOUT_RANGE[1]:  # NaN too
        return None
    return server, seconds


def server_wait(left: float) -> float:
    """Seconds a hook with `left` seconds to go waits for the server: SERVER_WAIT, stretched by
    the load as a command's first wait is (serve.first_wait), at most SERVER_WAIT_MAX and half
    of what is left (the work done here needs the rest)."""
    stretch = serve_client.first_wait() / serve_client.FIRST_WAIT
    return max(0.0, min(left / 2, SERVER_WAIT_MAX, SERVER_WAIT * stretch))


def _complete(buf: bytes | bytearray) -> bool:
    """Whether `buf` holds one whole JSON object or array (a host may keep the pipe open after it)."""
    if buf.rstrip()[-1:] not in (b"}", b"]") or buf.lstrip()[:1] not in (b"{", b"["):
        return False
    try:
        leanjson.raw_decode(buf.decode("utf-8", "replace").strip())
    except ValueError:
        return False  # a brace inside a string, or a nested object's end: read on
    return True


def _read_object(read, limit: int) -> str | None:
    """Chunks of `read(n)` up to the end of the first JSON object, or to EOF (b""), at most
    `limit` bytes; None where `read` gives None (its deadline passed)."""
    buf = bytearray()
    while len(buf) < limit:
        chunk = read(min(65536, limit - len(buf)))
        if chunk is None:
            return None
        if not chunk:
            break
        buf += chunk
        if _complete(buf):
            break
    return buf.decode("utf-8", "replace")


def read_input(stream, limit: int = MAX_STDIN * 4) -> str:
    """The hook's stdin, up to the end of its first JSON object (a host may leave the pipe open
    after writing it), else to EOF (a prompt typed by hand); at most `limit` bytes."""
    read = getattr(stream, "read1", None) or stream.read
    return _read_object(lambda n: read(n) or b"", limit) or ""


def read_stdin(deadline: float, limit: int = MAX_STDIN * 4) -> str | None:
    """`read_input` of file descriptor 0 by `deadline` (time.monotonic), without a thread; None
    when the deadline passes first (a host holding the pipe open and silent)."""
    import select
    import time

    def read(n: int) -> bytes | None:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([0], [], [], left)[0]:
            return None
        return os.read(0, n)

    return _read_object(read, limit)


def format_output(client: str, event: str, block: str) -> str:
    """What the hook prints: plain text for Claude Code's session start and prompt, the JSON
    object Codex, Gemini and Claude Code's SubagentStart read (json.dumps with
    ensure_ascii=False, by leanjson)."""
    if not block:
        return "{}" if client == "gemini" else ""
    if event in PLAIN_STDOUT.get(client, ()):
        return block
    return leanjson.dumps({"hookSpecificOutput": {"hookEventName": EVENT_NAMES[client][event],
                                                  "additionalContext": block}}, ensure_ascii=False)


def ask_server(client: str, event: str, text: str, db: str | os.PathLike | None,
               wait: float) -> tuple[str | None, str]:
    """Hand one hook to `pmem serve`: (the block it made, "served"), or (None, why): "none" (no
    server, or it refused: another build, another home, busy, an error) or "unanswered" (nothing
    within `wait` seconds: a stopped or wedged server, which the work done here should not ask
    again). `db`: the database the hook works on (None: the default)."""
    import time

    if not SUPPORTED:
        return None, "none"
    try:
        sock = dirs.socket_path()
        if not os.path.exists(sock):
            return None, "none"
        build = serve_client.build_id()
        request = {"op": "hook", "build": build, "client": client, "event": event, "input": text,
                   "db": os.path.abspath(dirs.db_path(db)), "cwd": os.getcwd(), "home": dirs.data_dir(),
                   "models": dirs.models_dir(), "config": dirs.config_path(), "env": settings_env(),
                   "deadline": time.time() + wait}
        reply = serve_client.call(request, sock, wait)
    except TimeoutError:  # connected (a stopped server's backlog) or not, no reply
        return None, "unanswered"
    except (OSError, ValueError, RuntimeError):
        return None, "none"
    if reply.get("ok") is True and reply.get("build") == build and isinstance(reply.get("block"), str):
        return reply["block"], "served"
    return None, "none"
