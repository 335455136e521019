"""`pmem serve`: a resident process that keeps embedding models loaded.

Every `pmem search` or `pmem add` otherwise spends ~0.25 s importing llama.cpp and loading the
model before a 15 ms embedding. With a server running, commands send their texts over a Unix
socket in the pmem home directory and get the vectors back; nothing else changes (the database is
still opened by the command itself; only an agent hook hands its whole work over, the "hook" op
that the CLI adds: pmem.integrations.hooks.serve_hook). No server, a stopped one, a broken one, one of another
build, or something else on the socket: the command loads the model itself, as before, and with
`server = "auto"` (the default) or "always" starts a server for the commands after it
(`start_in_background`). `server = "never"` never uses or starts one.

This module never imports the embedder: the server is given its model loader, and a client its
local fallback (`pmem.models.embed.load_embedder` passes both). It prints nothing: what a person should
know goes through `pmem.notices`, which the CLI shows on stderr and the TUI as a notification.

Safety: the socket is created 0600 inside the 0700 pmem directory, and on Linux the server also
checks that the connecting process belongs to the same user. It listens on nothing else.

Limits, so that a flood from its own user (or a stopped server) costs little:
- a client waits CONNECT_TIMEOUT to connect and, for each reply, what the request can take
  (`reply_timeout()`: a few seconds plus an allowance per text), then uses its local model;
- the server reads requests in one thread and runs them on WORKERS threads: idle connections hold
  no thread. At most MAX_CONNECTIONS are open; past it the oldest one still silent is dropped.
  A connection has REQUEST_TIMEOUT to send its request and SEND_TIMEOUT to take its reply;
- a request line over MAX_REQUEST bytes, nested JSON too deep to parse, or anything else that
  is not a request gets a one-line error; running out of file descriptors (EMFILE) drops the
  oldest silent connection or waits a moment, and the server keeps serving.

Protocol (one request per connection): the client sends one JSON line; the server answers one JSON
line and, for vectors, `n * dim` little-endian float32 values after it.

    {"op": "open", "model": PATH}            -> {"ok": true, "name": ..., "dim": ..., "query_aware": ...}
    {"op": "embed", "model": PATH, "texts": [...], "query": false} -> {"ok": true, "n": N, "dim": D} + bytes

Every request carries {"v": PROTOCOL}; a server answers a request of another version with an error,
and a client that gets one loads the model itself. Version 2 added "query": models that embed
search queries and stored texts differently (e5's "query: " / "passage: ", `query_aware`) are told
which; version 1 servers would have embedded every query as a passage.
    {"op": "status"}                          -> {"ok": true, "pid": ..., "models": [...], "warm": ..., ...}
    {"op": "hook", "build": ..., ...}         -> {"ok": true, "block": ..., "build": ...}
                                                 (an agent hook's whole work: `ops`, pmem.integrations.hooks)
    {"op": "stop"}                            -> {"ok": true}
    failures                                  -> {"ok": false, "error": "one line"}
    refusals (busy, stopping)                 -> {"ok": false, "busy": true, "error": ...}
"""

from __future__ import annotations

import errno
import json
import os
import selectors
import socket
import struct
import sys
import threading
import time
from array import array
from pathlib import Path
from typing import Any, Callable, Sequence

from .. import notices, paths
from ..errors import ModelError, PmemError, UsageError
from .serve_client import (  # shared with an agent hook's thin process
    CONNECT_TIMEOUT,
    MAX_REQUEST,
    PROTOCOL,
    SUPPORTED,
    build_id,
    first_wait,
)

MAX_CONNECTIONS = 64  # open at once, whatever their state
WORKERS = 4  # threads running requests (one model embeds one batch at a time anyway)
REQUEST_TIMEOUT = 10.0  # seconds a connection may take to send its request line
SEND_TIMEOUT = 10.0  # seconds the server waits for a client to take its reply
LOCK_WAIT = 60.0  # seconds a server waits for another that is starting (loading its model) to answer
PATH_CHECK = 1.0  # seconds between a server's looks at whether its socket's path is still its own
REPLY_BASE = 3.0  # seconds any reply may take: a busy server, a slow machine
# Measured with MiniLM on 1 thread of the 2-core machine at load average 12: 28 ms per short
# text, 2.6 s per 4,000-character text (512 tokens); the allowances are about 1.5-2x that.
REPLY_PER_TEXT = 0.05
REPLY_PER_CHAR = 1 / 1_000
_CHARS_COUNTED = 4_000  # a text is cut to 512 tokens: more characters cost nothing
_OUT_OF_FDS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
# A refusal that says nothing about the request: the client uses its local model instead.
BUSY = {"ok": False, "busy": True, "error": "the pmem server is busy"}

