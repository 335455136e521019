"""pmem.leanjson gives what the json package gives, for what a served hook sends and reads, and
imports neither json nor re."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pmem import leanjson

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = "osc52[\x1b]52;c;SGk=\x07] rlo[\u202e] zwsp[\u200b] tags[\U000e0069] nul[\x00] \"q\" \\b\\ é ünï 日本 😀"
VALUES = [
    {}, [], "", HOSTILE, {"prompt": HOSTILE, "session_id": "s1", "n": 3, "x": -0.0, "f": 1e-7, "big": 2**70},
    {"v": 2, "op": "hook", "env": {"PMEM_HOOK_TIMEOUT": "3"}, "deadline": 1764650000.123456, "ok": True,
     "no": False, "none": None, "list": [1, 2.5, "three", [], {}]},
    {"hookSpecificOutput": {"hookEventName": "BeforeAgent", "additionalContext": HOSTILE}},
    float("inf"), float("-inf"), 1.5, 0, True, None,
]


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("ascii_only", [True, False])
def test_dumps_writes_what_json_dumps_writes(value, ascii_only):
    assert leanjson.dumps(value, ensure_ascii=ascii_only) == json.dumps(value, ensure_ascii=ascii_only)


def test_dumps_refuses_what_it_does_not_write():
    for value in ({1: "int key"}, {"set": {1}}, object()):
        with pytest.raises(TypeError):
            leanjson.dumps(value)


@pytest.mark.parametrize("text", [json.dumps(v) for v in VALUES] + [
    ' \n {"a": [1, 2, {"b": null}]} \r\t', "NaN", "-Infinity", '"\\ud83d\\ude00"', "1E400", "-0", "[1e5, 2E-3]"])
def test_loads_reads_what_json_loads_reads(text):
    assert repr(leanjson.loads(text)) == repr(json.loads(text))


@pytest.mark.parametrize("text", ["", "  ", "{", '{"a": 1} x', "[1,]", "{'a': 1}", '"\x01"', "tru", "01"])
def test_loads_refuses_what_json_refuses(text):
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        leanjson.loads(text)


def test_raw_decode_is_the_decoders():
    text = '{"prompt": "a } inside"} and what follows'
    assert leanjson.raw_decode(text) == json.JSONDecoder().raw_decode(text)
    assert leanjson.raw_decode("xx[1, 2] tail", 2) == json.JSONDecoder().raw_decode("xx[1, 2] tail", 2)
    with pytest.raises(ValueError):
        leanjson.raw_decode(" [1]")  # like the decoder's: no whitespace skipped
    with pytest.raises(RecursionError):
        leanjson.raw_decode("[" * 100_000)


def test_it_imports_neither_json_nor_re():
    code = ("import sys; from pmem import leanjson; leanjson.loads(leanjson.dumps({'a': [1, 'b']})); "
            "print(' '.join(m for m in ('json', 're', 'enum') if m in sys.modules))")
    bare = "import sys; print(' '.join(m for m in ('json', 're', 'enum') if m in sys.modules))"
    env = {"PYTHONPATH": str(ROOT), "PATH": ""}
    base = subprocess.run([sys.executable, "-c", bare], capture_output=True, text=True, env=env).stdout
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.split() == base.split()
