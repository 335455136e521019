"""pmem's own blocks, marked where they are written and taken out where they come back.

Every block pmem puts in front of a model (a hook's output, `pmem recall`, `pmem context`) is
wrapped by `mark` in two comment lines that carry a digest of the block:

    <!-- pmem:block 3f2a9c1b7e4d -->
    # From the user's memory (pmem; ...)
    ...
    <!-- /pmem:block 3f2a9c1b7e4d -->

Such blocks come back: Gemini CLI's `-p` puts the session-start hook's block in front of the
user's prompt, so the next hook's `prompt` starts with it, and Gemini stores it inside the user's
message, so an import of that chat would store pmem's own memories again as something the user
said. `strip` takes them out (with a host's wrapper that held only the block, as Gemini's
`<hook_context>`): hooks search with what is left, importers store what is left.

Only a block whose digest matches what lies between its two lines is taken out, so a person's
text that mentions the marker (or pastes half a block, or edits one) is left exactly as it was.
The digest is of the block's words (whitespace collapsed): a host that re-wraps lines or trims
the ends still gives it back. Pure functions of strings: every layer may use them.
"""

from __future__ import annotations

import hashlib
import re

TAG = "pmem:block"
_MARK = "!-- " + TAG  # the cheap test: text without it holds no block
# Gemini CLI escapes hook output's < and > (`&lt;`, `&gt;`) before it wraps it: both spellings
# are pmem's marker, and the digest is of the block with them spelled back.
_BEGIN = re.compile(r"(?:<|&lt;)!-- pmem:block ([0-9a-f]{12}) --(?:>|&gt;)")
# Opening markers examined in one text: pmem puts a few blocks in one prompt, and text written
# to look like thousands of them (a hostile chat file) must cost linear time, not quadratic.
MAX_TRIES = 64
# Wrappers a host puts around hook output (Gemini CLI: `<hook_context>...</hook_context>`): taken
# out with the block when they hold nothing else.
HOST_WRAPPERS = ("hook_context",)
_WRAPPERS = "|".join(HOST_WRAPPERS)
_OPEN_WRAPPER = re.compile(r"<(%s)>\s*\Z" % _WRAPPERS)  # searched in the text just before a block
_CLOSE_WRAPPER = re.compile(r"\s*</(%s)>" % _WRAPPERS)
# Gemini CLI wraps hook output in `<hook_context>` and puts the session-start hook's in front of
# the prompt; a user never types it first. What such a wrapper at the start of a message holds
# is a hook's, pmem's (an older pmem's, unmarked) or another's, never the user's words.
_LEADING_WRAPPER = re.compile(r"\s*<(%s)>.*?</\1>\s*" % _WRAPPERS, re.S)  # matched at a position


def digest(block: str) -> str:
    """12 hex digits of the block's words, whitespace collapsed and `&lt;`, `&gt;` read as < and >."""
    words = " ".join(block.replace("&lt;", "<").replace("&gt;", ">").split())
    return hashlib.sha256(words.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def mark(block: str) -> str:
    """`block` between pmem's two marker lines; "" stays "" (nothing to inject)."""
    if not block.strip():
        return block
    d = digest(block)
    return f"<!-- {TAG} {d} -->\n{block}\n<!-- /{TAG} {d} -->"


OVERHEAD = len(mark("x")) - 1  # characters the markers add to a block


def strip(text: str) -> str:
    """`text` without pmem's marked blocks and the host wrappers that held only them; what is
    left on either side of a block is joined by a blank line and the ends are trimmed. Text with
    no whole, intact block comes back exactly as it was."""
    if _MARK not in text:
        return text
    pieces: list[str] = []
    pos = 0
    for tries, m in enumerate(_BEGIN.finditer(text)):
        if tries >= MAX_TRIES:
            break
        if m.start() < pos:
            continue  # inside a block already taken out
        d = m.group(1)
        close = _close(text, d, m.end())
        if close is None or digest(text[m.end():close[0]]) != d:
            continue
        start, stop = m.start(), close[1]
        wrapper = _OPEN_WRAPPER.search(text, pos, start)
        after = _CLOSE_WRAPPER.match(text, stop)
        if wrapper and after and wrapper.group(1) == after.group(1):
            start, stop = wrapper.start(), after.end()
        pieces.append(text[pos:start])
        pos = stop
    if not pieces:
        return text
    pieces.append(text[pos:])
    return "\n\n".join(p.strip() for p in pieces if p.strip())


def _close(text: str, d: str, at: int) -> tuple[int, int] | None:
    """(start, end) of the first closing marker of digest `d` from `at`, either spelling."""
    core = f"!-- /{TAG} {d} --"
    while (i := text.find(core, at)) >= 0:
        at = i + len(core)
        start = i - 1 if text[max(i - 1, 0):i] == "<" else i - 4 if text[max(i - 4, 0):i] == "&lt;" else -1
        end = at + 1 if text.startswith(">", at) else at + 4 if text.startswith("&gt;", at) else -1
        if start >= 0 and end >= 0:
            return start, end
    return None


def strip_leading_host_context(text: str) -> str:
    """`text` without the host wrappers (`<hook_context>...</hook_context>`) it starts with: what
    Gemini CLI put in front of the user's words. Other text is left as it was."""
    if not text.lstrip().startswith("<"):
        return text
    pos = 0
    while (m := _LEADING_WRAPPER.match(text, pos)) is not None and m.end() > pos:
        pos = m.end()
    return text[pos:] if pos else text


def user_words(text: str) -> str:
    """What a person wrote, from a prompt or message a host built around it: pmem's blocks and
    the host's leading hook wrappers taken out."""
    return strip_leading_host_context(strip(text)).strip()
