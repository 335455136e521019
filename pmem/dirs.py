"""Where pmem keeps things, as plain strings: `pmem.paths` gives the same places as Path objects.

A served agent hook finds its pmem home before anything else, before every prompt, so this
module imports nothing but os and sys: pathlib costs that process ~23 ms of CPU here and
platformdirs (pathlib, tempfile, shutil...) ~20 ms more (docs/decisions/0041-hook-process-lean.md).
On Linux, where the XDG variable and HOME are plain absolute paths, the user folders are the XDG
ones, exactly as platformdirs gives them; anywhere else (another system, Android, a relative
or unset HOME, a variable that is not an absolute path) platformdirs decides, as it always did.
"""

import os
import sys

APP = "pmem"


def expand(value: str) -> str:
    """`Path(value).expanduser()` as a string: a leading ~ or ~user expanded; RuntimeError where
    the home cannot be found (a ~user that does not exist), as pathlib raises."""
    if not value.startswith("~"):
        return value
    expanded = os.path.expanduser(value)
    if expanded.startswith("~"):
        raise RuntimeError("Could not determine home directory.")
    return expanded


def home() -> str | None:
    value = os.environ.get("PMEM_HOME")
    return expand(value) if value else None


def _xdg(variable: str, default: str) -> str | None:
    """platformdirs' Unix answer where it is plain: $variable when absolute, else HOME/default;
    None where platformdirs has to be asked (its rules for anything else vary by version)."""
    if sys.platform != "linux" or "ANDROID_DATA" in os.environ or hasattr(sys, "getandroidapilevel"):
        return None
    value = os.environ.get(variable, "")
    if not value:
        if not os.environ.get("HOME", "").startswith("/"):
            return None
        value = os.path.expanduser("~/" + default)
    elif not value.startswith("/"):
        return None
    return os.path.join(value, APP)


def user_data_dir() -> str:
    """The user's data folder for pmem (platformdirs' user_data_dir)."""
    found = _xdg("XDG_DATA_HOME", ".local/share")
    if found is None:
        import platformdirs

        found = platformdirs.user_data_dir(APP, appauthor=False)
    return found


def user_config_dir() -> str:
    """The user's config folder for pmem (platformdirs' user_config_dir)."""
    found = _xdg("XDG_CONFIG_HOME", ".config")
    if found is None:
        import platformdirs

        found = platformdirs.user_config_dir(APP, appauthor=False)
    return found


def data_dir() -> str:
    return home() or user_data_dir()


def config_dir() -> str:
    return home() or user_config_dir()


def db_path(override: str | os.PathLike | None = None) -> str:
    if override:
        return expand(os.fspath(override))
    value = os.environ.get("PMEM_DB")
    if value:
        return expand(value)
    return os.path.join(data_dir(), "pmem.db")


def config_path() -> str:
    return os.path.join(config_dir(), "config.toml")


def models_dir() -> str:
    value = os.environ.get("PMEM_MODELS_DIR")
    if value:
        return expand(value)
    return os.path.join(data_dir(), "models")


def socket_path() -> str:
    """The Unix socket `pmem serve` listens on (and commands look for)."""
    return os.path.join(data_dir(), "pmem.sock")
