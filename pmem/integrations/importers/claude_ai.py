"""Claude.ai data export: `conversations.json`, and beside it `memories.json` and the projects
(`projects.json`, or one `projects/<uuid>.json` each); `users.json` holds nothing to remember.

Conversations: a list with `chat_messages`. A message has `uuid`, `sender` ("human" or
"assistant"), `created_at`, a plain `text` and, in newer exports, `content` blocks (`text`,
`thinking`, `tool_use`, `tool_result`...): only the text blocks are kept. Messages that name
their parent (`parent_message_uuid`) form a tree (a regenerated answer or an edited question is
a second child); only one branch is imported: the one ending at the conversation's
`current_leaf_message_uuid`, or, where the export has none (or names a message it lacks), the
one ending at the newest leaf, as the claude.ai app opens a conversation on its latest message:
the leaf with the latest `created_at`, the later in `chat_messages` on a tie.

Memories (`memories.json`: a list of, or one, `{"conversations_memory", "project_memories":
{project uuid: text}, "account_uuid"}`): what Claude remembers about the person, as Markdown. Each
paragraph becomes an archival memory tagged `claude-ai` and `claude-memory` (and the section's
heading, where a bold line or a Markdown heading starts one); a project's memory is tagged
`claude-project-memory` with the project's uuid in meta (`project_uuid`). Ids come from the text, so importing a
later export adds only what changed (what Claude has since dropped stays, as it was).

Projects (`{"uuid", "name", "description", "prompt_template", "docs": [{"uuid", "filename",
"content", "created_at"}], "is_starter_project"}`): each knowledge document becomes an archival
memory (`Project <name>, <filename>: <content>`, split as long messages are), and the project's
instructions (`prompt_template`) and description one each, tagged `claude-ai`,
`claude-project` and the project's name. Anthropic's starter project is left out.

An export split over several zips is read as one: name the folder that holds them (each zip in
it is read), or import each zip; the ids of what was read from one zip do not depend on the
others. (No description of the manifest that links them was found, so it is not read.)

Bad records: a conversation whose `chat_messages` is no list or whose `current_leaf_message_uuid`
is no id is left out and counted; so is a message that is no object, or whose `uuid`, parent,
`sender`, `text` or `content` has the wrong type, a memory or project that is no object, and a
project document that is no object or whose content is no text. A name or a date of the wrong
type is read as absent.
"""

from __future__ import annotations

import re
from typing import Any, Iterator

from ...errors import UsageError
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
    make_memory,
    named,
    need,
    optional,
    slug,
    split_text,
    stable_id,
    when,
)

NAME = "claude-ai"
DESCRIPTION = "Claude.ai data export (zip or conversations.json with chat_messages, memories.json, projects)"
FILES = re.compile(r"(^|/)conversations\.json$")
KIND = "turn"


def accepts(name: str) -> bool:
    return name.endswith(".json")


PROJECT_FILES = re.compile(r"(^|/)(projects\.json|projects/[^/]+\.json)$")


def _kind(name: str, head: bytes) -> str | None:
    """Which file of an export this is, by its first bytes (and, for a project, its name or
    the fields only a project has)."""
    if b'"chat_messages"' in head:
        return "conversations"
    if b'"conversations_memory"' in head or b'"project_memories"' in head:
        return "memories"
    if b'"docs"' in head and b'"uuid"' in head and (
            PROJECT_FILES.search(name) or b'"prompt_template"' in head or b'"is_starter_project"' in head):
        return "projects"
    return None


def sniff(name: str, head: bytes) -> bool:
    return _kind(name, head) is not None


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


def _newest_leaf(messages: list[dict[str, Any]], by_id: dict[str, dict[str, Any]]) -> str | None:
    """The leaf the claude.ai app opens on: the latest `created_at`, the later one on a tie."""
    parents = {str(m.get("parent_message_uuid")) for m in messages if m.get("parent_message_uuid") not in (None, "")}
    leaves = [(when(optional(m, "created_at", str, int, float)) or "", n, key)
              for n, m in enumerate(messages) if (key := str(m.get("uuid"))) in by_id and key not in parents]
    return max(leaves)[2] if leaves else None


