"""`pmem mcp`: a stdio MCP server on the official SDK (`pip install "pmem-cli[mcp]"`).

The SDK (pydantic, its protocol types, starlette, httpx...) costs about a second of import and 40
MB, so it is an extra, and this process answers what a client asks first before it has imported
it: the handshake is a few fields pmem knows (`early_reply`), and `tools/list`, `ping` and the
empty prompt and resource lists are the SDK's own answers, generated from it into mcp_early.json
(`mcp_early`). They are written while the SDK imports in a thread; then the SDK serves the
session, handed every message in order, those answered early under ids of pmem's whose replies it
drops (`_Early`, `_Out`). The first message of another kind (a `tools/call`, anything the SDK
should judge), like a first message that is not an `initialize` pmem can answer, goes to the SDK
untouched, and so does everything after it; a client that leaves having asked nothing else is
never handed to the SDK. Figures:
docs/decisions/0037-llm-similar-anchor.md and docs/decisions/0039-mcp-early-tools-list.md. Nothing heavy loads for the
handshake: the
database opens on the first tool call and the embedding model loads on the first call that needs
a vector.
Tools run in worker threads; one lock keeps them to the one SQLite connection in turn. A call
answers within about `actions.LOCK_WAIT` seconds on a database another process holds (waiting
for its turn, the store's opening and the write lock included): its result, or a tool error that
says the database is locked and to try again.
"""

import json
import os
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from ..display import prompt_safe
from ..errors import DatabaseError, PmemError
from . import actions, mcp_early

EXTRA = "mcp"
INSTALL_HINT = 'pmem mcp needs the MCP SDK: pip install "pmem-cli[mcp]" (or pip install "mcp>=2,<3")'

INSTRUCTIONS = (
    "pmem is the user's personal long-term memory, shared by all their tools. Call `recall` with "
    "the topic at the start of a task to get what the user told you before; `search` for specific "
    "facts (results carry ids); `remember` durable facts, preferences and decisions the user states "
    "(one fact per call, in plain sentences); `update` when the user corrects a stored fact; "
    "`forget` only when asked. Memories are the user's data: quote them, do not invent them."
)


class MissingExtra(PmemError):
    """The optional MCP SDK is not installed."""


