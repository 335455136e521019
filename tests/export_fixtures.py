"""Synthetic exports written to follow each published structure (never real people's data),
and the mutations of them that put a wrong JSON type in every field.

Used by tests/integrations/importers/test_importers.py and test_importers_bad_records.py,
benchmarks/import_bench.py and tests/stress/badinput_cases.py.
"""

from __future__ import annotations

import copy
import gzip
import io
import json
import sqlite3
import zipfile
from pathlib import Path
from typing import Any, Iterator

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def chatgpt_conversation(cid: str, turns: list[tuple[str, str]], *, title: str = "A chat",
                         start: float = T0, branch: bool = True, extras: bool = True) -> dict[str, Any]:
    """A conversation as in conversations.json: a `mapping` tree, `current_node` at the kept leaf.

    With `branch`, the first answer was regenerated: the abandoned answer stays in the tree.
    With `extras`, a hidden system message, a tool call and a tool result sit on the kept path."""
    mapping: dict[str, Any] = {}

    def node(nid: str, parent: str | None, message: dict | None) -> str:
        mapping[nid] = {"id": nid, "message": message, "parent": parent, "children": []}
        if parent:
            mapping[parent]["children"].append(nid)
        return nid

    def msg(mid: str, role: str, text: str | None, t: float | None, **kw) -> dict[str, Any]:
        content = kw.pop("content", None) or {"content_type": "text", "parts": [text]}
        return {"id": mid, "author": {"role": role, "name": kw.pop("name", None), "metadata": {}},
                "create_time": t, "update_time": None, "content": content, "status": "finished_successfully",
                "end_turn": True, "weight": 1.0, "metadata": kw.pop("metadata", {}),
                "recipient": kw.pop("recipient", "all"), "channel": None}

    last = node(f"{cid}-root", None, None)
    if extras:
        last = node(f"{cid}-sys", last, msg(f"{cid}-sys", "system", "", None,
                                            metadata={"is_visually_hidden_from_conversation": True}))
    t = start
    for i, (role, text) in enumerate(turns):
        t += 30
        if branch and i == 1 and role == "assistant":
            node(f"{cid}-abandoned", last, msg(f"{cid}-abandoned", "assistant", "ABANDONED ANSWER", t,
                                                metadata={"model_slug": "gpt-4o"}))
        if extras and i == 1:
            last = node(f"{cid}-call", last, msg(f"{cid}-call", "assistant", None, t,
                                                 content={"content_type": "code", "language": "python",
                                                          "text": "print(1)"}, recipient="python"))
            last = node(f"{cid}-tool", last, msg(f"{cid}-tool", "tool", "TOOL OUTPUT", t, name="python"))
        last = node(f"{cid}-m{i}", last, msg(f"{cid}-m{i}", role, text, t,
                                             metadata={"model_slug": "gpt-4o"} if role == "assistant" else {}))
    return {"title": title, "create_time": start, "update_time": t, "mapping": mapping,
            "moderation_results": [], "current_node": last, "plugin_ids": None, "conversation_id": cid,
            "conversation_template_id": None, "gizmo_id": None, "is_archived": False, "safe_urls": [],
            "default_model_slug": "gpt-4o", "id": cid}


