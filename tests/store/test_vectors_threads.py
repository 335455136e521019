"""A bulk write with `threads` automatic gives the model the cores idle at each batch from the
second on, not only those idle when it loaded: a busy moment at the start of an import does not
hold for all of it (a one-thread e5 pass takes twice as long)."""

from __future__ import annotations

from pmem import Memory
from pmem.models import loading
from pmem.models.embed import FakeEmbedder
from pmem.service import MemoryStore


class Counted(FakeEmbedder):
    """A model that, as E5Embedder, runs on `threads` and records the count of each batch."""

    def __init__(self, threads: int):
        super().__init__(64)
        self.name = "fake-64"
        self.threads, self.batches = threads, []

    def use_threads(self, n: int) -> None:
        self.threads = n

    def embed(self, texts, query=False):
        self.batches.append(self.threads)
        return super().embed(texts)


def run(tmp_path, config, idle: list[int], monkeypatch, loaded: int = 1) -> Counted:
    readings = iter(idle)
    monkeypatch.setattr(loading, "default_threads", lambda samples=loading.BUSY_SAMPLES: next(readings))
    model = Counted(threads=loaded)  # loaded when another process held a core
    with MemoryStore(tmp_path / "t.db", config=config, embedder=model) as s:
        s.insert([Memory(id="", text=f"note number {i} about the garden") for i in range(150)])  # 3 batches of 64
    return model


def test_an_import_follows_the_idle_cores_batch_by_batch(tmp_path, fake_config, monkeypatch):
    model = run(tmp_path, fake_config, [2, 2], monkeypatch)
    assert model.batches == [1, 2, 2]  # the load's count for the first batch, the cores idle now after
    assert model.threads == 1  # its own count again at the end


def test_a_count_that_is_set_is_kept(tmp_path, fake_config, monkeypatch):
    model = run(tmp_path, fake_config.with_values(threads=1), [], monkeypatch)
    assert model.batches == [1, 1, 1]


def test_a_short_write_reads_nothing(tmp_path, fake_config, monkeypatch):
    readings = []
    monkeypatch.setattr(loading, "default_threads", lambda samples=loading.BUSY_SAMPLES: readings.append(1) or 2)
    model = Counted(threads=2)
    with MemoryStore(tmp_path / "s.db", config=fake_config, embedder=model) as s:
        s.add("one note about the garden")
    assert readings == [] and model.batches == [2]
