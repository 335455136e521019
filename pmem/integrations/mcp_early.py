"""The answers `pmem mcp` gives before the MCP SDK has loaded, beyond `initialize`: `tools/list`,
`ping` and the empty prompt and resource lists, exactly as the SDK serves them for pmem's tools.

They are the SDK's own answers, generated from it and kept in `mcp_early.json` (as man/ is kept):

    python -m pmem.integrations.mcp_early          # rewrite mcp_early.json from the installed SDK
    python -m pmem.integrations.mcp_early --check  # exit 1 if it is stale (tests/test_mcp_early.py)

The file names the SDK and pydantic versions it came from (pydantic writes the tools' input
schemas); under any others `answers()` gives None and the SDK answers everything but `initialize`.
Figures: benchmarks/README.md, "MCP: the tool list before the SDK".
"""

from __future__ import annotations

import io
import json
import sys
import threading
from pathlib import Path
from typing import Any

FILE = Path(__file__).with_name("mcp_early.json")
# What a client asks right after the handshake; each answer is the same for every client.
METHODS = ("tools/list", "ping", "prompts/list", "resources/list", "resources/templates/list")
DISTRIBUTIONS = ("mcp", "pydantic")


def compact(message: Any) -> bytes:
    """One line of JSON as the SDK writes it (pydantic's `model_dump_json`): no spaces, UTF-8.
    `generate` checks that this gives the SDK's bytes for every answer kept."""
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"


def installed() -> dict[str, str | None]:
    """The installed versions of DISTRIBUTIONS, from their `.dist-info` folders next to the
    packages (importlib.metadata costs more than pmem's whole handshake); None where unsure."""
    import importlib.util
    import os

    found: dict[str, str | None] = {}
    for name in DISTRIBUTIONS:
        found[name] = None
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        places = spec.submodule_search_locations if spec is not None else None
        if not places:
            continue
        versions = set()
        for place in places:
            folder = os.path.dirname(os.path.abspath(place))
            try:
                entries = os.listdir(folder)
            except OSError:
                continue
            versions |= {e[len(name) + 1:-len(".dist-info")] for e in entries
                         if e.startswith(name + "-") and e.endswith(".dist-info")}
        if len(versions) == 1:
            found[name] = versions.pop()
    return found


def answers() -> dict[str, dict[str, Any]] | None:
    """{protocol version: {method: result}} when the file was made from the installed SDK, else None."""
    try:
        kept = json.loads(FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(kept, dict) or kept.get("made_with") != installed():
        return None
    return kept.get("answers")


LAST = "pmem-early-last"  # the id of the `ping` that closes `sdk_session`


class _Client:
    """The SDK's stdin in `sdk_session`: the given lines, a `ping`, then the end of input once the
    ping is answered and nothing more has come for a moment."""

    def __init__(self, lines: list[bytes], out: _Replies):
        self.lines = [*lines, compact({"jsonrpc": "2.0", "id": LAST, "method": "ping"})]
        self.out = out

    def readline(self) -> str:
        if self.lines:
            return self.lines.pop(0).decode("utf-8", "replace")
        with self.out.more:
            self.out.more.wait_for(lambda: LAST.encode() in self.out.data, timeout=60)
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
    """The lines that pmem's tools on the SDK's own server (no early answers) write for `messages`
    (objects, or lines sent as they are), in the order written."""
    from . import mcp_server

    out = _Replies()
    server = mcp_server.build_server(mcp_server.Backend(lambda: None))
    client = _Client([m if isinstance(m, bytes) else compact(m) for m in messages], out)
    mcp_server._run(server, client, mcp_server._Out(out, None))  # type: ignore[arg-type]
    return [line for line in out.data.splitlines(keepends=True) if LAST.encode() not in line]


def generate() -> dict[str, Any]:
    """The file's content, from the installed SDK: each early version's handshake, then each of
    METHODS; refused when `compact` would not write the SDK's exact bytes."""
    from .mcp_server import EARLY_VERSIONS

    kept: dict[str, dict[str, Any]] = {}
    for version in EARLY_VERSIONS:
        hello = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "pmem", "version": "0"}}}
        asked = [{"jsonrpc": "2.0", "id": i, "method": method} for i, method in enumerate(METHODS, 1)]
        replies = {json.loads(line)["id"]: line
                   for line in sdk_session([hello, {"jsonrpc": "2.0", "method": "notifications/initialized"}, *asked])}
        kept[version] = {}
        for request in asked:
            line = replies[request["id"]]
            reply = json.loads(line)
            if "result" not in reply or compact(reply) != line:
                raise RuntimeError(f"the SDK's answer to {request['method']} is not kept exactly: {line[:200]!r}")
            kept[version][request["method"]] = reply["result"]
    return {"made_with": installed(), "answers": kept}


def text(content: dict[str, Any]) -> str:
    return json.dumps(content, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    fresh = text(generate())
    if "--check" in argv:
        current = FILE.read_text(encoding="utf-8") if FILE.exists() else ""
        if current != fresh:
            print(f"{FILE} is stale: run python -m pmem.integrations.mcp_early", file=sys.stderr)
            return 1
        return 0
    with io.open(FILE, "w", encoding="utf-8", newline="\n") as f:
        f.write(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
