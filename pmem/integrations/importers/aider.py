"""aider's chat history: `.aider.chat.history.md`, at the root of each project aider ran in
(`--chat-history-file` names another).

aider appends Markdown to it (aider/io.py, InputOutput): `# aider chat started at <local time>`
begins a session; each line the person typed is written as `#### <line>` with a Markdown line
break (two spaces) at its end, and the lines of one input follow each other (one message);
aider's own output (files added, edits applied, token counts, warnings, the answers to its
questions) is a `> ` blockquote; what the model answered is the text in between. The answers
are kept, the tool output is not; of aider's commands, `/ask`, `/code`, `/architect` and
`/context` keep their words, the others (`/add`, `/run`, ...) are left out. The project's
folder (where the file is) becomes the memory's scope.

aider writes the session's start in local time with no zone: it is read as this machine's
local time. A session is named by its start and its first message, so a history that grew
since the last import adds only its new messages.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Iterator

from ... import timeutil
from ...records import Memory
from .base import Entry, Turn, conversation_memories, stable_id

NAME = "aider"
DESCRIPTION = "aider chat history (.aider.chat.history.md in a project)"
KIND = "turn"
FILE_NAME = ".aider.chat.history.md"

_START = re.compile(r"^# aider chat started at (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\s*$")
_CONFIRM = re.compile(r"\(Y\)es/\(N\)o.*\]: ?\S*$")  # an answer aider logged as an input
_KEEP_COMMANDS = ("/ask", "/code", "/architect", "/context")


def accepts(name: str) -> bool:
    return name.endswith(".md")


def sniff(name: str, head: bytes) -> bool:
    for line in head.decode("utf-8", "replace").lstrip("\ufeff").splitlines():
        if line.strip():
            return bool(_START.match(line.rstrip("\r")))
    return False


def _started(text: str) -> str | None:
    try:
        return timeutil.iso(datetime.strptime(text, "%Y-%m-%d %H:%M:%S").astimezone())
    except (ValueError, OverflowError, OSError):
        return None


def _user_text(lines: list[str]) -> str:
    text = "\n".join(lines).strip()
    if not text or text == "<blank>" or _CONFIRM.search(text):
        return ""
    if text.startswith("/"):
        command, _, rest = text.partition(" ")
        return rest.strip() if command in _KEEP_COMMANDS else ""
    return text


class _Reader:
    def __init__(self, lines: list[str]):
        # aider ends each input line and each tool line with two spaces (a Markdown line break);
        # a history whose trailing spaces an editor removed is read without that rule
        self.strict = any(line.startswith("#### ") and line.endswith("  ") for line in lines)
        self.lines = lines
        self.sessions: list[tuple[int, str | None, list[tuple[str, int, str]]]] = []
        self.messages = 0

    def _is_user(self, line: str, continuing: bool) -> bool:
        if not (line.startswith("#### ") or line.rstrip() == "####"):
            return False
        return continuing or not self.strict or line.endswith("  ")

    def read(self) -> None:
        turns: list[tuple[str, int, str]] | None = None
        user: list[str] = []
        answer: list[str] = []
        user_closed = in_tool = False
        start = 0

        def flush() -> None:
            nonlocal user, answer, user_closed
            if turns is not None:
                if user:
                    turns.append(("user", start, _user_text(user)))
                    self.messages += 1
                text = "\n".join(answer).strip()
                if text:
                    turns.append(("assistant", start, text))
                    self.messages += 1
            user, answer, user_closed = [], [], False

        for n, raw in enumerate(self.lines, start=1):
            line = raw.rstrip("\r")
            m = _START.match(line)
            if m:
                flush()
                turns = []
                self.sessions.append((n, _started(m.group(1)), turns))
                in_tool = False
            elif in_tool:  # a multi-line tool message runs to the line that ends in a line break
                in_tool = not line.endswith("  ")
            elif self._is_user(line, bool(user) and not user_closed and not answer):
                if not (user and not user_closed and not answer):
                    flush()
                    start = n
                user.append(line[5:].rstrip() if line.startswith("#### ") else "")
            elif line.startswith("> ") or line.rstrip() == ">":
                flush()
                in_tool = self.strict and not line.endswith("  ")
            elif not line.strip():
                if user and not answer:
                    user_closed = True
                elif answer:
                    answer.append("")
            else:
                if not user and not answer:
                    start = n
                answer.append(line)
        flush()


def read(entry: Entry) -> Iterator[Memory]:
    reader = _Reader(entry.read_text().splitlines())
    reader.read()
    scope = str(entry.path.resolve().parent) if entry.path is not None else None
    kept = 0
    for _, started, items in reader.sessions:
        turns = [Turn(message_id=str(k), role=role, speaker="User" if role == "user" else "aider", text=text)
                 for k, (role, _, text) in enumerate(items) if text]
        if not turns:
            continue
        kept += len(turns)
        session = f"{started or 'undated'}-{stable_id(turns[0].text)[:8]}"
        yield from conversation_memories(NAME, session, turns, created_at=started, scope=scope)
    entry.counted(reader.messages, None if kept else
                  f"its {len(reader.sessions)} session(s) hold no message but aider's commands and output")