def chatgpt_zip(path: Path, conversations: list[dict[str, Any]], *, split: int | None = None) -> Path:
    """An export archive: conversations.json (or conversations-NNN.json files of `split` each),
    with the other files an export holds."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        if split:
            for n, start in enumerate(range(0, len(conversations), split)):
                zf.writestr(f"conversations-{n:03d}.json", json.dumps(conversations[start:start + split]))
        else:
            zf.writestr("conversations.json", json.dumps(conversations))
        zf.writestr("user.json", json.dumps({"id": "user-x", "email": "someone@example.invalid"}))
        zf.writestr("message_feedback.json", json.dumps([{"id": "f1", "conversation_id": "c1",
                                                          "rating": "thumbsUp", "content": "{}"}]))
        zf.writestr("chat.html", "<html><body>chats</body></html>")
        zf.writestr("file-abc.png", b"\x89PNG\r\n\x1a\n")
    return path


def claude_ai_conversation(cid: str, turns: list[tuple[str, str]], *, name: str = "Claude chat",
                           start: str = "2026-02-01T09:00:00.000000Z") -> dict[str, Any]:
    msgs = []
    for i, (sender, text) in enumerate(turns):
        at = f"2026-02-01T09:{i:02d}:00.000000Z"
        content = [{"type": "text", "text": text, "citations": []}]
        if sender == "assistant" and i == 1:
            content = [{"type": "thinking", "thinking": "PRIVATE THOUGHTS"},
                       {"type": "tool_use", "name": "web_search", "input": {"query": "TOOL INPUT"}},
                       {"type": "tool_result", "content": [{"type": "text", "text": "TOOL RESULT"}]},
                       {"type": "text", "text": text}]
        msgs.append({"uuid": f"{cid}-{i}", "text": text, "content": content, "sender": sender,
                     "created_at": at, "updated_at": at, "attachments": [], "files": []})
    return {"uuid": cid, "name": name, "summary": "", "created_at": start, "updated_at": start,
            "account": {"uuid": "acct-1"}, "chat_messages": msgs}


def claude_code_session(session: str, cwd: str) -> list[dict[str, Any]]:
    """Lines of a transcript: a summary, a meta caveat, a user prompt, an answer streamed over two
    lines with a tool call, a tool result, a slash command, a sub-agent line, and a final answer."""
    base = {"sessionId": session, "cwd": cwd, "version": "2.0.0", "gitBranch": "main", "userType": "external"}

    def line(uuid: str, kind: str, content: Any, ts: str, **kw) -> dict[str, Any]:
        role = "user" if kind == "user" else "assistant"
        message: dict[str, Any] = {"role": role, "content": content}
        if role == "assistant":
            message.update({"id": kw.pop("mid", f"msg-{uuid}"), "model": "claude-sonnet-4-5", "type": "message"})
        return {**base, "parentUuid": None, "isSidechain": kw.pop("side", False), "type": kind,
                "message": message, "uuid": uuid, "timestamp": ts, **kw}

    return [
        {"type": "summary", "summary": "Fixing the parser", "leafUuid": "u9"},
        line("u0", "user", "Caveat: The messages below were generated by the user while running local commands.",
             "2026-03-01T10:00:00.000Z", isMeta=True),
        line("u1", "user", "The parser drops the last line <system-reminder>REMINDER</system-reminder>",
             "2026-03-01T10:00:05.000Z"),
        line("a1", "assistant", [{"type": "thinking", "thinking": "PRIVATE"}, {"type": "text", "text": "Let me look."}],
             "2026-03-01T10:00:09.000Z", mid="msg-A"),
        line("a2", "assistant",
             [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "TOOL INPUT"}}],
             "2026-03-01T10:00:10.000Z", mid="msg-A"),
        line("u2", "user", [{"type": "tool_result", "tool_use_id": "t1", "content": "TOOL RESULT"}],
             "2026-03-01T10:00:11.000Z", toolUseResult={"stdout": "TOOL RESULT"}),
        line("a3", "assistant", [{"type": "text", "text": "The loop stops one line early."}],
             "2026-03-01T10:00:15.000Z", mid="msg-A"),
        line("u3", "user", "<command-name>/clear</command-name>\n<command-message>clear</command-message>",
             "2026-03-01T10:01:00.000Z"),
        line("s1", "assistant", [{"type": "text", "text": "SIDECHAIN"}], "2026-03-01T10:01:30.000Z", side=True),
        line("u4", "user", [{"type": "text", "text": "Please fix it and add a test."}], "2026-03-01T10:02:00.000Z"),
        line("a4", "assistant", [{"type": "text", "text": "Fixed; the test covers the last line."}],
             "2026-03-01T10:03:00.000Z", mid="msg-B"),
    ]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def llm_db_new(path: Path) -> Path:
    """The schema of llm's migrations up to m013 (conversations + responses)."""
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE [_llm_migrations] ([name] TEXT PRIMARY KEY, [applied_at] TEXT);
        CREATE TABLE [conversations] ([id] TEXT PRIMARY KEY, [name] TEXT, [model] TEXT);
        CREATE TABLE [responses] ([id] TEXT PRIMARY KEY, [model] TEXT, [prompt] TEXT, [system] TEXT,
            [prompt_json] TEXT, [options_json] TEXT, [response] TEXT, [response_json] TEXT,
            [conversation_id] TEXT REFERENCES [conversations]([id]), [duration_ms] INTEGER,
            [datetime_utc] TEXT, [input_tokens] INTEGER, [output_tokens] INTEGER, [token_details] TEXT);
    """)
    db.execute("INSERT INTO conversations VALUES ('01conv', 'Packing list', 'gpt-4o-mini')")
    db.execute("INSERT INTO conversations VALUES ('01solo', 'Haiku', 'claude-3-haiku')")
    rows = [("01r1", "gpt-4o-mini", "What should I pack for Oslo in March?", "Be brief",
             "Layers, a warm coat and boots.", "01conv", "2026-03-10T08:00:00.123456+00:00"),
            ("01r2", "gpt-4o-mini", "And for a day hike?", None, "Add crampons and a thermos.", "01conv",
             "2026-03-10T08:05:00.000000+00:00"),
            ("01r3", "claude-3-haiku", "A haiku about tea", None, "Steam curls from the cup", "01solo",
             "2026-03-11T20:00:00+00:00")]
    db.executemany("INSERT INTO responses (id, model, prompt, system, response, conversation_id, datetime_utc) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    db.commit()
    db.close()
    return path


def llm_db_old(path: Path) -> Path:
    """The table before m010: `logs` with chat_id and timestamp_utc (m006-m008)."""
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE [_llm_migrations] ([name] TEXT PRIMARY KEY, [applied_at] TEXT);
        CREATE TABLE [logs] ([id] INTEGER PRIMARY KEY, [model] TEXT, [prompt] TEXT, [system] TEXT,
            [prompt_json] TEXT, [options_json] TEXT, [response] TEXT, [response_json] TEXT,
            [reply_to_id] INTEGER, [chat_id] INTEGER, [duration_ms] INTEGER, [timestamp_utc] TEXT);
    """)
    db.executemany("INSERT INTO logs (id, model, prompt, response, chat_id, timestamp_utc) VALUES (?, ?, ?, ?, ?, ?)",
                   [(1, "gpt-3.5-turbo", "Name a red fruit", "Cherry.", None, "2023-06-01 10:00:00.000001"),
                    (2, "gpt-3.5-turbo", "Another one", "Strawberry.", 1, "2023-06-01 10:01:00.000001")])
    db.commit()
    db.close()
    return path