socket_path = paths.socket_path


def reply_timeout(texts: Sequence[str] = ()) -> float:
    """How long a client waits for a reply to a request carrying `texts`: what embedding them can
    take on a slow machine, with room for a busy server. Past it the server counts as stopped."""
    chars = sum(min(len(t), _CHARS_COUNTED) for t in texts)
    return REPLY_BASE + REPLY_PER_TEXT * len(texts) + REPLY_PER_CHAR * chars


def _check_path_length(path: Path) -> None:
    # sun_path holds 108 bytes on Linux, 104 on macOS.
    if len(os.fsencode(str(path))) >= 104:
        raise UsageError(f"the socket path {path} is too long for a Unix socket; set PMEM_HOME to a shorter path")


# --- wire ------------------------------------------------------------------------------------


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj).encode("ascii") + b"\n"


def _send_json(sock: socket.socket, obj: dict[str, Any]) -> None:
    sock.sendall(_line(obj))


class _Reader:
    """Reads a reply by a deadline: the whole reply, not each recv, is bounded."""

    def __init__(self, sock: socket.socket, deadline: float):
        self.sock = sock
        self.buf = b""
        self.deadline = deadline

    def _recv(self, size: int) -> bytes:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("the pmem server did not answer in time")
        self.sock.settimeout(left)
        chunk = self.sock.recv(size)
        if not chunk:
            raise ConnectionError("connection closed")
        return chunk

    def line(self, limit: int = MAX_REQUEST) -> bytes:
        while b"\n" not in self.buf:
            if len(self.buf) > limit:
                raise ValueError("reply too large")
            self.buf += self._recv(1 << 16)
        line, _, self.buf = self.buf.partition(b"\n")
        return line

    def exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            self.buf += self._recv(max(1 << 16, n - len(self.buf)))
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


def _float32(vectors: list[list[float]]) -> bytes:
    flat = array("f")
    for v in vectors:
        flat.extend(v)
    if sys.byteorder != "little":  # pragma: no cover - big-endian hosts
        flat.byteswap()
    return flat.tobytes()


def _unpack(data: bytes, n: int, dim: int) -> list[list[float]]:
    flat = array("f")
    flat.frombytes(data)
    if sys.byteorder != "little":  # pragma: no cover
        flat.byteswap()
    return [flat[i * dim:(i + 1) * dim].tolist() for i in range(n)]


# --- client ----------------------------------------------------------------------------------


def _exchange(payload: bytes, path: Path | None, timeout: float):
    """Send one encoded request; returns (header, reader, sock). OSError/ConnectionError/ValueError
    when no server answers within `timeout` (socket.timeout is an OSError)."""
    if not SUPPORTED:
        raise ConnectionError("Unix sockets are not available on this platform")
    path = path or socket_path()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        deadline = time.monotonic() + timeout
        sock.settimeout(min(CONNECT_TIMEOUT, timeout))
        sock.connect(str(path))
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        sock.sendall(payload)
        reader = _Reader(sock, deadline)
        try:
            header = json.loads(reader.line())
        except RecursionError:  # nested too deeply: not a reply any pmem server sends
            raise ValueError("the pmem server answered with something that is not a reply") from None
        if not isinstance(header, dict):
            raise ValueError("the pmem server answered with something that is not a reply")
        return header, reader, sock
    except BaseException:
        sock.close()
        raise


def request(op: dict[str, Any], *, path: Path | None = None, timeout: float | None = None):
    """Send one request; returns (header, reader, sock). Raises OSError/ConnectionError/ValueError
    when no server answers in `timeout` seconds (default: `reply_timeout()`)."""
    payload = _line({"v": PROTOCOL, **op})
    if len(payload) > MAX_REQUEST:
        raise ValueError("request too large for the pmem server")
    return _exchange(payload, path, reply_timeout() if timeout is None else timeout)


