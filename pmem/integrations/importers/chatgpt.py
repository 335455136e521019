"""ChatGPT data export: `conversations.json` (or the split `conversations-NNN.json`), alone or in the zip.

Each conversation holds its messages as a tree (`mapping`: node id -> {message, parent, children});
regenerating or editing a message starts a branch. Only the branch the person kept is imported:
the path from `current_node` back to the root. System, tool and hidden messages are skipped, and
so are messages addressed to a tool (`recipient` other than "all").
"""

from __future__ import annotations

import re
from typing import Any, Iterator

from ...records import Memory
from .base import Entry, Turn, conversation_memories, export_conversations, when

NAME = "chatgpt"
DESCRIPTION = "ChatGPT data export (zip, conversations.json, conversations-NNN.json)"
FILES = re.compile(r"(^|/)conversations(-\d+)?\.json$")
KIND = "turn"
_TEXT_TYPES = {"text", "multimodal_text"}


def accepts(name: str) -> bool:
    return name.endswith(".json")


def sniff(name: str, head: bytes) -> bool:
    return b'"mapping"' in head and (b'"current_node"' in head or b'"author"' in head)


def _text(content: dict[str, Any]) -> str:
    if content.get("content_type") not in _TEXT_TYPES:
        return ""
    parts = content.get("parts") or []
    return "\n".join(p for p in parts if isinstance(p, str) and p.strip()).strip()


def _hidden(message: dict[str, Any]) -> bool:
    meta = message.get("metadata") or {}
    return bool(meta.get("is_visually_hidden_from_conversation") or meta.get("is_user_system_message")
                or meta.get("is_contextual_answers_system_message"))


def kept_branch(conversation: dict[str, Any]) -> list[dict[str, Any]]:
    """The nodes from the root to `current_node` (the branch shown when the export was made).

    Without a usable `current_node`, the newest leaf stands in for it."""
    mapping = conversation.get("mapping") or {}
    if not isinstance(mapping, dict):
        return []
    node_id = conversation.get("current_node")
    if node_id not in mapping:
        leaves = [n for n in mapping.values() if isinstance(n, dict) and not n.get("children")]
        if not leaves:
            return []
        node_id = max(leaves, key=lambda n: ((n.get("message") or {}).get("create_time") or 0)).get("id")
    path: list[dict[str, Any]] = []
    seen: set[str] = set()
    while node_id is not None and node_id in mapping and node_id not in seen:
        seen.add(node_id)
        node = mapping[node_id]
        path.append(node)
        node_id = node.get("parent")
    return path[::-1]


def turns(conversation: dict[str, Any]) -> list[Turn]:
    out: list[Turn] = []
    for node in kept_branch(conversation):
        message = node.get("message")
        if not isinstance(message, dict):
            continue
        author = message.get("author") or {}
        role = author.get("role")
        if role not in ("user", "assistant") or _hidden(message):
            continue
        if message.get("recipient", "all") not in ("all", None):
            continue  # a call to a tool (browser, python, dalle), not said to the person
        text = _text(message.get("content") or {})
        if not text:
            continue
        extra = {}
        model = (message.get("metadata") or {}).get("model_slug")
        if role == "assistant" and model:
            extra["model"] = model
        out.append(Turn(message_id=str(message.get("id") or node.get("id")), role=role,
                        speaker="User" if role == "user" else "ChatGPT", text=text,
                        created_at=when(message.get("create_time")), extra=extra or None))
    return out


def read(entry: Entry) -> Iterator[Memory]:
    for cid, conversation in export_conversations(entry, "mapping", "ChatGPT"):
        yield from conversation_memories(
            NAME, cid, turns(conversation), title=conversation.get("title") or None,
            created_at=when(conversation.get("create_time")))
