"""English memories' second vector (pmem/store/english.py): written with the main one, erased with
it, filled by reindex, and search's dense side scoring an English pair by both models.

The plumbing runs on fakes (a fake main model under the default's name, a fake second model);
what the two real models decide runs with them (@pytest.mark.model)."""

from __future__ import annotations

import importlib
import struct
import threading
import time

import pytest

from pmem import Memory, search
from pmem.models.embed import FakeEmbedder, LlamaEmbedder
from pmem.search import semantic_ranks
from pmem.service import MemoryStore
from pmem.store import Filter
from pmem.store import english as en

DANA = "Deploys to production need approval from Dana"
TOKYO = "My flight to Tokyo leaves on October 12 from Berlin"  # e5 alone: cosine 0.794 against Dana's 0.791
QUESTION = "who signs off on releases"
RUSSIAN = "Моя сестра Лена живёт в Порту и работает архитектором."


def second_rows(store) -> dict[int, bytes]:
    return dict(store.conn.execute("SELECT seq, embedding FROM memory_vec_en"))


def seq_of(store, memory_id: str) -> int:
    return store.conn.execute("SELECT seq FROM memories WHERE id = ?", (memory_id,)).fetchone()[0]


def raw_bytes(path) -> bytes:
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*") if p.is_file())


# --- the plumbing, on fakes ------------------------------------------------------------------------

class Named(FakeEmbedder):
    """A fake under another model's name: the store treats its vectors as that model's."""

    def __init__(self, name: str, dim: int = 64):
        super().__init__(dim)
        self.name = name
        self.calls: list[list[str]] = []

    def embed(self, texts, query: bool = False):
        self.calls.append(list(texts))
        return super().embed(texts)


@pytest.fixture
def two(tmp_path, fake_config):
    """A store whose main model is (a fake under) the default's name, with a fake second model."""
    s = MemoryStore(tmp_path / "two.db", config=fake_config.with_values(embed_model=en.MAIN), embedder=Named(en.MAIN))
    s.vectors.english.embedder = Named(en.MODEL, 32)
    yield s
    s.close()


def test_the_second_vector_follows_writes_of_english_memories(two):
    m, _ = two.add(DANA)
    r, _ = two.add(RUSSIAN)
    rows = second_rows(two)
    assert set(rows) == {seq_of(two, m.id)}  # English only
    assert rows[seq_of(two, m.id)] == struct.pack("<32f", *FakeEmbedder(32).embed([DANA])[0])
    assert two.vectors.english.embedder.calls == [[DANA]]  # embedded before the write, once

    two.edit(m.id, text="Deploys need a sign-off from Dana now.")
    assert second_rows(two)[seq_of(two, m.id)] == struct.pack(
        "<32f", *FakeEmbedder(32).embed(["Deploys need a sign-off from Dana now."])[0])
    two.edit(m.id, text="Für Deployments braucht es die Freigabe von Dana.")  # now German: no second vector
    assert second_rows(two) == {}
    two.undo()  # back to the English text: its vector again
    assert set(second_rows(two)) == {seq_of(two, m.id)}
    two.delete(m.id)
    assert second_rows(two) == {}

    stored = two.insert([Memory(id="", text=t) for t in (TOKYO, RUSSIAN + " 2", "The cat eats at six.")])
    assert set(second_rows(two)) == {seq_of(two, stored[0].id), seq_of(two, stored[2].id)}


def test_none_keeps_no_second_vector_and_another_model_neither(tmp_path, fake_config):
    off = MemoryStore(tmp_path / "off.db", config=fake_config.with_values(embed_english="none"),
                      embedder=Named(en.MAIN))
    off.vectors.english.embedder = Named(en.MODEL, 32)
    off.add(DANA)
    assert second_rows(off) == {} and not off.vectors.english.in_use()
    other = MemoryStore(tmp_path / "other.db", config=fake_config)  # fake-64: not the model they go with
    other.vectors.english.embedder = Named(en.MODEL, 32)
    other.add(DANA)
    assert second_rows(other) == {} and other.vectors.english.embedder.calls == []


