"""The ChatGPT importer and the model of an answer: newer exports name it once per conversation
(`default_model_slug`) and leave each message's `metadata.model_slug` out."""

from __future__ import annotations

import json

from export_fixtures import chatgpt_conversation

from pmem.integrations.importers import load

TURNS = [("user", "Plan a week in Lisbon."), ("assistant", "Day one: Alfama."),
         ("user", "And day two?"), ("assistant", "Belém and its tarts.")]


def _without_model_slugs(conversation: dict, keep: str | None = None) -> dict:
    for node in conversation["mapping"].values():
        message = node.get("message")
        if message and node["id"] != keep:
            message["metadata"].pop("model_slug", None)
    return conversation


def test_an_answer_without_its_own_model_gets_the_conversations(tmp_path):
    conversation = _without_model_slugs(chatgpt_conversation("c1", TURNS), keep="c1-m3")
    conversation["default_model_slug"] = "gpt-5"
    conversation["mapping"]["c1-m3"]["message"]["metadata"]["model_slug"] = "gpt-5-thinking"
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([conversation]))
    plan = load(path)
    got = [(m.meta["role"], m.meta.get("model"), m.text) for m in plan.records]
    assert got == [("user", None, "User: Plan a week in Lisbon."), ("assistant", "gpt-5", "ChatGPT: Day one: Alfama."),
                   ("user", None, "User: And day two?"),
                   ("assistant", "gpt-5-thinking", "ChatGPT: Belém and its tarts.")]


def test_an_export_with_no_model_anywhere_names_none(tmp_path):
    conversation = _without_model_slugs(chatgpt_conversation("c2", TURNS))
    conversation["default_model_slug"] = None
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([conversation]))
    assert [m.meta.get("model") for m in load(path).records] == [None] * 4


def test_conversations_without_a_word_in_text_say_how_many_were_read(tmp_path):
    conversation = chatgpt_conversation("c3", [("user", "x")])
    conversation["mapping"]["c3-m0"]["message"]["content"] = {"content_type": "image_asset_pointer", "parts": []}
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([conversation]))
    plan = load(path)
    assert plan.records == [] and plan.empty == [
        "conversations.json: 1 conversations read, none with a message in text on its kept branch (system, tool "
        "and hidden messages are not imported)"]
