"""The dream review screen: plan in a worker, accept or reject each proposal, apply with progress.

`pmem.dream` is imported lazily (in the worker), so opening the TUI does not pay for it.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Label, ProgressBar, Static

from .render import literal, one_line


class DreamScreen(Screen[bool]):
    """Dismisses with True when something was applied (the list should reload)."""

    BINDINGS = [
        Binding("space", "toggle", "Accept/reject"),
        Binding("a", "accept_all", "All"),
        Binding("n", "reject_all", "None"),
        Binding("y", "apply", "Apply"),
        Binding("f", "full_plan", "Compare all"),
        Binding("escape,q", "close", "Close"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.plan: Any = None
        self.accepted: set[str] = set()
        self.applying = False
        self.applied = False
        self._requests = 0  # plans asked for (make_plan): a late answer to an older one is dropped
        self._full_asked = False  # f pressed: a whole plan is coming or shown

    def compose(self) -> ComposeResult:
        with Vertical(id="dream"):
            yield Label("Dream: planning…", id="dream-status")
            yield DataTable(id="proposals", cursor_type="row")
            with VerticalScroll(id="proposal-detail"):
                yield Static(Text(""), id="proposal-body", markup=False)
            yield ProgressBar(id="dream-progress", show_eta=False)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#proposals", DataTable)
        for key, label, width in (("ok", "", 3), ("kind", "kind", 9), ("n", "n", 3), ("reason", "reason", 40)):
            table.add_column(Text(label), key=key, width=width)
        self.query_one("#dream-progress", ProgressBar).display = False
        self.make_plan()

    # -- planning -------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="dream")
    def make_plan(self, full: bool = False, request: int = 0) -> None:
        """The plan (on a large store, of what changed since the last dream unless `full`). A
        thread worker runs on when another starts: only the newest request's plan is shown."""
        app = self.app
        try:
            dream = app.dream_module()  # type: ignore[attr-defined]
            with app.background() as store:  # type: ignore[attr-defined]
                plan = dream.plan(store, now=app.now_iso(), full=full)  # type: ignore[attr-defined]
        except Exception as exc:  # a plan failure must not kill the app
            if request == self._requests:
                app.call_from_thread(self._status, f"Dream could not plan: {exc}")
            return
        if request == self._requests:
            app.call_from_thread(self._show_plan, plan)

    def action_full_plan(self) -> None:
        """Plan again comparing every memory (what `pmem dream --full` does)."""
        if self.applying or self._full_asked:
            return
        self._full_asked = True
        self._status("Dream: comparing every memory…")
        self._requests += 1
        self.make_plan(full=True, request=self._requests)

    def _status(self, message: str) -> None:
        if not self.is_attached:
            return
        self.query_one("#dream-status", Label).update(literal(message))

    def _show_plan(self, plan: Any) -> None:
        if not self.is_attached:  # closed while planning
            return
        self.plan = plan
        self.accepted &= {p.id for p in plan.proposals}  # a new plan keeps what is still in it
        table = self.query_one("#proposals", DataTable)
        table.clear()
        for p in plan.proposals:
            table.add_row(*self._cells(p), key=p.id)
        n = len(plan.proposals)
        since = (" Only what changed since the last dream was compared (f compares every memory); "
                 "what you leave unaccepted stays turned down until a memory like it changes.") \
            if plan.since is not None else ""
        asked = sum(1 for p in plan.proposals if p.kind == "review")
        ask = (f" {asked} review{'s' if asked != 1 else ''}: one fact said twice? Only space says yes to "
               "one." if asked else "")
        self._status((f"Dream: {n} proposal{'s' if n != 1 else ''}. space accepts or rejects, y applies "
                      "the accepted ones." if n else "Dream: nothing to do.") + ask + since)
        if n:
            table.focus()
            self._show_proposal(plan.proposals[0])

    def _cells(self, p: Any) -> list[Text]:
        ok = p.id in self.accepted
        return [Text("[x]" if ok else "[ ]", style="bold green" if ok else "dim"), Text(p.kind),
                Text(str(len(p.members))), Text(one_line(p.reason or "", 200))]

    def _proposal(self, pid: str) -> Any:
        for p in self.plan.proposals if self.plan else ():
            if p.id == pid:
                return p
        return None

    def _current(self) -> Any:
        table = self.query_one("#proposals", DataTable)
        if not table.row_count or self.plan is None:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
        return self._proposal(key.value)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        p = self._proposal(event.row_key.value) if event.row_key else None
        if p is not None:
            self._show_proposal(p)

    def _show_proposal(self, p: Any) -> None:
        parts: list[Any] = [Text.assemble((p.kind, "bold"), "  ", (p.id, "dim"))]
        parts.append(literal(p.reason or ""))
        try:
            members = self.app.store.get_many(p.members)  # type: ignore[attr-defined]
        except Exception:
            members = []
        found = {m.id: m for m in members}
        parts.append(Text("members", style="bold underline"))
        for mid in p.members:
            m = found.get(mid)
            parts.append(Text.assemble((mid, "bold"), " ", one_line(m.text, 300) if m else "(not stored)"))
        if p.result_text:
            parts.append(Text("result", style="bold underline"))
            parts.append(literal(p.result_text))
        self.query_one("#proposal-body", Static).update(Group(*parts))

    # -- accept / reject ------------------------------------------------------------------

    def _refresh_marks(self) -> None:
        table = self.query_one("#proposals", DataTable)
        for p in self.plan.proposals if self.plan else ():
            ok = p.id in self.accepted
            table.update_cell(p.id, "ok", Text("[x]" if ok else "[ ]", style="bold green" if ok else "dim"))

    def action_toggle(self) -> None:
        p = self._current()
        if p is None or self.applying:
            return
        self.accepted.symmetric_difference_update({p.id})
        self._refresh_marks()
        table = self.query_one("#proposals", DataTable)
        if table.cursor_row < table.row_count - 1:
            table.move_cursor(row=table.cursor_row + 1)

    def action_accept_all(self) -> None:
        """Every proposal but the reviews: a pair dream could not decide needs its own yes (space)."""
        if self.plan is not None and not self.applying:
            self.accepted = {p.id for p in self.plan.proposals if p.kind != "review"}
            self._refresh_marks()

    def action_reject_all(self) -> None:
        if not self.applying:
            self.accepted = set()
            self._refresh_marks()

    # -- applying -------------------------------------------------------------------------

    def action_apply(self) -> None:
        if self.plan is None or self.applying:
            return
        if not self.accepted:
            self.app.notify("Nothing accepted: space accepts a proposal, a accepts all.", severity="warning")
            return
        self.applying = True
        bar = self.query_one("#dream-progress", ProgressBar)
        bar.display = True
        bar.update(total=len(self.accepted), progress=0)
        self._status(f"Applying {len(self.accepted)} proposals…")
        self.apply_plan(set(self.accepted))

    @work(thread=True, exclusive=True, group="dream")
    def apply_plan(self, accept: set[str]) -> None:
        app = self.app

        def progress(done: int, total: int) -> None:
            app.call_from_thread(self._progress, done, total)

        try:
            dream = app.dream_module()  # type: ignore[attr-defined]
            with app.background() as store:  # type: ignore[attr-defined]
                result = dream.apply(store, self.plan, accept=accept, progress=progress)
        except Exception as exc:
            app.call_from_thread(self._applied, None, f"Dream apply failed: {exc}")
            return
        app.call_from_thread(self._applied, result, None)

    def _progress(self, done: int, total: int) -> None:
        if not self.is_attached:
            return
        self.query_one("#dream-progress", ProgressBar).update(total=total, progress=done)

    def _applied(self, result: Any, error: str | None) -> None:
        self.applying = False
        if error:
            self._status(error)
            self.app.notify(error, severity="error", markup=False)
            return
        self.applied = True
        bar = self.query_one("#dream-progress", ProgressBar)
        bar.update(progress=bar.total or 0)
        applied = getattr(result, "applied", None)
        n = len(applied) if isinstance(applied, (list, tuple, set)) else len(self.accepted)
        skipped = getattr(result, "skipped", None) or []
        message = f"Applied {n} proposal{'s' if n != 1 else ''}"
        if skipped:
            message += f", skipped {len(skipped)} (their memories changed since the plan)"
        message += "; u or `pmem undo` reverts."
        self._status(message)
        self.app.notify(message, markup=False)
        self.dismiss(True)

    def action_close(self) -> None:
        if self.applying:
            self.app.notify("Still applying…", severity="warning")
            return
        self.workers.cancel_node(self)
        self.dismiss(self.applied)
