"""The keyword index: FTS5 ranks and how a query is planned on a large store, the neighbour
window of threaded memories, segment merges, and the languages memories are in.

Figures behind the constants and the query plans: docs/decisions/0044-store-figures.md."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence

from ..ranking.profile import DEFAULT, Profile
from .connection import Connection, Progress
from .filter import LIVE_SQL, Filter, date_window, estimate

KEYWORD_FETCH = 4  # a large store's keyword side ranks 4n by BM25 before it filters (KeywordIndex.ranks)
MERGE_STEP = 1000  # keyword-index pages one transaction of merge() writes (0.3-0.4 s at 100k)
MERGE_PAUSE = 0.1  # seconds between two steps: longer than SQLite's busy handler sleeps, so a waiting writer gets in


# -- threads and the neighbour-aware keyword index ---------------------------------------------
#
# The FTS5 entry of a memory in a thread holds its text and, in a second column, the text of its
# live neighbours (not forgotten, not merged): KEYWORD_WINDOW = (before, after) of them, in thread
# order (thread_pos, then seq). A question often shares its words with the turn before or after
# the one that answers it (docs/decisions/0002-threads-keyword-window.md). The index keeps its own copy of both
# columns, so triggers can rewrite any entry from the current rows alone: whatever writes
# `memories` (an edit, a forget, a purge, a merge, an undo), the index follows in the same
# transaction and is a pure function of the rows.

KEYWORD_WINDOW = (2, 2)
_LIVE = LIVE_SQL.format(a="n")


def _nearest(t: str, p: str, s: str, count: int, side: int, column: str, exclude: str | None = None) -> str:
    """The `count` live members of thread `t` nearest to the key (p, s) on one side, as a subquery."""
    op, order = ("<", "DESC") if side < 0 else (">", "ASC")
    skip = f" AND n.seq != {exclude}" if exclude else ""
    return (f"SELECT {column} FROM (SELECT n.{column} FROM memories n WHERE n.thread = {t} AND {_LIVE}{skip} "
            f"AND (n.thread_pos, n.seq) {op} ({p}, {s}) ORDER BY n.thread_pos {order}, n.seq {order} "
            f"LIMIT {int(count)})")


def _context(r: str, before: int, after: int) -> str:
    """SQL for the neighbour text of the memory `r` (a row alias, new or old); NULL when it has
    none or is not live itself (a forgotten memory lends and borrows no words)."""
    parts = [_nearest(f"{r}.thread", f"{r}.thread_pos", f"{r}.seq", n, side, "text")
             for n, side in ((before, -1), (after, 1)) if n > 0]
    if not parts:
        return "NULL"
    return (f"CASE WHEN {LIVE_SQL.format(a=r)} THEN "
            f"(SELECT group_concat(text, ' ') FROM ({' UNION ALL '.join(parts)})) END")


def _affected(r: str, before: int, after: int) -> str:
    """Seqs of the memories whose window holds the one at key `r` (old or new): the `after`
    members before it and the `before` members after it."""
    x = f"{r}.seq"
    parts = [_nearest(f"{r}.thread", f"{r}.thread_pos", x, n, side, "seq", exclude=x)
             for n, side in ((after, -1), (before, 1)) if n > 0]
    return " UNION ALL ".join(parts) or "SELECT NULL WHERE 0"


def install_keyword_window(conn, before: int, after: int) -> None:
    """(Re)create the triggers that keep memories_fts in step, for a window of `before` and
    `after` neighbours, and recompute every entry's context. Runs inside the caller's transaction."""
    for name in ("memories_ai", "memories_ai_thread", "memories_ad", "memories_au"):
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    own = _context("o", before, after)
    # m006 adds a `stems` column (stemming.index_stems); before it, the triggers write none.
    has_stems = any(r[1] == "stems" for r in conn.execute("PRAGMA table_info(memories_fts)"))
    sc, sv, su = (", stems", ", pmem_stems(new.text)", ", stems = pmem_stems(new.text)") if has_stems else ("", "", "")
    refresh = f"UPDATE memories_fts SET context = (SELECT {own} FROM memories o WHERE o.seq = memories_fts.rowid)"
    # Two insert triggers that never both fire, so their order cannot matter; a memory with no
    # thread costs one FTS insert, as before threads.
    conn.execute(f"""
        CREATE TRIGGER memories_ai AFTER INSERT ON memories WHEN new.thread IS NULL BEGIN
            INSERT INTO memories_fts(rowid, text{sc}) VALUES (new.seq, new.text{sv});
        END""")
    conn.execute(f"""
        CREATE TRIGGER memories_ai_thread AFTER INSERT ON memories WHEN new.thread IS NOT NULL BEGIN
            INSERT INTO memories_fts(rowid, text, context{sc}) VALUES
                (new.seq, new.text, {_context('new', before, after)}{sv});
            {refresh} WHERE rowid IN ({_affected('new', before, after)});
        END""")
    conn.execute(f"""
        CREATE TRIGGER memories_ad AFTER DELETE ON memories BEGIN
            DELETE FROM memories_fts WHERE rowid = old.seq;
            {refresh} WHERE old.thread IS NOT NULL AND rowid IN ({_affected('old', before, after)});
        END""")
    conn.execute(f"""
        CREATE TRIGGER memories_au AFTER UPDATE OF text, thread, thread_pos, forgotten_at, merged_into
        ON memories WHEN old.text IS NOT new.text OR old.thread IS NOT new.thread
            OR old.thread_pos IS NOT new.thread_pos
            OR (old.forgotten_at IS NULL) != (new.forgotten_at IS NULL)
            OR (old.merged_into IS NULL) != (new.merged_into IS NULL) BEGIN
            UPDATE memories_fts SET text = new.text, context = {_context('new', before, after)}{su}
                WHERE rowid = new.seq;
            {refresh} WHERE (old.thread IS NOT NULL OR new.thread IS NOT NULL) AND rowid IN
                ({_affected('old', before, after)} UNION {_affected('new', before, after)});
        END""")
    conn.execute(f"{refresh} WHERE rowid IN (SELECT seq FROM memories WHERE thread IS NOT NULL) "
                 "OR context IS NOT NULL")
    conn.execute("INSERT INTO settings (key, value) VALUES ('keyword_window', ?) "
                 "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (f"{int(before)},{int(after)}",))


class KeywordIndex:
    """memories_fts over the store's connection."""

    def __init__(self, db: Connection):
        self.db = db

    def languages(self) -> dict[str, int]:
        """Memories per guessed language other than English (kept by triggers, migration
        m007), most first: which stemmers a keyword query may need."""
        rows = self.db.execute("SELECT substr(key, 6), n FROM counts WHERE key >= 'lang:' AND key < 'lang;' "
                               "AND n > 0 ORDER BY n DESC, key").fetchall()
        return {r[0]: r[1] for r in rows}

    def window(self) -> tuple[int, int]:
        """How many neighbours (before, after) each threaded memory's keyword entry holds."""
        value = self.db.setting("keyword_window")
        if not value:
            return KEYWORD_WINDOW
        before, after = value.split(",")
        return int(before), int(after)

    def set_window(self, before: int, after: int) -> None:
        """Change the window and rewrite every threaded entry (one transaction; a tuning knob,
        not an event: no memory changes)."""
        from ..errors import UsageError

        if before < 0 or after < 0:
            raise UsageError("a keyword window counts 0 or more neighbours")
        with self.db.transaction():
            install_keyword_window(self.db.conn, before, after)

    def ranks(self, match: str, flt: Filter, n: int, context_weight: float = 1.0,
              profile: Profile = DEFAULT) -> list[tuple[int, float]]:
        """(seq, bm25) for an FTS5 `match` expression, best first; bm25 is negative, lower is better.
        A threaded memory's neighbours' words (the `context` column) count `context_weight`; which
        words are common on a large store: `profile` (common_share, common_min, common_max, common_recent)."""
        db = self.db
        where, params = flt.where(db.clock())
        weights = f"1.0, {float(context_weight)!r}"
        docs = db.memory_count()
        large = docs >= db.exact_below
        # Under a date filter on a large store, the storage range [lo, hi] of the window's newest
        # rows (date_window) bounds what is ranked; where those are the whole window the bounded
        # query is exact, and it costs what the window holds where dates follow storage order.
        window = date_window(db, flt, docs) if large else None
        lo, hi, complete = window if window is not None else (0, 0, False)
        span = " AND memories_fts.rowid BETWEEN ? AND ?" if complete else ""
        sql = (f"SELECT m.seq, bm25(memories_fts, {weights}) AS rank FROM memories_fts "
               f"JOIN memories m ON m.seq = memories_fts.rowid "
               f"WHERE memories_fts MATCH ?{span} AND {where} ORDER BY rank LIMIT ?")
        spanned = [lo, hi] if complete else []
        # On a large store the best KEYWORD_FETCH * n by BM25 alone are ranked first and only
        # those rows are looked up and filtered; where the filter keeps fewer than n of them and
        # more rows match than were ranked, the whole query. A filter known to keep under
        # 1 / KEYWORD_FETCH of the store (a tier, a tag) goes to the whole query at once: the
        # first pass would rank every row only to fail.
        selective = large and estimate(db, flt) * KEYWORD_FETCH < docs
        fetched = (f"SELECT f.rowid, f.rank, CASE WHEN m.seq IS NOT NULL AND ({where}) THEN 1 ELSE 0 END "
                   f"FROM (SELECT rowid, bm25(memories_fts, {weights}) AS rank "
                   f"FROM memories_fts WHERE memories_fts MATCH ? ORDER BY rank LIMIT ?) f "
                   f"LEFT JOIN memories m ON m.seq = f.rowid ORDER BY f.rank")

        def ranked(expr: str, selective: bool = selective) -> list[tuple[int, float]]:
            if large and not selective and not complete:
                best = KEYWORD_FETCH * int(n)
                found = db.execute(fetched, [*params, expr, best]).fetchall()
                rows = [(r[0], r[1]) for r in found if r[2]][:n]
                if len(rows) >= n or len(found) < best:  # enough, or every matching row was seen
                    return rows
            return [(r[0], r[1]) for r in db.execute(sql, [expr, *spanned, *params, int(n)])]

        terms = match.split(" OR ")
        if large and window is None and (flt.since or flt.until):
            return []  # no memory in the date window
        if complete:
            return ranked(match)
        if large and (len(terms) > 1 or window is not None):
            # BM25 is computed for every row holding any query word, and a word in 20-50% of a
            # large store costs much while adding little to the score (its IDF is near 0). Such
            # words choose no rows when rarer ones remain; a query of common words alone (under a
            # date filter, one common word too) ranks the newest common_recent rows holding them.
            cap = max(profile.common_min, min(docs * profile.common_share // 100, profile.common_max))
            rare = [t for t in terms if db.execute(
                "SELECT count(*) FROM (SELECT 1 FROM memories_fts WHERE memories_fts MATCH ? LIMIT ?)",
                (t, cap + 1)).fetchone()[0] <= cap]
            # Under a date filter "newest" means the newest rows of its window (their storage
            # range); under --as-of alone, of the memories created by then (date_window).
            newest = " AND rowid BETWEEN ? AND ?" if window is not None else ""
            recent = (f"SELECT m.seq, f.rank FROM (SELECT rowid, bm25(memories_fts, {weights}) AS rank "
                      f"FROM memories_fts "
                      f"WHERE memories_fts MATCH ?{newest} ORDER BY rowid DESC LIMIT ?) f "
                      f"JOIN memories m ON m.seq = f.rowid WHERE {where} ORDER BY f.rank LIMIT ?")
            common = " OR ".join(t for t in terms if t not in rare)
            # The rows holding a rare word, ranked with the common words counted where a row
            # holds them (a name tells whose memory it is). FTS5 has no optional phrase, so the
            # rare words are in the expression twice and count double; halved, a score lies
            # between the rare words' own and the whole query's, as search's absolute scores
            # expect (hit@10 of the alternatives: docs/decisions/0026-scale-sixth-round.md).
            if len(rare) == len(terms):
                return ranked(match)
            rows = [(seq, rank / 2) for seq, rank in ranked(f"({' OR '.join(rare)}) AND ({match})")] if rare else []
            if len(rows) >= n:
                return rows
            # Fewer rows than asked hold a rare word, so those rows are all of them: the rest come
            # from the newest rows holding the common words, ranked after them (BM25 of the whole
            # query over every row holding a common word took seconds at 1,000,000).
            seen = {seq for seq, _ in rows}
            last = rows[-1][1] if rows else None
            bounds = [lo, hi] if window is not None else []
            for seq, rank in db.execute(recent, [common, *bounds, profile.common_recent, *params, int(n)]):
                if seq not in seen and len(rows) < n:
                    rows.append((seq, rank if last is None else max(rank, last)))
            if len(rows) >= n:
                return rows
            return ranked(match, selective=True)  # the filter keeps few of the newest: the whole query
        return ranked(match)

    def holds_rare(self, match: str, seq: int, most: Callable[[int], int]) -> bool:
        """Whether the entry of memory `seq` (its text or its neighbours') holds a term of `match`
        (terms OR-ed, as KeywordIndex.ranks takes them) that at most most(N) entries hold, N the
        memories stored: one rowid lookup a term, and a count that stops past most(N) for each
        term it holds (pmem.search.dense_first)."""
        cap = most(self.db.memory_count())
        for term in match.split(" OR "):
            if self.db.execute("SELECT 1 FROM memories_fts WHERE memories_fts MATCH ? AND rowid = ?",
                               (term, seq)).fetchone() is None:
                continue
            held = self.db.execute("SELECT count(*) FROM (SELECT 1 FROM memories_fts WHERE memories_fts MATCH ? "
                                   "LIMIT ?)", (term, cap + 1)).fetchone()[0]
            if held <= cap:
                return True
        return False

    def neighbours(self, seqs: Sequence[int]) -> dict[int, list[int]]:
        """The live thread neighbours within the window (those whose words a keyword entry holds)
        of each live threaded memory among `seqs`, by seq: for the dense side's thread lift
        (pmem.search.thread_lift). A memory with no thread, or not live, has none."""
        before, after = self.window()
        parts = [_nearest("c.thread", "c.thread_pos", "c.seq", count, side, "seq")
                 for count, side in ((before, -1), (after, 1)) if count > 0]
        if not parts or not seqs or self.db.execute(
                "SELECT 1 FROM memories WHERE thread IS NOT NULL LIMIT 1").fetchone() is None:
            return {}
        # one correlated read a candidate, through memories_thread: ~2 ms for 100 at 100,000
        rows = self.db.execute(
            f"SELECT c.seq, (SELECT json_group_array(seq) FROM ({' UNION ALL '.join(parts)})) FROM json_each(?) p "
            f"JOIN memories c ON c.seq = p.value WHERE c.thread IS NOT NULL AND {LIVE_SQL.format(a='c')}",
            (json.dumps(list(seqs)),)).fetchall()
        return {seq: near for seq, near in ((seq, json.loads(near)) for seq, near in rows) if near}

    def candidate_neighbours(self, seqs: Sequence[int]) -> dict[int, list[int]]:
        """`neighbours(seqs)` with each list cut to `seqs` themselves: all the thread lift uses (a
        neighbour that is no candidate lends no distance). One read finds the live threaded
        candidates; only those sharing their thread with another have their windows read (at
        100,000 in threads of 20 the 125 candidates' windows cost 0.9 ms a search, and few
        candidates share a thread: docs/decisions/0058-search-at-scale.md)."""
        if not seqs:
            return {}
        rows = self.db.execute(
            f"SELECT c.seq, c.thread FROM json_each(?) p JOIN memories c ON c.seq = p.value "
            f"WHERE c.thread IS NOT NULL AND {LIVE_SQL.format(a='c')}",
            (json.dumps(list(dict.fromkeys(seqs))),)).fetchall()
        threads: dict[str, list[int]] = {}
        for seq, thread in rows:
            threads.setdefault(thread, []).append(seq)
        shared = [seq for members in threads.values() if len(members) > 1 for seq in members]
        if not shared:
            return {}
        kept = set(shared)  # a neighbour among the candidates is a live member of the same thread
        found = ((seq, [n for n in near if n in kept]) for seq, near in self.neighbours(shared).items())
        return {seq: near for seq, near in found if near}

    def starting_with(self, words: list[str]) -> str:
        """An FTS5 expression for texts that begin with these words (with the index's stemming)."""
        return "text : " + '^"' + " ".join(w.replace('"', '""') for w in words) + '"'

    # -- segments -------------------------------------------------------------------------

    def segments(self) -> int:
        """How many segments (b-trees) the index is in; each write adds one, and FTS5 merges them
        only in fours."""
        try:
            return self.db.execute("SELECT count(DISTINCT segid) FROM memories_fts_idx").fetchone()[0]
        except self.db.errors as exc:
            raise self.db.error(exc) from None

    def optimize(self) -> None:
        """Merge every segment at once, in the open transaction (a purge: no segment keeps the words)."""
        self.db.execute("INSERT INTO memories_fts(memories_fts) VALUES ('optimize')")

    def merge(self, step: int = MERGE_STEP, pause: float = MERGE_PAUSE,
              progress: Progress | None = None) -> tuple[int, int]:
        """Merge the index into one segment, `step` pages a transaction with `pause` seconds
        between two, so another writer waits about one step (SQLite's busy handler sleeps up to
        0.1 s between tries: without the pause it could sleep through every gap) and kill -9
        leaves a whole index. Inside a transaction already open it is one transaction.

        A query reads every segment's list of rows for each of its words: one segment makes the
        keyword side faster (docs/decisions/0027-keyword-merge-knn-bound.md). `progress` is called with (pages written,
        about how many there are). Returns the segments before and after."""
        db = self.db
        before = self.segments()
        if before < 2:
            return before, before
        total = done = 0
        if progress:
            total = db.execute("SELECT count(*) FROM memories_fts_data").fetchone()[0]
            progress(0, total)
        # A negative step puts every segment on one level and starts merging them; positive
        # steps go on with that merge (and leave a segment written meanwhile for later) until a
        # step changes nothing (FTS5's documented way to optimize incrementally).
        sql = "INSERT INTO memories_fts(memories_fts, rank) VALUES ('merge', ?)"
        pages = -abs(int(step))
        while True:
            changes = db.conn.total_changes
            with db.transaction():
                try:
                    db.execute(sql, (pages,))
                except db.errors as exc:
                    raise db.error(exc) from None
            if db.conn.total_changes - changes < 2:
                break
            if progress:
                done = min(done + abs(pages), total - 1)  # the last step says when it is done
                progress(done, total)
            pages = abs(pages)
            time.sleep(pause)
        if progress:
            progress(total, total)
        return before, self.segments()
