"""Settings: typed and frozen, validated once, written privately and atomically, repairable."""

from __future__ import annotations

import dataclasses
import stat

import pytest

from pmem import config
from pmem.errors import UsageError


def test_every_setting_is_a_typed_documented_field():
    s = config.Settings()
    assert config.KEYS == tuple(s.values)
    for f in dataclasses.fields(config.Settings):
        if f.metadata.get("internal"):
            continue
        assert f.metadata["help"] and type(getattr(s, f.name)).__name__ == f.type
    assert config.CHOICES == {"extract_mode": ("auto", "label", "rewrite"), "server": ("auto", "always", "never"),
                              "sync_auto": ("off", "on"), "embed_english": ("minilm", "none"),
                              "embed_bulk": ("int8", "int8-only", "float32")}
    assert config.Config is config.Settings
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.threads = 3  # type: ignore[misc]


def test_load_layers_defaults_file_and_environment(pmem_home, monkeypatch):
    path = config.set_value("recall_budget", "800")
    monkeypatch.setenv("PMEM_THREADS", "2")
    s = config.load()
    assert (s.recall_budget, s.threads, s.search_limit) == (800, 2, 10)
    assert s.origins["recall_budget"] == str(path) and s.origins["threads"] == "PMEM_THREADS"
    assert s.origins["search_limit"] == "default" and s.path == path


def test_with_values_validates_and_records_the_origin():
    s = config.Settings().with_values(merge_threshold=0.7)
    assert s.merge_threshold == 0.7 and s.origins["merge_threshold"] == "override"
    with pytest.raises(UsageError, match="server must be one of"):
        s.with_values(server="sometimes")


@pytest.mark.parametrize("key, value, message", [
    ("chat_model", "a\nb", "control characters"),
    ("embed_model", "x\x1b[2Jy", "control characters"),
    ("chat_model", "a\u0085b", "control characters"),
    ("recall_budget", "lots", "must be a whole number"),
    ("recall_budget", "-5", "between"),
    ("recall_budget", "99999999999999999999", "between"),
    ("dedup_lexical", "1.5", "between"),
    ("dedup_lexical", "nan", "between"),
    ("server", "sometimes", "must be one of"),
    ("nonsense", "1", "unknown setting"),
])
def test_bad_values_are_refused_and_the_file_is_untouched(pmem_home, key, value, message):
    path = config.set_value("search_limit", "7")
    before = path.read_bytes()
    with pytest.raises(UsageError, match=message):
        config.set_value(key, value)
    assert path.read_bytes() == before and config.load().search_limit == 7


def test_bad_values_in_the_environment_are_refused(monkeypatch):
    monkeypatch.setenv("PMEM_CHAT_MODEL", "a\nb")
    with pytest.raises(UsageError, match="PMEM_CHAT_MODEL: chat_model may not contain control characters"):
        config.load()


def test_config_file_is_private_and_written_atomically(pmem_home):
    path = config.set_value("recall_budget", "800")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.chmod(0o644)  # as older versions wrote it
    config.set_value("search_limit", "5")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in path.parent.iterdir() if "config" in p.name) == ["config.toml"]
    assert config.load().values | {"recall_budget": 800, "search_limit": 5} == config.load().values


def test_set_repairs_a_file_that_does_not_parse(pmem_home):
    path = config.paths.config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    # What `config set chat_model "a<newline>b"` used to write, next to a good line.
    path.write_text('recall_budget = 800\nchat_model = "a\nb"\n', encoding="utf-8")
    with pytest.raises(UsageError, match="cannot read config"):
        config.load()
    notes: list[str] = []
    config.set_value("chat_model", "SmolLM2-135M-Instruct", note=notes.append)
    s = config.load()
    assert (s.recall_budget, s.chat_model) == (800, "SmolLM2-135M-Instruct")
    assert notes and "did not parse" in notes[0] and "kept there as comments" in notes[0]
    text = path.read_text(encoding="utf-8")
    assert '# chat_model = "a' in text and "# b\"" in text  # kept, as comments


def test_set_moves_invalid_settings_of_a_parsing_file_to_comments(pmem_home, monkeypatch):
    monkeypatch.delenv("PMEM_SERVER")  # the tests' own "never": here the file's line is what counts
    path = config.paths.config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('server = "sometimes"\nchat_model = "a\\nb"\nsearch_limit = 3\n', encoding="utf-8")
    notes: list[str] = []
    config.set_value("recall_budget", "900", note=notes.append)
    s = config.load()
    assert (s.server, s.chat_model, s.search_limit, s.recall_budget) == ("auto", "SmolLM2-135M-Instruct", 3, 900)
    assert "held invalid settings: 2 line(s)" in notes[0]
    assert "\n# server = 'sometimes'" in path.read_text(encoding="utf-8")


def test_cli_refuses_a_newline_and_repairs_a_broken_file(pmem_home):
    from typer.testing import CliRunner

    from pmem.cli.app import app

    runner = CliRunner()
    bad = runner.invoke(app, ["config", "set", "chat_model", "a\nb"])
    assert bad.exit_code == 2 and "control characters" in bad.output and "Traceback" not in bad.output
    path = config.paths.config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('chat_model = "a\nb"\n', encoding="utf-8")
    assert runner.invoke(app, ["config"]).exit_code == 2
    fixed = runner.invoke(app, ["config", "set", "chat_model", "SmolLM2-135M-Instruct"])
    assert fixed.exit_code == 0, fixed.output
    assert runner.invoke(app, ["config", "get", "chat_model"]).output.strip() == "SmolLM2-135M-Instruct"