def call(op: dict[str, Any], *, path: Path | None = None, timeout: float | None = None) -> dict[str, Any]:
    header, _, sock = request(op, path=path, timeout=timeout)
    sock.close()
    return header


def _count(value: Any, low: int = 0) -> int | None:
    """`value` if it is a whole number (not a bool) of at least `low`, else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= low else None


def valid_open(info: Any) -> bool:
    """Whether an "open" reply is one a pmem server gives: ok, a name, a positive dimension. Anything
    else on the socket (another program, a broken server) is not used: the command loads its model."""
    return (isinstance(info, dict) and info.get("ok") is True and isinstance(info.get("name"), str)
            and bool(info["name"]) and _count(info.get("dim"), 1) is not None
            and isinstance(info.get("query_aware", False), bool))


def valid_status(info: Any) -> bool:
    """Whether a "status" reply has the fields `pmem serve --status` and `pmem doctor` show."""
    return (isinstance(info, dict) and info.get("ok") is True and _count(info.get("pid"), 1) is not None
            and _count(info.get("requests")) is not None and isinstance(info.get("started"), (int, float))
            and not isinstance(info.get("started"), bool)
            and isinstance(info.get("models", []), list) and all(isinstance(m, str) for m in info.get("models", [])))


def _embed_with(model: Any, texts: list[str], query: bool) -> list[list[float]]:
    """`model.embed(texts)`, telling a query-aware model when the texts are search queries."""
    if query and getattr(model, "query_aware", False):
        return model.embed(texts, query=True)
    return model.embed(texts)


class RemoteEmbedder:
    """An Embedder whose model lives in `pmem serve`. If the server goes away or stops answering,
    it switches for good to `fallback()`, the same model loaded in this process."""

    def __init__(self, model_path: Path, info: dict[str, Any], sock_path: Path, threads: int = 0,
                 fallback: Callable[[], Any] | None = None):
        self.path = model_path
        self.name = str(info["name"])
        self.dim = int(info["dim"])
        self.query_aware = bool(info.get("query_aware", False))
        self.remote = True
        self._sock_path = sock_path
        self._threads = threads
        self._fallback = fallback
        self._local: Any = None  # the fallback embedder, once the server stopped answering

    def embed(self, texts: list[str], query: bool = False) -> list[list[float]]:
        """Vectors of `texts`; query=True: they are search queries (see `query_aware`)."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a list of texts")
        texts = list(texts)
        if not texts:
            return []
        if self._local is None:
            payload = _line({"v": PROTOCOL, "op": "embed", "model": str(self.path), "texts": texts,
                             "query": bool(query)})
            if len(payload) > MAX_REQUEST:
                return _embed_with(self.local(), texts, query)  # bulk work: this process, as for a large import
            try:
                header, reader, sock = _exchange(payload, self._sock_path, reply_timeout(texts))
                try:
                    if header.get("busy"):
                        raise ConnectionError(str(header.get("error")))
                    if not header.get("ok"):
                        raise ModelError(str(header.get("error") or "the pmem server failed"))
                    n, dim = _count(header.get("n")), _count(header.get("dim"))
                    if n != len(texts) or dim != self.dim:
                        raise ConnectionError("the pmem server answered with the wrong shape")
                    return _unpack(reader.exactly(4 * len(texts) * self.dim), len(texts), self.dim)
                finally:
                    sock.close()
            except (OSError, ConnectionError, ValueError, KeyError):
                notices.notice("the server stopped answering; loading the model in this process")
                self._local = self.local()
        return _embed_with(self._local, texts, query)

    def local(self):
        """The same model loaded in this process: for bulk work (an import, a reindex), which
        should use the cores idle now rather than the threads the server chose at its start."""
        if self._fallback is None:
            raise ModelError("the pmem server stopped answering and no local model was given to fall back on")
        return self._fallback()


def connect_embedder(model_path: Path, threads: int = 0, *,
                     fallback: Callable[[], Any] | None = None) -> RemoteEmbedder | None:
    """A RemoteEmbedder when a server of this build answers for this model, else None (quietly,
    unless a server is there but does not answer in time). `fallback()` loads the model here."""
    found, how = connect(model_path, threads, fallback=fallback)
    return found if how == "server" else None