def _branch(conversation: dict[str, Any], messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    leaf = ident(conversation.get("current_leaf_message_uuid"), "'current_leaf_message_uuid'")
    by_id = {str(m["uuid"]): m for m in messages if m.get("uuid") not in (None, "")}
    if not any(m.get("parent_message_uuid") not in (None, "") for m in messages):
        return messages  # an older export: one list, in order
    if not leaf or leaf not in by_id:
        leaf = _newest_leaf(messages, by_id)
        if leaf is None:
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
    kind = _kind(entry.name, entry.head())
    if kind == "memories":
        yield from _memories(entry)
    elif kind == "projects":
        yield from _projects(entry)
    else:
        yield from _conversations(entry)


def _said_nothing(entry: Entry, read: int, what: str, why: str) -> None:
    """What an export file held, when none of it gave a memory (and no record was bad)."""
    if read and not entry.skips.count:
        entry.nothing = f"{read} {what} read, {why}"


def _conversations(entry: Entry) -> Iterator[Memory]:
    read = 0
    for cid, conversation, kept in export_threads(entry, "chat_messages", "Claude.ai", turns):
        read += 1
        project = optional(conversation, "project", dict) or {}
        name = optional(project, "name", str)
        yield from conversation_memories(
            NAME, cid, kept, title=optional(conversation, "name", str) or None,
            created_at=when(optional(conversation, "created_at", str, int, float)),
            meta={"project": name} if name else None)
    if entry.nothing is None:
        _said_nothing(entry, read, "conversations", "none with a message in text on its kept branch")


# -- memories.json and projects ---------------------------------------------------------------

def _objects(entry: Entry, label: str) -> list[tuple[str, Any]]:
    """(where, item) for a file holding a list of objects, or one."""
    data = entry.read_json()
    items = data if isinstance(data, list) else [data] if isinstance(data, dict) else None
    if items is None:
        raise UsageError(f"{entry.name}: expected a Claude.ai {label} object or a list of them")
    return [(f"{label} {n}", item) for n, item in enumerate(items, start=1)]


_HEADING = re.compile(r"^(?:#{1,6}\s+(.+?)\s*#*|\*\*(.+?)\*\*:?|__(.+?)__:?)$")


def paragraphs(text: str) -> list[tuple[str | None, str]]:
    """(section heading, paragraph) for each paragraph of a Markdown text; a line that is only a
    heading (`## Work`, `**Work context**`) names the section of the paragraphs after it."""
    out: list[tuple[str | None, str]] = []
    section: str | None = None
    for block in re.split(r"\n\s*\n", text.replace("\r\n", "\n")):
        block = block.strip()
        if not block:
            continue
        first, _, rest = block.partition("\n")
        heading = _HEADING.match(first.strip())
        if heading:
            section = next(g for g in heading.groups() if g).strip() or None
            block = rest.strip()
            if not block:
                continue
        out.append((section, block))
    return out


def _remembered(text: str, account: str | None, tags: set[str], meta: dict[str, Any],
                at: str | None) -> Iterator[Memory]:
    for section, paragraph in paragraphs(text):
        for part in split_text(paragraph):
            m_meta = {"kind": "claude-memory", "format": NAME, **meta}
            if section:
                m_meta["section"] = section
            yield make_memory(id=stable_id(NAME, "memory", account or "", meta.get("project_uuid") or "", part),
                              text=part, tier="archival", tags=tags | ({slug(section)} if section else set()),
                              source=f"{NAME}:memory", meta=m_meta, created_at=at)


def _memories(entry: Entry) -> Iterator[Memory]:
    """memories.json: Claude's memory of the person (`conversations_memory`) and of each
    project (`project_memories`), a paragraph each."""
    items = _objects(entry, "memory")
    found = 0
    for where, item in items:
        if not isinstance(item, dict):
            entry.skip(where, f"is {kind_of(item)}, not an object")
            continue
        try:
            account = ident(item.get("account_uuid"), "'account_uuid'")
            general = need(item, "conversations_memory", str)
            projects = need(item, "project_memories", dict) or {}
        except BadRecord as exc:
            entry.skip(where, str(exc))
            continue
        at = entry.mtime  # the export's date: the memory itself carries none
        if general and general.strip():
            for m in _remembered(general, account, {NAME, "claude-memory"}, {}, at):
                found += 1
                yield m
        for project, text in projects.items():
            if not isinstance(text, str):
                entry.skip(f"{where}, project {named(project, '?')}", f"is {kind_of(text)}, not text")
                continue
            if text.strip():
                for m in _remembered(text, account, {NAME, "claude-memory", "claude-project-memory"},
                                     {"project_uuid": project}, at):
                    found += 1
                    yield m
    if not found:
        _said_nothing(entry, len(items), "memory records", "each empty (Claude remembered nothing yet)")


def _projects(entry: Entry) -> Iterator[Memory]:
    """A project's knowledge documents, instructions and description, a memory each."""
    items = _objects(entry, "project")
    found = starters = 0
    for m in _project_memories(entry, items):
        if m is None:
            starters += 1
            continue
        found += 1
        yield m
    if not found:
        _said_nothing(entry, len(items), "projects", f"{starters} of them Anthropic's starter project (left out), "
                      "the rest with no documents, instructions or description")


def _project_memories(entry: Entry, items: list[tuple[str, Any]]) -> Iterator[Memory | None]:
    """The memories of each project; None for a starter project, left out."""
    for where, item in items:
        if not isinstance(item, dict):
            entry.skip(where, f"is {kind_of(item)}, not an object")
            continue
        if item.get("is_starter_project") is True:
            yield None  # Anthropic's example project, not the person's
            continue
        try:
            pid = ident(item.get("uuid"), "'uuid'")
            docs = need(item, "docs", list) or []
        except BadRecord as exc:
            entry.skip(where, str(exc))
            continue
        if pid is None:
            entry.skip(where, "no 'uuid'")
            continue
        name = (optional(item, "name", str) or "").strip() or "untitled"
        created = when(optional(item, "created_at", str, int, float))
        updated = when(optional(item, "updated_at", str, int, float)) or created
        tags = {NAME, "claude-project", slug(name)} - {""}
        meta = {"format": NAME, "project": name, "project_uuid": pid}
        for field, label, kind in (("prompt_template", "instructions", "project-instructions"),
                                   ("description", "description", "project-description")):
            text = optional(item, field, str)
            for k, part in enumerate(split_text(text or "")):
                yield make_memory(id=stable_id(NAME, "project", pid, field, k), tier="archival",
                                  text=f"Project {name}, {label}: {part}", tags=tags, source=f"{NAME}:project:{pid}",
                                  meta={**meta, "kind": kind}, created_at=created, updated_at=updated)
        for n, doc in enumerate(docs, start=1):
            place = f"{where}, document {n}"
            if not isinstance(doc, dict):
                entry.skip(place, f"is {kind_of(doc)}, not an object")
                continue
            try:
                did = ident(doc.get("uuid"), "'uuid'") or str(n)
                content = need(doc, "content", str)
            except BadRecord as exc:
                entry.skip(place, str(exc))
                continue
            filename = (optional(doc, "filename", str) or "").strip() or f"document {n}"
            at = when(optional(doc, "created_at", str, int, float)) or created
            parts = split_text(content or "")
            for k, part in enumerate(parts):
                yield make_memory(id=stable_id(NAME, "project", pid, "doc", did, k if len(parts) > 1 else ""),
                                  text=f"Project {name}, {filename}: {part}", tier="archival",
                                  tags=tags | {"project-knowledge"}, source=f"{NAME}:project:{pid}",
                                  meta={**meta, "kind": "project-document", "filename": filename, "document": did,
                                        **({"part": k} if len(parts) > 1 else {})},
                                  created_at=at, updated_at=at)
