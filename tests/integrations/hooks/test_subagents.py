"""SubagentStart (Claude Code, Codex): a subagent, which starts with a context of its own and no
SessionStart, gets what a session start gives, in the host's JSON, checked against the hosts'
own schemas (tests/data/hosts/); and Codex's PreCompact, which pmem leaves alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pmem.integrations import clients, hooks
from pmem.service import MemoryStore

ROOT = Path(__file__).resolve().parents[3]
HOSTS = ROOT / "tests" / "data" / "hosts"


def validate(schema_name: str, data) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((HOSTS / schema_name).read_text())
    jsonschema.validators.validator_for(schema)(schema).validate(data)


def run(client, event, payload, cfg) -> str:
    return hooks.run_hook(client, event, json.dumps(payload), lambda: MemoryStore(config=cfg),
                          make_filter=lambda data: hooks.hook_filter(data))


def context_of(out: str, event_name: str) -> str:
    data = json.loads(out)
    assert data["hookSpecificOutput"]["hookEventName"] == event_name
    return data["hookSpecificOutput"]["additionalContext"]


def claude_subagent(project, agent="a-1", session="parent"):
    payload = {"session_id": session, "transcript_path": "/tmp/t.jsonl", "cwd": str(project),
               "permission_mode": "default", "hook_event_name": "SubagentStart", "agent_id": agent,
               "agent_type": "general-purpose"}
    validate("claude-code-subagent-start.input.schema.json", payload)
    return payload


def codex_subagent(project, agent="019a-child", session="019a-parent"):
    payload = {"session_id": session, "turn_id": "t3", "transcript_path": None, "cwd": str(project),
               "hook_event_name": "SubagentStart", "model": "gpt-5", "permission_mode": "default",
               "agent_id": agent, "agent_type": "default"}
    validate("codex-subagent-start.input.schema.json", payload)
    return payload


def test_claude_code_subagent_gets_the_session_start_block_as_json(seeded, fake_config, project):
    out = run("claude-code", "subagent-start", claude_subagent(project), fake_config)
    validate("claude-code-subagent-start.output.schema.json", json.loads(out))  # plain text would be dropped
    block = context_of(out, "SubagentStart")
    start = run("claude-code", "session-start", {"session_id": "other", "cwd": str(project), "source": "startup"},
                fake_config)
    assert block == start  # what the parent got at its start
    assert "vegetarian" in block and "tomato beds" in block


def test_codex_subagent_output_passes_codex_schema(seeded, fake_config, project):
    out = run("codex", "subagent-start", codex_subagent(project), fake_config)
    validate("codex-subagent-start.output.schema.json", json.loads(out))
    assert "vegetarian" in context_of(out, "SubagentStart")


def test_a_subagent_neither_resets_nor_inherits_the_parents_session(seeded, fake_config, project):
    def prompt(text):
        return run("claude-code", "user-prompt", {"session_id": "parent", "cwd": str(project), "prompt": text,
                                                  "hook_event_name": "UserPromptSubmit"}, fake_config)

    start = run("claude-code", "session-start", {"session_id": "parent", "cwd": str(project), "source": "startup"},
                fake_config)
    assert "vegetarian" in start and "pasta with friends" in start
    # the parent was given these: a subagent, whose context is its own, still gets them
    first = context_of(run("claude-code", "subagent-start", claude_subagent(project, "a-1"), fake_config),
                       "SubagentStart")
    second = context_of(run("claude-code", "subagent-start", claude_subagent(project, "a-2"), fake_config),
                        "SubagentStart")
    assert first == second == start
    # and the parent's session file is as it was (not reset): what it was given is not given again
    assert "pasta with friends" not in prompt("dinner on Fridays?")
    assert "pasta with friends" in run("claude-code", "user-prompt", {"session_id": "fresh", "cwd": str(project),
                                                                      "prompt": "dinner on Fridays?"}, fake_config)


def test_nothing_to_give_prints_nothing(fake_config, pmem_home, project):
    assert run("claude-code", "subagent-start", claude_subagent(project), fake_config) == ""
    assert run("codex", "subagent-start", codex_subagent(project), fake_config) == ""


def test_installed_for_claude_code_and_codex_only():
    assert hooks.EVENT_NAMES["claude-code"]["subagent-start"] == "SubagentStart"
    assert hooks.EVENT_NAMES["codex"]["subagent-start"] == "SubagentStart"
    assert "subagent-start" not in hooks.EVENT_NAMES["gemini"]


def test_codex_precompact_is_left_alone_because_its_output_cannot_reach_the_model():
    """Codex offers PreCompact (its hooks.json schema), but what a PreCompact hook prints has no
    additionalContext (its output schema): memories given there would be lost. pmem resets its
    session file after the compaction (PostCompact) instead, and the memories come back with the
    next prompt. Should Codex ever accept context there, this test says to look again."""
    codex = json.loads((HOSTS / "codex-hooks.schema.json").read_text())
    assert "PreCompact" in codex["properties"]["hooks"]["properties"]
    output = json.loads((HOSTS / "codex-pre-compact.output.schema.json").read_text())
    assert output["additionalProperties"] is False
    assert "hookSpecificOutput" not in output["properties"] and "additionalContext" not in json.dumps(output)
    assert "PreCompact" not in hooks.EVENT_NAMES["codex"].values()
    assert hooks.EVENT_NAMES["codex"]["compact"] == "PostCompact"
    validate("codex-pre-compact.input.schema.json",  # what Codex would send: the schema file is sound
             {"session_id": "s", "turn_id": "t", "transcript_path": None, "cwd": "/", "hook_event_name": "PreCompact",
              "model": "gpt-5", "trigger": "auto"})


@pytest.mark.parametrize("client", ["claude-code", "codex"])
def test_cli_subagent_start_prints_the_hosts_json(client, seeded, project):
    payload = claude_subagent(project) if client == "claude-code" else codex_subagent(project)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PMEM_EMBED_MODEL": "fake-64"}
    r = subprocess.run([sys.executable, "-m", "pmem", "hook", client, "subagent-start"], input=json.dumps(payload),
                       capture_output=True, text=True, env=env, timeout=60, check=False)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    schema = "claude-code-subagent-start" if client == "claude-code" else "codex-subagent-start"
    validate(f"{schema}.output.schema.json", json.loads(r.stdout))
    assert "vegetarian" in context_of(r.stdout, "SubagentStart")


def test_settings_name_the_new_hook(tmp_path):
    for client in ("claude-code", "codex"):
        clients.install_hooks(client, program="pmem", home=tmp_path)
        data = json.loads(clients.settings_path(client, home=tmp_path).read_text())
        assert data["hooks"]["SubagentStart"][0]["hooks"][0]["command"] == f"pmem hook {client} subagent-start"
