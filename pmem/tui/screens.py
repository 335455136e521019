"""Modal screens: help, confirm, expire, edit, tags, filters, details."""

from __future__ import annotations

from dataclasses import replace

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, OptionList, Static, TextArea
from textual.widgets.option_list import Option

from ..display import restore_hidden, visible
from ..records import TIERS
from ..store import Filter

KEYS = [
    ("/", "search as you type (esc clears, enter goes to the list)"),
    ("f", "filters: tier, tag, expired, forgotten"),
    ("enter", "details of the highlighted memory"),
    ("T", "the whole thread of the highlighted memory"),
    ("S", "scope: all memories / global + this project's"),
    ("p", "pin / unpin"),
    ("x", "expire: now, 1d, 1w or a date"),
    ("e", "edit the text here (ctrl+s saves)"),
    ("E", "edit the text in $EDITOR"),
    ("t", "tags"),
    ("d", "forget (asks first)"),
    ("P", "erase for good, backups too (asks first)"),
    ("r", "restore a forgotten or expired memory"),
    ("u", "undo the last change (any tool's)"),
    ("D", "dream: review consolidation proposals"),
    ("C", "sync conflicts: both values, take the losing one back"),
    ("M", "search mode: hybrid, keyword, semantic"),
    ("ctrl+r", "reload from the database"),
    ("j k g G", "down, up, top, bottom"),
    ("?", "this help"),
    ("q", "quit"),
]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column()
        for key, what in KEYS:
            grid.add_row(Text(key), Text(what))
        with VerticalScroll(id="help", classes="dialog"):
            yield Label("pmem keys", classes="dialog-title")
            yield Static(grid, markup=False)
            yield Label("Every change is recorded: `pmem history ID`, `pmem undo`.", classes="hint")


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

    def __init__(self, question: Text) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.question, markup=False)
            with Horizontal(classes="buttons"):
                yield Button("Yes (y)", id="yes", variant="error")
                yield Button("No (n)", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class ExpireScreen(ModalScreen["str | None"]):
    """Returns what the user chose: 'now', a duration ('1d', '1w') or a date, or None."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Expire when?", classes="dialog-title")
            yield OptionList(Option("now", id="now"), Option("in 1 day", id="1d"),
                             Option("in 1 week", id="1w"), id="expire-choices")
            yield Input(placeholder="or a date / duration: 2026-01-31, 3d, 12h", id="expire-when")
            yield Label("enter: choose   esc: cancel", classes="hint")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        value = event.value.strip()
        if value:
            self.dismiss(value)


class EditScreen(ModalScreen["str | None"]):
    BINDINGS = [Binding("ctrl+s", "save", "Save"), Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        with Vertical(id="edit", classes="dialog"):
            yield Label("Edit memory", classes="dialog-title")
            # shown with visible(): a TextArea would write a memory's escape sequences raw
            yield TextArea(visible(self.text), id="edit-text", soft_wrap=True, tab_behavior="focus")
            yield Label("ctrl+s: save   esc: cancel", classes="hint")

    def action_save(self) -> None:
        self.dismiss(restore_hidden(self.query_one("#edit-text", TextArea).text, self.text))


class TagsScreen(ModalScreen["list[str] | None"]):
    """Edit all tags at once, comma or space separated."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, tags: list[str]) -> None:
        super().__init__()
        self.tags = tags

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Tags (comma or space separated)", classes="dialog-title")
            yield Input(visible(" ".join(self.tags)), id="tags-input")
            yield Label("enter: save   esc: cancel", classes="hint")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(parse_tags(restore_hidden(event.value, " ".join(self.tags))))


class TickBox(Checkbox):
    """A checkbox whose state shows without colour too (NO_COLOR): [X] or [ ]."""

    def watch_value(self) -> None:
        self.BUTTON_INNER = "X" if self.value else " "
        super().watch_value()

    def on_mount(self) -> None:
        self.BUTTON_INNER = "X" if self.value else " "
        self.refresh()


def parse_tags(value: str) -> list[str]:
    return list(dict.fromkeys(t for t in value.replace(",", " ").split() if t))


class FilterScreen(ModalScreen["Filter | None"]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel"), Binding("ctrl+s", "apply", "Apply")]

    def __init__(self, flt: Filter) -> None:
        super().__init__()
        self.flt = flt

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="filters", classes="dialog"):
            yield Label("Filters", classes="dialog-title")
            with Horizontal(classes="row"):
                for tier in TIERS:
                    yield TickBox(tier, tier in self.flt.tiers, id=f"tier-{tier}")
            yield Input(visible(" ".join(self.flt.tags)), placeholder="tags (all must match)",
                        id="filter-tags")
            with Horizontal(classes="row"):
                yield TickBox("expired", self.flt.include_expired, id="include-expired")
                yield TickBox("forgotten", self.flt.include_forgotten, id="include-forgotten")
            with Horizontal(classes="buttons"):
                yield Button("Apply", id="apply", variant="primary")
                yield Button("Reset", id="reset")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "reset":
            self.dismiss(Filter())
        else:
            self.action_apply()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.action_apply()

    def action_apply(self) -> None:
        tiers = tuple(t for t in TIERS if self.query_one(f"#tier-{t}", Checkbox).value) or TIERS
        typed = restore_hidden(self.query_one("#filter-tags", Input).value, " ".join(self.flt.tags))
        tags = tuple(parse_tags(typed))
        expired = self.query_one("#include-expired", Checkbox).value
        forgotten = self.query_one("#include-forgotten", Checkbox).value
        self.dismiss(replace(self.flt, tiers=tiers, tags=tags, include_expired=expired,
                             include_forgotten=forgotten, include_superseded=expired or forgotten,
                             include_merged=forgotten))


class DetailScreen(ModalScreen[None]):
    """The detail pane, full screen."""

    BINDINGS = [Binding("escape,enter,q", "dismiss", "Close")]

    def __init__(self, renderable) -> None:
        super().__init__()
        self.renderable = renderable

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="detail-full"):
            yield Static(self.renderable, markup=False)
