"""ChatGPT data export: `conversations.json` (or the split `conversations-NNN.json`), alone or in the zip.

Each conversation holds its messages as a tree (`mapping`: node id -> {message, parent, children});
regenerating or editing a message starts a branch. Only the branch the person kept is imported:
the path from `current_node` back to the root. System, tool and hidden messages are skipped, and
so are messages addressed to a tool (`recipient` other than "all").

Each answer names its model in `metadata.model_slug`; newer exports often leave that out and
name the conversation's model in `default_model_slug` instead, which then stands for the answers
that name none (the meta's `model`, as with older exports).

Bad records: a conversation whose tree cannot be walked (`mapping` no object, `current_node` or a
`parent` no id, a node on the kept branch no object) is left out and counted; so is a message on
it whose `author`, `content`, `metadata`, `recipient`, role or parts have the wrong type. A title,
a date or a model name of the wrong type is read as absent.
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
    if need(content, "content_type", str) not in _TEXT_TYPES:
        return ""
    parts = need(content, "parts", list) or []
    return "\n".join(p for p in parts if isinstance(p, str) and p.strip()).strip()  # images are objects


def _hidden(message: dict[str, Any]) -> bool:
    meta = need(message, "metadata", dict) or {}
    return bool(meta.get("is_visually_hidden_from_conversation") or meta.get("is_user_system_message")
                or meta.get("is_contextual_answers_system_message"))


def _node_time(node: Any) -> str:
    message = node.get("message") if isinstance(node, dict) else None
    return (when(message.get("create_time")) if isinstance(message, dict) else None) or ""


def kept_branch(conversation: dict[str, Any]) -> list[dict[str, Any]]:
    """The nodes from the root to `current_node` (the branch shown when the export was made).

    Without a usable `current_node`, the newest leaf stands in for it. A tree that cannot be
    walked (a node that is no object, a link that is no id) raises BadRecord."""
    mapping = need(conversation, "mapping", dict) or {}
    node_id = need(conversation, "current_node", str)
    if node_id not in mapping:
        leaves = [k for k, n in mapping.items() if isinstance(n, dict) and not n.get("children")]
        if not leaves:
            return []
        node_id = max(leaves, key=lambda k: _node_time(mapping[k]))
    path: list[dict[str, Any]] = []
    seen: set[str] = set()
    while isinstance(node_id, str) and node_id in mapping and node_id not in seen:
        seen.add(node_id)
        node = mapping[node_id]
        if not isinstance(node, dict):
            raise BadRecord(f"node {named(node_id, '?')} is {kind_of(node)}, not an object")
        path.append(node)
        try:
            node_id = need(node, "parent", str)
        except BadRecord as exc:
            raise BadRecord(f"node {named(node_id, '?')}: {exc}") from None
    return path[::-1]


def _turn(node: dict[str, Any], default_model: str | None = None) -> Turn | None:
    """The turn a node on the kept branch holds; None for what is not said between the two.
    An answer that names no model gets `default_model` (the conversation's)."""
    message = node.get("message")
    if message is None:
        return None
    if not isinstance(message, dict):
        raise BadRecord(f"'message' is {kind_of(message)}, not an object")
    author = need(message, "author", dict) or {}
    role = need(author, "role", str)
    if role not in ("user", "assistant") or _hidden(message):
        return None
    if need(message, "recipient", str) not in ("all", None):
        return None  # a call to a tool (browser, python, dalle), not said to the person
    text = _text(need(message, "content", dict) or {})
    if not text:
        return None
    message_id = ident(message.get("id"), "'id'") or ident(node.get("id"), "the node's 'id'")
    if message_id is None:
        raise BadRecord("no id")
    extra = {}
    model = optional(need(message, "metadata", dict) or {}, "model_slug", str) or default_model
    if role == "assistant" and model:
        extra["model"] = model
    return Turn(message_id=message_id, role=role, speaker="User" if role == "user" else "ChatGPT", text=text,
                created_at=when(optional(message, "create_time", int, float, str)), extra=extra or None)


def turns(conversation: dict[str, Any], skip: Skip | None = None) -> list[Turn]:
    """The kept branch's turns; a message of the wrong shape is left out (told to `skip`)."""
    out: list[Turn] = []
    default_model = optional(conversation, "default_model_slug", str)
    for n, node in enumerate(kept_branch(conversation)):
        try:
            turn = _turn(node, default_model and default_model.strip() or None)
        except BadRecord as exc:
            if skip is None:
                raise
            message = node.get("message")
            mid = message.get("id") if isinstance(message, dict) else None
            skip(f"message {named(mid, named(node.get('id'), str(n + 1)))}", str(exc))
            continue
        if turn is not None:
            out.append(turn)
    return out


def read(entry: Entry) -> Iterator[Memory]:
    read = 0
    for cid, conversation, kept in export_threads(entry, "mapping", "ChatGPT", turns):
        read += 1
        yield from conversation_memories(
            NAME, cid, kept, title=optional(conversation, "title", str) or None,
            created_at=when(optional(conversation, "create_time", int, float, str)))
    if read and not entry.skips.count:
        entry.nothing = (f"{read} conversations read, none with a message in text on its kept branch "
                         "(system, tool and hidden messages are not imported)")
