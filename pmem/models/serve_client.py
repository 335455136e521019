"""The client's side of `pmem serve` for a process that must start fast: an agent hook's.

Which build this is, how long to wait for a server, and one request answered by one line. It
imports the C parts of the standard library only: the `socket` module costs a hook's process
~20 ms of CPU here (its enums) and the json package ~17 ms (re) before every prompt, where `_socket` and
pmem.leanjson do the same work (docs/decisions/0041-hook-process-lean.md). `pmem.models.serve`
takes its build id, wait and protocol from here; its own client (`serve.request`, vectors after
the line) is for commands, which have imported all of that anyway.
"""

import os
import time

from .. import leanjson
from ..version import __version__

try:
    import _socket as _sockets
except ImportError:  # pragma: no cover - CPython has _socket
    import socket as _sockets  # type: ignore[no-redef]

PROTOCOL = 2  # 2: embed requests say whether the texts are search queries
MAX_REQUEST = 4 * 1024 * 1024  # bytes of one request line; a larger embed runs in the client
CONNECT_TIMEOUT = 1.0
SUPPORTED = hasattr(_sockets, "AF_UNIX")
FIRST_WAIT = 0.1  # seconds a command gives the server before it loads the model itself (idle machine)
_HERE = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # the pmem package (this is pmem/models/)


def first_wait() -> float:
    """FIRST_WAIT, stretched by how busy the CPUs are (a healthy server waits its turn for a core
    too, as a cold start would), at most 1 s."""
    try:
        busy = os.getloadavg()[0] / (os.cpu_count() or 1)
    except (AttributeError, OSError):
        busy = 1.0
    return min(1.0, FIRST_WAIT * max(1.0, busy))


def build_id() -> str:
    """This pmem's version and the identity of its code: a command that finds a server of another
    build stops it and starts its own (an upgrade must not keep old code serving). Every module
    counts, not only the model's: a server answers hooks with pmem's search and store code too
    (`ops`). ~1 ms for the ~100 files; zlib's checksums, not hashlib (whose OpenSSL costs an agent
    hook ~4 ms of CPU): it tells builds apart, it guards nothing."""
    import zlib

    parts = [__version__]
    for folder, subfolders, names in os.walk(_HERE):
        subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
        inner = folder[len(_HERE) + 1:]  # os.path.relpath(folder, _HERE), without its getcwd()
        for name in sorted(n for n in names if n.endswith(".py")):
            try:
                st = os.stat(os.path.join(folder, name))
            except OSError:
                continue
            parts.append(f"{os.path.join(inner, name)}:{st.st_size}:{st.st_mtime_ns}")
    data = "|".join(parts).encode()
    return f"{__version__}+{zlib.crc32(data):08x}{zlib.adler32(data):08x}"


def call(op: dict, path: str, timeout: float) -> dict:
    """Send one request ({"v": PROTOCOL, **op}) to the server on `path`; returns its reply line.

    TimeoutError when no reply comes within `timeout` seconds (connected to a stopped server's
    backlog, or not); ConnectionError or another OSError when no server is there; ValueError for
    a request too large or a reply that is not one."""
    payload = (leanjson.dumps({"v": PROTOCOL, **op}) + "\n").encode("ascii")
    if len(payload) > MAX_REQUEST:
        raise ValueError("request too large for the pmem server")
    if not SUPPORTED:
        raise ConnectionError("Unix sockets are not available on this platform")
    deadline = time.monotonic() + timeout
    sock = _sockets.socket(_sockets.AF_UNIX, _sockets.SOCK_STREAM)
    try:
        sock.settimeout(min(CONNECT_TIMEOUT, timeout))
        sock.connect(path)
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        sock.sendall(payload)
        buf = b""
        while b"\n" not in buf:
            if len(buf) > MAX_REQUEST:
                raise ValueError("reply too large")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the pmem server did not answer in time")
            sock.settimeout(left)
            chunk = sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("connection closed")
            buf += chunk
    finally:
        sock.close()
    try:
        header = leanjson.loads(buf.partition(b"\n")[0].decode("utf-8"))
    except (UnicodeDecodeError, RecursionError):
        raise ValueError("the pmem server answered with something that is not a reply") from None
    if not isinstance(header, dict):
        raise ValueError("the pmem server answered with something that is not a reply")
    return header
