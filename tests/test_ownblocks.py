"""pmem's own blocks: marked where pmem writes them, taken out where they come back, and a
person's text that only mentions the marker left exactly as it was."""

from __future__ import annotations

import json

import pytest

from pmem import ownblocks
from pmem.records import Memory

BLOCK = ("# From the user's memory (pmem; quote it, do not invent more)\n\n## Core\n"
         "- [2026-01-02 · ab12cd34] My cat is Miso")


def test_a_marked_block_and_the_gemini_wrapper_around_it_are_taken_out():
    marked = ownblocks.mark(BLOCK)
    assert marked.startswith("<!-- pmem:block ") and BLOCK in marked
    prompt = f"<hook_context>{marked}</hook_context>\n\nWhat is my cat called?"  # what Gemini CLI -p sends
    assert ownblocks.strip(prompt) == "What is my cat called?"
    assert ownblocks.strip(marked) == ""
    assert ownblocks.strip(f"before\n{marked}\nafter {marked}") == "before\n\nafter"


def test_a_block_a_host_rewrapped_still_comes_out():
    marked = ownblocks.mark(BLOCK)
    assert ownblocks.strip(marked.replace("\n", "\r\n")) == ""
    assert ownblocks.strip("  " + marked.replace("\n\n", "\n") + "  ") == ""


@pytest.mark.parametrize("text", [
    "What does <!-- pmem:block 0123456789ab --> mean in my prompt?",
    "I saw <!-- pmem:block 0123456789ab --> and <!-- /pmem:block 0123456789ab --> around my notes",
    "<!-- pmem:block 0123456789ab -->\nmy own words\n<!-- /pmem:block 0123456789ab -->",
    "pmem:block and /pmem:block are the marker words; <hook_context> too",
    "<hook_context>typed by hand</hook_context> is Gemini's wrapper",
])
def test_text_that_mentions_the_marker_is_not_damaged(text):
    assert ownblocks.strip(text) == text
    assert ownblocks.strip(text + "\n\n" + ownblocks.mark(BLOCK)) == text.strip()


def test_an_edited_block_is_not_taken_out():
    marked = ownblocks.mark(BLOCK)
    edited = marked.replace("Miso", "Mochi")
    assert ownblocks.strip(edited) == edited


def test_user_words_drop_what_gemini_put_in_front():
    old = "<hook_context># From the user's memory (pmem; an older pmem, unmarked)</hook_context>\n\nhello"
    assert ownblocks.user_words(old) == "hello"
    assert ownblocks.user_words("hello <hook_context>x</hook_context>") == "hello <hook_context>x</hook_context>"


def test_every_block_pmem_injects_is_marked(store):
    from pmem.integrations import context, hooks
    from pmem.recall import recall, render

    store.add("My cat is called Miso", pinned=True)
    store.add("The cabin trip is in May")
    data = hooks.HookInput(session_id="s1", cwd="/tmp/cabin", source="startup")
    for block in (hooks.build_context(store, "session-start", data, hooks.HookSettings()),
                  context.render_block(store),
                  *(render(recall(store, "cabin trip"), fmt) for fmt in ("md", "xml", "text"))):
        assert "Miso" in block and ownblocks.strip(block) == ""
    assert json.loads(render(recall(store, "cabin trip"), "json"))["core"]  # JSON, for programs, stays JSON


def test_the_prompt_hook_searches_with_the_users_words(store):
    """Gemini CLI -p: the session-start block (long, pmem's own) in front of the question."""
    from pmem.integrations import hooks

    for i in range(40):
        store.add(f"Standing preference {i}: tidy commit messages and short functions", pinned=True)
    store.add("My cat is called Miso and she likes tuna")
    data = hooks.HookInput(session_id="s2", cwd="/tmp/x", source="startup")
    start = hooks.build_context(store, "session-start", data, hooks.HookSettings())
    assert len(start) > hooks.MAX_PROMPT_CHARS
    prompt = f"<hook_context>{start}</hook_context>\n\nWhat is my cat called? Miso tuna"
    block = hooks.build_context(store, "user-prompt", hooks.HookInput(session_id="s2", prompt=prompt),
                                hooks.HookSettings())
    assert "Miso" in block and "Standing preference" not in block


def test_an_import_keeps_the_users_words_and_no_block():
    from pmem.integrations.importers.base import Turn, conversation_memories

    marked = ownblocks.mark(BLOCK)
    turns = [Turn("1", "user", "User", f"<hook_context>{marked}</hook_context>\n\nWhat is my cat called?"),
             Turn("2", "user", "User", marked),
             Turn("3", "assistant", "Gemini", "Miso.")]
    memories: list[Memory] = list(conversation_memories("gemini", "c1", turns))
    assert [m.text for m in memories] == ["User: What is my cat called?", "Gemini: Miso."]
    assert [m.thread_pos for m in memories] == [0, 1]


def test_text_made_of_markers_costs_linear_time():
    import time

    marker = "<!-- pmem:block 0123456789ab -->\n"
    hostile = marker * 50_000 + "x" * 1_000_000
    wrapped = "<hook_context></hook_context>" * 100_000 + "hello"
    t = time.perf_counter()
    assert ownblocks.strip(hostile) == hostile and ownblocks.user_words(hostile) == hostile.strip()
    assert ownblocks.user_words(wrapped) == "hello"
    assert time.perf_counter() - t < 5
