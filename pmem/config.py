"""Settings: built-in defaults < config.toml < PMEM_* environment variables.

`Settings` is a frozen dataclass: one typed field per setting, its help text and allowed values
in the field's metadata. Only the store and the CLI call `load()`; everything else receives the
Settings it needs (a store passes its own `store.config`). `pmem config` shows the effective
values and where each came from (`Settings.origins`).

Values are validated once, here: by type, by range, by their allowed words, and strings may hold
no control characters (a newline in config.toml made a file no command could read).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping

from . import paths
from .errors import UsageError


def _toml():
    """tomllib, imported only when a config file exists (it costs ~8 ms at start-up)."""
    try:  # Python 3.11+
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    return tomllib


def _setting(default: Any, help: str, *, choices: tuple[str, ...] | None = None,
             low: float | None = None, high: float | None = None, aliases: dict[str, str] | None = None) -> Any:
    return field(default=default, metadata={"help": help, "choices": choices, "low": low, "high": high,
                                            "aliases": aliases or {}})


_INT_MAX = 2**31 - 1  # what the model and SQLite layers below accept
HOOK_BUDGET_MAX = 9000  # Claude Code puts hook output over 10,000 characters in a file, and the model sees a preview


@dataclass(frozen=True, eq=False)  # no generated __eq__/__hash__: ~1 ms less at every start
class Settings:
    """pmem's settings, typed. Build one with `load()` (defaults, config.toml, environment) or
    `Settings()` (defaults only); derive a changed copy with `dataclasses.replace` or `with_values`."""

    embed_model: str = _setting("multilingual-e5-small-symmetric",
                                "embedding model: a known name or a path to a GGUF file (unset: a store keeps the "
                                "known model its vectors come from until `pmem reindex`)")
    embed_english: str = _setting(
        "minilm", "a second embedding model for English memories, under multilingual-e5-small-symmetric: "
                  "minilm (all-MiniLM-L6-v2: search scores a pair of an English question and an English "
                  "memory by both models; `pmem reindex` fills it for older memories) or none",
        choices=("minilm", "none"))
    embed_bulk: str = _setting(
        "int8", "how an import, a join's fill or a reindex runs multilingual-e5-small and English memories' "
                "all-MiniLM-L6-v2: int8 (ONNX Runtime's int8 products where installed, 2-4 times as fast; each "
                "vector within cosine 0.998 of the one a search computes, then made again in float32 by the "
                "background fill that follows, so the store ends as float32 would have made it), int8-only (the "
                "same, kept in int8: no second pass; two memories a question finds almost equally near may trade "
                "places) or float32 (the numbers a search and `pmem add` compute, at once)",
        choices=("int8", "int8-only", "float32"))
    chat_model: str = _setting("SmolLM2-135M-Instruct",
                               "chat model for extract and dream: a known name or a GGUF path")
    extract_mode: str = _setting(
        "auto", "how the chat model extracts: label (rules choose sentences, the model labels them), "
                "rewrite (it chooses, rewrites and judges conflicts), auto (rewrite from 1B parameters)",
        choices=("auto", "label", "rewrite"))
    recall_budget: int = _setting(1500, "default token budget of `pmem recall`", low=0, high=_INT_MAX)
    recall_neighbours: int = _setting(1, "thread neighbours on each side that `pmem recall` brings with each of "
                                         "its best three matches, in the budget the matches leave",
                                         low=0, high=_INT_MAX)
    recall_min_score: float = _setting(0.02, "score (0..1, as `pmem search` shows it) below which `pmem recall` "
                                             "leaves a meaning-only match (no query word) out as noise",
                                       low=0.0, high=1.0)
    search_limit: int = _setting(10, "default number of results of `pmem search`", low=0, high=_INT_MAX)
    server: str = _setting(
        "auto", "keep the embedding model loaded in a `pmem serve` process: auto (use it; when none runs, "
                "start one for the next commands, which leaves after server_idle_minutes), always (the "
                "same, and it stays until `pmem serve --stop`) or never (\"off\" and \"start\" are "
                "older names for never and auto)",
        choices=("auto", "always", "never"), aliases={"off": "never", "start": "auto"})
    server_idle_minutes: float = _setting(
        15.0, "minutes without a request after which a server that a command started leaves "
              "(server = auto)", low=0.01, high=10_000_000.0)
    threads: int = _setting(0, "CPU threads for models (0: the cores idle now; at least half, at most 8)",
                            low=0, high=1024)
    dedup_threshold: float = _setting(0.86, "cosine similarity above which dream treats two memories as "
                                            "duplicates (unset: the embedding model's own, 0.86 for MiniLM, "
                                            "0.94 for e5)", low=-1.0, high=1.0)
    dedup_lexical: float = _setting(0.3, "word-overlap (Jaccard of stems, names and numbers aside) also "
                                         "required for a duplicate", low=0.0, high=1.0)
    merge_threshold: float = _setting(0.80, "cosine similarity above which dream proposes merging related "
                                            "memories (unset: the embedding model's own, 0.80 for MiniLM, "
                                            "0.946 for e5)", low=-1.0, high=1.0)
    compress_after_days: int = _setting(30, "episodic memories older than this may be compressed by dream",
                                        low=0, high=1_000_000)
    purge_grace_days: int = _setting(30, "expired memories older than this may be purged by `dream --purge`",
                                     low=0, high=1_000_000)
    backup_keep: int = _setting(5, "how many database backups dream keeps", low=0, high=_INT_MAX)
    extract_min_support: float = _setting(0.6, "share of a fact's content words that must occur in its source",
                                          low=0.0, high=1.0)
    hook_budget: int = _setting(4000, "characters an agent hook (`pmem hook`) prints at most (at most 9000: "
                                      "Claude Code shows hook output over 10,000 characters only as a preview)",
                                low=200, high=HOOK_BUDGET_MAX)
    hook_timeout: float = _setting(4.0, "seconds an agent hook may take; past them it prints nothing",
                                   low=0.1, high=600.0)
    sync_auto: str = _setting("off", "after a command that changed memories, run `pmem sync` in the background "
                                     "(detached, a few seconds later, one for a run of commands; its errors show "
                                     "in `pmem sync status`): on or off", choices=("off", "on"))

    # Not settings: where they were read from.
    path: Path | None = field(default=None, compare=False, repr=False, metadata={"internal": True})
    origins: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False,
                                       metadata={"internal": True})

    @property
    def values(self) -> dict[str, Any]:
        """Every setting's value, in declaration order (a copy: Settings cannot be changed)."""
        return {k: getattr(self, k) for k in KEYS}

    def get(self, key: str) -> Any:
        """The value of setting `key`; KeyError for an unknown one."""
        if key not in KEYS:
            raise KeyError(key)
        return getattr(self, key)

    def with_values(self, origin: str = "override", **values: Any) -> "Settings":
        """A copy with some settings changed, validated like a config file's (UsageError)."""
        checked = {k: coerce(k, v, origin) for k, v in values.items()}
        origins = {**self.origins, **{k: origin for k in values}}
        return replace(self, **checked, origins=MappingProxyType(origins))


