"""Health checks behind `pmem doctor`: each says what is wrong and how to fix it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ContextManager

from . import db, paths
from .config import Settings
from .errors import PmemError

if TYPE_CHECKING:
    from .store.inspection import Inspection


@dataclass
class Check:
    """One finding. `level` is "ok", "info" (worth knowing, nothing wrong: a model that is
    fetched on first use) or "fail"; only "fail" makes `pmem doctor` exit 1."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    level: str = ""

    def __post_init__(self) -> None:
        if not self.level:
            self.level = "ok" if self.ok else "fail"


def run_checks(settings: Settings | PmemError, db_override=None,
               busy: Callable[[str], ContextManager[object]] = lambda label: contextlib.nullcontext()) -> list[Check]:
    """Every check, in order; a failing driver or config stops the later checks that need it.

    Args:
        settings: the settings the caller loaded (the CLI: `config.load()`), or the PmemError that
            loading them raised, reported here as the config check's failure. Never read here.
        db_override: the database path given with `--db`, if any (default paths.db_path()).
        busy: a context to hold around the database's integrity check, given what it does (the
            CLI shows it: it reads the whole file, 15 s at 1,000,000 memories).

    Returns:
        The checks. Raises nothing for a problem it finds: each becomes a failed Check.
    """
    checks: list[Check] = []
    try:
        drv = db.driver()
        checks.append(Check("sqlite driver", True, f"{drv.__name__} (SQLite {drv.sqlite_version})"))
    except PmemError as exc:
        checks.append(Check("sqlite driver", False, str(exc), "pip install sqlean.py"))
        return checks
    from .store import inspection

    try:
        checks.append(Check("sqlite-vec", True, inspection.vec_version()))
    except PmemError as exc:
        checks.append(Check("sqlite-vec", False, str(exc), "pip install --force-reinstall sqlite-vec"))
        return checks
    if isinstance(settings, PmemError):
        checks.append(Check("config", False, str(settings), "fix or delete the config file"))
        return checks
    cfg = settings
    if cfg.path is None:
        checks.append(Check("config", True, "built-in defaults"))
    else:
        checks.append(Check("config", True, str(cfg.path) + ("" if cfg.path.exists() else " (defaults)")))
        if cfg.path.exists():
            mode = cfg.path.stat().st_mode & 0o777
            checks.append(Check("config permissions", mode & 0o077 == 0, f"{cfg.path} mode {oct(mode)}",
                                f"chmod 600 {cfg.path}"))
    path = paths.db_path(db_override)
    if not path.exists():
        checks.append(Check("database", True, f"{path} (not created yet: the first `pmem add` creates it)"))
    else:
        checks.extend(_database_checks(cfg, path, busy))
    from .models import provision
    from .models.embed import is_fake

    for key in ("embed_model", "chat_model"):
        spec = cfg.get(key)
        if key == "embed_model" and is_fake(spec):  # tests and benchmarks: no file, vectors of no meaning
            checks.append(Check(key, True, f"{spec}: the built-in fake embedder (for tests; its vectors carry "
                                           "no meaning)", "pmem config set embed_model multilingual-e5-small",
                                level="info"))
        elif spec in provision.known_models():
            f = provision.model_file(spec, paths.models_dir())
            if f.exists():
                checks.append(Check(key, True, f"{spec}: {f}"))
            else:  # fetched by the first command that needs it: nothing is wrong
                checks.append(Check(key, True, f"{spec}: not installed yet; fetched on first use",
                                    "pmem models pull (to fetch it now)", level="info"))
        else:
            p = Path(spec).expanduser()
            ok = p.is_file() and provision.is_gguf(p)
            checks.append(Check(key, ok, f"{p}" + ("" if ok else ": missing or not a GGUF file"),
                                f"pmem config set {key} PATH_TO_A_GGUF"))
        bulk = _bulk_check(cfg) if key == "embed_model" else None
        if bulk is not None:
            checks.append(bulk)
    checks.append(_chat_runs_check(cfg))
    checks.append(_server_check(cfg))
    checks.append(_hooks_check())
    return checks