def test_an_english_pair_is_scored_by_both_models_on_e5s_scale(two):
    two.insert([Memory(id="", text=t) for t in (DANA, TOKYO, RUSSIAN)])
    main, second = FakeEmbedder(64), FakeEmbedder(32)
    query = "who approves deploys"

    def cos(e, a, b):
        va, vb = e.embed([a])[0], e.embed([b])[0]
        return sum(x * y for x, y in zip(va, vb))

    texts = {seq: m.text for seq, m in two.memories_by_seq(range(1, 10)).items()}
    got = {texts[seq]: 1.0 - d for seq, d in semantic_ranks(two, query, Filter(), 10)}
    for text in (DANA, TOKYO):
        assert got[text] == pytest.approx(en.combined(cos(main, query, text), cos(second, query, text)), abs=1e-5)
    assert got[RUSSIAN] == pytest.approx(cos(main, query, RUSSIAN), abs=1e-5)  # not English: e5 alone
    # a query in another language: every memory by the main model alone
    ru = {s: d for s, d in semantic_ranks(two, "где живёт сестра", Filter(), 10)}
    assert ru == pytest.approx(dict(two.vectors.ranks(two.query_vector("где живёт сестра"), Filter(), 10)))


def test_on_e5_scale_is_monotone_and_keeps_its_ends():
    xs = [-1.0, -0.5, 0.0, 0.2, 0.5, 0.8, 0.95, 1.0]
    ys = [en.on_e5_scale(x) for x in xs]
    assert ys == sorted(ys) and ys[-1] == 1.0 and en.on_e5_scale(2.0) == 1.0
    assert en.on_e5_scale(0.285) == pytest.approx(0.828)  # MiniLM's median turn pair: e5's median


def test_reindex_fills_what_an_older_store_lacks_and_resumes(two, monkeypatch):
    stored = two.insert([Memory(id="", text=f"note {i} about the garden and its tools") for i in range(10)]
                        + [Memory(id="", text=RUSSIAN)])
    two.conn.execute("DELETE FROM memory_vec_en")  # as a store from before the table holds it
    assert not two.vectors.english.in_use()
    model = two.vectors.english.embedder
    calls = []

    class Interrupted:  # the second model, stopped by ^C in its second batch
        name, dim = model.name, model.dim

        def embed(self, texts, **kw):
            calls.append(len(texts))
            if len(calls) == 2:
                raise KeyboardInterrupt
            return model.embed(texts, **kw)

    two.vectors.english.embedder = Interrupted()
    with pytest.raises(KeyboardInterrupt):
        two.vectors.english.fill(batch=4)
    assert len(second_rows(two)) == 4 and calls == [4, 4]  # the first batch stays
    two.vectors.english.embedder = model
    two.reindex()
    assert set(second_rows(two)) == {seq_of(two, m.id) for m in stored[:10]}


def test_an_import_leaves_the_second_vectors_to_the_fill(two, tmp_path, fake_config):
    """run_import(english_later=True) stores rows and main vectors only; until the fill, those
    memories are searched by the main model alone, and the fill then writes what an import that
    embedded both would have written (docs/decisions/0060-import-speed-second-vector.md)."""
    from pmem.integrations.importers.registry import run_import

    texts = [f"note {i} about the garden and its tools" for i in range(12)] + [DANA, TOKYO, RUSSIAN]
    records = [Memory(id=f"m{i}", text=t) for i, t in enumerate(texts)]
    eager = MemoryStore(tmp_path / "eager.db", config=two.config, embedder=Named(en.MAIN))
    eager.vectors.english.embedder = Named(en.MODEL, 32)
    try:
        assert run_import(eager, records).imported == len(texts)
        want = {m.id: second_rows(eager)[seq_of(eager, m.id)] for m in records[:-1]}
        assert len(second_rows(eager)) == len(texts) - 1
        main = eager.vectors([m.id for m in records])
    finally:
        eager.close()

    assert run_import(two, records, english_later=True).imported == len(texts)
    assert second_rows(two) == {} and two.vectors.english.embedder.calls == []
    assert two.vectors([m.id for m in records]) == main  # the main vectors as an eager import's
    assert two.english_missing() == len(texts) - 1  # every English one; not the Russian memory
    assert not two.vectors.english.later  # only during the import
    by_e5 = semantic_ranks(two, QUESTION, Filter(), 5)
    assert by_e5 == two.vectors.ranks(two.query_vector(QUESTION), Filter(), 5)  # the main vector alone
    assert search(two, QUESTION, limit=3)

    assert two.fill_missing() == len(texts) - 1
    assert {m.id: second_rows(two)[seq_of(two, m.id)] for m in records[:-1]} == want
    assert two.english_missing() == 0 and two.fill_missing() == 0  # nothing twice
    assert semantic_ranks(two, QUESTION, Filter(), 5) != by_e5  # both models now