def connect(model_path: Path, threads: int = 0, *, fallback: Callable[[], Any] | None = None,
            local: Callable[[], Any] | None = None) -> tuple[Any, str]:
    """Ask the server for this model; returns (embedder, how).

    how: "server" (a RemoteEmbedder); "local" (the server did not answer within first_wait(), so
    `local()` loaded the model here meanwhile and that is returned: a stopped or wedged server
    costs a command that wait, not seconds); or (None, why): "none" (no server), "other" (a
    server of another build: told to stop, so a new one can take its place), "refused" (it
    answered, with an error or something that is not a pmem reply), "unanswered" (no reply in
    time, and no `local` was given)."""
    if not SUPPORTED:
        return None, "none"
    sock_path = socket_path()
    if not sock_path.exists():
        return None, "none"
    result: dict[str, Any] = {}
    done = threading.Event()

    def ask() -> None:
        try:
            result["info"] = call({"op": "open", "model": str(model_path)}, path=sock_path)
        except socket.timeout:
            result["why"] = "unanswered"
        except (OSError, ConnectionError, ValueError):
            result["why"] = "none"
        finally:
            done.set()

    if local is None:
        ask()
    else:
        threading.Thread(target=ask, daemon=True, name="pmem-serve-open").start()
        if not done.wait(first_wait()):
            embedder = local()  # the server may still answer: this command no longer needs it
            if not done.is_set():
                notices.notice("the server did not answer in time; loaded the model in this process")
            return embedder, "local"
    if "why" in result:
        if result["why"] == "unanswered":
            notices.notice("the server did not answer in time; loading the model in this process")
        return None, result["why"]
    info = result["info"]
    if not valid_open(info):
        # a model it cannot load, an older server refusing our protocol, or not a pmem server at
        # all: loading the model here either works or fails with the same clear message
        if isinstance(info, dict) and "protocol version" in str(info.get("error", "")):
            stop(sock_path, timeout=1.0)
            return None, "other"
        return None, "refused"
    if info.get("build") != build_id():
        stop(sock_path, timeout=1.0)  # from before an upgrade (or a downgrade): replaced, never used
        return None, "other"
    return RemoteEmbedder(model_path, info, sock_path, threads, fallback), "server"


def status(path: Path | None = None) -> dict[str, Any] | None:
    try:
        info = call({"op": "status"}, path=path)
    except (OSError, ConnectionError, ValueError):
        return None
    return info if valid_status(info) else None


def stop(path: Path | None = None, timeout: float | None = None) -> bool:
    try:
        return call({"op": "stop"}, path=path, timeout=timeout).get("ok") is True
    except (OSError, ConnectionError, ValueError):
        return False


# --- server ----------------------------------------------------------------------------------


def _peer_uid(conn: socket.socket) -> int | None:
    so_peercred = getattr(socket, "SO_PEERCRED", None)
    if so_peercred is None:  # pragma: no cover - macOS/BSD: the 0600 socket file is the guard
        return None
    raw = conn.getsockopt(socket.SOL_SOCKET, so_peercred, struct.calcsize("3i"))
    return struct.unpack("3i", raw)[1]


def _say(conn: socket.socket, obj: dict[str, Any]) -> None:
    """A one-line reply from the accepting thread: best effort, never blocking it."""
    try:
        conn.send(_line(obj))
    except OSError:
        pass


