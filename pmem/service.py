"""The service over the store: what may be written to memories, when and how.

`MemoryStore`, the class users open (`from pmem import MemoryStore`), is the storage
(pmem.store.memories.Storage: rows, indexes, events, transactions, raw ranks) with the verbs over
it: add, insert, edit, pin, unpin, expire, forget, delete, restore, supersede, purge, undo. Here
each verb validates what it writes, refuses machine secrets and exact duplicates, embeds a new
text before it takes the write lock, and groups its writes into one undoable operation; the
storage writes the rows and tells the indexes and the journal. The model is reached through here
too: embedding, the stored vectors' thresholds, reindex and filling missing vectors. basic-memory
keeps its repository/ and services/ apart the same way (docs/decisions/0062-store-and-service.md).
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from . import secretscan
from .errors import NotFound, UsageError
from .records import Memory, Operation
from .store import erase
from .store.connection import ID, Progress
from .store.journal import memory_dict
from .store.memories import Storage
from .store.validation import normalize

if TYPE_CHECKING:
    from .models.embed import Embedder
    from .models.thresholds import Thresholds


class MemoryStore(Storage):
    """The memory database: its storage (pmem.store.Storage) with the verbs over it. Open one per
    process; it is cheap until a model is needed."""

    # -- the model: embedding before a write, thresholds, reindex (VectorIndex) ------------

    @property
    def embedder(self) -> "Embedder":
        """The embedding model, loaded on first use (VectorIndex.embedder)."""
        return self.vectors.embedder

    def embed_model_name(self) -> str:
        return self.vectors.model_name()

    def check_model(self) -> None:
        self.vectors.check_model()

    def thresholds(self) -> "Thresholds":
        """The cosine thresholds of the stored vectors' model (VectorIndex.thresholds)."""
        return self.vectors.thresholds()

    def embed(self, texts: list[str], progress: Progress | None = None, batch: int = 64,
              query: bool = False) -> list[bytes]:
        """Vectors of memories' texts, or (query=True) of search queries (VectorIndex.embed)."""
        return self.vectors.embed(texts, progress, batch, query)

    def query_vector(self, text: str) -> bytes:
        """The query embedding of `text` as little-endian float32 bytes. Raises ModelError."""
        return self.vectors.embed([text], query=True)[0]

    def prepared_vectors(self, texts: Iterable[str]):
        """Embed `texts` now and answer `embed()` from them until the block ends (VectorIndex.prepared)."""
        return self.vectors.prepared(texts)

    def bulk_embedding(self, count: int):
        """Embed in this process, not in `pmem serve`, while a write of `count` texts goes on in
        batches (VectorIndex.bulk)."""
        return self.vectors.bulk(count)

    def english_later(self):
        """Store no English second vectors in this block; fill_missing writes them after
        (VectorIndex.english_later)."""
        return self.vectors.english_later()

    def english_missing(self) -> int:
        """English memories whose second vector is still to be filled (EnglishVectors.missing)."""
        return self.vectors.english.missing()

    def reindex(self, progress: Progress | None = None, batch: int = 64) -> int:
        """Re-embed every memory with the configured model, resumably (VectorIndex.reindex)."""
        return self.vectors.reindex(progress, batch)

    def fill_missing(self, progress: Progress | None = None, batch: int = 64, scan: bool = True,
                     exact: bool = True) -> int:
        """Only what is missing: the vectors of memories stored without one (a sync's rows come
        first: VectorIndex.fill), then English memories' second vectors (EnglishVectors.fill;
        `scan` False: only where a sync left some out, as a scan reads every memory's language);
        then (`exact`) the vectors made in int8, again in float32 (VectorIndex.refine); the other
        stored vectors stay as they are. `exact` fills the second vectors in float32 at once (a
        search needs e5's first; these are no one's wait). Resumable. Returns how many were embedded."""
        n = self.vectors.fill(progress, batch)
        if scan or self.vectors.english.due():  # `exact` (embed_bulk int8): float32 at once, no one waits
            at_once = self.vectors.exactly() if exact and self.vectors.marks() else nullcontext()
            with self.vectors.bulk(self.db.memory_count()), at_once:
                n += self.vectors.english.fill(progress, batch)
        if exact and self.config.embed_bulk != "int8-only":  # int8's again in float32 (int8-only keeps them)
            n += self.vectors.refine(progress, batch)
        return n

    def int8_vectors(self) -> int:
        """Vectors made in int8 that fill_missing makes again in float32 (pmem.store.refine)."""
        from .store import refine

        return refine.count(self.db)

    def missing_vectors(self) -> int:
        """Memories stored without a vector yet (VectorIndex.missing)."""
        return self.vectors.missing()

    def reindex_progress(self) -> tuple[str, int, int] | None:
        """(target model, memories staged, memories) of an interrupted reindex, else None."""
        return self.vectors.reindex_progress()

    # -- the verbs ------------------------------------------------------------------------

    def new_memory(self, text: str, *, tags: Iterable[str] = (), tier: str = "archival", pinned: bool = False,
                   source: str | None = None, meta: dict | None = None, created_at: str | None = None,
                   expires_at: str | None = None, valid_from: str | None = None,
                   derived_from: Iterable[str] = (), memory_id: str | None = None,
                   scope: str | None = None, thread: str | None = None,
                   thread_pos: int | None = None) -> Memory:
        """A validated Memory that is not stored yet (see `insert`). With a `thread` and no
        `thread_pos`, storing it appends it to the thread."""
        now = self.clock()
        m = Memory(id=memory_id or "", text=text, tier=tier, pinned=pinned, tags=list(tags), source=source,
                   meta=dict(meta or {}), created_at=created_at or now, updated_at=now, expires_at=expires_at,
                   valid_from=valid_from, derived_from=list(derived_from), scope=scope, thread=thread,
                   thread_pos=thread_pos)
        return normalize(m)

    def add(self, text: str, *, allow_duplicate: bool = False, allow_secret: bool = False,
            **kw) -> tuple[Memory, bool]:
        """Store one memory. Returns (memory, created); an exact duplicate of an active memory
        is not stored twice unless asked: the existing one comes back with created=False.

        Text holding a machine secret (an API key, a private key...) raises SecretFound unless
        `allow_secret`."""
        m = self.new_memory(text, **kw)
        if not allow_secret:
            secretscan.refuse_memory(m)  # every field it stores: the text, tags, source, meta
        if not allow_duplicate:
            existing = self.find_exact(m.text)
            if existing is not None:
                return existing, False
        blob = self.embed([m.text])[0]
        with self.operation("add", m.text[:80]):
            if not allow_duplicate:  # again under the write lock: a concurrent add may have stored it
                existing = self.find_exact(m.text)
                if existing is not None:
                    return existing, False
            self.vectors.ensure_table()
            m = replace(m, id=self._new_id(), thread_pos=self._place(m, {}))
            self._insert(m, blob)
        return m, True

    def insert(self, memories: Sequence[Memory], *, kind: str = "import", summary: str = "",
               progress: Progress | None = None, keep_ids: bool = True,
               vectors: Sequence[bytes | None] | None = None, allow_secret: bool = False) -> list[Memory]:
        """Store many memories as one operation (one `undo` takes them all back).

        Memories are validated first (a machine secret in any raises SecretFound unless
        `allow_secret`) and embedded in batches, unless `vectors` are given (None for one: stored
        without a vector, for `fill_missing`); then everything is written in one transaction, so
        a failure stores nothing."""
        items = [normalize(m) for m in memories]
        if not allow_secret:
            for i, m in enumerate(items, start=1):
                secretscan.refuse_memory(m, what=f"memory {i} of {len(items)}" + (f" (id {m.id})" if m.id else ""))
        if vectors is not None and len(vectors) != len(items):
            raise ValueError("one vector per memory")
        blobs: list[bytes | None] = list(vectors) if vectors is not None else (
            list(self.embed([m.text for m in items], progress=progress)) if items else [])
        out: list[Memory] = []
        with self.operation(kind, summary or f"{len(items)} memories"):
            if any(b is not None for b in blobs):
                self.vectors.ensure_table()
            stored = self.existing_ids(m.id for m in items if m.id) if keep_ids else set()
            taken: set[str] = set()
            ends: dict[str, int] = {}
            for m in items:
                mid = m.id
                if not (keep_ids and mid and ID.match(mid) and mid not in taken and mid not in stored):
                    mid = self._new_id(taken)
                taken.add(mid)
                out.append(replace(m, id=mid, created_at=m.created_at or self.clock(),
                                   updated_at=m.updated_at or self.clock(), thread_pos=self._place(m, ends)))
            self._insert_many(out, blobs, action=kind if kind in ("import", "extract") else "add")
        return out

    def edit(self, memory_id: str, *, text: str | None = None, tags: Iterable[str] | None = None,
             add_tags: Iterable[str] = (), remove_tags: Iterable[str] = (), tier: str | None = None,
             meta: dict | None = None, source: str | None = None, expires_at: str | None | bool = False,
             valid_from: str | None = None, action: str | None = None, allow_secret: bool = False,
             update_meta: dict | None = None) -> Memory:
        """Change a memory; a text change re-embeds it (the old vector is kept for undo).
        `meta` replaces the metadata, `update_meta` sets some keys in it. A new text holding a
        machine secret raises SecretFound unless `allow_secret`.

        The changes apply to the row as it is inside the write transaction, so concurrent edits
        (two processes adding tags) both land and each event's `before` is exact."""
        add_tags, remove_tags = list(add_tags), set(remove_tags)
        tags = None if tags is None else list(tags)

        def change(before: Memory) -> Memory:
            new_tags = list(before.tags if tags is None else tags)
            after = replace(before, tags=[t for t in new_tags if t not in remove_tags] + add_tags)
            if text is not None:
                after = replace(after, text=text)
            if tier is not None:
                after = replace(after, tier=tier, pinned=tier == "core")
            if meta is not None:
                after = replace(after, meta=meta)
            if update_meta:
                after = replace(after, meta={**after.meta, **update_meta})
            if source is not None:
                after = replace(after, source=source)
            if expires_at is not False:
                after = replace(after, expires_at=expires_at)
            if valid_from is not None:
                after = replace(after, valid_from=valid_from)
            return normalize(after)

        seen = self.get(memory_id)  # read once outside the lock: embed before taking it
        guess = change(seen)
        if not allow_secret:  # what the edit brings in, in any field (a secret kept on purpose stays)
            secretscan.refuse_memory(guess, before=seen)
        if memory_dict(guess) == memory_dict(seen):
            return seen
        vectors: dict[str, bytes] = {}
        if guess.text != seen.text:
            vectors[guess.text] = self.embed([guess.text])[0]
        if action is None:
            changed = {k for k, v in memory_dict(guess).items() if memory_dict(seen)[k] != v}
            name = "retag" if changed <= {"tags"} else "edit"
        else:
            name = action
        with self.operation(name, f"{name} {seen.id}"):
            before = self._fresh(seen.id)
            after = change(before)
            if memory_dict(after) == memory_dict(before):
                return before
            after = replace(after, updated_at=self.clock())
            blob = None
            if after.text != before.text:  # embedding under the lock only if the text moved meanwhile
                blob = vectors.get(after.text) or self.embed([after.text])[0]
            if action is None:
                changed = {k for k, v in memory_dict(after).items() if memory_dict(before)[k] != v}
                name = "retag" if changed <= {"tags", "updated_at"} else "edit"
            return self._write(before, after, name, blob)

    def _update(self, memory_id: str, action: str, change: Callable[[Memory], Memory]) -> Memory:
        """Apply `change` to the fresh row inside the operation's write transaction."""
        full = self.resolve(memory_id)
        with self.operation(action, f"{action} {full}"):
            before = self._fresh(full)
            after = change(before)
            if memory_dict(after) == memory_dict(before):
                return before
            return self._write(before, replace(after, updated_at=self.clock()), action)

    def set_fields(self, memory_id: str, action: str, **changes) -> Memory:
        """Change fields of a memory as one recorded `action` (pin, forget, dream's dedup...)."""
        return self._update(memory_id, action, lambda m: replace(m, **changes))

    def pin(self, memory_id: str) -> Memory:
        """Make a memory core: always recalled first. A memory that is not active (forgotten,
        merged, superseded, expired) raises UsageError: pinned, it would still never be recalled."""
        def change(m: Memory) -> Memory:
            status = m.status(self.clock())
            if status != "active":
                later = m.merged_into or m.superseded_by
                raise UsageError(f"memory {m.id} is {status}: " + (
                    f"pin {later}, which replaced it" if later and status in ("merged", "superseded")
                    else f"restore it first (pmem restore {m.id})" if status in ("forgotten", "expired")
                    else "it is no longer current"))
            return replace(m, pinned=True, tier="core")

        return self._update(memory_id, "pin", change)

    def unpin(self, memory_id: str) -> Memory:
        """Unpin a memory (a core memory becomes archival); one undoable event. Returns the memory
        after the change. Raises NotFound / AmbiguousId."""
        return self._update(memory_id, "unpin", lambda m: replace(
            m, pinned=False, tier="archival" if m.tier == "core" else m.tier))

    def expire(self, memory_id: str, at: str | None = None) -> Memory:
        """Set when a memory expires (`at`, an ISO timestamp; now by default); one undoable event.
        Returns the memory after the change. Raises NotFound / AmbiguousId."""
        return self.set_fields(memory_id, "expire", expires_at=at or self.clock())

    def forget(self, memory_id: str) -> Memory:
        """Forget a memory (soft delete: hidden everywhere, `restore` or `undo` brings it back;
        `purge` erases it). Returns the memory after the change. Raises NotFound / AmbiguousId."""
        now = self.clock()
        return self._update(memory_id, "forget", lambda m: m if m.forgotten_at else replace(m, forgotten_at=now))

    def delete(self, memory_id: str, action: str = "delete") -> Memory:
        """Remove a memory's row and vector (dream --purge). The event keeps both, so undo restores it."""
        full = self.resolve(memory_id)
        with self.operation(action, f"{action} {full}"):
            m = self._fresh(full)
            self._delete(m, action)
        return m

    def restore(self, memory_id: str) -> Memory:
        """Bring back a forgotten, expired or merged memory."""
        now = self.clock()
        return self._update(memory_id, "restore", lambda m: replace(
            m, forgotten_at=None, merged_into=None, expires_at=None if m.is_expired(now) else m.expires_at))

    def supersede(self, old_id: str, new_id: str, at: str | None = None) -> Memory:
        """Mark `old_id` as no longer true from `at`, replaced by `new_id`. It stays findable with --as-of."""
        old_full, new_full = self.resolve(old_id), self.resolve(new_id)
        if old_full == new_full:
            raise UsageError("a memory cannot supersede itself")
        with self.operation("supersede", f"{new_full} supersedes {old_full}"):
            old, new = self._fresh(old_full), self._fresh(new_full)
            # Two current versions of one fact would be a fork: only a live head is replaced.
            for m in (old, new):
                if (m.superseded_by and m.superseded_by != new.id) or m.forgotten_at or m.merged_into:
                    raise UsageError(f"memory {m.id} is not current (superseded, merged or forgotten): "
                                     f"see `pmem why {m.id}`")
            at = at or new.valid_from or new.created_at
            if new.valid_from is None:
                self._write(new, replace(new, valid_from=at, updated_at=self.clock()), "supersede")
            return self._write(old, replace(old, valid_to=at, superseded_by=new.id, updated_at=self.clock()),
                               "supersede")

    def purge(self, ids: Iterable[str]) -> dict[str, Any]:
        """Erase memories for good: their text and vector leave every table.

        The rows go from `memories`, the FTS index (merged, so no segment keeps the words) and
        the vector tables (the vector is zeroed before its row is deleted); every event about
        them keeps only its action and time, and the summaries of operations that quoted the
        text are replaced. `secure_delete` zeroes the freed space, VACUUM rewrites the file from
        the live rows and a WAL checkpoint (TRUNCATE) empties the -wal; `checkpointed` is False
        when another process held a read open so the -wal could not be emptied (run it again
        when pmem is idle). A purge killed after its commit leaves a `purge_pending` setting, and
        the next MemoryStore opened on the file finishes the rewrite. `undo` skips a purge.
        Memories derived from these (extracted facts, merges) are separate memories, listed under
        `derived`, and backups are separate files (pmem.backup.purge_backups)."""
        return erase.purge(self.db, self.journal, self.vectors, self.keywords, ids)

    # -- undo -----------------------------------------------------------------------------

    def undo(self, op_id: str | None = None) -> Operation:
        """Revert the last operation not yet undone (or `op_id`, if it is that one), exactly.

        The operation is chosen and claimed inside the write transaction, so two concurrent
        undos revert two operations (or the second finds nothing), never one twice."""
        with self.transaction():
            op = self.journal.last_undoable()
            if op is None:
                raise NotFound("nothing to undo")
            if op_id is not None and op.id != op_id:
                raise UsageError(f"operation {op_id} is not the latest; undo goes back one operation at a time")
            rows = self.journal.undo_events(op.id)
            self._revert(rows, self._lost_vectors(rows))
            return self.journal.finish_undo(op, rows)

    def _lost_vectors(self, rows: Sequence[tuple]) -> dict[str, bytes]:
        """Vectors, by text, of the states undo puts back whose events kept none (Journal.undo_events' rows)."""
        # Old events kept no vector: re-embed those texts (rare; the lock is held meanwhile).
        needs_vec = [json.loads(r[4]) for r in rows if r[4] and r[7] is None and r[5]
                     and json.loads(r[4])["text"] != json.loads(r[5])["text"]]
        return dict(zip([d["text"] for d in needs_vec], self.embed([d["text"] for d in needs_vec]))) \
            if needs_vec else {}
