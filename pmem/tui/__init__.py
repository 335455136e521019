"""`pmem tui`: a Textual browser for memories. Importing this package loads textual; `import pmem`
does not import it."""

from .app import PmemApp, make_app

__all__ = ["PmemApp", "make_app"]
