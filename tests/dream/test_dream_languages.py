"""Dream's dedup across languages and inflections (pmem.dream.sameness, Rule.bilingual).

Two texts in two languages share no words to compare, so a pair whose names, numbers and dates
agree is judged on the cosine of the two texts embedded alike (e5's "query: " on both); names
are compared across scripts and declensions ("Иван" / "Ivan", "Сергей" / "Сергеем"). The rule
must never let through what the keys make two facts: another place, number, person, kin or a
negation said in the other language. The real e5 model's side is at the end (@pytest.mark.model)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pmem import dream
from pmem.dream import sameness
from pmem.dream.planners import ACROSS_NEAREST, Planning
from pmem.dream.records import Budget, Plan
from pmem.models.thresholds import E5_SMALL, MINILM
from pmem.service import MemoryStore

NOW = "2026-01-01T00:00:00Z"
RULE = sameness.Rule(auto=0.94, review=0.94, lexical=0.3, bilingual=0.925, bilingual_floor=0.88)

# One fact in two languages: the same names, numbers and dates, nothing to compare word by word.
ACROSS = {
    "German, a number": ("Dana moved to Porto in 2019", "Dana zog 2019 nach Porto"),
    "Spanish, names stemmed otherwise": ("Carlos works at Telefónica in Madrid",
                                         "Carlos trabaja en Telefónica en Madrid"),
    "Russian, declined and in Cyrillic": ("Ivan lives in Kazan with his wife", "Иван живёт в Казани с женой"),
    "German, a date with its dot": ("Anna's birthday is on 12 May", "Annas Geburtstag ist am 12. Mai"),
}
# What the keys must still tell apart when the other side is in another language.
ACROSS_NEGATIVES = {
    "place": ("Dana moved to Porto in 2019", "Dana zog 2019 nach Lissabon"),
    "number": ("Dana moved to Porto in 2019", "Dana zog 2021 nach Porto"),
    "person, in Cyrillic": ("Ivan lives in Kazan with his wife", "Илья живёт в Казани с женой"),
    "kin, declined": ("Ivan lives in Kazan with his wife", "Иван живёт в Казани с сестрой"),
    "negation": ("Marco is allergic to cats", "Marco no es alérgico a los gatos"),
    "month": ("Anna's birthday is on 12 May", "Annas Geburtstag ist am 12. Juni"),
    "a name one letter off": ("Anna's birthday is on 12 May", "Annes Geburtstag ist am 12. Mai"),
}


@pytest.mark.parametrize("kind", sorted(ACROSS))
def test_a_fact_in_two_languages_keeps_its_keys(kind):
    a, b = (sameness.facets(t) for t in ACROSS[kind])
    assert sameness.two_languages(a, b)
    assert sameness.differs(a, b) is None, (a.keys, b.keys)


@pytest.mark.parametrize("kind", sorted(ACROSS_NEGATIVES))
def test_a_hard_negative_in_two_languages_is_two_facts_at_any_cosine(kind):
    a, b = (sameness.facets(t) for t in ACROSS_NEGATIVES[kind])
    assert sameness.differs(a, b), kind
    assert sameness.verdict(a, b, 0.999, RULE, symmetric=0.999)[0] is None


def test_a_pair_in_two_languages_is_one_fact_only_from_the_cosine_of_both_embedded_alike():
    a, b = (sameness.facets(t) for t in ACROSS["German, a number"])
    assert sameness.verdict(a, b, 0.93, RULE, symmetric=0.93)[0] == "dedup"
    assert sameness.verdict(a, b, 0.93, RULE, symmetric=0.91)[0] is None  # below the dedup cosine: not asked
    assert sameness.verdict(a, b, 0.95, RULE, symmetric=0.91)[0] == "review"  # at it: asked
    assert sameness.verdict(a, b, 0.95, RULE, symmetric=None)[0] == "review"  # no such vectors: asked
    assert sameness.verdict(a, b, 0.87, RULE, symmetric=0.99)[0] is None  # below the floor: never compared
    assert sameness.verdict(a, b, 0.999, replace(RULE, bilingual=2.0), symmetric=0.999)[0] == "review"  # MiniLM


def test_a_pair_in_two_languages_with_no_name_or_number_is_never_deduped_by_its_cosine():
    a, b = sameness.facets("The office opens early"), sameness.facets("Das Büro öffnet früh")
    assert sameness.two_languages(a, b) and sameness.differs(a, b) is None
    assert sameness.verdict(a, b, 0.93, RULE, symmetric=0.999)[0] is None


def test_one_language_guessed_twice_is_still_compared_word_by_word():
    # "die" and "a" make a short English text look German or Spanish: it still shares its words
    a, b = sameness.facets("Raj is allergic to peanuts"), sameness.facets("Raj is allergic to shellfish")
    a = replace(a, lang="es")
    assert not sameness.two_languages(a, b)
    assert sameness.verdict(a, b, 0.99, RULE, symmetric=0.999)[0] != "dedup"


def test_names_match_across_scripts_and_declensions_but_not_another_name():
    assert sameness.latin("Ольга") == "olga" and sameness.latin("Lucía") == "lucia"
    assert sameness.same_name("sergej", "sergeem") and sameness.same_name("kazan", "kazani")
    assert sameness.same_name("anna", "annas")
    assert not sameness.same_name("anna", "anne") and not sameness.same_name("ivan", "ilya")
    assert not sameness.same_name("porto", "portugal") and not sameness.same_name("moscow", "moskve")
    a, b = sameness.facets("Отчёт пишет Сергей"), sameness.facets("Отчёт написан Сергеем")
    assert sameness.differs(a, b) is None  # Russian declines names: one person
    a, b = sameness.facets("Отчёт пишет Сергей"), sameness.facets("Отчёт пишет Семён")
    assert sameness.differs(a, b) == "different name"


def test_names_within_one_latin_language_are_not_matched_by_their_endings():
    a, b = sameness.facets("Daniel moved to Porto in 2019"), sameness.facets("Daniela moved to Porto in 2019")
    assert sameness.differs(a, b) == "different name"


def test_a_german_day_with_its_dot_is_a_date_and_a_noun_after_a_genitive_is_no_name():
    f = sameness.facets("Annas Geburtstag ist am 12. Mai")
    assert {"n:12", "month:5"} <= f.keys
    assert not any(k.startswith("name:geburtstag") for k in f.keys)
    assert "name:mai" not in f.keys


def test_without_is_a_negation():
    a, b = sameness.facets("I prefer tea without sugar"), sameness.facets("I like my tea with no sugar")
    assert sameness.differs(a, b) is None
    a, b = sameness.facets("Lena drinks her coffee without sugar"), sameness.facets("Lena drinks her coffee with sugar")
    assert sameness.differs(a, b) == "one is negated"


def test_only_e5_judges_pairs_in_two_languages():
    assert E5_SMALL.dedup_bilingual <= 1.0 and E5_SMALL.dedup_bilingual_floor < E5_SMALL.dedup
    assert MINILM.dedup_bilingual > 1.0  # English only: its cosines across languages say nothing


def test_pairs_across_languages_keep_each_texts_nearest_in_the_other_languages_only():
    rng = np.random.default_rng(3)
    base = rng.standard_normal((1, 16)).astype(np.float32)
    vecs = base + 0.05 * rng.standard_normal((12, 16)).astype(np.float32)  # all close to each other
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    langs = ["de"] * 2 + ["en"] * 10
    ctx = Planning(store=None, result=Plan(created_at=NOW, kinds=["dedup"]), kinds=["dedup"],  # type: ignore[arg-type]
                   now=NOW, budget=Budget(None), expired=[], active=[None] * 12, vecs=vecs,  # type: ignore[list-item]
                   index={}, words={}, claimed=set(), generator=False)
    pairs = ctx.pairs_across(list(range(12)), langs, 0.5)
    assert all(langs[i] != langs[j] for i, j, _ in pairs)
    assert len(pairs) == 2 * ACROSS_NEAREST  # not the 20 pairs of two languages above 0.5
    sims = vecs[:2] @ vecs[2:].T
    for row in (0, 1):
        nearest = {2 + int(c) for c in np.argsort(-sims[row])[:ACROSS_NEAREST]}
        assert {j for i, j, _ in pairs if i == row} == nearest
    assert ctx.pairs_across(list(range(2, 12)), langs, 0.5) == []  # one language: nothing to compare


@pytest.mark.model
def test_real_e5_dedups_a_fact_in_two_languages_and_keeps_another_value(tmp_path, monkeypatch):
    monkeypatch.setenv("PMEM_THREADS", "1")
    monkeypatch.setenv("PMEM_EMBED_MODEL", "multilingual-e5-small")
    with MemoryStore(tmp_path / "languages.db") as s:
        a, _ = s.add("Dana moved to Porto in 2019")
        b, _ = s.add("Dana zog 2019 nach Porto", allow_duplicate=True)
        c, _ = s.add("Carlos works at Telefónica in Madrid")
        d, _ = s.add("Carlos trabaja en Telefónica en Madrid", allow_duplicate=True)
        s.add("Marco is allergic to cats")
        s.add("Marco es alérgico a los perros", allow_duplicate=True)  # another animal
        s.add("Lucia plays the piano every evening")
        s.add("Lucía toca la guitarra todas las noches", allow_duplicate=True)  # another instrument
        s.add("Ivan lives in Kazan with his wife")
        s.add("Иван живёт в Казани с сестрой", allow_duplicate=True)  # his sister
        s.add("The Berlin office opens at 9", pinned=True)
        s.add("Das Büro in Berlin öffnet um 9", pinned=True, allow_duplicate=True)  # pinned: never merged away
        plan = dream.plan(s, only={"dedup"}, now=NOW, generator=False)
        assert {frozenset(p.members) for p in plan.proposals if p.kind == "dedup"} == \
            {frozenset((a.id, b.id)), frozenset((c.id, d.id))}
        (p,) = [p for p in plan.proposals if p.kind == "dedup" and b.id in p.members]
        assert "two languages" in p.reason or "near-duplicates" in p.reason
        before = {m.id: (m.text, m.merged_into) for m in (s.get(i) for i in (a.id, b.id, c.id, d.id))}
        dream.apply(s, plan, backup=False)
        assert {s.get(b.id).merged_into, s.get(a.id).merged_into} - {None}  # one of the two kept
        again = dream.plan(s, only={"dedup"}, now=NOW, generator=False)
        assert [p for p in again.proposals if p.kind == "dedup"] == []  # a second dream: nothing new
        s.undo()
        assert {m.id: (m.text, m.merged_into) for m in (s.get(i) for i in before)} == before