def _database_checks(cfg: Settings, path: Path, busy: Callable[[str], ContextManager[object]]) -> list[Check]:
    """What the database file says of itself, asked through an Inspection (pmem/store/inspection.py):
    a file a store would refuse, or migrate, is still read, and a damaged one is a finding."""
    from .store.inspection import Inspection

    checks: list[Check] = []
    try:
        with Inspection(path) as look:
            with busy(f"checking the database ({path.stat().st_size / 1e6:,.0f} MB)"):
                result = look.quick_check()
            mode = path.stat().st_mode & 0o777
            checks.append(Check("database", result == "ok", f"{path}: integrity {result}",
                                "restore from a backup in " + str(paths.backups_dir())))
            checks.append(Check("permissions", mode & 0o077 == 0, f"{path} mode {oct(mode)}",
                                f"chmod 600 {path}"))
            page, pages, free = look.pages()
            from .store import UPKEEP_MIN_FREE

            if pages and free >= UPKEEP_MIN_FREE * pages and free * page >= UPKEEP_BYTES:
                checks.append(Check("free space", True, f"{free * page / 1e6:.0f} MB of the "
                                    f"{pages * page / 1e6:.0f} MB file is free pages",
                                    "pmem dream --apply gives it back at its end", level="info"))
            from .store.migrations import MIGRATIONS

            done = look.applied_migrations()
            checks.append(Check("schema", len(done) <= len(MIGRATIONS), f"{len(done)} of {len(MIGRATIONS)} migrations",
                                "upgrade pmem"))
            stored = look.setting("embed_model")
            staged = look.interrupted_reindex()
            english = _english_check(cfg, look, stored, path)
            waiting = look.missing_vectors()
            if waiting:
                checks.append(_filling("missing vectors", f"{waiting:,} memories have no vector yet (stored by a "
                                       "sync before embedding): found by their words, not yet by their meaning",
                                       path, "pmem sync (or pmem reindex --missing) embeds them"))
            rough = look.int8_vectors()
            if rough:
                checks.append(_filling("int8 vectors", f"{rough:,} vectors made in int8 by an import, a join or "
                                       "a reindex wait to be made again in float32 (searches use them meanwhile)",
                                       path, "pmem reindex --missing makes them now"))
        resume = f" (an interrupted reindex to {staged.model} has {staged.done} of {staged.total} done; " \
                 f"`pmem reindex` resumes it)" if staged else ""
        from .models.provision import embed_model_for

        in_use = embed_model_for(cfg, stored)
        if stored is not None and stored != _model_name(in_use):
            checks.append(Check("vectors", False, f"stored vectors come from {stored}, configured model is "
                                f"{cfg.embed_model}{resume}", "pmem reindex"))
        elif stored is not None and in_use != cfg.embed_model:  # no model configured: the store keeps its own
            from .models.provision import memories_as_queries

            gain = "questions in other words find their memories more often" \
                if memories_as_queries(cfg.embed_model) else "about 100 languages"
            checks.append(Check("vectors", True, f"stored vectors come from {in_use}, which this store keeps "
                                f"using; new stores use {cfg.embed_model} ({gain}){resume}",
                                "pmem reindex", level="info"))
        if english is not None:
            checks.append(english)
    except PmemError as exc:
        if not any(c.name == "database" and not c.ok for c in checks):  # one finding of a file too damaged to read
            checks.append(Check("database", False, str(exc), "check the path, or restore a backup"))
    return checks


def _english_check(cfg: Settings, look: Inspection, stored: str | None, path: Path) -> Check | None:
    """English memories without their second vector (pmem/store/english.py: a store from before
    it, or one whose MiniLM could not load): searched by e5 alone until `pmem reindex --missing` fills them.
    Counted from the store's counters (`lang:` counts every memory not guessed English), not by
    guessing each text's language again."""
    from .store import english

    if cfg.embed_english != "minilm" or stored != english.MAIN:
        return None
    counts = look.english_counts()
    if counts is None:
        return None
    missing = counts.memories - counts.not_english - counts.english_vectors
    if missing <= 0:
        return None
    detail = f"{missing:,} English memories have no second vector ({english.MODEL}) yet, so a search ranks " \
             f"them by {english.MAIN} alone"
    return _filling("english vectors", detail, path, "pmem reindex --missing")


def _filling(name: str, detail: str, path: Path, fix: str) -> Check:
    """A finding of vectors still missing, with the fill that embeds them (pmem/fill.py): how far
    it is while it runs (no command to name then), else why the last one stopped, if it did."""
    from . import fill

    now = fill.describe(fill.summary(path))
    if now.startswith("running"):
        return Check(name, True, f"{detail}; the background fill is {now}", level="info")
    if now:
        detail += f"; the background fill {now}"
    return Check(name, True, detail, fix, level="info")


