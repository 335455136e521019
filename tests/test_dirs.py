"""pmem.dirs finds pmem's folders as strings, importing neither pathlib nor platformdirs where the
XDG folders are plain, and gives the places platformdirs and pmem.paths give, in every case."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import platformdirs
import pytest

from pmem import dirs, paths

ROOT = Path(__file__).resolve().parents[1]
UNSET = None
# (XDG_DATA_HOME, XDG_CONFIG_HOME, HOME): plain ones, and the odd ones platformdirs decides
CASES = [
    (UNSET, UNSET, "/home/ann"),
    ("", "", "/home/ann/"),
    ("/data/xdg", "/conf/xdg/", "/home/ann"),
    (UNSET, UNSET, "/"),
    ("relative/data", "relative/conf", "/home/ann"),
    ("  /padded", " ", "/home/ann"),
    (UNSET, UNSET, "relative-home"),
    (UNSET, UNSET, UNSET),
]


def _set(monkeypatch, data, config, home):
    monkeypatch.delenv("PMEM_HOME", raising=False)
    for name, value in (("XDG_DATA_HOME", data), ("XDG_CONFIG_HOME", config), ("HOME", home)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)


@pytest.mark.parametrize("data, config, home", CASES)
def test_the_user_folders_are_platformdirs_own(monkeypatch, data, config, home):
    _set(monkeypatch, data, config, home)
    assert dirs.user_data_dir() == platformdirs.user_data_dir("pmem", appauthor=False)
    assert dirs.user_config_dir() == platformdirs.user_config_dir("pmem", appauthor=False)
    assert paths.data_dir() == Path(platformdirs.user_data_dir("pmem", appauthor=False))
    assert paths.config_path() == Path(platformdirs.user_config_dir("pmem", appauthor=False)) / "config.toml"


@pytest.mark.parametrize("env", [
    {"PMEM_HOME": "~/pm/"},
    {"PMEM_HOME": "/srv/pmem-home", "PMEM_DB": "~/elsewhere/my.db", "PMEM_MODELS_DIR": "~/models"},
    {"PMEM_DB": "relative.db", "XDG_DATA_HOME": "/data/xdg"},
    {},
])
def test_every_place_is_what_paths_gives(monkeypatch, env):
    """pmem.paths wraps pmem.dirs; the places are those pathlib's expanduser gave before."""
    monkeypatch.setenv("HOME", "/home/ann")
    for name in ("PMEM_HOME", "PMEM_DB", "PMEM_MODELS_DIR", "XDG_DATA_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    home = os.environ.get("PMEM_HOME")
    data = Path(home).expanduser() if home else Path(platformdirs.user_data_dir("pmem", appauthor=False))
    assert paths.data_dir() == Path(dirs.data_dir()) == data
    db = os.environ.get("PMEM_DB")
    assert Path(dirs.db_path()) == paths.db_path() == (Path(db).expanduser() if db else data / "pmem.db")
    assert Path(dirs.db_path("~/x.db")) == paths.db_path("~/x.db") == Path("~/x.db").expanduser()
    models = os.environ.get("PMEM_MODELS_DIR")
    assert Path(dirs.models_dir()) == paths.models_dir() == (Path(models).expanduser() if models else data / "models")
    assert Path(dirs.socket_path()) == paths.socket_path() == data / "pmem.sock"


def test_a_home_that_cannot_be_found_fails_as_pathlib_does(monkeypatch):
    monkeypatch.setenv("PMEM_HOME", "~no-such-user-here/pmem")
    with pytest.raises(RuntimeError):
        Path("~no-such-user-here/pmem").expanduser()
    with pytest.raises(RuntimeError):
        dirs.data_dir()
    with pytest.raises(RuntimeError):
        paths.data_dir()


def test_plain_xdg_folders_need_neither_pathlib_nor_platformdirs(tmp_path):
    code = ("import sys; from pmem import dirs; found = [dirs.data_dir(), dirs.config_path(), dirs.db_path()]; "
            "import json; print(json.dumps([found, 'platformdirs' in sys.modules, 'pathlib' in sys.modules]))")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMEM_", "XDG_"))}
    env.update(HOME=str(tmp_path), PYTHONPATH=str(ROOT))
    found, platform, pathlib = json.loads(subprocess.run([sys.executable, "-c", code], env=env, check=True,
                                                         capture_output=True, text=True).stdout)
    assert found == [f"{tmp_path}/.local/share/pmem", f"{tmp_path}/.config/pmem/config.toml",
                     f"{tmp_path}/.local/share/pmem/pmem.db"]
    assert not platform
    assert not pathlib or "pathlib" in _baseline()


def _baseline() -> set[str]:
    out = subprocess.run([sys.executable, "-c", "import sys, json; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True).stdout
    return set(json.loads(out))
