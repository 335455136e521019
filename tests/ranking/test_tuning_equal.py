"""search() chooses its profile by value, never by identity: an equal Tuning ranks alike."""

from __future__ import annotations

import copy
from dataclasses import replace

from pmem.search import DEFAULT_TUNING, ENGLISH_TUNING, Tuning, profile_for, search

TEXTS = ["Deploys to production need approval from Dana.", "Who approves the deploys?",
         "The standup is at 9:30 in the small meeting room.", "Dana's cat is called Miso."]


def _ranked(store, **kw):
    return [(h.memory.id, h.score, h.rank_score) for h in search(store, "who approves deploys", limit=4, **kw)]


def test_equal_profiles_rank_alike(store):
    for text in TEXTS:
        store.add(text)
    assert profile_for(store) == DEFAULT_TUNING  # no English side on the fake model
    given = [_ranked(store), _ranked(store, tuning=DEFAULT_TUNING), _ranked(store, tuning=Tuning()),
             _ranked(store, tuning=copy.deepcopy(DEFAULT_TUNING)), _ranked(store, tuning=replace(DEFAULT_TUNING))]
    assert all(g == given[0] for g in given)
    # and a profile that differs does differ: the check above could fail
    other = _ranked(store, tuning=replace(DEFAULT_TUNING, adaptive=False, keyword_weight=1.0, dense_first=False))
    assert [r[2] for r in other] != [r[2] for r in given[0]]


def test_the_english_choice_is_made_by_value(store, monkeypatch):
    """Where the English side is in use, search() without a profile ranks by the English
    coefficients; given one, equal or not to the default, it ranks by that one as given."""
    monkeypatch.setattr(type(store.vectors.english), "in_use", lambda self: True)
    assert profile_for(store) == ENGLISH_TUNING == profile_for(store, base=Tuning())
    assert profile_for(store, mode="semantic") == DEFAULT_TUNING
    seen = []
    import importlib

    module = importlib.import_module("pmem.search")
    real = module.fused
    monkeypatch.setattr(module, "fused", lambda *a: seen.append(a[5]) or real(*a))
    store.add(TEXTS[0])
    search(store, "approval", mode="keyword")
    search(store, "approval", mode="keyword", tuning=Tuning())
    search(store, "approval", mode="keyword", tuning=DEFAULT_TUNING)
    assert seen[1] == seen[2] == DEFAULT_TUNING