Config = Settings  # the name pmem.__init__ and older callers use

_FIELDS = {f.name: f for f in fields(Settings) if not f.metadata.get("internal")}
KEYS: tuple[str, ...] = tuple(_FIELDS)
_TYPES: dict[str, type] = {"str": str, "int": int, "float": float}
_TYPE_NAMES = {int: "whole number", float: "number"}

# key -> (default, help), and key -> allowed words: kept for the CLI's `pmem config`.
DEFAULTS: dict[str, tuple[Any, str]] = {k: (f.default, f.metadata["help"]) for k, f in _FIELDS.items()}
CHOICES: dict[str, tuple[str, ...]] = {k: f.metadata["choices"] for k, f in _FIELDS.items()
                                       if f.metadata["choices"]}


def is_set(settings: Settings, key: str) -> bool:
    """Whether the user chose `key` (config file, environment, an override), or only the default
    applies. A Settings built in code counts as chosen where its value is not the default."""
    origin = (getattr(settings, "origins", None) or {}).get(key, "default")
    return origin != "default" or settings.get(key) != DEFAULTS[key][0]


def env_name(key: str) -> str:
    """The environment variable that overrides `key` (PMEM_ and the key in capitals)."""
    return "PMEM_" + key.upper()


def help_text(key: str) -> str:
    """The help text of setting `key`."""
    return _FIELDS[key].metadata["help"]


def _kind(key: str) -> type:
    f = _FIELDS[key]
    return _TYPES[f.type] if isinstance(f.type, str) else f.type  # annotations are strings here


def _control(text: str) -> str | None:
    for ch in text:
        if ord(ch) < 32 or 0x7F <= ord(ch) <= 0x9F or ch in "\u2028\u2029":
            return ch
    return None