class Server:
    """Serves embeddings on a Unix socket until stopped, signalled, or idle for `idle` seconds.

    `loader(path, threads=...)` loads the embedder for a model file (the CLI passes
    `pmem.models.embed.load_model_file`, which runs GGUF and e5 files alike; tests pass fakes).
    `ops` adds requests this module knows nothing of: `ops[name](server, request, reply)` calls
    `reply(header)` once, and may tidy up after it (the CLI gives "hook", an agent hook run whole
    here, which closes its database before replying; this module imports none of it). `warm`, if
    given, runs on a thread of its own once the server answers (what the ops will need, loaded
    before the first request needs it)."""

    def __init__(self, path: Path | None = None, *, loader: Callable[..., Any], threads: int = 0,
                 idle: float = 0.0, max_connections: int = MAX_CONNECTIONS, workers: int = WORKERS,
                 request_timeout: float = REQUEST_TIMEOUT, started_by: str = "", build: str | None = None,
                 ops: dict[str, Callable[["Server", dict[str, Any], Callable[[dict[str, Any]], None]], None]]
                 | None = None, warm: Callable[[], None] | None = None):
        if not SUPPORTED:
            raise UsageError("`pmem serve` needs Unix sockets, which this platform does not have")
        self.path = path or socket_path()
        self.started_by = started_by or "pmem serve"
        self.build = build or build_id()
        self._lock_fd: int | None = None
        self.threads = threads
        self.idle = idle
        self.max_connections = max(1, max_connections)
        self.workers = max(1, workers)
        self.request_timeout = request_timeout
        self.started = time.time()
        self.last = time.monotonic()
        self.requests = 0
        self._loader = loader
        self._ops = dict(ops or {})
        self._warm = warm
        self._warmed_up = threading.Event()  # set once `warm` has run (status says "warm")
        if warm is None:
            self._warmed_up.set()
        self._models: dict[str, Any] = {}
        self._models_lock = threading.Lock()
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self._pool = None
        self._count_lock = threading.Lock()
        self._running = 0  # connections handed to the workers
        self._waiting: dict[socket.socket, tuple[float, bytearray]] = {}  # silent so far, oldest first
        self._short_of_fds_at = 0.0
        self._node: tuple[int, int] | None = None  # the socket file this server made (inode, ctime)

    # lifecycle
    def bind(self, wait: float = 0.0) -> None:
        """Claim the socket: UsageError when a server answers on it. One server per pmem home: the
        check and the claim happen under a lock (`pmem.sock.lock`) that is held until `serve()`
        starts answering, so a second server started meanwhile (two commands starting one at
        once) waits for the first to answer and then stops here. `wait` seconds are given to a
        running server to leave (one that a command replaces after an upgrade)."""
        _check_path_length(self.path)
        paths.ensure_private_dir(self.path.parent)
        start = time.monotonic()
        while True:
            if self._take_lock():
                running = (self.path.exists() or self.path.is_symlink()) and status(self.path) is not None
                if not running:
                    break
                self._release_lock()
                if time.monotonic() - start >= wait:
                    raise UsageError(f"a pmem server is already running on {self.path} "
                                     "(`pmem serve --stop` stops it)")
            elif time.monotonic() - start >= LOCK_WAIT:
                raise UsageError(f"another pmem server is starting on {self.path}")
            time.sleep(0.1)
        if self.path.exists() or self.path.is_symlink():
            self.path.unlink()  # left behind by a server that died
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(str(self.path))
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        self._node = self._path_node()
        sock.listen(128)
        sock.setblocking(False)
        self._sock = sock

    def _path_node(self) -> tuple[int, int] | None:
        """(inode, ctime) of the file at the socket's path, None when there is none: an inode
        number alone can come back for the next file made there."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_ctime_ns

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _take_lock(self) -> bool:
        """The lock under which a server claims the socket; False while another server holds it."""
        import fcntl

        if self._lock_fd is not None:
            return True
        fd = os.open(str(self.path) + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    def leaves_at(self) -> float | None:
        """When this server exits if no request comes (a Unix time), or None: it stays until stopped."""
        if not self.idle:
            return None
        return time.time() + max(0.0, self.idle - (time.monotonic() - self.last))

    def serve(self) -> None:
        assert self._sock is not None, "bind() first"
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="pmem-serve")
        self._release_lock()  # answering from now on: a server started after this one finds it
        if self._warm is not None:
            threading.Thread(target=self._warmed, name="pmem-serve-warm", daemon=True).start()
        selector = selectors.DefaultSelector()
        selector.register(self._sock, selectors.EVENT_READ, None)
        look = time.monotonic() + PATH_CHECK
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                if self.idle and now - self.last > self.idle and not self._running and not self._waiting:
                    break
                if now >= look:
                    look = now + PATH_CHECK
                    if self._path_node() != self._node and not self._running:
                        break  # another server took the path over (this one was stopped, or slow to
                        # answer its status): no client reaches this one any more, so it leaves
                wait = 0.2
                for conn, (deadline, _) in list(self._waiting.items()):
                    if now >= deadline:
                        self._drop(selector, conn, "bad request: nothing arrived in time")
                    else:
                        wait = min(wait, deadline - now)
                for key, _ in selector.select(max(wait, 0.0)):
                    if key.data is None:
                        self._accept(selector)
                    else:
                        self._read(selector, key.fileobj)  # type: ignore[arg-type]
        finally:
            for conn in list(self._waiting):
                self._drop(selector, conn)
            selector.close()
            self.close()

    def _warmed(self) -> None:
        try:
            self._warm()  # type: ignore[misc]
        except Exception:  # noqa: BLE001 - only a head start: the request that needs it tries again
            pass
        finally:
            self._warmed_up.set()

    def shutdown(self) -> None:
        self._stop.set()

    def close(self) -> None:
        self._stop.set()
        if self._pool is not None:
            self._pool.shutdown(wait=True)  # requests under way finish; queued ones are told "stopping"
            self._pool = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            try:
                # Only our own socket: a server stopped (SIGSTOP) long enough for another to take
                # the path over must not remove the newer one's when it ends.
                if self._path_node() == self._node:
                    self.path.unlink()
            except FileNotFoundError:
                pass
        for model in self._models.values():
            getattr(model, "close", lambda: None)()
        self._models.clear()
        self._release_lock()

    # connections
    def _accept(self, selector: selectors.BaseSelector) -> None:
        assert self._sock is not None
        try:
            conn, _ = self._sock.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            if exc.errno in _OUT_OF_FDS:
                self._short_of_fds(selector)
                return
            if exc.errno == errno.ECONNABORTED:
                return
            raise
        conn.setblocking(False)
        try:
            uid = _peer_uid(conn)
        except OSError:
            conn.close()
            return
        if uid is not None and uid != os.getuid():
            _say(conn, {"ok": False, "error": "this pmem server belongs to another user"})
            conn.close()
            return
        if len(self._waiting) + self._running >= self.max_connections:
            if not self._waiting:  # every slot is a request under way: refuse, the client falls back
                _say(conn, BUSY)
                conn.close()
                return
            self._drop(selector, next(iter(self._waiting)), BUSY)
        now = time.monotonic()
        self._waiting[conn] = (now + self.request_timeout, bytearray())
        selector.register(conn, selectors.EVENT_READ, True)
        self.last = now

    def _short_of_fds(self, selector: selectors.BaseSelector) -> None:
        """accept() failed for lack of file descriptors: free one (the oldest connection that has
        sent nothing) or, if every one is a request under way, wait a moment for them to end."""
        now = time.monotonic()
        if now - self._short_of_fds_at > 10:
            notices.notice("server: out of file descriptors; dropping idle connections until some are free")
        self._short_of_fds_at = now
        if self._waiting:
            self._drop(selector, next(iter(self._waiting)))
        else:
            time.sleep(0.05)

    def _drop(self, selector: selectors.BaseSelector, conn: socket.socket,
              why: str | dict[str, Any] | None = None) -> None:
        self._waiting.pop(conn, None)
        try:
            selector.unregister(conn)
        except (KeyError, ValueError):
            pass
        if why:
            _say(conn, why if isinstance(why, dict) else {"ok": False, "error": why})
        conn.close()

    def _read(self, selector: selectors.BaseSelector, conn: socket.socket) -> None:
        entry = self._waiting.get(conn)
        if entry is None:
            return
        try:
            chunk = conn.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(selector, conn)
            return
        if not chunk:
            self._drop(selector, conn)  # the client went away
            return
        buf = entry[1]
        start = len(buf)
        buf += chunk
        end = buf.find(b"\n", start)
        if end < 0 or end > MAX_REQUEST:
            if len(buf) > MAX_REQUEST:
                self._drop(selector, conn, f"bad request: larger than {MAX_REQUEST} bytes")
            return
        del self._waiting[conn]
        selector.unregister(conn)
        with self._count_lock:
            self._running += 1
            self.requests += 1  # counted on arrival: a status reply counts itself
        try:
            assert self._pool is not None
            self._pool.submit(self._handle, conn, bytes(buf[:end]))
        except RuntimeError:  # shutting down, or no thread could be started
            with self._count_lock:
                self._running -= 1
            _say(conn, BUSY)
            conn.close()

    # requests
    def _handle(self, conn: socket.socket, line: bytes) -> None:
        try:
            with conn:
                conn.setblocking(True)
                conn.settimeout(SEND_TIMEOUT)
                try:
                    req = json.loads(line)
                    if not isinstance(req, dict):
                        raise ValueError("not an object")
                except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
                    reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
                    _send_json(conn, {"ok": False, "error": f"bad request: {' '.join(reason.split())}"})
                    return
                if self._stop.is_set():
                    _send_json(conn, {"ok": False, "busy": True, "error": "the pmem server is stopping"})
                    return
                try:
                    self._dispatch(conn, req)
                except PmemError as exc:
                    _send_json(conn, {"ok": False, "error": str(exc)})
                except OSError:
                    raise
                except Exception as exc:  # one bad request must not take the server down
                    _send_json(conn, {"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        except OSError:
            pass  # the client went away, or did not take its reply in time
        finally:
            with self._count_lock:
                self._running -= 1
            self.last = time.monotonic()

    def fit_threads(self) -> None:
        """With `threads` 0 (automatic), give the models that can change it the cores idle now
        (loading.default_threads) before each request, not only at the start: a server lives
        for hours, and two BLAS threads chosen on an idle machine made each query ~20x slower
        once another process kept a core busy (OpenBLAS's threads wait spinning; benchmarks/
        README.md, "The hook's process, lean")."""
        if self.threads:
            return
        from .loading import default_threads

        n = default_threads(samples=1)  # one reading: no wait in front of every request
        for model in list(self._models.values()):
            use = getattr(model, "use_threads", None)
            if use is not None:
                use(n)

    def model(self, path: Any):
        """The embedder for this model file, loaded on first use and kept."""
        if not isinstance(path, str) or not path:
            raise UsageError("bad request: no model path")
        key = str(Path(path).resolve())
        with self._models_lock:
            if key not in self._models:
                self._models[key] = self._loader(key, threads=self.threads)
            return self._models[key]

    def _dispatch(self, conn: socket.socket, req: dict[str, Any]) -> None:
        op = req.get("op")
        if req.get("v") != PROTOCOL:
            raise UsageError(f"protocol version {req.get('v')!r} is not {PROTOCOL}: restart `pmem serve`")
        if op == "open":
            model = self.model(req.get("model"))
            _send_json(conn, {"ok": True, "name": model.name, "dim": model.dim,
                              "query_aware": bool(getattr(model, "query_aware", False)), "build": self.build})
        elif op == "embed":
            texts = req.get("texts")
            if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                raise UsageError("bad request: texts must be a list of strings")
            query = req.get("query", False)
            if not isinstance(query, bool):
                raise UsageError("bad request: query must be true or false")
            model = self.model(req.get("model"))
            self.fit_threads()
            vectors = _embed_with(model, texts, query)
            _send_json(conn, {"ok": True, "n": len(vectors), "dim": model.dim})
            conn.sendall(_float32(vectors))
        elif op == "status":
            from ..version import __version__

            _send_json(conn, {"ok": True, "pid": os.getpid(), "version": __version__, "build": self.build,
                              "socket": str(self.path), "started": self.started, "started_by": self.started_by,
                              "requests": self.requests, "idle_limit": self.idle, "leaves_at": self.leaves_at(),
                              "threads": self.threads, "models": sorted(self._models),
                              "warm": self._warmed_up.is_set()})
        elif op == "stop":
            _send_json(conn, {"ok": True})
            self.shutdown()
        elif isinstance(op, str) and op in self._ops:
            self._ops[op](self, req, lambda header: _send_json(conn, header))
        else:
            raise UsageError(f"bad request: unknown op {op!r}")


_spawned: list = []  # children started by this process (kept so Python does not warn about them)


def spawn(argv: list[str], log: Path, env: dict[str, str] | None = None):
    """Start `pmem <argv>` in its own session, output to `log` (0600); returns the Popen. `env`:
    the environment it gets (default: this process's now)."""
    import subprocess

    paths.ensure_private_dir(log.parent)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "pmem", *argv], stdin=subprocess.DEVNULL, stdout=fd,
                                stderr=fd, start_new_session=True, close_fds=True, env=env)
    finally:
        os.close(fd)
    _spawned.append(proc)
    return proc


