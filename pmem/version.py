"""pmem's version, in one place: pyproject.toml reads it from here (setuptools' `attr:`), and
`pmem.__version__`, `pmem --version` and `pmem serve`'s status answer import it.

A foundation module that imports nothing, so a low layer (serve) can name the version without
importing the `pmem` package, which would pull in the store, search and recall above it.
"""

__version__ = "0.2.0"