def coerce(key: str, value: Any, origin: str) -> Any:
    """`value` as setting `key` holds it, or UsageError naming `origin` (a file, a variable).

    Strings: no control characters (newlines, escapes), one of the choices where there are some.
    Numbers: parsed from text when needed, within the field's range."""
    if key not in _FIELDS:
        raise UsageError(f"{origin}: unknown setting {key!r} (see `pmem config`)")
    kind = _kind(key)
    meta = _FIELDS[key].metadata
    if kind is str:
        if not isinstance(value, str):
            raise UsageError(f"{origin}: {key} must be text, got {value!r}")
        bad = _control(value)
        if bad is not None:
            raise UsageError(f"{origin}: {key} may not contain control characters (found {bad!r})")
        value = meta["aliases"].get(value, value)  # an older name keeps working
        if meta["choices"] and value not in meta["choices"]:
            raise UsageError(f"{origin}: {key} must be one of {', '.join(meta['choices'])}, got {value!r}")
        return value
    if isinstance(value, bool) or (isinstance(value, float) and kind is int and not value.is_integer()):
        raise UsageError(f"{origin}: {key} must be a {_TYPE_NAMES[kind]}, got {value!r}")
    try:
        number = kind(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError, OverflowError):
        raise UsageError(f"{origin}: {key} must be a {_TYPE_NAMES[kind]}, got {value!r}") from None
    if number != number or not (meta["low"] <= number <= meta["high"]):  # NaN, or out of range
        raise UsageError(f"{origin}: {key} must be between {meta['low']:g} and {meta['high']:g}, got {value!r}")
    return number


def check_choice(key: str, value: str) -> str:
    """`value` if it is one of setting `key`'s allowed words, else UsageError."""
    return coerce(key, value, "value")


def load(path: Path | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """The effective settings: defaults, then config.toml (`path`, default paths.config_path()),
    then PMEM_* variables of `environ` (default os.environ).

    Returns:
        Settings, with `path` and `origins` ("default", the file's path or the variable's name).
    Raises:
        UsageError: the file cannot be read or parsed, names an unknown setting, or a value is
        invalid (the message names the file or variable; `pmem config set` can repair a file).
    """
    environ = os.environ if environ is None else environ
    path = path or paths.config_path()
    values: dict[str, Any] = {}
    origins = {key: "default" for key in KEYS}
    if path.exists():
        for key, value in _read(path).items():
            values[key] = coerce(key, value, str(path))
            origins[key] = str(path)
    for key in KEYS:
        name = env_name(key)
        if environ.get(name, "") != "":
            values[key] = coerce(key, environ[name], name)
            origins[key] = name
    return Settings(**values, path=path, origins=MappingProxyType(origins))


def _read(path: Path) -> dict[str, Any]:
    tomllib = _toml()
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError) as exc:
        raise UsageError(f"cannot read config {path}: {exc} (`pmem config set` rewrites it)") from None


def _salvage(text: str) -> tuple[dict[str, Any], list[str]]:
    """From a config.toml that does not parse: the `key = value` lines that do, alone, and hold a
    known, valid setting; and every other non-blank line, to keep as a comment."""
    tomllib = _toml()
    good: dict[str, Any] = {}
    bad: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            item = tomllib.loads(line)
            (key, value), = item.items()
            good[key] = coerce(key, value, "line")
        except (tomllib.TOMLDecodeError, ValueError, UsageError):
            bad.append(line)
    return good, bad


def _toml_value(value: Any) -> str:
    if isinstance(value, (int, float)):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def set_value(key: str, value: str, path: Path | None = None, *,
              note: Callable[[str], None] | None = None) -> Path:
    """Write one setting to config.toml (atomically, mode 0600), keeping the others.

    A file that does not parse is repaired: its valid `key = value` lines are kept, the rest is
    kept as comments marked as such, and `note` (if given) is told what happened.

    Args:
        key: a setting name (see KEYS).
        value: its new value, as text; validated like a config file's.
        path: the file (default paths.config_path()).
        note: called with a one-line message when the file had to be repaired.

    Returns:
        The path written. Raises UsageError for an unknown key or an invalid value (the file is
        then left untouched).
    """
    if key not in _FIELDS:
        raise UsageError(f"unknown setting {key!r}; known: {', '.join(KEYS)}")
    path = path or paths.config_path()
    coerced = coerce(key, value, "value")
    data: dict[str, Any] = {}
    kept: list[str] = []
    if path.exists():
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            parsed = _toml().loads(text)
        except _toml().TOMLDecodeError:
            data, kept = _salvage(text)
            problem = "did not parse"
        else:
            for k, v in parsed.items():
                try:
                    data[k] = coerce(k, v, "line")
                except UsageError:
                    kept.append(f"{k} = {v!r}")
            problem = "held invalid settings"
        if kept and note:
            note(f"{path} {problem}: {len(kept)} line(s) kept there as comments; the valid settings stay")
    data[key] = coerced
    lines = [f"{k} = {_toml_value(v)}" for k, v in data.items()]
    if kept:
        lines.append("# pmem config set could not read these lines and kept them as comments:")
        lines.extend("# " + "".join(ch if _control(ch) is None else "?" for ch in ln) for ln in kept)
    _write_private(path, "\n".join(lines) + "\n")
    return path


def _write_private(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder, mode 0600, then rename."""
    paths.ensure_private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
