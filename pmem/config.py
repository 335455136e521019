"""Settings: built-in defaults < config.toml < PMEM_* environment variables.

Every key is listed in DEFAULTS with its type; `pmem config` shows the effective values and
where each one came from.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import paths
from .errors import UsageError



def _toml():
    """tomllib, imported only when a config file exists (it costs ~8 ms at start-up)."""
    try:  # Python 3.11+
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    return tomllib

# key -> (default, help). The type of the default is the type of the setting.
DEFAULTS: dict[str, tuple[Any, str]] = {
    "embed_model": ("all-MiniLM-L6-v2", "embedding model: a known name or a path to a GGUF file"),
    "chat_model": ("SmolLM2-135M-Instruct", "chat model for extract and dream: a known name or a GGUF path"),
    "extract_mode": ("auto", "how the chat model extracts: label (rules choose sentences, the model labels them), "
                             "rewrite (it chooses, rewrites and judges conflicts), auto (rewrite from 1B parameters)"),
    "recall_budget": (1500, "default token budget of `pmem recall`"),
    "search_limit": (10, "default number of results of `pmem search`"),
    "server": ("auto", "use a running `pmem serve` to skip loading the embedding model: auto, "
                       "start (also start one when none runs; it exits after 30 idle minutes) or off"),
    "threads": (0, "CPU threads for models (0: the idle cores, from the load average; at least half, at most 8)"),
    "dedup_threshold": (0.92, "cosine similarity above which dream treats two memories as duplicates"),
    "dedup_lexical": (0.5, "word-overlap (Jaccard) also required for a duplicate"),
    "merge_threshold": (0.80, "cosine similarity above which dream proposes merging related memories"),
    "compress_after_days": (30, "episodic memories older than this may be compressed by dream"),
    "purge_grace_days": (30, "expired memories older than this may be purged by `dream --purge`"),
    "backup_keep": (5, "how many database backups dream keeps"),
    "extract_min_support": (0.6, "share of a fact's content words that must occur in its source"),
}


# Settings that take one of a few words.
CHOICES: dict[str, tuple[str, ...]] = {
    "extract_mode": ("auto", "label", "rewrite"),
    "server": ("auto", "start", "off"),
}


def env_name(key: str) -> str:
    return "PMEM_" + key.upper()


@dataclass
class Config:
    values: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    path: Path | None = None

    def __getattr__(self, key: str) -> Any:
        try:
            return self.values[key]
        except KeyError:
            raise AttributeError(key) from None

    def get(self, key: str) -> Any:
        return self.values[key]


def _coerce(key: str, value: Any, origin: str) -> Any:
    default = DEFAULTS[key][0]
    kind = type(default)
    try:
        if kind is bool:
            if isinstance(value, str):
                return value.strip().lower() in ("1", "true", "yes", "on")
            return bool(value)
        if kind is int:
            return int(value)
        if kind is float:
            return float(value)
        text = str(value)
        if key in CHOICES and text not in CHOICES[key]:
            raise UsageError(f"{origin}: {key} must be one of {', '.join(CHOICES[key])}, got {text!r}")
        return text
    except (TypeError, ValueError):
        raise UsageError(f"{origin}: {key} must be a {kind.__name__}, got {value!r}") from None


def load(path: Path | None = None, environ: dict[str, str] | None = None) -> Config:
    environ = os.environ if environ is None else environ
    path = path or paths.config_path()
    cfg = Config(path=path)
    for key, (default, _) in DEFAULTS.items():
        cfg.values[key] = default
        cfg.origins[key] = "default"
    if path.exists():
        tomllib = _toml()
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError) as exc:
            raise UsageError(f"cannot read config {path}: {exc}") from None
        for key, value in data.items():
            if key not in DEFAULTS:
                raise UsageError(f"{path}: unknown setting {key!r} (see `pmem config`)")
            cfg.values[key] = _coerce(key, value, str(path))
            cfg.origins[key] = str(path)
    for key in DEFAULTS:
        name = env_name(key)
        if name in environ and environ[name] != "":
            cfg.values[key] = _coerce(key, environ[name], name)
            cfg.origins[key] = name
    return cfg


def set_value(key: str, value: str, path: Path | None = None) -> Path:
    """Write one setting to config.toml, keeping the others."""
    if key not in DEFAULTS:
        raise UsageError(f"unknown setting {key!r}; known: {', '.join(DEFAULTS)}")
    path = path or paths.config_path()
    coerced = _coerce(key, value, "value")
    data: dict[str, Any] = {}
    if path.exists():
        data = _toml().loads(path.read_text(encoding="utf-8"))
    data[key] = coerced
    paths.ensure_private_dir(path.parent)
    lines = []
    for k, v in data.items():
        if isinstance(v, bool):
            lines.append(f"{k} = {'true' if v else 'false'}")
        elif isinstance(v, (int, float)):
            lines.append(f"{k} = {v}")
        else:
            escaped = str(v).replace("\\", "\\\\").replace('"', '\\"')
            lines.append(f'{k} = "{escaped}"')
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
