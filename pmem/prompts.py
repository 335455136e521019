"""Every prompt and output schema pmem sends to a chat model (extract and dream), in one place to review.

Small local models invent facts when asked to write them (SmolLM2-135M hallucinated 64% of
written facts in a one-shot JSON trial). So the default task is to *label* numbered sentences
of the source: the answer can only point at text that exists. Only a strong model may also
rewrite a chosen sentence, and every rewrite still goes through the grounding gate.
"""

from __future__ import annotations

# What a durable fact can be about; "none" marks small talk, greetings and filler.
KINDS = ("preference", "plan", "event", "identity", "relationship", "work", "place", "health",
         "possession", "none")

LABEL_SYSTEM = ("You label sentences from a conversation or note. A sentence is a durable fact when "
                "it says something lasting about a person: what they like, plan, did, own, where they "
                "live or work, who they know. Greetings, questions, thanks and small talk are none.")

LABEL_USER = """Sentences:
{numbered}

Give one label per sentence, in order ({count} labels).{none}"""


def label_schema(count: int, allow_none: bool = True) -> dict:
    """Exactly one label per numbered sentence: alignment cannot drift.

    Without `allow_none` the model labels but does not choose: SmolLM2-135M labelled every
    sentence of a LoCoMo session "none" (it repeats its first answer), so for a small model the
    rules in extract.is_candidate choose and the model only names the kind."""
    kinds = list(KINDS) if allow_none else [k for k in KINDS if k != "none"]
    return {
        "type": "object",
        "properties": {"labels": {"type": "array", "items": {"type": "string", "enum": kinds},
                                  "minItems": count, "maxItems": count}},
        "required": ["labels"],
    }


REWRITE_SYSTEM = ("You extract durable facts from a conversation or note. For each numbered sentence "
                  "that states something lasting about a person (preference, plan, event, identity, "
                  "relationship, work, place, health, possession), write it as one short third-person "
                  "fact using only words and names from that sentence and its speaker. Never add "
                  "anything that is not stated. Skip greetings, questions and small talk.")

REWRITE_USER = """Sentences:
{numbered}

List the facts, each with the number of the sentence it comes from."""


def rewrite_schema(count: int, max_facts: int) -> dict:
    return {
        "type": "object",
        "properties": {"facts": {"type": "array", "maxItems": max_facts, "items": {
            "type": "object",
            "properties": {"n": {"type": "integer", "enum": list(range(1, count + 1))},
                           "kind": {"type": "string", "enum": [k for k in KINDS if k != "none"]},
                           "fact": {"type": "string", "maxLength": 200}},
            "required": ["n", "kind", "fact"]}}},
        "required": ["facts"],
    }


JUDGE_SYSTEM = ("You compare a new fact with a stored memory about the same person. Answer same if "
                "they say the same thing, refines if the new fact adds detail to it, contradicts if "
                "both cannot be true now, unrelated otherwise.")

JUDGE_USER = "Stored memory: {old}\nNew fact: {new}"

JUDGE_SCHEMA = {
    "type": "object",
    "properties": {"relation": {"type": "string", "enum": ["same", "refines", "contradicts", "unrelated"]}},
    "required": ["relation"],
}


def numbered(sentences: list[str]) -> str:
    return "\n".join(f"{i}. {s}" for i, s in enumerate(sentences, start=1))


def label_messages(sentences: list[str], allow_none: bool = True) -> list[dict]:
    none = " Use none for small talk." if allow_none else ""
    return [{"role": "system", "content": LABEL_SYSTEM},
            {"role": "user", "content": LABEL_USER.format(numbered=numbered(sentences), count=len(sentences),
                                                          none=none)}]


def rewrite_messages(sentences: list[str]) -> list[dict]:
    return [{"role": "system", "content": REWRITE_SYSTEM},
            {"role": "user", "content": REWRITE_USER.format(numbered=numbered(sentences))}]


def judge_messages(old: str, new: str) -> list[dict]:
    return [{"role": "system", "content": JUDGE_SYSTEM},
            {"role": "user", "content": JUDGE_USER.format(old=old, new=new)}]


# -- dream: merges and summaries (pmem.dream); the text is then checked by the grounding gate --

DREAM_SYSTEM = {
    "merge": ("You merge notes about the same subject into one note. Use only facts stated in the "
              "notes, keep every fact, add nothing. Answer with JSON: {\"text\": \"...\"}."),
    "compress": ("You summarise a conversation excerpt in a few sentences. Use only facts stated in "
                 "it, keep names, dates and numbers, add nothing. Answer with JSON: {\"text\": \"...\"}."),
}

DREAM_SCHEMA = {"type": "object", "properties": {"text": {"type": "string", "minLength": 1}},
                "required": ["text"]}


def dream_messages(kind: str, texts: list[str]) -> list[dict]:
    """The messages asking for one merged note (`kind` "merge") or one summary ("compress")."""
    listing = "\n".join(f"- {t}" for t in texts)
    return [{"role": "system", "content": DREAM_SYSTEM[kind]},
            {"role": "user", "content": f"Notes:\n{listing}"}]
