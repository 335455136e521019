"""Check the sdist and the wheel `python -m build` wrote: the name on the package index, the version
pmem/version.py holds, the `pmem` command and the llm plugin's entry point, and the files a user
needs. Usage: python .ci/check_dist.py DIST_DIR (exit 1 and one line per problem)."""

from __future__ import annotations

import re
import sys
import tarfile
import zipfile
from pathlib import Path

NAME = "pmem-cli"
ROOT = Path(__file__).resolve().parents[1]


def main(dist: Path) -> int:
    version = re.search(r'__version__ = "([^"]+)"', (ROOT / "pmem/version.py").read_text()).group(1)
    stem = f"{NAME.replace('-', '_')}-{version}"
    problems = []
    wheels = list(dist.glob(f"{stem}-py3-none-any.whl"))
    sdists = list(dist.glob(f"{stem}.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        return _report([f"expected {stem}.tar.gz and {stem}-py3-none-any.whl in {dist}, found "
                        f"{sorted(p.name for p in dist.iterdir())}"])
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = set(wheel.namelist())
        meta = wheel.read(f"{stem}.dist-info/METADATA").decode()
        entry_points = wheel.read(f"{stem}.dist-info/entry_points.txt").decode()
    if f"Name: {NAME}\n" not in meta or f"Version: {version}\n" not in meta:
        problems.append(f"wheel METADATA does not name {NAME} {version}")
    if "pmem = pmem.cli:main" not in entry_points:
        problems.append("wheel has no `pmem` console script")
    if f"[llm]\n{NAME} = pmem.integrations.llm_plugin" not in entry_points:
        problems.append(f"wheel has no llm entry point named {NAME}")
    for needed in ("pmem/__init__.py", "pmem/py.typed", "pmem/tui/pmem.tcss", "pmem/integrations/mcp_early.json"):
        if needed not in names:
            problems.append(f"wheel lacks {needed}")
    if "Provides-Extra: mcp" not in meta or "Provides-Extra: llm" not in meta:
        problems.append("wheel METADATA lacks the mcp or llm extra")
    with tarfile.open(sdists[0]) as sdist:
        members = {m.name.split("/", 1)[1] for m in sdist.getmembers() if "/" in m.name}
    for needed in ("pyproject.toml", "README.md", "LICENSE", "pmem/__init__.py"):
        if needed not in members:
            problems.append(f"sdist lacks {needed}")
    return _report(problems)


def _report(problems: list[str]) -> int:
    for p in problems:
        print(f"dist: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