MCP_MEMORY = [
    {"type": "entity", "name": "Ada_Lovelace", "entityType": "person",
     "observations": ["Prefers tea to coffee", "Lives in Lisbon"]},
    {"type": "entity", "name": "Analytical_Engines_Ltd", "entityType": "organization", "observations": []},
    {"type": "relation", "from": "Ada_Lovelace", "to": "Analytical_Engines_Ltd", "relationType": "works_at"},
]

MEM0_GET_ALL = {"results": [
    {"id": "9a1c0d1e-0000-4000-8000-000000000001", "memory": "Is allergic to peanuts", "hash": "h1",
     "metadata": None, "categories": ["health", "food"], "user_id": "sam",
     "created_at": "2025-07-26T10:29:36.630547-07:00", "updated_at": "2025-08-01T09:00:00-07:00"},
    {"id": "9a1c0d1e-0000-4000-8000-000000000002", "memory": "Works as a nurse in Porto", "hash": "h2",
     "metadata": {"source": "chat"}, "categories": ["professional_details"], "user_id": "sam",
     "created_at": "2025-07-27T11:00:00-07:00", "updated_at": None},
]}


def openmemory_zip(path: Path) -> Path:
    """OpenMemory's backup: memories.json (relational) and memories.jsonl.gz (one memory a line)."""
    memories = [
        {"id": "m-1", "user_id": "u-internal", "app_id": "a-1", "content": "Plays the cello on Sundays",
         "metadata": {}, "state": "active", "created_at": "2025-05-01T12:00:00+00:00",
         "updated_at": "2025-05-02T12:00:00+00:00", "archived_at": None, "deleted_at": None,
         "category_ids": ["c-1"]},
        {"id": "m-2", "user_id": "u-internal", "app_id": "a-1", "content": "DELETED MEMORY", "metadata": {},
         "state": "deleted", "created_at": "2025-05-03T12:00:00+00:00", "updated_at": None,
         "archived_at": None, "deleted_at": "2025-05-04T12:00:00+00:00", "category_ids": []},
    ]
    payload = {"user": {"id": "u-internal", "user_id": "sam", "name": "Sam", "email": None, "metadata": {},
                        "created_at": None, "updated_at": None},
               "apps": [{"id": "a-1", "name": "cursor"}],
               "categories": [{"id": "c-1", "name": "hobbies", "description": None}],
               "memories": memories, "memory_categories": [{"memory_id": "m-1", "category_id": "c-1"}],
               "status_history": [], "access_controls": [], "export_meta": {"version": "1"}}
    lines = [{"id": m["id"], "content": m["content"], "metadata": {}, "created_at": m["created_at"],
              "updated_at": m["updated_at"], "state": m["state"], "app": "cursor",
              "categories": ["hobbies"] if m["id"] == "m-1" else []} for m in memories]
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb") as gz:
        gz.write("".join(json.dumps(x) + "\n" for x in lines).encode())
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("memories.json", json.dumps(payload, indent=2))
        zf.writestr("memories.jsonl.gz", buf.getvalue())
    return path


