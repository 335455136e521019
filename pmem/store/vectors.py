"""The vector index: embedding, the float32 table, the bit index over it, semantic ranks, the
partition scan two connections share, and a resumable reindex.

Figures behind the constants and the bit code: docs/decisions/0044-store-figures.md."""

from __future__ import annotations

import base64
import json
import math
import struct
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

from ..config import Config
from ..errors import ModelMismatch
from ..ranking.profile import DEFAULT, Profile
from ..records import TIERS
from . import refine
from .connection import Connection, Progress, count_triggers
from .english import EnglishVectors
from .filter import Filter, date_window, estimate, is_live
from .refine import int8_calls, made_int8, remember

if TYPE_CHECKING:
    from ..models.cache import ModelCache
    from ..models.embed import Embedder
    from ..models.thresholds import Thresholds

BULK_EMBED = 256  # texts in one call above which a `pmem serve` client loads the model itself
KNN_MAX = 4096  # sqlite-vec's largest k for one KNN query
EXACT_SCAN_MAX = 1000  # filtered rows below which distances are computed directly
PART_SLACK = 8  # rows each partition gives beyond its even share of the pool
WHOLE_EXACT_MAX = 2048  # a whole tier (core) of at most this many memories is ranked exactly
BITS_FROM = 10_000  # vectors from which the bit index is built (smaller stores search exactly)
BIT_PARTS = 16  # vec0 partitions per tier in memory_bits...
WHOLE_TIERS = ("core",)  # ...but one for a tier that stays small (each partition's KNN costs ~0.2 ms)
CENTER_SAMPLE = 4096  # vectors whose per-dimension mean and spread set the bit thresholds
LEVEL_Z = 0.67  # thresholds at mean -/+ 0.67 standard deviations: a normal's tertiles
# The thermometer code of the float32 vector `v` (named parameters :lo and :hi: bit_lo, bit_hi). `||` of
# the two differences, cast back to a blob, is one float32 vector of 2 * dim values (vec_bit and
# the vec_ functions refuse a concatenation directly); vec_quantize_binary keeps a bit per value > 0.
LEVELS_SQL = "vec_quantize_binary(CAST(vec_sub({v}, :lo) || vec_sub({v}, :hi) AS BLOB))"
DIM_MAX = 4096  # dimensions a vector in a sync changeset may claim (float16 there: decisions/0057)
# A vector written over another keeps the kept count: INSERT OR REPLACE fired the insert trigger
# and not the delete one (recursive triggers are off), so each rewrite counted one vector more and
# `missing` then saw none missing (m013_recount_vectors set the counts right).
_UPSERT = ("INSERT INTO memory_vec (seq, embedding, live) VALUES (?, ?, ?) "
          "ON CONFLICT(seq) DO UPDATE SET embedding = excluded.embedding, live = excluded.live")


def serialize(vector: Sequence[float]) -> bytes:
    """Little-endian float32, the layout sqlite-vec reads."""
    return struct.pack(f"<{len(vector)}f", *vector)


def deserialize(blob: bytes) -> list[float]:
    return list(struct.unpack(f"<{len(blob) // 4}f", blob))


# -- vectors that travel (a sync changeset) -------------------------------------------------------

def pack_half(blob: bytes) -> str | None:
    """A stored float32 vector as base64 float16 (JSON carries text, not bytes): half the bytes,
    rankings the same (docs/decisions/0057-join-useful-at-once.md); None for one float16 cannot
    hold (a value past 65504, or not finite: not sent, embedded by the receiver)."""
    n = len(blob) // 4
    values = struct.unpack(f"<{n}f", blob[:4 * n])
    if not all(math.isfinite(v) for v in values):
        return None
    try:
        return base64.b64encode(struct.pack(f"<{n}e", *values)).decode()
    except OverflowError:
        return None


