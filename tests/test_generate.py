"""The JSON generator: retries on bad output, one-line errors for bad models, the real GGUF."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pmem.errors import ExtractionError, ModelError
from pmem.generate import JsonGenerator, LlamaGenerator, load_generator


class Scripted(JsonGenerator):
    name = "scripted"

    def __init__(self, answers):
        self.answers = list(answers)
        self.seen = []

    def _complete(self, messages, schema, max_tokens, attempt):
        self.seen.append(max_tokens)
        return self.answers.pop(0)


def test_retries_then_returns_the_first_object():
    g = Scripted(['{"labels": [', '[1, 2]', '{"labels": ["event"]}'])
    assert g.generate_json([], {}, max_tokens=10) == {"labels": ["event"]}
    assert g.seen[1] > g.seen[0]  # a cut-off answer gets more room next time


def test_junk_after_all_tries_is_one_extraction_error():
    g = Scripted(["junk", "more junk", "still junk"])
    with pytest.raises(ExtractionError, match="scripted returned .* after 3 tries"):
        g.generate_json([], {})


def test_missing_model_file(tmp_path):
    with pytest.raises(ModelError, match="neither a known model"):
        load_generator(str(tmp_path / "none.gguf"))


def test_not_a_gguf(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"nope" * 10)
    with pytest.raises(ModelError, match="not a GGUF"):
        load_generator(str(bad))


def test_truncated_gguf_is_one_line(tmp_path):
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\x00" * 40)
    with pytest.raises(ModelError, match="cannot load cut.gguf") as info:
        LlamaGenerator(bad)
    assert "\n" not in str(info.value)


def test_import_pmem_generate_does_not_load_llama_cpp():
    code = "import pmem.generate, pmem.extract, sys; print('llama_cpp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.model
def test_real_model_answers_in_schema():
    g = load_generator("SmolLM2-135M-Instruct")
    assert g.name.startswith("SmolLM2") and not g.strong
    schema = {"type": "object", "properties": {"labels": {"type": "array", "items": {
        "type": "string", "enum": ["event", "plan"]}, "minItems": 3, "maxItems": 3}}, "required": ["labels"]}
    answer = g.generate_json([{"role": "user", "content": "Label: 1. I ran. 2. I will swim. 3. I ate."}], schema, 64)
    assert len(answer["labels"]) == 3 and set(answer["labels"]) <= {"event", "plan"}
    assert load_generator("SmolLM2-135M-Instruct") is g  # one instance per path


def test_unknown_extract_mode_is_a_usage_error(tmp_path):
    from pmem.errors import UsageError

    with pytest.raises(UsageError, match="extract_mode"):
        load_generator(str(tmp_path / "none.gguf"), threads=1, mode="sometimes")