log_path = paths.serve_log_path


def detach(argv: list[str], log: Path | None = None, wait: float = 60.0) -> dict[str, Any]:
    """Start `pmem serve` (argv) in the background and wait until it answers."""
    log = log or log_path()
    proc = spawn(argv, log)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        info = status()
        if info is not None and info.get("pid") == proc.pid:
            return info
        if proc.poll() is not None:
            tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise PmemError(f"the server did not start: {tail[0]} (log: {log})")
        time.sleep(0.05)
    proc.terminate()
    raise PmemError(f"the server did not answer within {wait:.0f} s (log: {log})")


# A server launched for the next commands waits for the command that launched it: it loads e5 and
# MiniLM too, and beside a cold search on two cores it took the cores that search was loading its
# own with (docs/decisions/0059-first-search.md). It starts as the command exits, or this long after
# the command asked for it if the command is still running (the MCP server, the TUI, an import).
# While another thread of the command is running then (an import's passes hold both cores: 680
# turns took 5.98 s with a server loading beside them, 5.76 s without), it waits on, RECHECK at a
# time, until the command rests or exits, START_LATEST at most (a long import gets one for hooks).
START_AFTER = 5.0
RECHECK = 1.0
START_LATEST = 60.0
_deferred: dict[str, Any] = {}  # the launch start_in_background put off: argv, log, env, timer
_deferred_lock = threading.Lock()
_at_exit: list[bool] = []  # launch_deferred registered with atexit, once per process


