"""Claude.ai data export: `conversations.json`, a list of conversations with `chat_messages`.

A message has `uuid`, `sender` ("human" or "assistant"), `created_at`, a plain `text` and, in
newer exports, `content` blocks (`text`, `thinking`, `tool_use`, `tool_result`...): only the text
blocks are kept. Where messages name their parent (`parent_message_uuid`) and the conversation
its `current_leaf_message_uuid`, only that branch is imported.
"""

from __future__ import annotations

import re
from typing import Any, Iterator

from ...records import Memory
from .base import Entry, Turn, conversation_memories, export_conversations, when

NAME = "claude-ai"
DESCRIPTION = "Claude.ai data export (zip or conversations.json with chat_messages)"
FILES = re.compile(r"(^|/)conversations\.json$")
KIND = "turn"


def accepts(name: str) -> bool:
    return name.endswith(".json")


def sniff(name: str, head: bytes) -> bool:
    return b'"chat_messages"' in head


def _text(message: dict[str, Any]) -> str:
    blocks = message.get("content")
    if isinstance(blocks, list) and blocks:
        texts = [b.get("text") for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
        return "\n\n".join(t.strip() for t in texts if isinstance(t, str) and t.strip())
    text = message.get("text")
    return text.strip() if isinstance(text, str) else ""


def _branch(conversation: dict[str, Any], messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    leaf = conversation.get("current_leaf_message_uuid")
    by_id = {m.get("uuid"): m for m in messages}
    if not leaf or leaf not in by_id or not any("parent_message_uuid" in m for m in messages):
        return messages
    path, seen = [], set()
    node = by_id.get(leaf)
    while node is not None and node.get("uuid") not in seen:
        seen.add(node.get("uuid"))
        path.append(node)
        node = by_id.get(node.get("parent_message_uuid"))
    return path[::-1]


def turns(conversation: dict[str, Any]) -> list[Turn]:
    messages = [m for m in conversation.get("chat_messages") or [] if isinstance(m, dict)]
    out: list[Turn] = []
    for n, message in enumerate(_branch(conversation, messages)):
        sender = message.get("sender")
        if sender not in ("human", "assistant"):
            continue
        text = _text(message)
        if not text:
            continue
        role = "user" if sender == "human" else "assistant"
        out.append(Turn(message_id=str(message.get("uuid") or n), role=role,
                        speaker="User" if role == "user" else "Claude", text=text,
                        created_at=when(message.get("created_at"))))
    return out


def read(entry: Entry) -> Iterator[Memory]:
    for cid, conversation in export_conversations(entry, "chat_messages", "Claude.ai"):
        project = conversation.get("project")
        meta = {"project": project.get("name")} if isinstance(project, dict) and project.get("name") else None
        yield from conversation_memories(
            NAME, cid, turns(conversation), title=conversation.get("name") or None,
            created_at=when(conversation.get("created_at")), meta=meta)