def test_a_purge_leaves_the_second_vector_nowhere(two, tmp_path):
    for i in range(50):
        two.add(f"ordinary memory number {i} about gardening and tools")
    m, _ = two.add(DANA)
    blob = second_rows(two)[seq_of(two, m.id)]
    seq = seq_of(two, m.id)
    two.purge([m.id])
    assert two.conn.execute("SELECT count(*) FROM memory_vec WHERE seq = ?", (seq,)).fetchone()[0] == 0
    assert seq not in second_rows(two)
    two.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert blob not in raw_bytes(tmp_path / "two.db")


def test_search_uses_the_fitted_share_where_the_english_side_is_in_use(two, monkeypatch):
    module = importlib.import_module("pmem.search")  # pmem.search is also the function's name
    seen = []
    real_fused = module.fused

    def fused(kw, sem, floor, query, mode, tuning, *rest):
        seen.append(tuning)
        return real_fused(kw, sem, floor, query, mode, tuning, *rest)

    monkeypatch.setattr(module, "fused", fused)
    two.add(DANA)
    search(two, QUESTION)
    assert seen[-1] == module.ENGLISH_TUNING != module.DEFAULT_TUNING
    search(two, QUESTION, tuning=module.Tuning())  # a profile given is used as given
    assert seen[-1] == module.DEFAULT_TUNING
    two.conn.execute("DELETE FROM memory_vec_en")
    search(two, QUESTION)
    assert seen[-1] == module.DEFAULT_TUNING


class Waiting(Named):
    """A main model whose embedding waits (up to 5 s) for the second model's to have started."""

    def __init__(self, name: str, started: threading.Event):
        super().__init__(name)
        self.started, self.overlapped = started, []

    def embed(self, texts, query: bool = False):
        self.overlapped.append(self.started.wait(5))
        return super().embed(texts, query)


class Starting(Named):
    """A second model that says when it starts, and on which thread it ran."""

    def __init__(self, name: str, dim: int, started: threading.Event):
        super().__init__(name, dim)
        self.started, self.threads = started, []

    def embed(self, texts, query: bool = False):
        self.threads.append(threading.current_thread().name)
        self.started.set()
        return super().embed(texts, query)


def test_the_second_model_embeds_memories_beside_the_main_one(tmp_path, fake_config):
    """A cold `pmem add` loads and runs MiniLM while e5 embeds, not after it."""
    started = threading.Event()
    s = MemoryStore(tmp_path / "side.db", config=fake_config.with_values(embed_model=en.MAIN),
                    embedder=Waiting(en.MAIN, started))
    s.vectors.english.embedder = second = Starting(en.MODEL, 32, started)
    try:
        m, _ = s.add(DANA)
        assert s.vectors.embedder.overlapped == [True]  # type: ignore[attr-defined]
        assert second.threads == ["pmem-english-prepare"]
        assert second_rows(s)[seq_of(s, m.id)] == struct.pack("<32f", *FakeEmbedder(32).embed([DANA])[0])
    finally:
        s.close()


class Threaded(Named):
    """A main model on `threads` BLAS threads (as E5Embedder): it records the threads each batch
    runs on; its first batch waits for the second model to have started, its second lets that
    finish (up to 5 s each)."""

    def __init__(self, name: str, started: threading.Event, release: threading.Event, threads: int = 2):
        super().__init__(name)
        self.english: en.EnglishVectors | None = None  # the store's, once it is open
        self.started, self.release = started, release
        self.threads, self.batches, self.set_to = threads, [], []

    def use_threads(self, n: int) -> None:
        self.set_to.append(n)
        self.threads = n

    def embed(self, texts, query: bool = False):
        self.batches.append(self.threads)
        if len(self.batches) == 1:
            self.started.wait(5)
        elif len(self.batches) == 2:
            self.release.set()
            for _ in range(500):
                if self.english is None or not self.english.busy_threads():
                    break
                time.sleep(0.01)
        return super().embed(texts, query)