def start_in_background(idle_minutes: float | None = 15.0, by: str = "", at_once: bool = False) -> bool:
    """For `server = auto | always`: launch a server for the next commands without waiting for it
    (this command loads its own model meanwhile). It leaves after `idle_minutes` without a request
    (None: it stays until stopped). Two commands starting one at once give one server: the second
    finds the first's lock and exits (serve_cmd). The launch is put off until this process exits,
    START_AFTER seconds (more while the command is still working, START_LATEST at most), or
    `launch_deferred()` (`at_once`: now). Returns whether one was launched or put off."""
    if not SUPPORTED:
        return False
    argv = ["serve", "--started-by", (by or "a pmem command")[:200] + f" (pid {os.getpid()})"]
    if idle_minutes:
        argv += ["--idle", f"{round(idle_minutes * 60, 1)}s"]
    try:
        _check_path_length(socket_path())
        log = log_path()
    except (OSError, PmemError):
        return False  # the command works without it
    if at_once:
        return _launch(argv, log, None)
    import atexit

    timer = threading.Timer(START_AFTER, _when_resting, args=(time.monotonic(),))
    timer.daemon = True
    with _deferred_lock:
        if _deferred:
            return True  # one is waiting already
        # this process's environment now: the home and settings the command ran with
        _deferred.update(argv=argv, log=log, env=dict(os.environ), timer=timer)
        if not _at_exit:
            atexit.register(launch_deferred)
            _at_exit.append(True)
    timer.start()
    return True


