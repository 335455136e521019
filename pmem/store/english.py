"""A second vector for English memories: all-MiniLM-L6-v2 beside the main model.

multilingual-e5-small-symmetric (the default) finds memories in every language, but MiniLM finds
English memories asked for in other words far more often (paraphrase top-1 0.82 against 0.68)
and drags every other language down. So where the query and a memory are both English (the
store's own guess, `pmem_lang`), search scores the pair by the mean of e5's cosine and MiniLM's
cosine moved onto e5's scale (`on_e5_scale`); every other pair by e5 alone. The combined cosine is
on e5's scale, so e5's thresholds, score floor and the rest of search stay as they are, and a
memory with no second vector (not English, or stored before this table) competes by e5 alone.

MiniLM rescores e5's nearest `english_pool` (pmem.ranking.profile) only: no second index to
search (exact over every memory gave the same figures). Figures and how they were found:
docs/decisions/0017-two-models-english.md.

Written wherever the main vector is (VectorIndex.put, put_many; memory texts embedded through
VectorIndex.embed are embedded here too, before any write lock), erased with it (delete, and
triggers when a memory's row goes or its text changes), filled for older stores by `pmem reindex`.
An import writes none (VectorIndex.english_later): a background process fills them after it
(pmem/fill.py, docs/decisions/0060-import-speed-second-vector.md).
"""

from __future__ import annotations

import bisect
import json
import struct
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Protocol, Sequence

from ..config import Config
from ..errors import ModelError
from ..ranking.profile import DEFAULT, Profile
from . import refine
from .connection import Connection, Progress

if TYPE_CHECKING:
    from ..models.cache import ModelCache
    from ..models.embed import Embedder
    from ..models.provision import Reporting

MODEL = "all-MiniLM-L6-v2"
DIM = 384  # MiniLM's dimension: a second vector that travels (a sync changeset) must have it
DUE = "english_fill_due"  # setting: a sync stored English memories without their second vector
MAIN = "multilingual-e5-small-symmetric"  # the main identity the weight and the map were measured with
PENDING_MAX = 50_000  # vectors embedded ahead of their write kept at most (a bulk import's batch)
BULK_EMBED = 256  # texts from which a `pmem serve` client embeds here (as vectors.BULK_EMBED)
# How MiniLM runs here (docs/decisions/0019-second-vector-cost.md): its Q8_0
# copy (provision.quantized_model); a query on one thread, as e5's forward pass has the others;
# memories in packs of 32 tokens (CPU per short memory: 128 +12%, 512 +55%; no gain from packing).
QUERY_THREADS = 1
BULK_PACK = 32
# A bulk write runs both models at once (prepare): MiniLM takes a third of the cores (one at least),
# e5 the rest, and all of them once MiniLM is done. Both engines' threads wait spinning: each at its
# full count on 2 cores, they stalled each other (docs/decisions/0054-import-bulk-embedding.md).
BULK_SHARE = 3

def on_e5_scale(cosine: float, knots: Sequence[tuple[float, float]] = DEFAULT.english_knots) -> float:
    """A MiniLM cosine as the e5 cosine of the same rank among LoCoMo turn pairs (the profile's
    english_knots: linear between them)."""
    if cosine <= knots[0][0]:
        return knots[0][1]
    if cosine >= knots[-1][0]:
        return knots[-1][1]
    i = bisect.bisect_right([x for x, _ in knots], cosine)
    (x0, y0), (x1, y1) = knots[i - 1], knots[i]
    return y0 + (y1 - y0) * (cosine - x0) / (x1 - x0)


def combined(e5: float, minilm: float, profile: Profile = DEFAULT) -> float:
    """An English pair's cosine on e5's scale: MiniLM's part profile.english_weight."""
    w = profile.english_weight
    return (1.0 - w) * e5 + w * on_e5_scale(minilm, profile.english_knots)


