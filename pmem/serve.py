"""`pmem serve`: an optional resident process that keeps embedding models loaded.

Every `pmem search` or `pmem add` otherwise spends ~0.25 s importing llama.cpp and loading the
model before a 15 ms embedding. With a server running, commands send their texts over a Unix
socket in the pmem home directory and get the vectors back; nothing else changes (the database is
still opened by the command itself). No server, a stopped one, or a broken one: the command loads
the model itself, as before. Setting `server = "off"` never uses one.

Safety: the socket is created 0600 inside the 0700 pmem directory, and on Linux the server also
checks that the connecting process belongs to the same user. It listens on nothing else.

Protocol (one request per connection): the client sends one JSON line; the server answers one JSON
line and, for vectors, `n * dim` little-endian float32 values after it.

    {"op": "open", "model": PATH}            -> {"ok": true, "name": ..., "dim": ...}
    {"op": "embed", "model": PATH, "texts": [...]} -> {"ok": true, "n": N, "dim": D} + bytes
    {"op": "status"}                          -> {"ok": true, "pid": ..., "models": [...], ...}
    {"op": "stop"}                            -> {"ok": true}
    failures                                  -> {"ok": false, "error": "one line"}
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from array import array
from pathlib import Path
from typing import Any

from . import paths
from .errors import ModelError, PmemError, UsageError

SOCKET_NAME = "pmem.sock"
PROTOCOL = 1
MAX_REQUEST = 64 * 1024 * 1024  # bytes of one request line
CONNECT_TIMEOUT = 2.0
REPLY_TIMEOUT = 600.0
SUPPORTED = hasattr(socket, "AF_UNIX")


def socket_path() -> Path:
    return paths.data_dir() / SOCKET_NAME


def _check_path_length(path: Path) -> None:
    # sun_path holds 108 bytes on Linux, 104 on macOS.
    if len(os.fsencode(str(path))) >= 104:
        raise UsageError(f"the socket path {path} is too long for a Unix socket; set PMEM_HOME to a shorter path")


# --- wire ------------------------------------------------------------------------------------


def _send_json(sock: socket.socket, obj: dict[str, Any]) -> None:
    sock.sendall(json.dumps(obj).encode("ascii") + b"\n")


class _Reader:
    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = b""

    def line(self, limit: int = MAX_REQUEST) -> bytes:
        while b"\n" not in self.buf:
            if len(self.buf) > limit:
                raise ValueError("request too large")
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("connection closed")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line

    def exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(max(1 << 16, n - len(self.buf)))
            if not chunk:
                raise ConnectionError("connection closed")
            self.buf += chunk
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


def request(op: dict[str, Any], *, path: Path | None = None, timeout: float = REPLY_TIMEOUT):
    """Send one request; returns (header, reader). Raises OSError/ConnectionError when no server."""
    if not SUPPORTED:
        raise ConnectionError("Unix sockets are not available on this platform")
    path = path or socket_path()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(CONNECT_TIMEOUT)
        sock.connect(str(path))
        sock.settimeout(timeout)
        _send_json(sock, {"v": PROTOCOL, **op})
        reader = _Reader(sock)
        header = json.loads(reader.line())
        return header, reader, sock
    except BaseException:
        sock.close()
        raise


def call(op: dict[str, Any], *, path: Path | None = None, timeout: float = REPLY_TIMEOUT) -> dict[str, Any]:
    header, _, sock = request(op, path=path, timeout=timeout)
    sock.close()
    return header


class RemoteEmbedder:
    """An Embedder whose model lives in `pmem serve`; falls back to a local model if the server
    goes away between calls."""

    def __init__(self, model_path: Path, info: dict[str, Any], sock_path: Path, threads: int = 0):
        self.path = model_path
        self.name = str(info["name"])
        self.dim = int(info["dim"])
        self.remote = True
        self._sock_path = sock_path
        self._threads = threads
        self._local = None

    def embed(self, texts: list[str]) -> list[list[float]]:
        if isinstance(texts, str):
            raise TypeError("embed() takes a list of texts")
        texts = list(texts)
        if not texts:
            return []
        if self._local is None:
            try:
                header, reader, sock = request({"op": "embed", "model": str(self.path), "texts": texts},
                                               path=self._sock_path)
                try:
                    if not header.get("ok"):
                        raise ModelError(str(header.get("error") or "the pmem server failed"))
                    n, dim = int(header["n"]), int(header["dim"])
                    if n != len(texts) or dim != self.dim:
                        raise ConnectionError("the pmem server answered with the wrong shape")
                    return _unpack(reader.exactly(4 * n * dim), n, dim)
                finally:
                    sock.close()
            except (OSError, ConnectionError, ValueError, KeyError):
                print("pmem: the server stopped answering; loading the model in this process", file=sys.stderr)
                self._local = self.local()
        return self._local.embed(texts)

    def local(self):
        """The same model loaded in this process: for bulk work (an import, a reindex), which
        should use the cores idle now rather than the threads the server chose at its start."""
        from .embed import load_embedder

        return load_embedder(str(self.path), threads=self._threads, server="off")


def connect_embedder(model_path: Path, threads: int = 0) -> RemoteEmbedder | None:
    """A RemoteEmbedder when a server answers for this model, else None (quietly)."""
    if not SUPPORTED:
        return None
    sock_path = socket_path()
    if not sock_path.exists():
        return None
    try:
        info = call({"op": "open", "model": str(model_path)}, path=sock_path)
    except (OSError, ConnectionError, ValueError):
        return None
    if not info.get("ok"):
        # e.g. a server from another pmem version, or a model it cannot load: loading it here
        # either works or fails with the same clear message
        return None
    return RemoteEmbedder(model_path, info, sock_path, threads)


def status(path: Path | None = None) -> dict[str, Any] | None:
    try:
        info = call({"op": "status"}, path=path, timeout=10)
    except (OSError, ConnectionError, ValueError):
        return None
    return info if info.get("ok") else None


def stop(path: Path | None = None) -> bool:
    try:
        return bool(call({"op": "stop"}, path=path, timeout=10).get("ok"))
    except (OSError, ConnectionError, ValueError):
        return False


# --- server ----------------------------------------------------------------------------------


def _peer_uid(conn: socket.socket) -> int | None:
    so_peercred = getattr(socket, "SO_PEERCRED", None)
    if so_peercred is None:  # pragma: no cover - macOS/BSD: the 0600 socket file is the guard
        return None
    import struct

    raw = conn.getsockopt(socket.SOL_SOCKET, so_peercred, struct.calcsize("3i"))
    return struct.unpack("3i", raw)[1]


class Server:
    """Serves embeddings on a Unix socket until stopped, signalled, or idle for `idle` seconds."""

    def __init__(self, path: Path | None = None, *, threads: int = 0, idle: float = 0.0, loader=None):
        if not SUPPORTED:
            raise UsageError("`pmem serve` needs Unix sockets, which this platform does not have")
        self.path = path or socket_path()
        self.threads = threads
        self.idle = idle
        self.started = time.time()
        self.last = time.monotonic()
        self.requests = 0
        self._loader = loader  # path, threads -> Embedder (default: LlamaEmbedder)
        self._models: dict[str, Any] = {}
        self._models_lock = threading.Lock()
        self._stop = threading.Event()
        self._sock: socket.socket | None = None

    # lifecycle
    def bind(self) -> None:
        _check_path_length(self.path)
        paths.ensure_private_dir(self.path.parent)
        if self.path.exists() or self.path.is_symlink():
            if status(self.path) is not None:
                raise UsageError(f"a pmem server is already running on {self.path} (`pmem serve --stop` stops it)")
            self.path.unlink()  # left behind by a server that died
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(str(self.path))
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        sock.listen(16)
        sock.settimeout(0.5)
        self._sock = sock

    def serve(self) -> None:
        assert self._sock is not None, "bind() first"
        try:
            while not self._stop.is_set():
                if self.idle and time.monotonic() - self.last > self.idle:
                    break
                try:
                    conn, _ = self._sock.accept()
                except socket.timeout:
                    continue
                except OSError:
                    if self._stop.is_set():
                        break
                    raise
                self.last = time.monotonic()
                threading.Thread(target=self._handle, args=(conn,), daemon=True).start()
        finally:
            self.close()

    def shutdown(self) -> None:
        self._stop.set()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
        for model in self._models.values():
            getattr(model, "close", lambda: None)()
        self._models.clear()

    # requests
    def _handle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(REPLY_TIMEOUT)
            try:
                uid = _peer_uid(conn)
                if uid is not None and uid != os.getuid():
                    _send_json(conn, {"ok": False, "error": "this pmem server belongs to another user"})
                    return
                try:
                    req = json.loads(_Reader(conn).line())
                    if not isinstance(req, dict):
                        raise ValueError("not an object")
                except (ValueError, UnicodeDecodeError) as exc:
                    _send_json(conn, {"ok": False, "error": f"bad request: {exc}"})
                    return
                try:
                    self._dispatch(conn, req)
                except PmemError as exc:
                    _send_json(conn, {"ok": False, "error": str(exc)})
                except Exception as exc:  # one bad request must not take the server down
                    _send_json(conn, {"ok": False, "error": f"{type(exc).__name__}: {exc}"})
            except OSError:
                pass  # the client went away
            finally:
                self.requests += 1
                self.last = time.monotonic()

    def model(self, path: Any):
        """The embedder for this GGUF path, loaded on first use and kept."""
        if not isinstance(path, str) or not path:
            raise UsageError("bad request: no model path")
        key = str(Path(path).resolve())
        with self._models_lock:
            if key not in self._models:
                loader = self._loader
                if loader is None:
                    from .embed import LlamaEmbedder as loader
                self._models[key] = loader(key, threads=self.threads)
            return self._models[key]

    def _dispatch(self, conn: socket.socket, req: dict[str, Any]) -> None:
        op = req.get("op")
        if req.get("v") != PROTOCOL:
            raise UsageError(f"protocol version {req.get('v')!r} is not {PROTOCOL}: restart `pmem serve`")
        if op == "open":
            model = self.model(req.get("model"))
            _send_json(conn, {"ok": True, "name": model.name, "dim": model.dim})
        elif op == "embed":
            texts = req.get("texts")
            if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                raise UsageError("bad request: texts must be a list of strings")
            model = self.model(req.get("model"))
            vectors = model.embed(texts)
            _send_json(conn, {"ok": True, "n": len(vectors), "dim": model.dim})
            conn.sendall(_float32(vectors))
        elif op == "status":
            from . import __version__

            _send_json(conn, {"ok": True, "pid": os.getpid(), "version": __version__, "socket": str(self.path),
                              "started": self.started, "requests": self.requests, "idle_limit": self.idle,
                              "threads": self.threads,
                              "models": sorted(self._models)})
        elif op == "stop":
            _send_json(conn, {"ok": True})
            self.shutdown()
        else:
            raise UsageError(f"bad request: unknown op {op!r}")


_spawned: list = []  # children started by this process (kept so Python does not warn about them)


def spawn(argv: list[str], log: Path):
    """Start `pmem <argv>` in its own session, output to `log` (0600); returns the Popen."""
    import subprocess

    paths.ensure_private_dir(log.parent)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "pmem", *argv], stdin=subprocess.DEVNULL, stdout=fd,
                                stderr=fd, start_new_session=True, close_fds=True)
    finally:
        os.close(fd)
    _spawned.append(proc)
    return proc


def log_path() -> Path:
    return paths.data_dir() / "serve.log"


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


AUTOSTART_IDLE = "30m"


def start_in_background() -> bool:
    """For `server = "start"`: launch a server for the next commands without waiting for it
    (this command loads its own model meanwhile). It exits after AUTOSTART_IDLE without use."""
    if not SUPPORTED:
        return False
    try:
        _check_path_length(socket_path())
        spawn(["serve", "--idle", AUTOSTART_IDLE], log_path())
    except (OSError, PmemError):
        return False  # the command works without it
    return True