class SecondOnCores(LlamaEmbedder):
    """A second model as LlamaEmbedder is called (threads, pack_tokens), without llama.cpp: it
    records the threads it was given and holds its pass until released."""

    def __init__(self, started: threading.Event, release: threading.Event, threads: int = 2):
        self.name, self.dim, self.threads = en.MODEL, 32, threads
        self.started, self.release, self.given = started, release, []

    def embed(self, texts, threads: int = 0, pack_tokens: int = 0):
        self.given.append(threads)
        self.started.set()
        self.release.wait(5)
        return FakeEmbedder(32).embed(texts)

    def close(self) -> None:
        pass


def test_a_bulk_write_shares_the_cores_between_the_two_models(tmp_path, fake_config):
    """An import runs MiniLM beside e5: MiniLM on its share of the threads (en.share), e5 on the
    rest while MiniLM runs and on all of them after; its own count again at the end."""
    started, release = threading.Event(), threading.Event()
    main = Threaded(en.MAIN, started, release, threads=2)
    config = fake_config.with_values(embed_model=en.MAIN, threads=2)  # not what the machine runs now
    s = MemoryStore(tmp_path / "bulk.db", config=config, embedder=main)
    main.english = s.vectors.english
    s.vectors.english.embedder = second = SecondOnCores(started, release, threads=2)
    texts = [f"{p} {t} {w} (note {i})." for i, (p, t, w) in
             enumerate((p, t, w) for p in PEOPLE for t in THINGS for w in WHEN)][:150]
    try:
        s.insert([Memory(id="", text=t) for t in texts])
        assert second.given == [en.share(2)] == [1]
        assert main.batches[1:] == [1, 2]  # batch 2 beside MiniLM, batch 3 after it (batch 1: as it starts)
        assert main.threads == 2  # given back
        assert len(second_rows(s)) == len(texts)
    finally:
        s.close()


@pytest.mark.parametrize("threads, share", [(1, 1), (2, 1), (3, 1), (6, 2), (8, 2)])
def test_the_second_model_takes_a_third_of_the_threads(threads, share):
    assert en.share(threads) == share


class Served(Named):
    """A second model as a `pmem serve` client is: remote, with the same model loadable here."""

    remote = True

    def __init__(self, name: str, dim: int):
        super().__init__(name, dim)
        self.here = Named(name, dim)

    def local(self) -> Named:
        return self.here


def test_a_bulk_write_embeds_every_batch_of_the_second_model_here(two):
    """Inside bulk_embedding (an import, a reindex), a batch as small as a `pmem add` embeds in
    this process; outside it, the server answers it."""
    two.vectors.english.embedder = served = Served(en.MODEL, 32)
    with two.bulk_embedding(en.BULK_EMBED + 1):
        two.insert([Memory(id="", text=DANA)])
    two.insert([Memory(id="", text=TOKYO)])
    assert (served.here.calls, served.calls) == ([[DANA]], [[TOKYO]])
    with two.bulk_embedding(en.BULK_EMBED):  # no more than one call would send
        two.insert([Memory(id="", text="The spare key is under the blue flowerpot.")])
    assert len(served.calls) == 2


def test_with_embed_bulk_float32_the_server_is_asked_for_no_call_of_several_texts(tmp_path, fake_config):
    """A served MiniLM runs calls of many texts in int8: with embed_bulk = float32 those run here,
    as a search's texts do; one text (a search, an add) is still the server's."""
    s = MemoryStore(tmp_path / "f.db", config=fake_config.with_values(embed_model=en.MAIN, embed_bulk="float32"),
                    embedder=Named(en.MAIN))
    try:
        s.vectors.english.embedder = served = Served(en.MODEL, 32)
        s.insert([Memory(id="", text=DANA), Memory(id="", text=TOKYO)])
        s.insert([Memory(id="", text="The spare key is under the blue flowerpot.")])
        assert served.here.calls == [[DANA, TOKYO]] and served.calls == [["The spare key is under the blue flowerpot."]]
    finally:
        s.close()


