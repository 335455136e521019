"""Text for a model passes one gate: every path that puts memories in front of a model (hooks,
`pmem context`, every MCP tool, the llm fragment and tools, recall) strips the same hidden
characters, `display.prompt_safe`, and keeps everything else."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from pmem.display import prompt_safe
from pmem.service import MemoryStore

ROOT = Path(__file__).resolve().parents[1]

# What a memory may hide from the person who reads a prompt: the ESC and BEL of an OSC 52 clipboard
# write, bidi overrides and isolates, zero-width characters, a BOM, Unicode tag characters ("ASCII
# smuggling"), a variation selector, a C1 CSI, DEL, backspace and a carriage return.
HIDDEN = {
    "esc": "\x1b", "bel": "\x07", "rlo": "\u202e", "pdf": "\u202c", "lri": "\u2066", "pdi": "\u2069",
    "zwsp": "\u200b", "zwj": "\u200d", "bom": "\ufeff", "tags": "\U000e0069\U000e0067\U000e006e",
    "vs": "\U000e0100", "csi": "\x9b", "del": "\x7f", "bs": "\x08", "cr": "\r",
}
HIDDEN_CHARS = set("".join(HIDDEN.values()))
PARTS = "osc52[\x1b]52;c;SGk=\x07] " + " ".join(f"{name}[{seq}]" for name, seq in HIDDEN.items())
CORE = f"Hotel ref pinned {PARTS} end"
NOTE = f"Hotel booking note {PARTS} end"
TAG = "trip\u202e\u200bX"


def _clean(text: str) -> str:
    """What every path must show of a memory: the gate's output (hooks and context also collapse
    runs of whitespace, which these texts do not have once cleaned)."""
    cleaned = prompt_safe(text)
    assert " ".join(cleaned.split()) == cleaned and not HIDDEN_CHARS & set(cleaned)
    return cleaned


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _pmem(args, stdin: str = "", env=None) -> str:
    r = subprocess.run([sys.executable, "-m", "pmem", *args], input=stdin, capture_output=True, text=True,
                       check=False, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    assert r.returncode == 0, r.stderr
    return r.stdout


def _hook_paths(cwd: Path, env=None, raw: dict | None = None) -> dict[str, str]:
    """Each client's hooks, in sessions of their own (`raw` gets what they printed, unparsed)."""
    out = {}
    tag = (env or {}).get("PMEM_SERVER", "")
    start = json.dumps({"session_id": "gate-start", "cwd": str(cwd), "source": "startup"})
    for client in ("claude-code", "codex", "gemini"):
        for event, stdin in (("session-start", start.replace("gate-start", f"{client}-start{tag}")),
                             ("user-prompt", json.dumps({"session_id": f"{client}-prompt{tag}", "cwd": str(cwd),
                                                         "prompt": "hotel booking note"}))):
            text = _pmem(["hook", client, event], stdin, env)
            if raw is not None:
                raw[f"hook {client} {event}"] = text
            if client != "claude-code":  # Codex and Gemini read JSON: the model gets additionalContext
                text = json.loads(text)["hookSpecificOutput"]["additionalContext"]
            out[f"hook {client} {event}"] = text
    return out


def _mcp_paths(home: Path, cwd: Path, core_id: str, note_id: str) -> dict[str, str]:
    pytest.importorskip("mcp.client.stdio", reason='the MCP SDK is an extra: pip install ".[mcp]"')
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "pmem", "mcp"], cwd=str(cwd),
        env={"PMEM_HOME": str(home), "PMEM_EMBED_MODEL": "fake-64", "PYTHONPATH": str(ROOT),
             "PMEM_MODELS_DIR": os.environ.get("PMEM_MODELS_DIR", "")})

    async def main():
        out = {}
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            calls = [("recall", {"topic": "hotel"}), ("search", {"query": "hotel"}),
                     ("remember", {"text": CORE}), ("pin", {"id": note_id}),
                     ("update", {"id": note_id, "text": NOTE + " corrected"}), ("forget", {"id": core_id})]
            for name, args in calls:
                r = await s.call_tool(name, args)
                assert not r.is_error, (name, r.content[0].text)
                out[f"mcp {name}"] = r.content[0].text
        return out

    return anyio.run(main)


def _llm_paths() -> dict[str, str]:
    llm = pytest.importorskip("llm", reason='llm is an extra: pip install ".[llm]"')
    from llm.plugins import load_plugins, pm

    from pmem.integrations import llm_plugin

    load_plugins()
    registered = not pm.is_registered(llm_plugin)
    if registered:
        pm.register(llm_plugin, name="pmem-gate-test")
    try:
        fragment = llm.get_fragment_loaders()["pmem"]("hotel")
        tools = {t.name: t for t in llm.get_tools()["Pmem"]().tools()}
        return {"llm fragment": str(fragment),
                "llm search": tools["Pmem_search"].implementation(query="hotel"),
                "llm recall": tools["Pmem_recall"].implementation(topic="hotel"),
                "llm remember": tools["Pmem_remember"].implementation(text=NOTE)}
    finally:
        if registered:
            pm.unregister(name="pmem-gate-test")