def _when_resting(asked: float) -> None:
    """The timer's launch: put off again while another thread of this command runs (its own
    thread aside), until START_LATEST after the command asked; where threads cannot be seen
    (no /proc), at once."""
    from .loading import own_running

    if own_running() > 1 and time.monotonic() - asked < START_LATEST:
        with _deferred_lock:
            if not _deferred:  # launched at exit, or dropped, meanwhile
                return
            timer = threading.Timer(RECHECK, _when_resting, args=(asked,))
            timer.daemon = True
            _deferred["timer"] = timer
        timer.start()
        return
    launch_deferred()


def launch_deferred() -> bool:
    """Launch the server start_in_background put off, if one is waiting (at exit, after
    START_AFTER, or by a command about to leave without its exit handlers). Returns whether one was."""
    with _deferred_lock:
        waiting = dict(_deferred)
        _deferred.clear()
    if not waiting:
        return False
    waiting["timer"].cancel()
    return _launch(waiting["argv"], waiting["log"], waiting["env"])


def drop_deferred() -> bool:
    """Forget the server start_in_background put off, if one is waiting (a test that ends, or a
    process about to serve that home itself). Returns whether one was."""
    with _deferred_lock:
        waiting = dict(_deferred)
        _deferred.clear()
    if waiting:
        waiting["timer"].cancel()
    return bool(waiting)


def _launch(argv: list[str], log: Path, env: dict[str, str] | None) -> bool:
    try:
        spawn(argv, log, env)
    except (OSError, PmemError):
        return False  # the command works without it
    return True