def test_a_cold_search_loads_the_second_model_on_its_own_thread(two, monkeypatch):
    """MiniLM's load (import llama_cpp, the file) overlaps e5's load and query, not precedes them."""
    two.add(DANA)
    loaded_on = []

    def load(spec, **kw):
        loaded_on.append((spec, threading.current_thread().name))
        return Named(en.MODEL, 32)

    monkeypatch.setattr("pmem.models.embed.load_embedder", load)
    monkeypatch.setattr(en, "model_file", lambda progress=None: "minilm.q8_0.gguf")
    two.vectors.english.embedder = None
    assert search(two, QUESTION, limit=1)[0].memory.text == DANA
    assert loaded_on == [("minilm.q8_0.gguf", "pmem-english-query")]


# --- the real models ---------------------------------------------------------------------------------

SMALL = [DANA, TOKYO, "The dentist moved my appointment to Friday at 3.", "Our cat Miso eats twice a day.",
         "The spare key is under the blue flowerpot.", RUSSIAN]
PEOPLE = ["Anna", "Ben", "Chloe", "Dmitri", "Elif", "Farid", "Greta", "Hiro", "Ines", "Jonas"]
THINGS = ["bought new running shoes", "made a lentil soup", "watched a film about whales", "repainted the fence",
          "planted tomatoes", "baked sourdough bread", "fixed the bike's chain", "read a novel set in Lisbon",
          "visited the science museum", "went swimming at the lake", "started learning the cello",
          "ordered a blue armchair", "cleaned the gutters", "tried a Georgian restaurant", "lost an umbrella"]
WHEN = ["on Monday", "last weekend", "in the spring"]
DISTRACTORS = [f"{p} {t} {w}." for p in PEOPLE for t in THINGS for w in WHEN][:300]


@pytest.fixture
def real(tmp_path, monkeypatch):
    monkeypatch.setenv("PMEM_THREADS", "1")
    s = MemoryStore(tmp_path / "real.db")  # the default: multilingual-e5-small-symmetric, English side on
    yield s
    s.close()


@pytest.mark.model
@pytest.mark.slow
def test_the_issues_question_finds_dana_first(real):
    real.insert([Memory(id="", text=t) for t in SMALL])
    assert real.vectors.english.in_use()
    assert real.vectors.english.embedder.name == "all-MiniLM-L6-v2.q8_0"  # its Q8_0 copy, made on first use
    for mode in ("hybrid", "semantic"):
        assert search(real, QUESTION, mode=mode, limit=3)[0].memory.text == DANA, mode
    # e5 alone ranks the flight first
    e5 = [real.memories_by_seq([s])[s].text for s, _ in real.vectors.ranks(real.query_vector(QUESTION), Filter(), 3)]
    assert e5[0] == TOKYO

    real.insert([Memory(id="", text=t) for t in DISTRACTORS])
    for mode in ("hybrid", "semantic"):
        assert search(real, QUESTION, mode=mode, limit=3)[0].memory.text == DANA, mode


@pytest.mark.model
def test_other_languages_are_scored_by_e5_alone(real):
    real.insert([Memory(id="", text=t) for t in SMALL])
    ru_seq = real.conn.execute("SELECT seq FROM memories WHERE text = ?", (RUSSIAN,)).fetchone()[0]
    assert ru_seq not in second_rows(real)
    for query in ("где живёт моя сестра", "what does my sister do for work"):
        e5 = dict(real.vectors.ranks(real.query_vector(query), Filter(), 10))
        got = dict(semantic_ranks(real, query, Filter(), 10))
        assert got[ru_seq] == pytest.approx(e5[ru_seq], abs=1e-6)
        english = [s for s in got if s != ru_seq]
        if query.startswith("где"):
            assert got == pytest.approx(e5)
        else:  # English pairs: both models
            (vec,) = real.vectors.english.embedder.embed([query])  # MiniLM, loaded by this search
            minilm = dict(real.conn.execute("SELECT seq, 1 - vec_distance_cosine(embedding, ?) FROM memory_vec_en",
                                            (struct.pack(f"<{len(vec)}f", *vec),)))
            assert english and all(got[s] == pytest.approx(1 - en.combined(1 - e5[s], minilm[s]), abs=1e-5)
                                   for s in english)
    hits = search(real, "what does my sister do for work", limit=1)
    assert hits[0].memory.text == RUSSIAN