def sdk_available() -> bool:
    """Whether the SDK (2.x, with `mcp.server.mcpserver`) is installed, without importing it:
    `find_spec` of a submodule would import its parents, which is the whole SDK."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("mcp")
    except (ImportError, ValueError):
        return False
    places = spec.submodule_search_locations if spec is not None else None
    return bool(places) and any((Path(p) / "server" / "mcpserver").is_dir() for p in places)


BUSY = ("the pmem database is busy: another pmem process (an import, a dream) holds it; "
        "try again in a few seconds")
WAITING = "an earlier pmem call is still running (the local model, or a busy database); try again in a few seconds"


class Backend:
    """The store behind the tools: opened on first use, shared by all calls, one call at a time."""

    def __init__(self, open_store: Callable[[], Any], cwd: str | None = None, wait: float = actions.LOCK_WAIT):
        self._open_store = open_store
        self._store: Any = None
        self._lock = threading.Lock()
        self._opening: threading.Thread | None = None
        self._open_error: BaseException | None = None
        self.wait = wait
        self.cwd = cwd
        self.client_name: str | None = None
        self.error_class: type[Exception] = PmemError

    def run(self, fn: Callable[[Any], Any], writes: bool = False) -> Any:
        """Call `fn(store)` within `wait` seconds in all; a foreseeable pmem error becomes a tool
        error whose one-line message the model reads (an unexpected one is logged to stderr by
        the SDK). A tool that `writes` is followed by actions.after_write."""
        with actions.lock_deadline(self.wait):
            if not self._lock.acquire(timeout=max(0.0, actions.time_left())):
                raise self.error_class(WAITING)
            try:
                store = self._opened()
                out = fn(store)
            except PmemError as exc:
                raise self.error_class(prompt_safe(str(exc))) from None
            finally:
                self._lock.release()
        if writes:
            actions.after_write(store)
        return out

    def _opened(self) -> Any:
        """The store, opened in a thread of its own: an open that has to wait (migrations on a
        locked file, a killed purge's rewrite) goes on after this call answers "busy", and a
        later call finds the store ready."""
        while self._store is None:
            if self._opening is None:
                self._opening = threading.Thread(target=self._open, name="pmem-mcp-open", daemon=True)
                self._opening.start()
            self._opening.join(max(0.0, actions.time_left()))
            if self._opening.is_alive():
                raise DatabaseError(BUSY)
            self._opening = None
            error, self._open_error = self._open_error, None
            if error is None:
                continue
            if not (isinstance(error, DatabaseError) and "locked" in str(error) and actions.time_left() > 0.2):
                raise error
        return self._store

    def _open(self) -> None:
        try:
            self._store = self._open_store()
        except BaseException as exc:  # noqa: BLE001 - handed to the call that waits for it
            self._open_error = exc

    def close(self) -> None:
        with self._lock:
            if self._opening is not None:
                self._opening.join(self.wait)
            if self._store is not None:
                self._store.close()
                self._store = None

    @property
    def source(self) -> str:
        return actions.client_source("mcp", self.client_name)


def _client_name(ctx: Any) -> str | None:
    try:
        params = ctx.session.client_params
        return params.client_info.name if params is not None else None
    except Exception:  # noqa: BLE001 - a client that sent no info is still served
        return None


def build_server(backend: Backend, *, scope_filter: Callable[[Any], Any] | None = None,
                 scope_for_write: Callable[[], str | None] | None = None):
    """The MCPServer with pmem's six tools. `scope_filter(store)` gives the Filter for reads and
    `scope_for_write()` the scope of new memories (the client's project); both optional."""
    try:
        from mcp.server.mcpserver import Context, MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
        from mcp.types import ToolAnnotations
    except ImportError:
        raise MissingExtra(INSTALL_HINT) from None

    backend.error_class = ToolError

    from .. import __version__

    server = MCPServer(name="pmem", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")

    def flt(store):
        return scope_filter(store) if scope_filter else None

    def note_client(ctx: Context) -> None:
        if backend.client_name is None:
            backend.client_name = _client_name(ctx)

    @server.tool(annotations=ToolAnnotations(title="Recall memories", read_only_hint=True, open_world_hint=False),
                 structured_output=False)
    def recall(topic: str = "", budget: int = 1500, ctx: Context = None) -> str:  # type: ignore[assignment]
        """A context block of what the user told you before: their core (pinned) memories first,
        then those most relevant to `topic` (or the most recent when no topic), within `budget`
        tokens (at most 6000). Call it at the start of a task."""
        note_client(ctx)
        return backend.run(lambda s: actions.recall(s, topic or None, budget=budget, flt=flt(s)))

    @server.tool(annotations=ToolAnnotations(title="Search memories", read_only_hint=True, open_world_hint=False),
                 structured_output=False)
    def search(query: str, limit: int = 10, tags: list[str] | None = None,
               ctx: Context = None) -> str:  # type: ignore[assignment]
        """Search the user's memories by words and meaning. Returns JSON: results with id, text,
        score, tier, tags, created_at and source, best first (at most 50; long texts are cut).
        Use the ids with `update`, `pin` and `forget`."""
        note_client(ctx)
        return actions.bounded_json(
            backend.run(lambda s: actions.search(s, query, limit=limit, tags=tags, flt=flt(s))), "results")

    @server.tool(annotations=ToolAnnotations(title="Remember", read_only_hint=False, destructive_hint=False,
                                             idempotent_hint=True, open_world_hint=False),
                 structured_output=False)
    def remember(text: str, tags: list[str] | None = None, pin: bool = False, project: bool = False,
                 extract: bool = False, ctx: Context = None) -> str:  # type: ignore[assignment]
        """Store a memory: one durable fact, preference or decision, in a plain sentence. It is
        the user's everywhere, unless `project` is true: then it belongs to the project you work
        in (facts about this codebase) and is recalled only there. `pin` makes it core (always
        recalled). `extract` instead runs the local model over `text` (a conversation or notes)
        and stores the facts it finds, keeping `text` as their source. An identical memory is
        not stored twice: the existing one comes back, pinned and tagged as asked."""
        note_client(ctx)
        scope = scope_for_write() if (project and scope_for_write) else None
        return actions.bounded_json(backend.run(lambda s: actions.remember(
            s, text, tags=tags, pin=pin, source=backend.source, extract=extract, scope=scope), writes=True), "facts")

    @server.tool(annotations=ToolAnnotations(title="Correct a memory", read_only_hint=False, destructive_hint=False,
                                             idempotent_hint=False, open_world_hint=False),
                 structured_output=False)
    def update(id: str, text: str, ctx: Context = None) -> str:  # type: ignore[assignment]
        """Correct a memory: stores `text` as a new memory that supersedes memory `id` (at least 4
        characters of it) from now on. The old one stays in the history (undoable with `pmem undo`).
        An `id` already corrected is corrected in its current version; the same call twice stores
        one correction."""
        note_client(ctx)
        return actions.bounded_json(backend.run(lambda s: actions.update(s, id, text, source=backend.source),
                                                writes=True))

    @server.tool(annotations=ToolAnnotations(title="Pin a memory", read_only_hint=False, destructive_hint=False,
                                             idempotent_hint=True, open_world_hint=False),
                 structured_output=False)
    def pin(id: str, ctx: Context = None) -> str:  # type: ignore[assignment]
        """Pin memory `id` (at least 4 characters of it): it becomes core and is recalled first,
        every time. A forgotten or replaced memory cannot be pinned."""
        note_client(ctx)
        return actions.bounded_json(backend.run(lambda s: actions.pin(s, id), writes=True))

    @server.tool(annotations=ToolAnnotations(title="Forget a memory", read_only_hint=False, destructive_hint=True,
                                             idempotent_hint=True, open_world_hint=False),
                 structured_output=False)
    def forget(id: str, ctx: Context = None) -> str:  # type: ignore[assignment]
        """Forget memory `id` (at least 4 characters of it; a soft delete: the user can bring it back
        with `pmem undo` or `pmem restore`). Only when the user asks you to forget something."""
        note_client(ctx)
        return actions.bounded_json(backend.run(lambda s: actions.forget(s, id), writes=True))

    return server


EARLY_VERSIONS = mcp_early.EARLY_VERSIONS  # the handshake versions pmem answers itself
# What the SDK's server declares for pmem's six tools (MCPServer's defaults).
CAPABILITIES = {"prompts": {"listChanged": False}, "resources": {"listChanged": False, "subscribe": False},
                "tools": {"listChanged": False}}
REMEMBER_AFTER = 10.0  # seconds into a session under another SDK before its early answers are generated
REPLAY = "pmem-early-"  # how every id the SDK sees for a request answered early begins
# Client capabilities an early `initialize` may declare, and what each may hold (a subset of what
# the SDK accepts in every early version, tests compare): the rest goes to the SDK.
_CAPABILITY_FLAGS = {"roots": {"listChanged"}}
_CAPABILITY_PARTS = {"sampling": {"context", "tools"}, "elicitation": {"form", "url"}}
_ENVELOPE = {"jsonrpc", "id", "method", "params"}


def _plain_id(mid: Any) -> bool:
    """An id the SDK echoes as `json.dumps` writes it (a float, a huge number or escapes are its to judge)."""
    if type(mid) is int:
        return -(2**53) < mid < 2**53
    return type(mid) is str and mid.isascii() and mid.isprintable()


def _plain_text(value: Any) -> bool:
    return isinstance(value, str) and (value.isascii() or not any(0xD800 <= ord(c) < 0xE000 for c in value))


def _plain_capabilities(caps: Any) -> bool:
    if not isinstance(caps, dict):
        return False
    for name, value in caps.items():
        if not isinstance(value, dict):
            return False
        if name == "experimental":
            ok = all(isinstance(v, dict) for v in value.values())
        elif name in _CAPABILITY_FLAGS:
            ok = set(value) <= _CAPABILITY_FLAGS[name] and all(isinstance(v, bool) for v in value.values())
        elif name in _CAPABILITY_PARTS:
            ok = set(value) <= _CAPABILITY_PARTS[name] and all(v == {} for v in value.values())
        else:
            ok = False
        if not ok:
            return False
    return True


def early_reply(message: Any) -> dict[str, Any] | None:
    """The reply to a client's first message when it is an `initialize` pmem can answer before the
    SDK has loaded (the same reply the SDK gives), else None: the SDK answers it."""
    if (not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or message.get("method") != "initialize"
            or not set(message) <= _ENVELOPE):
        return None
    mid, params = message.get("id"), message.get("params")
    if not _plain_id(mid) or not isinstance(params, dict) or set(params) != {"protocolVersion", "capabilities",
                                                                             "clientInfo"}:
        return None
    info = params["clientInfo"]
    if (params["protocolVersion"] not in EARLY_VERSIONS or not _plain_capabilities(params["capabilities"])
            or not isinstance(info, dict) or not set(info) <= {"name", "version", "title"}
            or not {"name", "version"} <= set(info) or not all(_plain_text(v) for v in info.values())):
        return None
    from ..version import __version__

    return {"jsonrpc": "2.0", "id": mid, "result": {
        "capabilities": CAPABILITIES, "instructions": INSTRUCTIONS, "protocolVersion": params["protocolVersion"],
        "serverInfo": {"name": "pmem", "version": __version__}}}


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise ValueError("a repeated key")  # which one counts is the SDK's to say
    return found


def _refuse(constant: str) -> Any:
    raise ValueError(constant)  # NaN and Infinity: not JSON


def _parse(line: bytes) -> Any:
    """The message in `line`, or None for anything but strict JSON (the SDK's to judge)."""
    try:
        return json.loads(line.decode("utf-8"), object_pairs_hook=_unique, parse_constant=_refuse)
    except (ValueError, RecursionError):
        return None


class _Early:
    """The client's lines, on their way to the SDK in order: while the SDK loads, the `initialize`
    and then the requests whose answers `mcp_early.json` keeps are answered here, and each goes on
    under an id of pmem's whose reply `_Out` drops, so that the SDK's session is the one it would
    have had. A message of any other kind, or the SDK starting to serve, ends the answering; from
    then on every line goes to the SDK untouched. Notifications pass without ending it."""

    def __init__(self, wire: "_Wire", answers: Callable[[], dict[str, dict[str, Any]] | None]):
        self.wire = wire
        self._answers = answers  # read on the first request after the handshake, not before its reply
        self.answers: dict[str, dict[str, Any]] | None = None
        self.drop: set[str] = set()
        self.on = True
        self.version: str | None = None  # of the `initialize` answered here
        self._lines: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        self._tag = f"{REPLAY}{os.urandom(4).hex()}-"
        self._count = 0
        self.answered_all = False  # the client left, and nothing it sent needs the SDK
        self.moved = threading.Event()  # set at the end of input (and by the SDK's import)

    def take(self, line: bytes) -> None:
        if self.on:
            try:
                line = self._answer(line)
            except OSError:
                raise  # the client is gone
            except Exception:  # noqa: BLE001 - whatever this path cannot handle, the SDK can
                self.on = False
        self._lines.put(line)

    def pump(self) -> None:
        """Read the rest of the client's lines (a thread of its own), then the end of input."""
        try:
            for line in iter(self.wire.reader.readline, b""):
                self.take(line)
            self.answered_all = self.on
        except (OSError, ValueError):
            pass
        finally:
            self._lines.put(b"")
            self.moved.set()

    def readline(self) -> str:  # the SDK's stdin
        return self._lines.get().decode("utf-8", "replace")

    def close(self) -> None:
        pass

    def _answer(self, line: bytes) -> bytes:
        message = _parse(line)
        if self.version is None:
            reply = early_reply(message)
            if reply is not None:
                self.version = message["params"]["protocolVersion"]
        elif self._notification(message):
            return line
        else:
            reply = self._listed(message)
        if reply is None:
            self.on = False
            return line
        replay = f"{self._tag}{self._count}"
        self._count += 1
        self.drop.add(replay)
        self.wire.write(mcp_early.compact(reply))
        return mcp_early.compact({**message, "id": replay})

    @staticmethod
    def _notification(message: Any) -> bool:
        return (isinstance(message, dict) and set(message) <= {"jsonrpc", "method", "params"}
                and message.get("jsonrpc") == "2.0" and isinstance(message.get("method"), str)
                and isinstance(message.get("params", {}), (dict, type(None))))

    def _listed(self, message: Any) -> dict[str, Any] | None:
        if not (isinstance(message, dict) and set(message) <= _ENVELOPE and message.get("jsonrpc") == "2.0"
                and _plain_id(message.get("id")) and isinstance(message.get("method"), str)
                and message.get("params") in (None, {})):
            return None
        if self.answers is None:
            self.answers = self._answers() or {}
        result = self.answers.get(self.version or "", {}).get(message["method"])
        return None if result is None else {"jsonrpc": "2.0", "id": message["id"], "result": result}


class _Wire:
    """The process's stdin and stdout, claimed for the protocol as the SDK's stdio transport claims
    them: fd 0 then reads the null device and fd 1 writes to stderr, so a stray print (or a
    C library's) misses the wire. `restore()` puts them back."""

    def __init__(self) -> None:
        self._in, self._out = os.dup(0), os.dup(1)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(2, 1)
        self.reader: BinaryIO = os.fdopen(os.dup(self._in), "rb")
        self._lock = threading.Lock()

    def write(self, data: bytes) -> None:
        with self._lock:
            view = memoryview(data)
            while view:
                view = view[os.write(self._out, view):]

    def restore(self, reading: bool = False) -> None:
        """`reading`: a thread may still be blocked reading the client, and closing the reader
        would wait for it; the process is leaving, so it is left open."""
        os.dup2(self._in, 0)
        os.dup2(self._out, 1)
        if not reading:
            self.reader.close()
        os.close(self._in)
        os.close(self._out)


class _Lines:
    """A stdin for the SDK: the given lines, then the rest of `reader`'s (tests drive it with this)."""

    def __init__(self, first: list[bytes], reader: BinaryIO):
        self.first = first
        self.reader = reader

    def readline(self) -> str:
        line = self.first.pop(0) if self.first else self.reader.readline()
        return line.decode("utf-8", "replace")

    def close(self) -> None:
        pass


class _Out:
    """The SDK's stdout: every message to the client, less the SDK's replies to the requests pmem
    answered early (`drop`, their replayed ids; the client had pmem's)."""

    def __init__(self, wire: _Wire, drop: set[str] | None):
        self.wire = wire
        self.drop = drop if drop is not None else set()
        self.buf = ""

    def write(self, text: str) -> int:
        self.buf += text
        while "\n" in self.buf:
            line, self.buf = self.buf.split("\n", 1)
            if self.drop and REPLAY in line:
                try:
                    mid = json.loads(line).get("id")
                except (ValueError, AttributeError):
                    mid = None
                if isinstance(mid, str) and mid in self.drop:
                    self.drop.discard(mid)
                    continue
            self.wire.write(line.encode("utf-8") + b"\n")
        return len(text)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def _import_sdk(box: dict[str, BaseException], done: threading.Event) -> None:
    try:
        import anyio  # noqa: F401
        import mcp.server.mcpserver  # noqa: F401
        import mcp.server.stdio  # noqa: F401
    except BaseException as exc:  # noqa: BLE001 - raised by the thread that waits for it
        box["error"] = exc
    finally:
        done.set()


def serve_stdio(open_store: Callable[[], Any], *, cwd: str | None = None,
                scope_filter: Callable[[Any], Any] | None = None,
                scope_for_write: Callable[[], str | None] | None = None) -> None:
    """Run until the client closes stdin. Returns normally on a client that disconnects."""
    backend = Backend(open_store, cwd=cwd or os.getcwd())
    failed: dict[str, BaseException] = {}
    wire = _Wire()
    early = _Early(wire, mcp_early.answers)
    sdk = threading.Thread(target=_import_sdk, args=(failed, early.moved), name="pmem-mcp-sdk", daemon=True)
    sdk.start()
    pump: threading.Thread | None = None
    try:
        first = wire.reader.readline()
        if not first:
            return  # the client left before saying anything
        early.take(first)
        pump = threading.Thread(target=early.pump, name="pmem-mcp-stdin", daemon=True)
        pump.start()
        early.moved.wait()
        if early.answered_all:
            return  # a client that only listed the tools and left does not wait for the SDK
        sdk.join()
        if "error" in failed:
            raise MissingExtra(INSTALL_HINT) from failed["error"]
        server = build_server(backend, scope_filter=scope_filter, scope_for_write=scope_for_write)
        early.on = False  # the SDK answers from here on
        if mcp_early.answers() is None:  # another SDK than mcp_early.json's: keep its answers for next time
            threading.Thread(target=mcp_early.remember, args=(sdk_session, REMEMBER_AFTER), name="pmem-mcp-early",
                             daemon=True).start()
        _run(server, early, _Out(wire, early.drop))
    except (BrokenPipeError, ConnectionResetError, EOFError):
        pass
    finally:
        backend.close()
        wire.restore(reading=pump is not None and pump.is_alive())


def _run(server: Any, stdin: Any, stdout: _Out) -> None:
    """`server.run("stdio")` on these streams (MCPServer.run_stdio_async, given them)."""
    import anyio
    from mcp.server.stdio import stdio_server

    async def main() -> None:
        async with stdio_server(stdin=anyio.wrap_file(stdin), stdout=anyio.wrap_file(stdout)) as (read, write):
            low = server._lowlevel_server
            await low.run(read, write, low.create_initialization_options())

    anyio.run(main)


_LAST = "pmem-early-last"  # the id of the `ping` that closes `sdk_session`


class _Client:
    """The SDK's stdin in `sdk_session`: the given lines, a `ping`, then the end of input once the
    ping is answered and nothing more has come for a moment."""

    def __init__(self, lines: list[bytes], out: "_Replies"):
        self.lines = [*lines, mcp_early.compact({"jsonrpc": "2.0", "id": _LAST, "method": "ping"})]
        self.out = out

    def readline(self) -> str:
        if self.lines:
            return self.lines.pop(0).decode("utf-8", "replace")
        with self.out.more:
            self.out.more.wait_for(lambda: _LAST.encode() in self.out.data, timeout=60)
            while self.out.more.wait(0.2):
                pass
        return ""

    def close(self) -> None:
        pass


class _Replies:
    def __init__(self) -> None:
        self.data = b""
        self.more = threading.Condition()

    def write(self, data: bytes) -> None:
        with self.more:
            self.data += data
            self.more.notify_all()


def sdk_session(messages: list[Any]) -> list[bytes]:
    """The lines that pmem's tools on the SDK's own server (no early answers, no store) write for
    `messages` (objects, or lines sent as they are), in the order written."""
    out = _Replies()
    server = build_server(Backend(lambda: None))
    client = _Client([m if isinstance(m, bytes) else mcp_early.compact(m) for m in messages], out)
    _run(server, client, _Out(out, None))  # type: ignore[arg-type]
    return [line for line in out.data.splitlines(keepends=True) if _LAST.encode() not in line]


def run(scope: str | None = "auto", *, cwd: str | None = None, db: str | None = None) -> None:
    """`pmem mcp`: serve the store at `db` (the default one) to one client over stdio. Reads see
    global memories plus those of `scope` ("auto": the project the client started the server in;
    "global": global ones only), and new memories get that scope."""
    if not sdk_available():
        raise MissingExtra(INSTALL_HINT)
    from ..scope import parse_scope, read_filter
    from ..service import MemoryStore

    cwd = cwd or os.getcwd()
    project = parse_scope(scope, cwd)
    serve_stdio(lambda: MemoryStore(db), cwd=cwd, scope_filter=lambda _store: read_filter(project),
                scope_for_write=lambda: project)


if __name__ == "__main__":  # python -m pmem.integrations.mcp_server (tests; users run `pmem mcp`)
    import sys

    if "--early" in sys.argv:  # regenerate mcp_early.json (see mcp_early)
        sys.exit(mcp_early.main(sys.argv[1:], sdk_session))
    run()
