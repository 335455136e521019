"""The answers `pmem mcp` gives before the MCP SDK has loaded, beyond `initialize`: `tools/list`,
`ping` and the empty prompt and resource lists, exactly as the SDK serves them for pmem's tools.

They are the SDK's own answers, generated from it and kept in `mcp_early.json` (as man/ is kept):

    python -m pmem.integrations.mcp_server --early          # rewrite mcp_early.json from the installed SDK
    python -m pmem.integrations.mcp_server --early --check  # exit 1 if stale (tests/integrations/test_mcp_early.py)

The file names the SDK and pydantic versions it came from (pydantic writes the tools' input
schemas). Under any others the SDK answers everything but `initialize`, and `pmem mcp` generates
the same answers once it has loaded (`remember`) into the data folder, for its next start: that
copy names the versions too, and a digest of this module and mcp_server.py, where the tools are.
This module imports nothing of the SDK's, nor mcp_server: a session of pmem's tools on the SDK
(`mcp_server.sdk_session`) is handed to what needs one. Figures:
docs/decisions/0039-mcp-early-tools-list.md.
"""

from __future__ import annotations

import io
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

FILE = Path(__file__).with_name("mcp_early.json")
CACHE = "mcp-early.json"  # in the data folder: what `remember` generated under another SDK
# The handshake versions pmem answers itself; the SDK answers any other (tests hold this inside
# the SDK's own list, and the early reply equal to the SDK's for each).
EARLY_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
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


def _read(path: Path) -> dict[str, Any] | None:
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    shaped = isinstance(kept, dict) and isinstance(kept.get("answers"), dict) and all(
        isinstance(by_method, dict) and all(isinstance(result, dict) for result in by_method.values())
        for by_method in kept["answers"].values())
    return kept if shaped else None


def _digest() -> str:
    """What the answers are made from in pmem: the tools (mcp_server.py) and their generation (here)."""
    import hashlib

    here = Path(__file__)
    return hashlib.sha256(here.read_bytes() + here.with_name("mcp_server.py").read_bytes()).hexdigest()


def cache_path() -> Path:
    from ..paths import data_dir

    return data_dir() / CACHE


def answers(file: Path | None = None) -> dict[str, dict[str, Any]] | None:
    """{protocol version: {method: result}} made from the installed SDK (the kept file, or the
    copy `remember` wrote), else None."""
    made = installed()
    if None in made.values():
        return None
    kept = _read(file or FILE)
    if kept is not None and kept.get("made_with") == made:
        return kept["answers"]
    try:
        cached = _read(cache_path())
        if cached is not None and cached.get("made_with") == made and cached.get("source") == _digest():
            return cached["answers"]
    except OSError:
        pass
    return None


Session = Callable[[list[Any]], list[bytes]]  # messages in, the lines the SDK wrote out


def remember(session: Session, delay: float = 0.0) -> None:
    """Generate the answers from the SDK now loaded into the data folder (0600, replaced whole),
    after `delay` seconds, so as not to slow the session's first calls. Runs in a thread of
    `pmem mcp`; a failure only means the next start waits for the SDK too."""
    time.sleep(delay)
    try:
        if None in installed().values():
            return
        content = {**generate(session), "source": _digest()}
        from ..paths import ensure_private_dir

        target = cache_path()
        ensure_private_dir(target.parent)
        temp = target.with_name(f".{CACHE}.{os.getpid()}")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text(content))
        os.replace(temp, target)
    except Exception:  # noqa: BLE001 - a cache: the session it runs in is served all the same
        return


def generate(session: Session) -> dict[str, Any]:
    """The file's content, from the installed SDK's `session`: each early version's handshake, then
    each of METHODS; refused when `compact` would not write the SDK's exact bytes."""
    kept: dict[str, dict[str, Any]] = {}
    for version in EARLY_VERSIONS:
        hello = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "pmem", "version": "0"}}}
        asked = [{"jsonrpc": "2.0", "id": i, "method": method} for i, method in enumerate(METHODS, 1)]
        replies = {json.loads(line)["id"]: line
                   for line in session([hello, {"jsonrpc": "2.0", "method": "notifications/initialized"}, *asked])}
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


def main(argv: list[str], session: Session) -> int:
    fresh = text(generate(session))
    if "--check" in argv:
        current = FILE.read_text(encoding="utf-8") if FILE.exists() else ""
        if current != fresh:
            print(f"{FILE} is stale: run python -m pmem.integrations.mcp_server --early", file=sys.stderr)
            return 1
        return 0
    with io.open(FILE, "w", encoding="utf-8", newline="\n") as f:
        f.write(fresh)
    return 0