@pytest.mark.model
def test_an_older_store_searches_by_e5_until_reindex_fills_it(real, tmp_path):
    real.insert([Memory(id="", text=t) for t in SMALL])
    # as a pmem before the table left it: no m012, no table; opening it again migrates
    for name in ("memory_vec_en_gone", "memory_vec_en_text"):
        real.conn.execute(f"DROP TRIGGER {name}")
    real.conn.execute("DROP TABLE memory_vec_en")
    real.conn.execute("DELETE FROM _pmem_migrations WHERE name = 'm012_english_vectors'")
    real.close()
    old = MemoryStore(tmp_path / "real.db")
    try:
        assert second_rows(old) == {} and not old.vectors.english.in_use()
        assert search(old, QUESTION, mode="semantic", limit=1)[0].memory.text == TOKYO  # e5 alone
        old.reindex()
        assert len(second_rows(old)) == len(SMALL) - 1  # every English memory
        assert search(old, QUESTION, mode="semantic", limit=1)[0].memory.text == DANA
    finally:
        old.close()


@pytest.mark.model
def test_a_purged_memory_leaves_no_row_in_either_table(real, tmp_path):
    real.insert([Memory(id="", text=t) for t in SMALL])
    m = real.find_exact(DANA)
    seq = seq_of(real, m.id)
    blobs = [real.vectors.get(seq), second_rows(real)[seq]]
    real.purge([m.id])
    for table in ("memory_vec", "memory_vec_en"):
        assert real.conn.execute(f"SELECT count(*) FROM {table} WHERE seq = ?", (seq,)).fetchone()[0] == 0
    real.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = raw_bytes(tmp_path / "real.db")
    assert all(b not in data for b in blobs)


@pytest.mark.model
def test_add_import_and_sync_apply_write_the_second_vector(real, tmp_path):
    from pmem import sync
    from pmem.integrations.importers.registry import run_import

    m, _ = real.add(DANA)
    assert seq_of(real, m.id) in second_rows(real)
    result = run_import(real, [Memory(id="", text=TOKYO), Memory(id="", text=RUSSIAN)])
    assert result.imported == 2
    assert len(second_rows(real)) == 2  # Dana and the flight; not the Russian memory

    folder, key = tmp_path / "Sync", tmp_path / "key"
    sync.init(real, str(folder), key_file=str(key))
    other = MemoryStore(tmp_path / "other" / "pmem.db")
    try:
        sync.join(other, str(folder), key_file=str(key))
        assert len(second_rows(other)) == 2
        n, _ = real.add("The dentist moved my appointment to Friday at 3.")
        sync.run(real)
        sync.run(other)
        there = seq_of(other, n.id)
        assert there in second_rows(other)
        pair = (second_rows(other)[there], second_rows(real)[seq_of(real, n.id)])
        got, sent = (struct.unpack("<384f", b) for b in pair)
        assert max(abs(x - y) for x, y in zip(got, sent)) < 1e-3  # it travelled, as float16 (decisions/0057)
    finally:
        other.close()


def test_an_error_of_the_second_model_beside_the_main_one_reaches_the_caller(two):
    """What MiniLM's thread raises (not a ModelError: that is a notice, and e5 alone) is raised
    on the thread that writes, as it was when MiniLM ran there, never a traceback from a thread."""
    class Broken(Named):
        def embed(self, texts, query: bool = False):
            raise MemoryError("out of memory")

    two.vectors.english.embedder = Broken(en.MODEL, 32)
    with pytest.raises(MemoryError):
        two.add(DANA)
    assert two.count() == 0
    two.vectors.english.embedder = Named(en.MODEL, 32)
    m, _ = two.add(DANA)
    assert set(second_rows(two)) == {seq_of(two, m.id)}
