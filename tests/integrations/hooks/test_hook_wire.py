"""What a served hook's process decides without config.py: the two settings it reads itself (the
same values config.load gives, or "ask config.load"), the variables it sends, its output, and its
stdin read by a deadline without a thread."""

from __future__ import annotations

import dataclasses
import json
import os
import time

import pytest

from pmem import config
from pmem.errors import UsageError
from pmem.integrations import hook_wire


def test_its_names_are_configs():
    field = {f.name: f for f in dataclasses.fields(config.Settings)}  # each setting's documented bounds
    assert hook_wire.SETTINGS_ENV == tuple(config.env_name(k) for k in config.KEYS)
    assert hook_wire.SERVER_DEFAULT == config.DEFAULTS["server"][0]
    assert hook_wire.SERVER_CHOICES == config.CHOICES["server"]
    assert hook_wire.SERVER_ALIASES == field["server"].metadata["aliases"]
    assert hook_wire.TIMEOUT_DEFAULT == config.DEFAULTS["hook_timeout"][0]
    meta = field["hook_timeout"].metadata
    assert hook_wire.TIMEOUT_RANGE == (meta["low"], meta["high"])


FILES = [None, "", "hook_budget = 5000\n", 'embed_model = "fake-64"\nthreads = 2\n', 'server = "never"\n',
         'server = "always"\nhook_timeout = 2.5\n', "hook_timeout = 1\n", '"ser\\u0076er" = "never"\n',
         "server = 5\n", "not toml at all [\n", 'sync_auto = "on"  # no server here\n']
ENVS = [{}, {"PMEM_SERVER": "never"}, {"PMEM_SERVER": "off"}, {"PMEM_SERVER": "start"}, {"PMEM_SERVER": "bogus"},
        {"PMEM_HOOK_TIMEOUT": " 2.5 "}, {"PMEM_HOOK_TIMEOUT": "0.05"}, {"PMEM_HOOK_TIMEOUT": "nan"},
        {"PMEM_HOOK_TIMEOUT": "1e1"}, {"PMEM_HOOK_TIMEOUT": "soon"},
        {"PMEM_SERVER": "always", "PMEM_HOOK_TIMEOUT": "9"}, {"PMEM_SERVER": "", "PMEM_HOOK_TIMEOUT": ""}]


@pytest.mark.parametrize("text", FILES)
@pytest.mark.parametrize("env", ENVS)
def test_choose_gives_what_config_load_gives_or_leaves_it_to_it(pmem_home, monkeypatch, text, env):
    pmem_home.mkdir(parents=True, exist_ok=True)
    monkeypatch.delenv("PMEM_SERVER", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if text is not None:
        (pmem_home / "config.toml").write_text(text)
    chosen = hook_wire.choose()
    try:
        cfg = config.load()
    except UsageError:
        cfg = None
    if chosen is not None:
        # what the process decides alone is what config.load says, or config.load fails (and the
        # server, and then the hook in-process, say so: the process decided nothing wrong)
        assert cfg is None or chosen == (cfg.server, cfg.hook_timeout)
    else:
        mentions = text is not None and ("server" in text or "hook_timeout" in text or "\\" in text)
        assert cfg is None or mentions, "only config.load can tell, yet it found nothing to tell"


def test_the_usual_homes_need_no_config_load(pmem_home, monkeypatch):
    monkeypatch.delenv("PMEM_SERVER", raising=False)
    assert hook_wire.choose() == ("auto", 4.0)  # no config.toml
    pmem_home.mkdir(parents=True, exist_ok=True)
    (pmem_home / "config.toml").write_text('hook_budget = 3000\nembed_english = "none"\n')
    assert hook_wire.choose() == ("auto", 4.0)
    monkeypatch.setenv("PMEM_HOOK_TIMEOUT", "2")
    assert hook_wire.choose() == ("auto", 2.0)


def test_only_the_settings_variables_are_sent(monkeypatch):
    monkeypatch.setenv("PMEM_HOOK_BUDGET", "3000")
    monkeypatch.setenv("PMEM_SYNC_PASSPHRASE", "secret")
    monkeypatch.setenv("PMEM_THREADS", "")
    sent = hook_wire.settings_env()
    assert sent["PMEM_HOOK_BUDGET"] == "3000" and "PMEM_SYNC_PASSPHRASE" not in sent and "PMEM_THREADS" not in sent
    assert set(sent) <= {config.env_name(k) for k in config.KEYS}


HOSTILE = "Hotel osc52[\x1b]52;c;SGk=\x07] rlo[\u202e] \"quoted\" \\ é 日本"


@pytest.mark.parametrize("client", hook_wire.CLIENTS)
def test_the_output_is_json_dumps(client):
    for event in hook_wire.EVENT_NAMES[client]:
        out = hook_wire.format_output(client, event, HOSTILE)
        if client == "claude-code" and event != "subagent-start":  # plain stdout is context there only
            assert out == HOSTILE
        else:
            assert out == json.dumps({"hookSpecificOutput": {"hookEventName": hook_wire.EVENT_NAMES[client][event],
                                                             "additionalContext": HOSTILE}}, ensure_ascii=False)
    assert hook_wire.format_output(client, "user-prompt", "") == ("{}" if client == "gemini" else "")


@pytest.fixture
def stdin_pipe():
    """fd 0 replaced by a pipe's reading end; yields the writing end."""
    read, write = os.pipe()
    saved = os.dup(0)
    os.dup2(read, 0)
    os.close(read)
    try:
        yield write
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        try:
            os.close(write)
        except OSError:
            pass


def test_stdin_is_read_to_its_first_json_object_by_a_deadline(stdin_pipe):
    os.write(stdin_pipe, b'{"prompt": "a } inside", ')
    os.write(stdin_pipe, b'"nested": {"x": [1]}}\n')
    text = hook_wire.read_stdin(time.monotonic() + 5)  # the pipe stays open: read to the object's end
    assert text is not None and json.loads(text)["prompt"] == "a } inside"


def test_a_silent_open_stdin_ends_at_the_deadline(stdin_pipe):
    started = time.monotonic()
    assert hook_wire.read_stdin(started + 0.3) is None
    assert 0.25 < time.monotonic() - started < 2
    os.write(stdin_pipe, b"plan dinner for six")
    os.close(stdin_pipe)
    assert hook_wire.read_stdin(time.monotonic() + 5) == "plan dinner for six"  # typed by hand: to EOF
