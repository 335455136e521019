"""One profile per embedding model (pmem.models.profiles): the registry, the lookups a store's
recorded model name goes through, a user's own model, and the modules that read their values
from the profiles (thresholds, provision, the e5 engine)."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest
from conftest import registered_for_the_test

from pmem.models import profiles, provision, provision_e5, thresholds
from pmem.models.embed import FakeEmbedder


@pytest.fixture
def registry():
    """The registry, put back as it was after the test."""
    with registered_for_the_test(profiles):
        yield profiles


def test_the_default_profiles_register_themselves_once_each():
    names = [p.name for p in profiles.profiles()]
    assert sorted(names) == sorted({"all-MiniLM-L6-v2", "multilingual-e5-small", "multilingual-e5-small-symmetric"})
    assert len(names) == len(set(names))
    for p in profiles.profiles():
        assert p.defaults == frozenset(), p.name  # every value of a default profile was measured
        assert p.dim > 0 and p.filename and p.package and p.version and p.files


@pytest.mark.parametrize("recorded", ["multilingual-e5-small", "MULTILINGUAL-E5-SMALL", "multilingual-e5-small.q4",
                                      "/home/me/models/multilingual-e5-small.q4.e5s1",
                                      "C:\\models\\multilingual-e5-small.q4.e5s1"])
def test_a_stored_name_finds_its_profile_by_name_stem_or_path(recorded):
    assert profiles.lookup(recorded) is profiles.E5_SMALL
    assert thresholds.for_model(recorded) is profiles.E5_SMALL.thresholds


def test_the_symmetric_scheme_is_the_same_file_with_the_query_prefix_on_both_sides():
    sym, e5 = profiles.E5_SYMMETRIC, profiles.E5_SMALL
    assert (sym.filename, sym.files, sym.dim) == (e5.filename, e5.files, e5.dim)
    assert sym.passage_prefix == sym.query_prefix == e5.query_prefix != e5.passage_prefix
    assert sym.memories_as_queries and not e5.memories_as_queries and not profiles.MINILM.memories_as_queries
    assert sym.thresholds != e5.thresholds  # its cosines sit elsewhere on the scale


def test_thresholds_names_are_the_profiles_values():
    assert thresholds.MINILM is profiles.MINILM.thresholds
    assert thresholds.E5_SMALL is profiles.E5_SMALL.thresholds
    assert thresholds.E5_SYMMETRIC is profiles.E5_SYMMETRIC.thresholds
    assert thresholds.BY_MODEL == {p.name.lower(): p.thresholds for p in profiles.profiles()}
    with pytest.raises(AttributeError):
        thresholds.NO_SUCH_MODEL  # noqa: B018


def test_provision_fetches_what_each_profile_names():
    for p in profiles.profiles():
        spec = provision.known_models()[p.name]
        assert (spec.kind, spec.package, spec.version, spec.filename, spec.files, spec.convert) == \
               ("embed", p.package, p.version, p.filename, p.files, p.convert)
        assert provision.memories_as_queries(p.name) is p.memories_as_queries
        assert provision.stored_model(p.name) == p.name
    e5 = profiles.E5_SMALL
    assert (provision_e5.NAME, provision_e5.FILENAME) == (e5.name, e5.filename)
    assert {provision_e5.MEMBER: provision_e5.MEMBER_SHA256} == e5.files
    assert provision_e5.WHEEL.startswith(f"{e5.package}-{e5.version}-")


def test_the_e5_engine_prefixes_and_thresholds_are_its_profiles():
    pytest.importorskip("numpy")
    from pmem.models import e5

    assert (e5.QUERY_PREFIX, e5.PASSAGE_PREFIX) == (e5.PROFILE.query_prefix, e5.PROFILE.passage_prefix)
    assert e5.E5Embedder.profile is profiles.E5_SMALL and e5.E5Embedder.thresholds is e5.PROFILE.thresholds


def test_a_users_own_gguf_gets_a_profile_that_says_what_is_a_default():
    p = profiles.for_model("/home/me/models/nomic-embed-text-v1.5.Q8_0.gguf", dim=768)
    assert profiles.lookup(p.name) is None
    assert (p.filename, p.dim) == ("nomic-embed-text-v1.5.Q8_0.gguf", 768)
    assert p.measured == {"name", "filename", "dim"}
    assert p.defaults == {"engine", "query_prefix", "passage_prefix", "thresholds"}
    assert p.thresholds is profiles.MINILM.thresholds  # what pmem has always used for such a model
    assert not p.memories_as_queries
    unopened = profiles.for_model("nomic-embed-text-v1.5.Q8_0")
    assert unopened.dim == 0 and "dim" in unopened.defaults
    assert thresholds.for_model(None) is thresholds.MINILM and thresholds.for_model("x") is thresholds.MINILM


def test_a_registered_profile_is_found_by_its_aliases(registry):
    mine = replace(profiles.MINILM, name="my-embedder", filename="my-embedder.q8.gguf",
                   thresholds=replace(profiles.MINILM.thresholds, dedup=0.5),
                   measured=frozenset({"name", "filename", "dim"}))
    registry.register(mine, aliases=("mine",))
    assert registry.lookup("my-embedder.q8") is mine and registry.lookup("MINE") is mine
    assert thresholds.for_model("/models/my-embedder.q8.gguf").dedup == 0.5
    assert "my-embedder" in thresholds.BY_MODEL and mine in registry.profiles()
    assert mine.defaults == {"engine", "query_prefix", "passage_prefix", "thresholds"}


def test_a_store_compares_with_its_vectors_models_profile(registry, store):
    """The real store: its thresholds are the profile's of the model its vectors come from."""
    assert store.thresholds() == thresholds.MINILM  # "fake-64": nobody registered it
    fake = profiles.unregistered("fake-64", dim=64)
    tuned = replace(fake, thresholds=replace(fake.thresholds, dedup=0.7, merge=0.6),
                    measured=fake.measured | {"thresholds"})
    registry.register(tuned)
    store.add("I keep my bike in the garage")
    assert store.vectors.model()[0] == FakeEmbedder(64).name
    t = store.thresholds()
    assert (t.dedup, t.merge) == (0.7, 0.6)
    assert {f.name: getattr(t, f.name) for f in fields(t)} == thresholds.as_dict(tuned.thresholds)


def test_unregister_takes_a_profile_back_under_every_name():
    mine = replace(profiles.MINILM, name="my-embedder", filename="my-embedder.q8.gguf")
    with registered_for_the_test(profiles):
        profiles.register(mine, aliases=("mine",))
        profiles.register(replace(profiles.MINILM, description="replaced"))  # MiniLM's own name
        assert profiles.lookup("all-MiniLM-L6-v2").description == "replaced"
    assert profiles.lookup("my-embedder") is None and profiles.lookup("mine") is None
    assert profiles.lookup("all-MiniLM-L6-v2") is profiles.MINILM  # what it replaced is back
    profiles.register(mine, aliases=("mine",))
    profiles.unregister(mine)
    assert profiles.lookup("mine") is None and mine not in profiles.profiles()