def create_tables(conn) -> None:
    """memory_vec_en, and the triggers that drop a second vector when its memory's row goes or its
    text changes (the new text's vector is written by the same write, VectorIndex.put)."""
    conn.execute("CREATE TABLE IF NOT EXISTS memory_vec_en (seq INTEGER PRIMARY KEY, embedding BLOB NOT NULL)")
    conn.execute("CREATE TRIGGER IF NOT EXISTS memory_vec_en_gone AFTER DELETE ON memories "
                 "BEGIN DELETE FROM memory_vec_en WHERE seq = old.seq; END")
    conn.execute("CREATE TRIGGER IF NOT EXISTS memory_vec_en_text AFTER UPDATE OF text ON memories "
                 "WHEN old.text IS NOT new.text BEGIN DELETE FROM memory_vec_en WHERE seq = old.seq; END")


def share(threads: int) -> int:
    """MiniLM's threads beside e5 in a bulk write, of `threads` in all (BULK_SHARE)."""
    return max(1, threads // BULK_SHARE)


def model_file(progress: "Reporting" = None) -> Path:
    """MiniLM's file as the second vectors use it, here and in `pmem serve` (its Q8_0 copy)."""
    from ..models.provision import quantized_model

    return quantized_model(MODEL, progress=progress)


def is_english(text: str) -> bool:
    from ..stemming import index_language

    return index_language(text) == "en"


class Owner(Protocol):
    """What the second vectors read of the main index (VectorIndex): its settings, its model and
    where models are kept."""

    config: Config
    models: "ModelCache | None"

    def model(self) -> tuple[str | None, int | None]: ...

    def model_name(self) -> str: ...

    def int8(self) -> bool: ...

    def marks(self) -> bool: ...


class EnglishVectors:
    """The second vectors of one store's English memories (VectorIndex.english)."""

    def __init__(self, db: Connection, owner: Owner):
        self.db = db
        self._owner = owner  # its settings, and the model its vectors come from
        self.embedder: "Embedder | None" = None  # loaded on first use; benchmarks set their own
        self._failed = False  # MiniLM could not be loaded in this process: e5 alone, said once
        self._pending: dict[str, bytes] = {}
        self._preparing: threading.Thread | None = None  # prepare()'s embedding, while e5 embeds
        self._error: Exception | None = None  # what it raised, for wait() to raise here
        self._busy_threads = 0  # the cores prepare()'s MiniLM holds while it runs (VectorIndex.embed's e5 has the rest)
        self._load_lock = threading.Lock()
        self.bulk = False  # VectorIndex.bulk(): every batch embeds in this process
        self.lazy = False  # VectorIndex.arriving(): write what came, embed nothing (fill does, later)
        self._given: dict[str, bytes] = {}  # second vectors that came with their texts (arriving)
        self.later = False  # VectorIndex.english_later(): writes leave the second vectors to fill()
        self.rough: dict[bytes, None] = {}  # second vectors _embed made in int8, marked when written (refine)
        self.keep = 0  # inside VectorIndex.arriving(): a vector written stays in `rough` (two rows may share it)

    def active(self) -> bool:
        """Whether this store keeps second vectors: `embed_english = minilm` and the main model is
        the one they were measured with (a store on another model searches as before)."""
        owner = self._owner
        return self.config.embed_english == "minilm" and not self._failed \
            and (owner.model()[0] or owner.model_name()) == MAIN and self.db.has_table("memory_vec_en")

    @property
    def config(self) -> Config:
        return self._owner.config

    def _model(self) -> "Embedder | None":
        """MiniLM, loaded on first use (on whichever thread asks first: query_vector and prepare
        load it beside e5's work); None, said once, where it cannot be loaded."""
        with self._load_lock:
            if self.embedder is None and not self._failed:
                from ..models.embed import load_embedder

                try:
                    self.embedder = load_embedder(str(model_file()), threads=self.config.threads,
                                                  server=self.config.server,
                                                  idle_minutes=self.config.server_idle_minutes,
                                                  cache=self._owner.models)
                except ModelError as exc:
                    self._fail(f"{exc}; searching English memories by {MAIN} alone (embed_english = none "
                               "turns the second model off)")
            return self.embedder

    def _fail(self, message: str) -> None:
        from .. import notices

        self._failed = True
        notices.notice(message)

    def _embed(self, texts: list[str], query: bool = False, beside: bool = False) -> list[bytes] | None:
        """MiniLM's vectors of `texts` (None where it cannot be had); `beside`: e5 embeds meanwhile
        in this process (prepare), so MiniLM takes its share of the cores only (BULK_SHARE)."""
        model = self._model()
        if model is None:
            return None
        try:
            int8 = self._owner.int8()  # calls of many texts in int8, or as a search's (llama.cpp)
            if (len(texts) > BULK_EMBED or self.bulk or (len(texts) > 1 and not int8)) \
                    and getattr(model, "remote", False):
                model = model.local()  # type: ignore[attr-defined]  # bulk work runs here, as VectorIndex.embed's
            from ..models.embed import LlamaEmbedder

            if hasattr(model, "use_int8") and not getattr(model, "remote", False):
                model.use_int8(int8)
            calls = refine.int8_calls(model)
            if not isinstance(model, LlamaEmbedder):  # served: the server decides
                vectors = model.embed(texts)
            elif query:
                vectors = model.embed(texts, threads=QUERY_THREADS)
            elif beside:
                self._busy_threads = share(model.threads)
                vectors = model.embed(texts, threads=self._busy_threads, pack_tokens=BULK_PACK)
            else:
                vectors = model.embed(texts, pack_tokens=BULK_PACK)
        except ModelError as exc:
            self._fail(f"{exc}; searching English memories by {MAIN} alone")
            return None
        finally:
            if beside:
                self._busy_threads = 0
        blobs = [struct.pack(f"<{len(v)}f", *v) for v in vectors]
        if not query and self._owner.marks() and refine.made_int8(model, calls, len(texts)):
            refine.remember(self.rough, blobs)
        return blobs

    # -- writes ---------------------------------------------------------------------------------

    def prepare(self, texts: Sequence[str]) -> Callable[[], None]:
        """Start embedding the English ones of memory texts about to be written, on another
        thread (MiniLM's load and forward passes beside e5's: VectorIndex.embed starts this before
        its own model and waits at its end, before any write lock is taken). Returns the wait."""
        self.wait()
        if self.later or self.lazy or not self.active():
            return self.wait
        todo = [t for t in dict.fromkeys(texts) if t and t not in self._pending and is_english(t)]
        if not todo:
            return self.wait

        def run() -> None:
            try:
                blobs = self._embed(todo, beside=True)
            except Exception as exc:  # noqa: BLE001 - raised again on the caller's thread, by wait()
                self._error = exc
                return
            if blobs is None:
                return
            if len(self._pending) + len(todo) > PENDING_MAX:
                self._pending.clear()  # never consumed (a duplicate add, extract's sources): re-embedded if written
            self._pending.update(zip(todo, blobs))

        self._preparing = threading.Thread(target=run, name="pmem-english-prepare", daemon=True)
        self._preparing.start()
        return self.wait

    def busy_threads(self) -> int:
        """The threads prepare()'s MiniLM runs on now, 0 when it is not running in this process."""
        worker = self._preparing
        return self._busy_threads if worker is not None and worker.is_alive() else 0

    def wait(self) -> None:
        """Until what prepare() started is done (the pending vectors are then this thread's)."""
        worker, self._preparing = self._preparing, None
        if worker is not None:
            worker.join()
        error, self._error = self._error, None
        if error is not None:
            raise error

    def put(self, seqs: Iterable[int]) -> None:
        """Write the second vector of each of these rows whose text is English, from what was
        prepared, else embedded now (undo restoring a kept vector, a caller's own vectors)."""
        self.wait()
        if self.later or not self.active():
            return
        rows = self.db.execute("SELECT seq, text FROM memories WHERE seq IN (SELECT value FROM json_each(?)) "
                               "AND pmem_lang(text) = 'en'", (json.dumps(list(seqs)),)).fetchall()
        if not rows:
            return
        have = {**self._pending, **self._given}
        if self.lazy:
            kept = [(seq, t) for seq, t in rows if t in have]
            if len(kept) < len(rows):
                self.db.set_setting(DUE, "1")  # fill() embeds the rest, at the next sync or reindex
            rows = kept
        missing = [t for _, t in rows if t not in have]
        if missing:
            blobs = self._embed(list(dict.fromkeys(missing)))
            if blobs is None:
                return
            have.update(zip(dict.fromkeys(missing), blobs))
        self.db.conn.executemany("INSERT OR REPLACE INTO memory_vec_en (seq, embedding) VALUES (?, ?)",
                                 [(seq, have[t]) for seq, t in rows])
        self._mark([(seq, have[t]) for seq, t in rows])
        for _, t in rows:
            self._pending.pop(t, None)

    def _mark(self, rows: Sequence[tuple[int, bytes]]) -> None:
        """Mark the rows whose second vectors came from int8 (pmem.store.refine); unmark the others."""
        refine.written(self.db, "english", rows, self.rough, keep=bool(self.keep))

    def given(self, vectors: dict[str, bytes]) -> None:
        """Second vectors that came with their texts (VectorIndex.arriving), by text; {} forgets them."""
        self._given = dict(vectors)

    def of(self, seqs: Iterable[int]) -> dict[int, bytes]:
        """The stored second vectors of these rows (a sync sends them with the texts)."""
        if not self.db.has_table("memory_vec_en"):
            return {}
        return dict(self.db.execute("SELECT seq, embedding FROM memory_vec_en WHERE seq IN "
                                    "(SELECT value FROM json_each(?))", (json.dumps(list(seqs)),)))

    def delete(self, seq: int, zero: bool = False) -> None:
        """Drop row `seq`'s second vector; `zero` overwrites it first (a purge: no page keeps it)."""
        if not self.db.has_table("memory_vec_en"):
            return
        if zero:
            self.db.execute("UPDATE memory_vec_en SET embedding = zeroblob(length(embedding)) WHERE seq = ?", (seq,))
        self.db.execute("DELETE FROM memory_vec_en WHERE seq = ?", (seq,))

    def fill(self, progress: Progress | None = None, batch: int = 64) -> int:
        """Embed every English memory that has no second vector yet (`pmem reindex`, the fill after
        an import: pmem/fill.py), a committed batch at a time: interrupted, the next run
        goes on from there, and a row written twice is replaced, not doubled. Returns how many."""
        if not self.active():
            return 0
        sql = ("SELECT m.seq, m.text FROM memories m WHERE pmem_lang(m.text) = 'en' AND m.seq > ? AND NOT EXISTS "
               "(SELECT 1 FROM memory_vec_en e WHERE e.seq = m.seq) ORDER BY m.seq LIMIT ?")
        total = self.missing()
        done, last = 0, -1
        while True:
            todo = self.db.execute(sql, (last, batch)).fetchall()
            if not todo:
                with self.db.transaction():
                    self.db.execute("DELETE FROM settings WHERE key = ?", (DUE,))
                return done
            last = todo[-1][0]
            blobs = self._embed([t for _, t in todo])
            if blobs is None:
                return done
            with self.db.transaction():  # only where the text is still the one embedded
                self._write(todo, blobs)
            done += len(todo)
            if progress:
                progress(min(done, total), total)

    def _write(self, todo: Sequence[tuple[int, str]], blobs: Sequence[bytes]) -> None:
        """Second vectors of (seq, text) rows, each only where its memory's text is still that text."""
        now = dict(self.db.execute("SELECT seq, text FROM memories WHERE seq IN (SELECT value FROM json_each(?))",
                                   (json.dumps([seq for seq, _ in todo]),)))
        rows = [(seq, blob) for (seq, text), blob in zip(todo, blobs) if now.get(seq) == text]
        self.db.conn.executemany("INSERT OR REPLACE INTO memory_vec_en (seq, embedding) VALUES (?, ?)", rows)
        self._mark(rows)

    def refine(self, progress: Progress | None = None, batch: int = 64) -> int:
        """Embed again in float32 the second vectors marked as made in int8 (VectorIndex.refine,
        which holds the store in float32 meanwhile), a committed batch at a time. Returns how many."""
        total = refine.count(self.db, "english")
        if not total:
            return 0
        if not self.active():  # second vectors off (or another main model): none to make, no fill to start
            with self.db.transaction():
                self.db.execute(f"DELETE FROM {refine.TABLE} WHERE side = 'english'")
            return 0
        done, last = 0, -1
        while True:
            todo = refine.todo(self.db, "english", "memory_vec_en", last, batch)
            if not todo:
                with self.db.transaction():
                    refine.unmark_gone(self.db, "english", "memory_vec_en")
                return done
            last = todo[-1][0]
            blobs = self._embed([t for _, t in todo])
            if blobs is None:
                return done
            with self.db.transaction():  # where the text is the one embedded and the mark still there
                still = refine.marked(self.db, "english", [seq for seq, _ in todo])
                self._write([(seq, t) for seq, t in todo if seq in still],
                            [b for (seq, _), b in zip(todo, blobs) if seq in still])
            done += len(todo)
            if progress:
                progress(min(done, total), total)

    def due(self) -> bool:
        """Whether a sync stored English memories without their second vector (fill them)."""
        return self.db.setting(DUE) is not None

    def missing(self) -> int:
        """English memories with no second vector yet, from the kept counts (`lang:` counts every
        memory not guessed English), as `pmem doctor` tells them; 0 where none are kept."""
        if not self.active():
            return 0
        other = self.db.execute("SELECT coalesce(sum(n), 0) FROM counts WHERE key >= 'lang:' AND key < 'lang;'")
        return max(0, self.db.memory_count() - other.fetchone()[0] - self.count())

    def count(self) -> int:
        if not self.db.has_table("memory_vec_en"):
            return 0
        return self.db.execute("SELECT count(*) FROM memory_vec_en").fetchone()[0]

    # -- search ---------------------------------------------------------------------------------

    def in_use(self) -> bool:
        """Whether search scores by both models here: active, and some memory has its second vector."""
        return self.active() and self.db.execute("SELECT 1 FROM memory_vec_en LIMIT 1").fetchone() is not None

    def applies(self, query: str) -> bool:
        """Whether a search for `query` rescores its English memories (an English query)."""
        return is_english(query) and self.in_use()

    def query_vector(self, query: str) -> Callable[[], bytes | None]:
        """Start embedding `query` with MiniLM on another thread, loading MiniLM there first in
        a cold command (while e5 loads, embeds and ranks on this one: llama.cpp and numpy both
        release the GIL); returns what waits for it."""
        out: list[bytes | None] = [None]

        def run() -> None:
            try:
                blobs = self._embed([query], query=True)
                out[0] = blobs[0] if blobs else None
            except Exception:  # noqa: BLE001 - this search goes on by e5 alone
                out[0] = None

        worker = threading.Thread(target=run, name="pmem-english-query", daemon=True)
        worker.start()

        def wait() -> bytes | None:
            worker.join()
            return out[0]

        return wait

    def rescore(self, query: str, ranks: list[tuple[int, float]],
                vector: Callable[[], bytes | None] | None = None,
                profile: Profile = DEFAULT) -> list[tuple[int, float]]:
        """e5's (seq, cosine distance) best first, the memories with a second vector scored by
        `combined`, best first again; as given when MiniLM cannot be had. `vector`: what
        query_vector returned, else the query is embedded here."""
        if vector is None:
            blobs = self._embed([query], query=True)
            blob = blobs[0] if blobs else None
        else:
            blob = vector()
        if blob is None or not ranks:
            return ranks
        near = dict(self.db.execute(
            "SELECT seq, vec_distance_cosine(embedding, ?) FROM memory_vec_en "
            "WHERE seq IN (SELECT value FROM json_each(?))", (blob, json.dumps([s for s, _ in ranks]))))
        out = [(seq, 1.0 - combined(1.0 - d, 1.0 - near[seq], profile) if seq in near else d) for seq, d in ranks]
        out.sort(key=lambda r: (r[1], r[0]))
        return out
