"""Claude.ai data export: `conversations.json`, a list of conversations with `chat_messages`.

A message has `uuid`, `sender` ("human" or "assistant"), `created_at`, a plain `text` and, in
newer exports, `content` blocks (`text`, `thinking`, `tool_use`, `tool_result`...): only the text
blocks are kept. Where messages name their parent (`parent_message_uuid`) and the conversation
its `current_leaf_message_uuid`, only that branch is imported.

Bad records: a conversation whose `chat_messages` is no list or whose `current_leaf_message_uuid`
is no id is left out and counted; so is a message that is no object, or whose `uuid`, parent,
`sender`, `text` or `content` has the wrong type. A name or a date of the wrong type is read as
absent.
"""

from __future__ import annotations

import re
from typing import Any, Iterator

from ...records import Memory
from .base import (
    BadRecord,
    Entry,
    Skip,
    Turn,
    conversation_memories,
    export_threads,
    ident,
    kind_of,
    named,
    need,
    optional,
    when,
)

NAME = "claude-ai"
DESCRIPTION = "Claude.ai data export (zip or conversations.json with chat_messages)"
FILES = re.compile(r"(^|/)conversations\.json$")
KIND = "turn"


def accepts(name: str) -> bool:
    return name.endswith(".json")


def sniff(name: str, head: bytes) -> bool:
    return b'"chat_messages"' in head


def _text(message: dict[str, Any]) -> str:
    blocks = need(message, "content", list)
    if blocks:
        texts = [b.get("text") for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
        return "\n\n".join(t.strip() for t in texts if isinstance(t, str) and t.strip())
    text = need(message, "text", str)
    return text.strip() if text else ""


def _messages(conversation: dict[str, Any], skip: Skip) -> list[dict[str, Any]]:
    """The conversation's messages whose ids can be read (the others are told to `skip`)."""
    out = []
    for n, message in enumerate(need(conversation, "chat_messages", list) or [], start=1):
        try:
            if not isinstance(message, dict):
                raise BadRecord(f"is {kind_of(message)}, not an object")
            ident(message.get("uuid"), "'uuid'")
            ident(message.get("parent_message_uuid"), "'parent_message_uuid'")
        except BadRecord as exc:
            skip(f"message {n}", str(exc))
            continue
        out.append(message)
    return out


def _branch(conversation: dict[str, Any], messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    leaf = ident(conversation.get("current_leaf_message_uuid"), "'current_leaf_message_uuid'")
    by_id = {str(m["uuid"]): m for m in messages if m.get("uuid") not in (None, "")}
    if not leaf or leaf not in by_id or not any("parent_message_uuid" in m for m in messages):
        return messages
    path, seen = [], set()
    node = by_id.get(leaf)
    while node is not None and str(node.get("uuid")) not in seen:
        seen.add(str(node.get("uuid")))
        path.append(node)
        parent = node.get("parent_message_uuid")
        node = by_id.get(str(parent)) if parent not in (None, "") else None
    return path[::-1]


def _turn(n: int, message: dict[str, Any]) -> Turn | None:
    sender = need(message, "sender", str)
    if sender not in ("human", "assistant"):
        return None
    text = _text(message)
    if not text:
        return None
    role = "user" if sender == "human" else "assistant"
    return Turn(message_id=ident(message.get("uuid"), "'uuid'") or str(n), role=role,
                speaker="User" if role == "user" else "Claude", text=text,
                created_at=when(optional(message, "created_at", str, int, float)))


def turns(conversation: dict[str, Any], skip: Skip | None = None) -> list[Turn]:
    """The kept branch's turns; a message of the wrong shape is left out (told to `skip`)."""
    def strict(where: str, why: str) -> None:
        raise BadRecord(f"{where}: {why}")

    tell = skip or strict
    out: list[Turn] = []
    for n, message in enumerate(_branch(conversation, _messages(conversation, tell))):
        try:
            turn = _turn(n, message)
        except BadRecord as exc:
            tell(f"message {named(message.get('uuid'), str(n + 1))}", str(exc))
            continue
        if turn is not None:
            out.append(turn)
    return out


def read(entry: Entry) -> Iterator[Memory]:
    for cid, conversation, kept in export_threads(entry, "chat_messages", "Claude.ai", turns):
        project = optional(conversation, "project", dict) or {}
        name = optional(project, "name", str)
        yield from conversation_memories(
            NAME, cid, kept, title=optional(conversation, "name", str) or None,
            created_at=when(optional(conversation, "created_at", str, int, float)),
            meta={"project": name} if name else None)