@pytest.mark.slow
def test_every_path_to_a_model_strips_the_same_hidden_characters(fake_config, pmem_home, tmp_path, monkeypatch):
    cwd = tmp_path / "not-a-project"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    with MemoryStore(config=fake_config) as s:
        core = s.add(CORE, pinned=True, tags=[TAG])[0]
        note = s.add(NOTE, tags=[TAG], source="import\u202e")[0]

    outputs: dict[str, str] = {}
    outputs.update(_hook_paths(cwd))
    outputs["context"] = _pmem(["context", "--scope", "global"])
    agents = cwd / "AGENTS.md"
    _pmem(["context", "--scope", "global", "--write", str(agents)])
    outputs["context --write"] = agents.read_text(encoding="utf-8")
    outputs.update(_llm_paths())  # before MCP, which forgets and corrects
    outputs["recall"] = _pmem(["recall", "hotel"])
    outputs.update(_mcp_paths(pmem_home, cwd, core.id, note.id))

    # Where each path shows a memory's text: the core memory at session start and in the
    # conventions file, the relevant note for a prompt, the one each tool was called about.
    shows = {"hook claude-code session-start": CORE, "hook codex session-start": CORE,
             "hook gemini session-start": CORE, "hook claude-code user-prompt": NOTE,
             "hook codex user-prompt": NOTE, "hook gemini user-prompt": NOTE, "context": CORE,
             "context --write": CORE, "llm fragment": NOTE, "llm search": NOTE, "llm recall": NOTE,
             "llm remember": NOTE, "recall": NOTE, "mcp recall": NOTE, "mcp search": NOTE,
             "mcp remember": CORE, "mcp pin": NOTE, "mcp update": NOTE + " corrected", "mcp forget": CORE}
    assert set(shows) == set(outputs)
    problems = _leaks(outputs, shows)
    assert not problems, "\n".join(problems)
    found = {r["id"]: r for r in json.loads(outputs["mcp search"])["results"]}
    assert found[note.id]["source"] == "import"  # every string of a result, not only the text


def _leaks(outputs: dict[str, str], shows: dict[str, str]) -> list[str]:
    """What each path got wrong: a hidden character let through, the memory not shown as the gate
    leaves it, a tag not gated (every path checked, so a failure lists all that leak)."""
    problems = []
    for path, text in outputs.items():
        try:
            strings = _strings(json.loads(text))  # a JSON result: the model reads its strings
        except ValueError:
            strings = [text]
        leaked = {name for name, seq in HIDDEN.items() if any(ch in s for ch in seq for s in [text, *strings])}
        if leaked:
            problems.append(f"{path} lets through {sorted(leaked)}")
        elif not any(_clean(shows[path]) in s for s in strings):
            problems.append(f"{path} does not show the memory as the gate leaves it: {text[:300]!r}")
        elif path not in ("context", "context --write", "mcp forget") and not any(
                prompt_safe(TAG) in s for s in strings):  # where tags are shown, gated too
            problems.append(f"{path}: no gated tag in {text[:300]!r}")
    return problems


@pytest.mark.model
@pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="needs Unix sockets")
def test_a_hook_served_by_pmem_serve_passes_the_same_gate(fake_config, monkeypatch, tmp_path):
    """The hook run whole in `pmem serve` (the real server, with the real default model loaded;
    the hook's settings name the fake one): the same bytes as in-process, gated the same."""
    home = Path(tempfile.mkdtemp(prefix="pmem-", dir="/tmp"))  # short: the socket's path must fit
    monkeypatch.setenv("PMEM_HOME", str(home))
    cwd = tmp_path / "not-a-project"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    try:
        with MemoryStore(config=fake_config) as s:
            s.add(CORE, pinned=True, tags=[TAG])
            s.add(NOTE, tags=[TAG], source="import\u202e")
        local: dict[str, str] = {}
        gated = _hook_paths(cwd, raw=local)
        server_env = {k: v for k, v in os.environ.items() if k != "PMEM_EMBED_MODEL"}
        subprocess.run([sys.executable, "-m", "pmem", "serve", "--detach", "--idle", "5m"], check=True,
                       capture_output=True, timeout=300, env={**server_env, "PYTHONPATH": str(ROOT)})
        served: dict[str, str] = {}
        assert _hook_paths(cwd, {"PMEM_SERVER": "auto"}, raw=served) == gated
        assert served == local
        shows = {path: NOTE if "user-prompt" in path else CORE for path in served}
        problems = _leaks(served, shows)
        assert not problems, "\n".join(problems)
        # and it was the server: a hook it answers opens no database in its own process
        r = subprocess.run([sys.executable, "-X", "importtime", "-m", "pmem", "hook", "codex", "user-prompt"],
                           input=json.dumps({"session_id": "x", "prompt": "hotel booking note"}), text=True,
                           capture_output=True, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(ROOT), "PMEM_SERVER": "auto"})
        assert "Hotel booking note" in r.stdout and "sqlean" not in r.stderr and "_sqlite3" not in r.stderr
    finally:
        from pmem.models import serve

        serve.stop(home / "pmem.sock", timeout=2.0)
        shutil.rmtree(home, ignore_errors=True)