def _chat_runs_check(cfg: Settings) -> Check:
    """The chat model, run once in a child process: a llama.cpp build that dies on this CPU shows
    here as a finding with its fix, not as a crash of `extract` or `dream`."""
    from .models import provision
    from .models.generate import ModelCrash, check_runs

    spec = cfg.chat_model
    path = provision.model_file(spec, paths.models_dir()) if spec in provision.known_models() \
        else Path(spec).expanduser()
    if not path.is_file():
        return Check("chat model runs", True, "not checked: the chat model is not installed", level="info")
    try:
        ran = check_runs(path, threads=cfg.threads, fresh=True)
    except ModelCrash as exc:
        what, _, fix = str(exc).partition("; rebuild llama-cpp-python for a portable instruction set: ")
        return Check("chat model runs", False, what, fix)
    if not ran:
        return Check("chat model runs", False, f"{path.stem} did not load or answer in a child process",
                     "pmem extract --dry-run < some.txt shows the error")
    return Check("chat model runs", True, f"{path.stem} generated text in a child process")


def _hooks_check() -> Check:
    """Agent hooks never fail a prompt; they log here instead, so this is where a person looks."""
    path = paths.hook_log_path()
    try:
        lines = [ln for ln in path.read_text(encoding="utf-8", errors="replace").splitlines() if ln[:4].isdigit()]
    except OSError:
        lines = []
    if not lines:
        return Check("agent hooks", True, "no errors logged")
    return Check("agent hooks", True, f"last error: {lines[-1][:300]} (all in {path})")


def _bulk_check(cfg: Settings) -> Check | None:
    """How e5 embeds many texts at once (an import, a join's fill, a reindex): its int8 graph
    through ONNX Runtime, or float32 and why (docs/decisions/0070-e5-int8-bulk.md). None for a
    model that has no such graph (a GGUF, the fake embedder)."""
    from .models import e5_int8, provision

    spec = cfg.embed_model
    if spec not in provision.known_models() or provision.model_file(spec).suffix != ".e5s1":
        return None
    if cfg.embed_bulk == "float32":
        return Check("bulk embedding", True, "float32 (embed_bulk = float32): imports at float32's speed, "
                                             "every vector exactly float32's", level="info")
    ort = e5_int8.runtime()
    if ort is None:
        return Check("bulk embedding", True, "float32: onnxruntime cannot be loaded here, so imports run at "
                                             "float32's speed", "pip install onnxruntime", level="info")
    kernel = ", uint8 weights: this CPU has no VNNI" if e5_int8.saturates() else ""
    after = "; kept in int8 (embed_bulk = int8-only)" if cfg.embed_bulk == "int8-only" else \
        ", then made again in float32 in the background"
    return Check("bulk embedding", True, f"int8 through ONNX Runtime {ort.__version__}{kernel} (imports, "
                                         f"joins, reindex{after}; searches and `pmem add` stay float32)")


def _server_check(cfg: Settings) -> Check:
    """The server is started by the commands themselves: not running is fine; one of another build
    or a socket nobody answers on is worth a word."""
    from .models import serve

    sock = serve.socket_path()
    if cfg.server == "never":
        return Check("server", True, "not used (server = never)")
    info = serve.status() if sock.exists() else None
    if info is not None:
        other = "" if info.get("build") == serve.build_id() else \
            f"; it is from another pmem build ({info.get('version')}), so the next command replaces it"
        return Check("server", True, f"running (pid {info['pid']}, {info['requests']} requests, started by "
                                     f"{info.get('started_by') or 'pmem serve'}) on {sock}{other}")
    if sock.exists():
        return Check("server", True, f"not running; stale socket {sock} (the next command that needs the "
                                     "embedding model replaces it)")
    return Check("server", True, f"not running (server = {cfg.server}: the next command that needs the "
                                 "embedding model starts one)")


UPKEEP_BYTES = 10_000_000  # free space worth mentioning (and the share at which a dream gives it back)


def _model_name(spec: str) -> str:
    from .models import provision

    if spec in provision.known_models():
        if provision.memories_as_queries(spec):
            return spec  # its own name (pmem.models.embed.SymmetricEmbedder), not its file's
        return provision.model_file(spec, paths.models_dir()).stem
    return Path(spec).expanduser().stem