def unpack_half(text: Any, dim: int) -> bytes | None:
    """The float32 vector of what `pack_half` made, or None for anything else: the exact length
    for `dim` values, checked before decoding; every value finite; not all zero (a cosine of it is
    no number)."""
    if not (isinstance(text, str) and 0 < dim <= DIM_MAX and len(text) == 4 * -(-2 * dim // 3)):
        return None
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        return None
    if len(raw) != 2 * dim:
        return None
    values = struct.unpack(f"<{dim}e", raw)
    if not all(math.isfinite(v) for v in values) or not any(values):
        return None
    return struct.pack(f"<{dim}f", *values)


# -- the tables ---------------------------------------------------------------------------------

def create_vector_tables(conn, dim: int) -> None:
    """Float32 vectors in a plain table: a keyed read costs ~5 us, where a vec0 point read walks
    its chunk's overflow pages (~35-150 us), so rescoring can read them (see build_bits)."""
    conn.execute("CREATE TABLE IF NOT EXISTS memory_vec (seq INTEGER PRIMARY KEY, embedding BLOB NOT NULL, "
                 "live INTEGER NOT NULL DEFAULT 1)")
    count_triggers(conn, "memory_vec", "'vectors'")


def bit_parts(tier: str) -> int:
    """How many partitions of memory_bits hold `tier`."""
    return 1 if tier in WHOLE_TIERS else BIT_PARTS


def bit_part(tier_index: int, seq: int) -> int:
    return tier_index * BIT_PARTS + seq % bit_parts(TIERS[tier_index])


def build_bits(conn) -> bool:
    """(Re)build memory_bits: two bits per dimension of each vector, in a vec0 bit[] table
    partitioned by tier and seq % BIT_PARTS (the core tier in one partition), so a search reads
    only the tiers it wants and each partition's top-k stays small (vec0's top-k costs O(rows * k)).

    The bits are a thermometer code: per dimension, whether the value is above its low and its
    high threshold (the store's mean -/+ LEVEL_Z standard deviations, `bit_lo` / `bit_hi` in
    settings), so the Hamming distance sums how many levels apart two vectors are. Embeddings
    share a common direction: raw signs are nearly the same bits for every text (recall in
    docs/decisions/0023-two-bit-codes.md)."""
    dim_row = conn.execute("SELECT value FROM settings WHERE key = 'embed_dim'").fetchone()
    dim = int(dim_row[0]) if dim_row else 0
    conn.execute("DROP TABLE IF EXISTS memory_bits")
    conn.execute("DELETE FROM settings WHERE key IN ('bit_center', 'bit_lo', 'bit_hi')")
    total = conn.execute("SELECT count(*) FROM memory_vec").fetchone()[0] if dim else 0
    if not dim or dim % 8 or not total:
        return False
    step = max(1, total // CENTER_SAMPLE)
    sums, squares = [0.0] * dim, [0.0] * dim
    count = 0
    for (blob,) in conn.execute("SELECT embedding FROM memory_vec WHERE seq % ? = 0 LIMIT ?", (step, CENTER_SAMPLE)):
        if len(blob) == 4 * dim:
            for i, v in enumerate(struct.unpack(f"<{dim}f", blob)):
                sums[i] += v
                squares[i] += v * v
            count += 1
    count = max(count, 1)
    means = [s / count for s in sums]
    spreads = [LEVEL_Z * math.sqrt(max(q / count - m * m, 0.0)) for q, m in zip(squares, means)]
    lo = struct.pack(f"<{dim}f", *(m - d for m, d in zip(means, spreads)))
    hi = struct.pack(f"<{dim}f", *(m + d for m, d in zip(means, spreads)))
    conn.execute("INSERT INTO settings (key, value) VALUES ('bit_lo', ?), ('bit_hi', ?)", (lo.hex(), hi.hex()))
    conn.execute(f"CREATE VIRTUAL TABLE memory_bits USING vec0(seq INTEGER PRIMARY KEY, "
                 f"part INTEGER PARTITION KEY, bits bit[{2 * dim}], live INTEGER)")
    for tier_index, tier in enumerate(TIERS):
        # Sorted by partition, so consecutive inserts fill the same vec0 chunk.
        conn.execute(
            f"INSERT INTO memory_bits (seq, part, bits, live) SELECT seq, part, {LEVELS_SQL.format(v='embedding')}, "
            "live FROM ("
            f"SELECT v.seq, {tier_index * BIT_PARTS} + v.seq % {bit_parts(tier)} AS part, v.embedding, v.live "
            "FROM memory_vec v JOIN memories m ON m.seq = v.seq WHERE m.tier = :tier "
            f"ORDER BY v.seq % {bit_parts(tier)}, v.seq)", {"lo": lo, "hi": hi, "tier": tier})
    return True


# -- the partition scan ---------------------------------------------------------------------------

class PartitionScan:
    """The bit-index partitions of one semantic search, each read by whichever connection is
    free: the searching store's, and a helper's (search's side reader, once its keyword side is
    done), so the two threads end together instead of one waiting (SQLite releases the GIL while
    it steps; docs/decisions/0026-scale-sixth-round.md).

    `help()` (the helper's thread) waits until the searching thread `post()`s the work or
    `close()`s the scan, then reads partitions until none is left; a partition it fails on goes
    back to the list. `run()` (the searching thread) reads the rest and waits for the helper's
    last one."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._todo: list[list[Any]] = []
        self._sql = ""
        self._posted = False
        self._closed = False
        self._busy = 0
        self._rows: list[tuple[int, float]] = []

    def post(self, sql: str, jobs: list[list[Any]]) -> None:
        with self._cond:
            self._sql, self._todo, self._rows, self._posted = sql, list(jobs), [], True
            self._cond.notify_all()

    def close(self) -> None:
        """No more work: a waiting helper returns."""
        with self._cond:
            self._closed = True
            self._todo = []
            self._cond.notify_all()

    def _take(self) -> list[Any] | None:
        with self._cond:
            if self._closed or not self._todo:
                return None
            self._busy += 1
            return self._todo.pop()

    def _done(self, rows: list[tuple[int, float]] | None, job: list[Any]) -> None:
        with self._cond:
            self._busy -= 1
            if rows is None:
                self._todo.append(job)  # the searching thread reads it
            else:
                self._rows += rows
            self._cond.notify_all()

    def _read(self, conn, stop_on_error: bool) -> None:
        while (job := self._take()) is not None:
            try:
                rows = [(r[0], r[1]) for r in conn.execute(self._sql, job)]
            except BaseException:
                self._done(None, job)
                if stop_on_error:
                    return
                raise
            self._done(rows, job)

    def help(self, conn) -> None:
        with self._cond:
            while not (self._posted or self._closed):
                self._cond.wait()
        self._read(conn, stop_on_error=True)

    def run(self, conn, sql: str, jobs: list[list[Any]]) -> list[tuple[int, float]]:
        """Every job's rows, read by this thread and any helper."""
        self.post(sql, jobs)
        while True:
            self._read(conn, stop_on_error=False)
            with self._cond:
                while self._busy:
                    self._cond.wait()
                if not self._todo:  # else the helper gave one back
                    return self._rows


# -- the index ------------------------------------------------------------------------------------

class VectorIndex:
    """The vectors of one store's memories, and the model that makes them."""

    def __init__(self, db: Connection, config: Config, embedder: "Embedder | None" = None,
                 models: "ModelCache | None" = None):
        self.db = db
        self.models = models  # where load_embedder keeps the models it loads (None: the process's own)
        self.config = config
        self._embedder = embedder
        self._embedder_given = embedder is not None
        self._reindex_target = False  # during reindex(): embed with the configured model
        self._bits: bool | None = None  # whether memory_bits exists (cached once True)
        self._prepared: dict[str, bytes] | None = None  # vectors embedded ahead of a write (prepared)
        self._bulk = False  # inside bulk(): every batch embeds in this process, the last small one too
        self._exact = False  # inside exactly(): every call in float32, whatever embed_bulk says
        self.rough: dict[bytes, None] = {}  # vectors embed() made in int8, marked when written (refine)
        self._keep = 0  # inside arriving(): a vector written stays in `rough` (two rows may share it)
        self.english = EnglishVectors(db, self)  # English memories' second vector (store/english.py)

    def __call__(self, ids: Iterable[str]) -> dict[str, bytes]:
        """Stored vectors of these memories, by id (a keyed join, not a scan of the vec table)."""
        if not self.exists():
            return {}
        rows = self.db.execute(
            "SELECT m.id, v.embedding FROM memories m JOIN memory_vec v ON v.seq = m.seq "
            "WHERE m.id IN (SELECT value FROM json_each(?))", (json.dumps(list(ids)),))
        return {r[0]: r[1] for r in rows}

    # -- the model ------------------------------------------------------------------------

    @property
    def embedder(self) -> "Embedder":
        """The embedding model named by the store's settings, loaded on first use (or a running
        `pmem serve`). Raises ModelError when it cannot be found, fetched or loaded."""
        if self._embedder is None:
            from ..models.embed import load_embedder

            self._embedder = load_embedder(self.model_name(), threads=self.config.threads,
                                           server=self.config.server,
                                           idle_minutes=self.config.server_idle_minutes, cache=self.models)
        self._bulk_precision(self._embedder)  # whoever embeds many texts with it (a dream's words too)
        return self._embedder

    def _bulk_precision(self, embedder: "Embedder") -> None:
        """e5's calls of many texts in int8 or float32, as the setting embed_bulk says."""
        engine = getattr(embedder, "inner", embedder)  # SymmetricEmbedder's model
        if hasattr(engine, "use_int8"):
            engine.use_int8(self.int8())

    def int8(self) -> bool:
        """Whether calls of many texts may run in int8 now (embed_bulk, unless inside exactly())."""
        return self.config.embed_bulk != "float32" and not self._exact

    def marks(self) -> bool:
        """Whether int8 vectors are marked to be made again in float32 (embed_bulk = int8)."""
        return self.config.embed_bulk == "int8" and not self._exact

    def model_name(self) -> str:
        """The embedding model this store embeds with: the configured one; when none is configured,
        the known model its vectors come from (a store made under the old default, MiniLM, keeps
        working until `pmem reindex`); else the default (provision.embed_model_for)."""
        from ..models.provision import embed_model_for

        if self._reindex_target:
            return self.config.embed_model
        return embed_model_for(self.config, self.db.setting("embed_model"))

    def model(self) -> tuple[str | None, int | None]:
        """The model and dimension the stored vectors come from (None before the first)."""
        name, dim = self.db.setting("embed_model"), self.db.setting("embed_dim")
        return name, (int(dim) if dim else None)

    def check_model(self) -> None:
        """Fail clearly when the configured embedder does not match the stored vectors."""
        name, dim = self.model()
        if name is None:
            return
        e = self.embedder
        if name != e.name or dim != e.dim:
            staged = self.reindex_progress()
            resume = f" (to resume the interrupted one: {staged[1]} of {staged[2]} done)" \
                if staged and staged[0] == e.name else ""
            raise ModelMismatch(
                f"the stored vectors come from {name} ({dim}-d) but the configured model is "
                f"{e.name} ({e.dim}-d); run `pmem reindex` to re-embed{resume}, or configure {name} again")

    def thresholds(self) -> "Thresholds":
        """The cosine thresholds of the model the stored vectors come from (the configured one
        before the first vector), with the user's dedup/merge settings (pmem.models.thresholds)."""
        from ..models.thresholds import effective

        return effective(self.model()[0] or self.config.embed_model, self.config)

    def embed(self, texts: list[str], progress: Progress | None = None, batch: int = 64,
              query: bool = False) -> list[bytes]:
        """Vectors of memories' texts, or (query=True) of search queries, for models that embed
        the two differently (e5's "query: " / "passage: "). Vectors prepared ahead of a write answer
        queries too: those searches compare memories with memories."""
        prepared = self._prepared
        if prepared is not None and texts and all(t in prepared for t in texts):
            if not query:
                self.english.prepare(texts)()
            return [prepared[t] for t in texts]
        unique = list(dict.fromkeys(texts))
        if len(unique) < len(texts):  # each text once (a chat history's "ok" and "thanks")
            vectors = dict(zip(unique, self.embed(unique, progress, batch, query)))
            return [vectors[t] for t in texts]
        self.check_model()
        english = self.english.prepare(texts) if not query else None  # MiniLM beside e5 (store/english.py)
        embedder = self.embedder
        kw = {"query": True} if query and getattr(embedder, "query_aware", False) else {}
        int8 = self.int8()  # e5's calls of many texts: in int8 or float32
        if (len(texts) > BULK_EMBED or self._bulk or (len(texts) > 1 and not int8)) \
                and getattr(embedder, "remote", False):
            # `pmem serve` is for short requests (and its int8 for several texts): bulk work runs here
            embedder = embedder.local()  # type: ignore[attr-defined]
        self._bulk_precision(embedder)  # the local model a bulk call takes, too
        engine = getattr(embedder, "inner", embedder)  # SymmetricEmbedder's model
        threads = getattr(engine, "threads", 0) if hasattr(engine, "use_threads") else 0
        automatic = not int(self.config.threads)
        if threads and automatic:
            from ..models.loading import default_threads
        out: list[bytes] = []
        try:
            for start in range(0, len(texts), batch):
                if threads:  # the cores MiniLM does not hold now (english.BULK_SHARE)
                    # With `threads` automatic, from the second batch on the cores idle now: a
                    # busy moment when the model loaded does not hold for a whole import.
                    now = default_threads(samples=2) if start and automatic else threads
                    engine.use_threads(max(1, now - self.english.busy_threads()))
                chunk = texts[start:start + batch]
                calls = int8_calls(embedder)
                blobs = [serialize(v) for v in embedder.embed(chunk, **kw)]
                if self.marks() and not query and made_int8(embedder, calls, len(chunk)):
                    remember(self.rough, blobs)
                out.extend(blobs)
                if progress:
                    progress(min(start + batch, len(texts)), len(texts))
        finally:
            if threads:
                engine.use_threads(threads)
        if english is not None:
            english()
        return out

    @contextmanager
    def bulk(self, count: int) -> Iterator[None]:
        """A write of `count` texts embedded in batches (an import, a reindex): past BULK_EMBED in
        all, each batch embeds in this process, as one call of that size would. Batch by batch, an
        import's last batch (680 turns: 512 + 168) went to a running `pmem serve`, whose two models
        then ran side by side on all cores each (docs/decisions/0054-import-bulk-embedding.md)."""
        outer = self._bulk, self.english.bulk
        self._bulk = self.english.bulk = outer[0] or count > BULK_EMBED
        try:
            yield
        finally:
            self._bulk, self.english.bulk = outer
            if not outer[0]:  # what was never written (an import's duplicates) is not kept
                self.rough.clear()
                self.english.rough.clear()

    @contextmanager
    def exactly(self) -> Iterator[None]:
        """Every call in the block in float32, e5's and MiniLM's (refine)."""
        outer = self._exact
        self._exact = True
        try:
            yield
        finally:
            self._exact = outer

    @contextmanager
    def english_later(self) -> Iterator[None]:
        """Writes in this block store no second vector (an import): EnglishVectors.fill writes them
        after, in the background (pmem/fill.py), and until then those memories compete by
        the main vector alone (docs/decisions/0060-import-speed-second-vector.md)."""
        outer = self.english.later
        self.english.later = True
        try:
            yield
        finally:
            self.english.later = outer

    @contextmanager
    def prepared(self, texts: Iterable[str]) -> Iterator[None]:
        """Embed `texts` now, in one batch, and answer `embed()` from them until the block ends:
        a run that writes in one operation (extract) does its model work before the write
        transaction, so other processes can write meanwhile."""
        todo = [t for t in dict.fromkeys(texts) if t]
        outer = self._prepared
        mine = dict(zip(todo, self.embed(todo))) if todo else {}
        self._prepared = {**(outer or {}), **mine}
        try:
            yield
        finally:
            self._prepared = outer
            for blob in mine.values():  # those never written (extract's sources) are not kept
                self.rough.pop(blob, None)

    @contextmanager
    def arriving(self, main: dict[str, bytes], english: dict[str, bytes],
                 rough: Sequence[bytes] = ()) -> Iterator[None]:
        """Vectors that came with the texts (a sync's changesets), by text: a write in the block
        takes them instead of embedding; an English text whose second vector did not come gets
        none (`fill` does it later). A text with no vector at all is the caller's to leave
        unembedded (insert with a None vector) or to embed. `rough`: those of them their sender
        made in int8 (either side), marked as such here too (pmem.store.refine)."""
        outer, lazy = self._prepared, self.english.lazy
        self._prepared = {**(outer or {}), **main}
        self.english.lazy = True
        self.english.given(english)
        if self.config.embed_bulk != "int8-only":  # float32 too: its fill makes them float32
            remember(self.rough, rough)
            remember(self.english.rough, rough)
        self._keep += 1
        self.english.keep += 1
        try:
            yield
        finally:
            self._prepared, self.english.lazy = outer, lazy
            self._keep -= 1
            self.english.keep -= 1
            self.english.given({})
            for blob in rough:
                self.rough.pop(blob, None)
                self.english.rough.pop(blob, None)

    def missing(self) -> int:
        """Memories with no vector yet (a sync stores the rows first; `fill` embeds them)."""
        if not self.exists():
            return self.db.memory_count()
        if self.db.memory_count() <= self.db.counter("vectors"):  # the kept counts: every sync asks
            return 0
        return self.db.execute("SELECT count(*) FROM memories m WHERE NOT EXISTS "
                               "(SELECT 1 FROM memory_vec v WHERE v.seq = m.seq)").fetchone()[0]

    def fill(self, progress: Progress | None = None, batch: int = 64) -> int:
        """Embed every memory that has no vector, a committed batch at a time, each written only
        where its text is still the one embedded: interrupted (Ctrl-C, kill -9), the next run goes
        on from there, and a search meanwhile finds the rest by their words. Returns how many."""
        total = self.missing()
        if not total:
            return 0
        done, last = 0, -1
        with self.bulk(total):
            while True:
                if self.exists():
                    todo = self.db.execute(
                        "SELECT m.seq, m.text FROM memories m WHERE m.seq > ? AND NOT EXISTS "
                        "(SELECT 1 FROM memory_vec v WHERE v.seq = m.seq) ORDER BY m.seq LIMIT ?",
                        (last, batch)).fetchall()
                else:
                    todo = self.db.execute("SELECT seq, text FROM memories WHERE seq > ? ORDER BY seq LIMIT ?",
                                           (last, batch)).fetchall()
                if not todo:
                    return done
                last = todo[-1][0]
                blobs = dict(zip([t for _, t in todo], self.embed([t for _, t in todo])))
                with self.db.transaction():
                    if not self._still_model():  # a reindex swapped the vectors meanwhile
                        return done
                    now = self.db.by_seq(seq for seq, _ in todo)
                    rows = [(seq, blobs[text], now[seq].tier, is_live(now[seq])) for seq, text in todo
                            if seq in now and now[seq].text == text and self.get(seq) is None]
                    self.put_many(rows)
                done += len(todo)
                if progress:
                    progress(min(done, total), total)

    def refine(self, progress: Progress | None = None, batch: int = 64) -> int:
        """Embed again in float32 the vectors marked as made in int8 (pmem.store.refine), then
        English memories' second vectors likewise, a committed batch at a time, each written only
        where its text is still the one embedded and its mark still there: interrupted, the next
        run goes on from there, and until then search uses the int8 vectors. Returns how many."""
        total = refine.count(self.db, "main")
        done, last = 0, -1
        with self.bulk(total), self.exactly(), self.english_later():
            while total:
                todo = refine.todo(self.db, "main", "memory_vec", last, batch)
                if not todo:
                    break
                last = todo[-1][0]
                blobs = dict(zip([t for _, t in todo], self.embed([t for _, t in todo])))
                with self.db.transaction():
                    if not self._still_model():  # a reindex swapped the vectors meanwhile: its fill's work now
                        return done
                    now = self.db.by_seq(seq for seq, _ in todo)
                    still = refine.marked(self.db, "main", [seq for seq, _ in todo])
                    self.put_many([(seq, blobs[text], now[seq].tier, is_live(now[seq])) for seq, text in todo
                                   if seq in now and now[seq].text == text and seq in still], english=False)
                done += len(todo)
                if progress:
                    progress(min(done, total), total)
            with self.db.transaction():
                refine.unmark_gone(self.db, "main", "memory_vec")
            done += self.english.refine(progress, batch)
        if not refine.count(self.db):
            refine.MARKED.discard(str(self.db.path))  # nothing left for a fill at the command's end
        return done

    # -- rows -----------------------------------------------------------------------------

    def exists(self) -> bool:
        """Whether any memory has been embedded yet (the vector table exists)."""
        return self.db.has_table("memory_vec")

    def has_bits(self) -> bool:
        """Whether the bit index exists (built past BITS_FROM vectors)."""
        if not self._bits:  # only True is cached: another process may create the table
            self._bits = self.db.has_table("memory_bits")
        return self._bits

    def ensure_table(self) -> None:
        if self.exists():
            return
        e = self.embedder
        create_vector_tables(self.db.conn, int(e.dim))
        self._bits = None
        self.db.set_setting("embed_model", e.name)
        self.db.set_setting("embed_dim", str(e.dim))

    def get(self, seq: int) -> bytes | None:
        """The stored vector of row `seq`, or None."""
        if not self.exists():
            return None
        row = self.db.execute("SELECT embedding FROM memory_vec WHERE seq = ?", (seq,)).fetchone()
        return row[0] if row else None

    def put(self, seq: int, blob: bytes, tier: str, live: bool) -> None:
        self.ensure_table()
        self.db.execute(_UPSERT, (seq, blob, int(live)))
        self._mark([(seq, blob)])
        self._put_bits(seq, blob, tier, live)
        if not self._reindex_target:  # a reindex fills the second vectors after its swap
            self.english.put([seq])

    def put_many(self, rows: Sequence[tuple[int, bytes, str, bool]], english: bool = True) -> None:
        """`put` for many (seq, blob, tier, live) at once: a statement per table, not per row
        (a first sync join stores 2,000 at a time; docs/decisions/0046-sync-100k.md). `english`
        False: the second vectors stay as they are (refine)."""
        if not rows:
            return
        self.ensure_table()
        self.db.conn.executemany(_UPSERT, [(seq, blob, int(live)) for seq, blob, _, live in rows])
        self._mark([(seq, blob) for seq, blob, *_ in rows])
        if english:
            self.english.put([seq for seq, *_ in rows])
        if not self.has_bits():
            if self.db.counter("vectors") >= BITS_FROM:
                self.build_bits()  # once, past BITS_FROM (includes these rows), as put does
            return
        levels = self.levels()
        self.db.conn.executemany("DELETE FROM memory_bits WHERE seq = ?", [(seq,) for seq, *_ in rows])
        self.db.conn.executemany("INSERT INTO memory_bits (seq, part, bits, live) "
                                 f"VALUES (:seq, :part, {LEVELS_SQL.format(v=':v')}, :live)",
                                 [{"seq": seq, "part": bit_part(TIERS.index(tier), seq), "v": blob,
                                   "live": int(live), **levels} for seq, blob, tier, live in rows])

    def _still_model(self) -> bool:
        """Inside a write: whether the stored vectors still come from the model this process embeds
        with (a `pmem reindex` in another process may have swapped them since it embedded)."""
        name, dim = self.model()
        e = self.embedder
        return name is None or (name, dim) == (e.name, int(e.dim))

    def may_be_int8(self, blobs: Iterable[bytes]) -> None:
        """Vectors about to be written whose origin is unknown (undo's kept ones): marked when
        written, as int8 ones are, so the fill makes them float32 (a float32 one again: no harm)."""
        if self.marks():
            remember(self.rough, blobs)

    def _mark(self, rows: Sequence[tuple[int, bytes]]) -> None:
        """Mark the rows whose vectors came from int8 (pmem.store.refine); unmark the others."""
        refine.written(self.db, "main", rows, self.rough, keep=bool(self._keep))

    def _put_bits(self, seq: int, blob: bytes, tier: str, live: bool) -> None:
        """The bit code of a vector, in the partition of the memory's tier."""
        if not self.has_bits():
            if self.db.counter("vectors") >= BITS_FROM:
                self.build_bits()  # once, when the store grows past BITS_FROM (includes this row)
            return
        self.db.execute("DELETE FROM memory_bits WHERE seq = ?", (seq,))
        self.db.execute("INSERT INTO memory_bits (seq, part, bits, live) "
                        f"VALUES (:seq, :part, {LEVELS_SQL.format(v=':v')}, :live)",
                        {"seq": seq, "part": bit_part(TIERS.index(tier), seq), "v": blob,
                         "live": int(live), **self.levels()})

    def sync(self, seq: int, tier: str, live: bool) -> None:
        """After a change of tier or liveness: the vector's flags and bit partition follow."""
        if not self.exists():
            return
        self.db.execute("UPDATE memory_vec SET live = ? WHERE seq = ?", (int(live), seq))
        blob = self.get(seq)
        if blob is not None:
            self._put_bits(seq, blob, tier, live)

    def delete(self, seq: int, zero: bool = False) -> None:
        """Drop row `seq`'s vector; `zero` overwrites it first (a purge: no page keeps it)."""
        if self.exists():
            if zero:
                dim = int(self.model()[1] or 0)
                self.db.execute("UPDATE memory_vec SET embedding = ? WHERE seq = ?", (serialize([0.0] * dim), seq))
            self.db.execute("DELETE FROM memory_vec WHERE seq = ?", (seq,))
        if self.has_bits():
            self.db.execute("DELETE FROM memory_bits WHERE seq = ?", (seq,))
        self.english.delete(seq, zero)

    def levels(self) -> dict[str, bytes]:
        """The thresholds of the bit index's thermometer code (build_bits), read each time:
        another process may have rebuilt the index with new ones."""
        rows = dict(self.db.execute("SELECT key, value FROM settings WHERE key IN ('bit_lo', 'bit_hi')"))
        return {k: bytes.fromhex(rows.get(f"bit_{k}") or "") for k in ("lo", "hi")}

    def build_bits(self) -> bool:
        """(Re)build the bit index of the vectors (done by itself past BITS_FROM)."""
        with self.db.transaction():
            self._bits = None
            return build_bits(self.db.conn)

    def blocks(self, size: int = 16384, upto: int | None = None) -> Iterator[tuple[list[int], bytes]]:
        """Every stored vector of the store's dimension (of rows up to `upto`), `size` at a time
        in row order: (their seqs, the float32 vectors joined), so that a caller holds one block,
        not the store."""
        _, dim = self.model()
        if not dim or not self.exists():
            return
        last = -1
        bound, upper = ("", ()) if upto is None else (" AND seq <= ?", (int(upto),))
        while True:
            rows = self.db.execute(f"SELECT seq, embedding FROM memory_vec WHERE seq > ?{bound} "
                                   "ORDER BY seq LIMIT ?", (last, *upper, int(size))).fetchall()
            if not rows:
                return
            last = rows[-1][0]
            rows = [r for r in rows if len(r[1]) == dim * 4]
            yield [r[0] for r in rows], b"".join(r[1] for r in rows)

    # -- ranks ----------------------------------------------------------------------------

    def ranks(self, vector: bytes, flt: Filter, n: int,
              scan: PartitionScan | None = None, profile: Profile = DEFAULT) -> list[tuple[int, float]]:
        """(seq, cosine distance) of the `n` memories nearest to `vector` that pass `flt`, best first.

        Below `exact_below` vectors, or when the filter keeps few memories, the distance is
        computed for every filtered row (exact). Above, the bit codes answer first: vec0 finds
        the nearest by Hamming distance in each partition of the wanted tiers (live rows only
        unless asked), and the best `profile.bit_pool` (at least 2n; pmem.ranking.profile) are
        rescored with their float32 vectors and filtered: exact where that pool holds every filtered memory, else
        approximate (recall in docs/decisions/0022-scale-bit-index.md). With a `scan`, another thread may read
        some of the partitions on its own connection (PartitionScan)."""
        if n <= 0 or not self.exists():
            return []
        where, params = flt.where(self.db.clock())
        total = self.db.counter("vectors")
        if total >= self.db.exact_below and self.has_bits():
            rows = self._bit_ranks(vector, flt, n, where, params, scan, profile.bit_pool)
            if rows is not None:
                return rows
        sql = (f"SELECT m.seq, vec_distance_cosine(v.embedding, ?) AS distance FROM memories m "
               f"JOIN memory_vec v ON v.seq = m.seq WHERE {where} ORDER BY distance, m.seq LIMIT ?")
        return [(r[0], r[1]) for r in self.db.execute(sql, [vector, *params, int(n)])]

    def _bit_ranks(self, vector: bytes, flt: Filter, n: int, where: str, params: list[Any],
                   scan: PartitionScan | None = None,
                   bit_pool: int = DEFAULT.bit_pool) -> list[tuple[int, float]] | None:
        """The approximate path of `ranks`; None when the exact scan should answer."""
        live = flt.live_only
        rows = {t: estimate(self.db, Filter(tiers=(t,), include_expired=True, include_superseded=True,
                                            include_forgotten=not live, include_merged=not live))
                for t in flt.tiers}
        in_knn = sum(rows.values())
        wanted = estimate(self.db, flt)
        if wanted <= EXACT_SCAN_MAX or in_knn == 0:
            return None
        if flt.since or flt.until:
            # A small date window is scanned whole along the date index: exact, and cheaper than
            # a bit pool that cannot know how few pass (docs/decisions/0032-date-filters-scale.md).
            window = date_window(self.db, flt, self.db.counter("vectors"))
            if window is None or window[2]:
                return None
        pool = max(bit_pool, 2 * n) * in_knn // wanted
        # A small tier kept whole (core) is ranked exactly through its own index: its bit top-k
        # had to be as large as the pool (vec0's selection costs O(chunk_size * k)).
        wanted_tiers = list(dict.fromkeys(flt.tiers))  # `--tier core --tier core` is one tier
        exact = [t for t in wanted_tiers if t in WHOLE_TIERS and rows[t] <= WHOLE_EXACT_MAX]
        whole: list[tuple[int, float]] = []
        for tier in exact:
            whole += [(r[0], r[1]) for r in self.db.execute(
                f"SELECT m.seq, vec_distance_cosine(v.embedding, ?) AS distance FROM memories m "
                f"INDEXED BY memories_{tier} JOIN memory_vec v ON v.seq = m.seq "
                f"WHERE m.tier = '{tier}' AND {where} ORDER BY distance, m.seq LIMIT ?", [vector, *params, int(n)])]
        tiers = [t for t in wanted_tiers if t not in exact]
        if not tiers:
            return sorted(whole, key=lambda r: (r[1], r[0]))[:n]
        # (partition, its tier's partitions, its tier's rows): each partition must be able to give
        # an even share of the pool, and never needs more than its tier holds.
        parts = [(bit_part(TIERS.index(t), p), bit_parts(t), rows[t]) for t in tiers
                 for p in range(bit_parts(t))]
        code = self.db.execute(f"SELECT {LEVELS_SQL.format(v=':v')}", {"v": vector, **self.levels()}).fetchone()[0]
        knn = ("SELECT seq, distance FROM memory_bits WHERE bits MATCH vec_bit(?) AND k = ? AND part = ?"
               + (" AND live = 1" if live else ""))
        rescore = (f"SELECT m.seq, vec_distance_cosine(v.embedding, ?) AS distance FROM json_each(?) p "
                   f"JOIN memories m ON m.seq = p.value JOIN memory_vec v ON v.seq = m.seq "
                   f"WHERE {where} ORDER BY distance, m.seq LIMIT ?")
        for _ in range(3):
            # A tier kept whole is one partition: past KNN_MAX its top-k is capped (approximate),
            # where the exact scan of every tier would cost far more.
            ks = [min(-(-pool // count), tier_rows, KNN_MAX - PART_SLACK if count == 1 else tier_rows) + PART_SLACK
                  for _, count, tier_rows in parts]
            if max(ks) > KNN_MAX:
                return None
            jobs = [[code, k, p] for (p, _, _), k in zip(parts, ks)]
            lead = max(range(len(parts)), key=lambda i: parts[i][2] / parts[i][1])  # the largest partitions' first
            near = self.bounded_knn(knn, jobs, lead, pool, scan or PartitionScan())
            near.sort(key=lambda r: (r[1], r[0]))
            seqs = json.dumps([seq for seq, _ in near[:pool]])
            found = [(r[0], r[1]) for r in self.db.execute(rescore, [vector, seqs, *params, int(n)])]
            if len(whole) + len(found) >= n:  # as when the core tier's rows were in the pool
                return sorted(whole + found, key=lambda r: (r[1], r[0]))[:n] if whole else found
            pool *= 4  # the filter kept fewer than estimated: a larger pool, then the exact scan
        return None

    def bounded_knn(self, knn: str, jobs: list[list[Any]], lead: int, pool: int,
                    scan: PartitionScan) -> list[tuple[int, float]]:
        """Every partition's nearest rows by Hamming distance (jobs: [code, k, partition]), of which
        the best `pool` are the same as without the bound below.

        vec0 picks a chunk's k nearest in k passes over the chunk, O(chunk x k); with a bound on
        the distance only the rows within it take part. The bound is the k-th distance of one
        partition, read first (`lead`); each other partition gives its k nearest within it, and
        a row left out is farther than every row kept. So where at least `pool` rows are kept,
        the best `pool` are those without the bound (vec0 0.1.7-0.1.9 breaks ties the same way
        with or without it); else the partitions are read again without it
        (docs/decisions/0027-keyword-merge-knn-bound.md)."""
        conn = self.db.conn
        first = [(r[0], r[1]) for r in conn.execute(knn, jobs[lead])]
        rest = jobs[:lead] + jobs[lead + 1:]
        if not rest:
            return first
        if len(first) < jobs[lead][1]:  # a partition smaller than its k: no bound from it
            return first + scan.run(conn, knn, rest)
        bound = max(d for _, d in first)
        near = scan.run(conn, knn + " AND distance <= ?", [job + [bound] for job in rest])
        if len(first) + len(near) < pool:
            near = scan.run(conn, knn, rest)
        return first + near

    def help_scan(self, scan: PartitionScan) -> None:
        """Read partitions of another connection's `scan` on this one (search's side reader)."""
        scan.help(self.db.conn)

    # -- reindex --------------------------------------------------------------------------

    def reindex(self, progress: Progress | None = None, batch: int = 64) -> int:
        """Re-embed every memory with the configured model (or the default when none is
        configured), resumably (`_stage`); the stored vectors change in one transaction at the
        end, so searches never mix two models' vectors. Then English memories get their second
        vector where they lack one (EnglishVectors.fill: a store from before it, or after a change
        of model), resumable too."""
        if not self._embedder_given:
            self._embedder = None
        self._reindex_target = True
        try:
            with self.bulk(self.db.memory_count()):
                n = self._reindex(progress, batch)
        finally:
            self._reindex_target = False
            if not self._embedder_given and self._embedder is not None \
                    and self.model()[0] not in (None, self._embedder.name):
                self._embedder = None  # interrupted: the stored vectors' model answers again
        with self.bulk(self.db.memory_count()):
            self.english.fill(progress, batch)  # English memories' second vectors, where missing
        return n

    def _reindex(self, progress: Progress | None, batch: int) -> int:
        rows = self._stage(progress, batch)
        db = self.db
        with db.transaction():
            db.execute("DROP TABLE IF EXISTS memory_vec")
            db.execute("DROP TABLE IF EXISTS memory_bits")
            db.execute("DELETE FROM counts WHERE key = 'vectors'")
            db.execute("DELETE FROM settings WHERE key IN ('bit_lo', 'bit_hi')")
            db.execute("DELETE FROM settings WHERE key IN ('embed_model', 'embed_dim')")
            self._bits = None
            self.ensure_table()
            by_seq = db.by_seq(seq for seq, _ in rows)
            for seq, blob in rows:
                m = by_seq[seq]
                self.put(seq, blob, m.tier, is_live(m))
            if self.marks() and db.setting("reindex_int8"):  # some batch (of any run) staged in int8
                refine.mark(db, "main", [seq for seq, _ in rows])
            self._end_reindex()
        return len(rows)

    def _stage(self, progress: Progress | None, batch: int) -> list[tuple[int, bytes]]:
        """Embed every memory with the configured model into the staging table `reindex_vec`,
        one committed transaction per batch, skipping the memories staged by an earlier,
        interrupted run for the same model (settings reindex_model / reindex_dim); staging for
        another model is thrown away. Triggers drop a staged vector when its memory is deleted or
        its text changes, so what is staged always matches the text. Returns (seq, vector) in
        seq order, for the final swap."""
        e = self.embedder
        if self._bulk and getattr(e, "remote", False):
            e = e.local()  # type: ignore[attr-defined]  # bulk work runs here (bulk)
        db = self.db
        with db.transaction():
            if (db.setting("reindex_model"), db.setting("reindex_dim")) != (e.name, str(e.dim)):
                self._end_reindex()
                db.execute("CREATE TABLE reindex_vec (seq INTEGER PRIMARY KEY, embedding BLOB NOT NULL)")
                db.execute("CREATE TRIGGER reindex_vec_gone AFTER DELETE ON memories "
                           "BEGIN DELETE FROM reindex_vec WHERE seq = old.seq; END")
                db.execute("CREATE TRIGGER reindex_vec_text AFTER UPDATE OF text ON memories "
                           "WHEN old.text IS NOT new.text "
                           "BEGIN DELETE FROM reindex_vec WHERE seq = old.seq; END")
                db.set_setting("reindex_model", e.name)
                db.set_setting("reindex_dim", str(e.dim))
        total = db.execute("SELECT count(*) FROM memories").fetchone()[0]
        done = db.execute("SELECT count(*) FROM reindex_vec").fetchone()[0]
        if progress and done:
            progress(done, total)  # resumed
        while True:
            todo = db.execute(
                "SELECT m.seq, m.text FROM memories m WHERE NOT EXISTS "
                "(SELECT 1 FROM reindex_vec r WHERE r.seq = m.seq) ORDER BY m.seq LIMIT ?", (batch,)).fetchall()
            if not todo:
                break
            calls = int8_calls(e)
            vectors = e.embed([t for _, t in todo])
            with db.transaction():  # only where the text is still the one embedded
                if self.marks() and made_int8(e, calls, len(todo)):
                    db.set_setting("reindex_int8", "1")  # the swap marks them (pmem.store.refine)
                db.conn.executemany(
                    "INSERT OR REPLACE INTO reindex_vec (seq, embedding) SELECT ?, ? "
                    "WHERE EXISTS (SELECT 1 FROM memories WHERE seq = ? AND text = ?)",
                    [(seq, serialize(v), seq, text) for (seq, text), v in zip(todo, vectors)])
            total = db.execute("SELECT count(*) FROM memories").fetchone()[0]
            done = db.execute("SELECT count(*) FROM reindex_vec").fetchone()[0]
            if progress:
                progress(min(done, total), total)
        return [(r[0], r[1]) for r in db.execute(
            "SELECT m.seq, r.embedding FROM memories m JOIN reindex_vec r ON r.seq = m.seq ORDER BY m.seq")]

    def _end_reindex(self) -> None:
        """Drop the staging of a reindex (finished, or for another model)."""
        self.db.execute("DROP TRIGGER IF EXISTS reindex_vec_gone")
        self.db.execute("DROP TRIGGER IF EXISTS reindex_vec_text")
        self.db.execute("DROP TABLE IF EXISTS reindex_vec")
        self.db.execute("DELETE FROM settings WHERE key IN ('reindex_model', 'reindex_dim', 'reindex_int8')")

    def reindex_progress(self) -> tuple[str, int, int] | None:
        """(target model, memories staged, memories) of an interrupted reindex, else None."""
        model = self.db.setting("reindex_model")
        if model is None or not self.db.has_table("reindex_vec"):
            return None
        staged = self.db.execute("SELECT count(*) FROM reindex_vec").fetchone()[0]
        return model, staged, self.db.execute("SELECT count(*) FROM memories").fetchone()[0]
