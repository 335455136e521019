"""pmem as a plugin for Simon Willison's `llm` (entry point `pmem-cli` in the `llm` group).

    llm -f pmem:"trip plans" "suggest a day"            # fragment: a recall block for the query
    llm -T Pmem "remember that I moved to Lisbon" --ta  # toolbox: search, recall, remember

llm loads this module through its pluggy entry points when pmem is installed in llm's
environment (`llm install pmem-cli`, or `pip install pmem-cli` next to llm). Memories written here carry
the source `llm:<model id>` when llm says which model called, else `llm`. What the model reads
(the fragment, tool results, tool errors) passes `display.prompt_safe`, as every prompt pmem builds.
"""


from typing import Any

import llm

from ..display import prompt_safe
from ..errors import PmemError
from . import actions


def _open_store():
    from ..service import MemoryStore

    return MemoryStore()


def _scope_filter(store):
    """Global memories plus those of the project llm runs in (when pmem knows scopes)."""
    try:
        from ..scope import auto_scope, read_filter
    except ImportError:
        return None
    return read_filter(auto_scope(None))


def pmem_loader(argument: str) -> llm.Fragment:
    """`-f pmem:QUERY`: the user's core memories and those relevant to QUERY, as a Markdown block
    (an empty QUERY gives the core and most recent ones)."""
    store = _open_store()
    try:
        block = actions.recall(store, argument.strip() or None, flt=_scope_filter(store))
    finally:
        store.close()
    return llm.Fragment(block, source=f"pmem:{argument}")


class Pmem(llm.Toolbox):
    """The user's personal memory (pmem): search it, recall context, remember new facts."""

    def __init__(self, source: str = "llm"):
        self._source = source

    def _run(self, fn):
        try:
            store = _open_store()
            try:
                return fn(store)
            finally:
                store.close()
        except PmemError as exc:  # llm hands the message to the model: gated as a result is
            raise type(exc)(prompt_safe(str(exc))) from None

    def search(self, query: str, limit: int = 10) -> str:
        """Search the user's memories by words and meaning; JSON results with id, text, score and
        date, best first (at most 50)."""
        return actions.bounded_json(self._run(
            lambda s: actions.search(s, query, limit=limit, flt=_scope_filter(s))), "results")

    def recall(self, topic: str = "") -> str:
        """What the user told you before: core memories first, then those relevant to `topic`."""
        return self._run(lambda s: actions.recall(s, topic or None, flt=_scope_filter(s)))

    def remember(self, text: str, pin: bool = False, project: bool = False) -> str:
        """Store one durable fact, preference or decision the user stated, as a plain sentence.
        `pin` makes it core (always recalled); `project` keeps it to the project in the current
        directory (facts about that codebase) instead of everywhere."""
        def run(s):
            scope = None
            if project:
                from ..scope import auto_scope

                scope = auto_scope(None)
            source = "llm" if self._source == "llm" else actions.client_source("llm", self._source)
            out = actions.remember(s, text, pin=pin, source=source, scope=scope)
            actions.after_write(s)
            return out

        return actions.bounded_json(self._run(run))


@llm.hookimpl
def register_fragment_loaders(register: Any) -> None:
    register("pmem", pmem_loader)


@llm.hookimpl
def register_tools(register: Any) -> None:
    register(Pmem)
