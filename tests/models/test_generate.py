"""The JSON generator: retries on bad output, one-line errors for bad models, the real GGUF."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pmem.errors import ExtractionError, ModelError
from pmem.models.generate import JsonGenerator, LlamaGenerator, load_generator


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


def test_a_loop_of_symbols_is_retried_with_more_room_then_named():
    from pmem.models.generate import Runaway

    class Looping(Scripted):
        def _complete(self, messages, schema, max_tokens, attempt):
            self.seen.append(max_tokens)
            raise Runaway("looped")

    g = Looping([])
    with pytest.raises(ExtractionError, match="scripted returned a loop of symbols after 3 tries"):
        g.generate_json([], {}, max_tokens=10)
    assert g.seen == [10, 15, 22]


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
    code = "import pmem.models.generate, pmem.extract, sys; print('llama_cpp' in sys.modules)"
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


def _capture_load_params(monkeypatch):
    """Record the model parameters each llama.cpp model load receives (the real load still runs)."""
    low = pytest.importorskip("llama_cpp").llama_cpp
    seen = []
    real = low.llama_model_load_from_file

    def load(path, params):
        seen.append({name: getattr(params, name) for name, _ in params._fields_ if name == "use_extra_bufts"})
        return real(path, params)

    monkeypatch.setattr(low, "llama_model_load_from_file", load)
    return seen


@pytest.mark.model
def test_the_chat_model_loads_without_extra_buffer_types(monkeypatch):
    """llama.cpp's extra buffer types hold the AMX kernels that crash native builds on some Xeons."""
    from pmem.models import provision
    from pmem.models.generate import LlamaGenerator
    from pmem.paths import models_dir

    seen = _capture_load_params(monkeypatch)
    path = provision.ensure_model("SmolLM2-135M-Instruct", models_dir(), progress=False)
    g = LlamaGenerator(path, threads=1)
    try:
        assert seen == [{"use_extra_bufts": False}]  # what llama.cpp's own load was given
        assert len(g.generate_json([{"role": "user", "content": "Is water wet?"}],
                                   {"type": "object", "properties": {"yes": {"type": "boolean"}},
                                    "required": ["yes"]}, 16)) == 1
    finally:
        g.close()
    # and the wrapper is gone once the load is over: other code in this process gets llama.cpp's own
    import llama_cpp

    assert llama_cpp.llama_cpp.llama_model_default_params().use_extra_bufts is True


def test_a_llama_cpp_without_the_switch_loads_as_it_is(monkeypatch):
    import ctypes

    from pmem.models import loading

    class Params(ctypes.Structure):
        _fields_ = [("n_gpu_layers", ctypes.c_int32)]

    class Low:
        llama_model_params = Params

        @staticmethod
        def llama_model_default_params():
            return Params()

    made = []

    class Lib:
        llama_cpp = Low

        @staticmethod
        def Llama(**kwargs):
            made.append(Low.llama_model_default_params())
            return kwargs

    assert loading.llama(Lib, model_path="x") == {"model_path": "x"}
    assert not hasattr(made[0], "use_extra_bufts")


def test_readme_and_ci_install_the_same_way_and_the_last_resort_is_the_one_pmem_names():
    """CI installs exactly as README says (no CMAKE_ARGS); the rebuild the install page keeps as a
    last resort (docs/guide/install.md) is the command the crash message gives."""
    import re
    from pathlib import Path

    from pmem.models.generate import REBUILD

    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text(encoding="utf-8")
    ci = (root / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r'^python -m pip install "\.\[dev,mcp,llm\]"$', ci, re.M)
    assert not re.search(r"^\s*(export )?CMAKE_ARGS=", ci, re.M)
    assert "unset CMAKE_ARGS" in ci
    assert 'pip install ".[dev,mcp,llm]"' in readme and "python -m pytest" in readme
    install = (root / "docs" / "guide" / "install.md").read_text(encoding="utf-8")
    assert " ".join(install.replace("\\\n", " ").split()).count(" ".join(REBUILD.split())) == 1
