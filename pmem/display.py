"""Text from users and models is data: shown literally on a terminal, cleaned for a prompt.

Three places text leaves pmem, three rules (README, "Output"):

- a terminal (CLI tables, `echo` to a tty, the TUI): `visible()` shows every character that would
  act instead of print as an escape: C0/C1 controls and DEL as `\\x1b`, invisible format
  characters (bidi overrides and isolates, zero-width characters, Unicode tag characters) as
  `\\u202e` or `\\U000e0041`, lone surrogates as `\\udc80`. So OSC 52 (clipboard), OSC 0 (title),
  `ESC[2J`, `ESC[6n` or a right-to-left override reach the screen as text, never as effects;
- a pipe: what is stored, byte for byte (a program downstream decides);
- JSON (`json_dumps()`): every string escaped where needed (`\\u009b`, `\\u202e`), which keeps the
  value exact while the document stays printable;
- a prompt for another model (recall blocks, hook output, `pmem context`, MCP tool results, the
  llm plugin): `prompt_safe()`, the one gate they all call, removes the controls (except newline
  and tab) and the invisible format characters, which could carry instructions the person reading
  the block cannot see.
"""

from __future__ import annotations

import json
import re
from typing import Any, overload

# Controls: C0 except tab and newline, DEL, C1.
_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f"
# Invisible format characters: the Arabic letter mark, LRM/RLM, bidi embeddings and overrides
# (U+202A-202E) and isolates (U+2066-2069); zero-width space, non-joiner, joiner, word joiner and
# the invisible operators (U+200B-200D, U+2060-2064), the BOM / zero-width no-break space; tag
# characters (U+E0000-E007F, "ASCII smuggling") and the variation selectors supplement
# (U+E0100-E01EF), both invisible and able to spell out hidden text.
_FORMAT = ("\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff"
           "\U000e0000-\U000e007f\U000e0100-\U000e01ef")
_SURROGATES = "\ud800-\udfff"  # lone surrogates (undecodable bytes in arguments): unprintable

_FOR_TERMINAL = re.compile(f"[{_CONTROLS}{_FORMAT}{_SURROGATES}]")
_FOR_PROMPT = re.compile(f"[{_CONTROLS}{_FORMAT}]")
_FOR_JSON = re.compile(f"[\x7f-\x9f{_FORMAT}{_SURROGATES}\u2028\u2029]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def visible(text: str) -> str:
    """Text for a terminal: every control or invisible character shown as an escape (`\\x1b`,
    `\\u202e`), so it prints instead of acting. Newlines and tabs are kept."""
    return _FOR_TERMINAL.sub(_escape, text)


_SHOWN = re.compile(r"\\(?:x([0-9a-f]{2})|u([0-9a-f]{4})|U([0-9a-f]{8}))")


def restore_hidden(edited: str, original: str) -> str:
    """Text edited from `visible(original)` (the TUI's edit dialogs), with the escapes of the
    characters `original` really holds turned back into them; other backslash text stays as typed.
    So opening a dialog on such a memory shows no raw escape, and saving changes only what the
    person changed."""
    if edited == visible(original):
        return original
    hidden = set(_FOR_TERMINAL.findall(original))
    if not hidden:
        return edited

    def back(match: re.Match) -> str:
        char = chr(int(next(g for g in match.groups() if g), 16))
        return char if char in hidden else match.group()

    return _SHOWN.sub(back, edited)


@overload
def prompt_safe(value: str) -> str: ...


@overload
def prompt_safe(value: Any) -> Any: ...


def prompt_safe(value: Any) -> Any:
    """Text for another model's prompt: controls (except newline and tab) and invisible format
    characters removed. A carriage return goes too, so `\\r\\n` becomes `\\n`.

    The one gate for text a model reads (recall blocks, hooks, `pmem context`, MCP results, the
    llm plugin): a JSON value (dict, list) comes back with every string in it cleaned, keys too,
    so a tool result is gated whole."""
    if isinstance(value, str):
        return _FOR_PROMPT.sub("", value)
    if isinstance(value, dict):
        return {prompt_safe(k): prompt_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [prompt_safe(v) for v in value]
    return value


def _json_escape(match: re.Match) -> str:
    code = ord(match.group())
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # JSON spells characters beyond the BMP as a surrogate pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def json_dumps(data: Any, **options: Any) -> str:
    """json.dumps with readable non-ASCII text, but DEL, C1 controls, invisible format characters,
    lone surrogates and U+2028/2029 escaped (json.dumps escapes only C0 unless it escapes all
    non-ASCII). The value is exactly the same; the document is safe on a terminal."""
    text = json.dumps(data, ensure_ascii=False, **options)
    # Outside strings JSON holds only ASCII, so every match is inside a string.
    return _FOR_JSON.sub(_json_escape, text)