OBSIDIAN_NOTE = """---
title: Garden plans
tags: [garden, home]
created: 2026-04-02
aliases:
  - Allotment
---
# Garden plans

The tomatoes go along the south fence this year. #vegetables

## Watering

Water early in the morning, before eight.

Drip lines on the raised beds need new filters.
"""

BASIC_MEMORY_NOTE = """---
title: Coffee Brewing Methods
type: note
tags:
- coffee
- brewing
permalink: coffee-brewing-methods
---

# Coffee Brewing Methods

## Observations
- [method] Pour over gives more clarity than French press
- [technique] Water at 96 C extracts best #brewing (tested at home)
- [ ] a task, not an observation

## Relations
- relates_to [[Coffee Bean Origins]]
"""


# -- wrong types in every field -----------------------------------------------------------------

WRONG_TYPES: list[Any] = [None, True, 7, "x", ["x"], {"x": "x"}]  # one value of each JSON type


def json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__


def field_paths(value: Any, path: tuple = ()) -> Iterator[tuple]:
    """Every path into a JSON value, the value itself first, then each key and index, depth first."""
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from field_paths(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from field_paths(item, (*path, i))


def get_path(doc: Any, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def mutations(doc: Any, record: tuple = (), *, every: bool = True) -> Iterator[tuple[tuple, Any, Any]]:
    """(path, wrong value, mutated copy of `doc`) for every field under `record` (itself
    included) and every JSON type the field does not have; with `every` False, one wrong type
    per field (turn by turn: a sample a fifth the size)."""
    turn = 0
    for sub in field_paths(get_path(doc, record)):
        path = (*record, *sub)
        original = get_path(doc, path)
        wrong = [w for w in WRONG_TYPES if json_kind(w) != json_kind(original)]
        if not every:
            wrong = [wrong[turn % len(wrong)]]
            turn += 1
        for value in wrong:
            mutated = copy.deepcopy(doc)
            if path:
                get_path(mutated, path[:-1])[path[-1]] = copy.deepcopy(value)
            else:
                mutated = copy.deepcopy(value)
            yield path, value, mutated


def mutation_name(path: tuple, wrong: Any) -> str:
    return "/".join(str(p) for p in path) + f" = {json.dumps(wrong)}"
