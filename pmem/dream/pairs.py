"""Finding the close pairs: every pair compared in blocks, random-hyperplane LSH on a large set,
and on a large store a slice's neighbours among all stored vectors (neighbours)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Iterable

from ..records import Memory
from .records import Budget

if TYPE_CHECKING:
    from ..service import MemoryStore


def vectors_of(store: "MemoryStore", memories: list[Memory]):
    """Unit vectors (numpy float32 rows) for `memories`, in order; rows of zeros where missing."""
    import numpy as np

    _, dim = store.vector_model()
    if not memories or not dim:
        return np.zeros((len(memories), 1), dtype=np.float32)
    blobs = store.vectors(m.id for m in memories)
    out = np.zeros((len(memories), dim), dtype=np.float32)
    for i, m in enumerate(memories):
        blob = blobs.get(m.id)
        if blob is not None and len(blob) == dim * 4:
            out[i] = np.frombuffer(blob, dtype="<f4")
    return out


PAIRS_EXACT_MAX = 20_000  # memories above which pairs are found by LSH instead of comparing all


def close_pairs(vecs, threshold: float) -> list[tuple[int, int, float]]:
    """(i, j, cosine) with i < j and cosine >= threshold, best first."""
    if len(vecs) > PAIRS_EXACT_MAX:
        return close_pairs_lsh(vecs, threshold)
    return close_pairs_exact(vecs, threshold)


def mask_hits(mask):
    """(rows, columns) of the True cells of a 2-d boolean array, in row order: np.nonzero's
    answer, from a 1-d search that is ~14 times faster on a large, mostly False mask."""
    import numpy as np

    return np.divmod(np.flatnonzero(mask), mask.shape[1])


def close_pairs_exact(vecs, threshold: float) -> list[tuple[int, int, float]]:
    """Every pair compared, in blocks to bound memory."""
    n = len(vecs)
    out: list[tuple[int, int, float]] = []
    block = max(1, min(1024, 2**26 // max(n, 1)))  # rows per product: at most ~256 MB of float32
    for start in range(0, n, block):
        sims = vecs[start:start + block] @ vecs[start:].T  # the upper triangle only
        rows, cols = mask_hits(sims >= threshold)
        for r, c in zip(rows.tolist(), cols.tolist()):
            if c > r:
                out.append((start + r, start + c, float(sims[r, c])))
    out.sort(key=lambda p: (-round(p[2], 6), p[0], p[1]))
    return out


LSH_LOW = 2000  # vectors nearest the centre, compared with every vector exactly (see close_pairs_lsh)
LSH_LAST: dict[str, Any] = {}  # how the last close_pairs_lsh went: space, bits, tables, pairs compared


def close_pairs_lsh(vecs, threshold: float, miss: float = 0.001,
                    space: str | None = None) -> list[tuple[int, int, float]]:
    """close_pairs without comparing all pairs (100,000 memories: 5e9): random-hyperplane LSH, seeded.

    Two vectors at angle a share a b-bit bucket of one table with probability (1 - a/pi)^b;
    enough tables are used that a pair at the threshold is missed with probability `miss`
    (closer pairs less often), and only pairs sharing a bucket are compared exactly.

    A model whose vectors all lean one way (multilingual-e5-small: unrelated texts at cosine
    ~0.86) puts unrelated pairs in one bucket nearly as often as close ones, and the tables cost
    more than all pairs. Hashing the vectors minus their mean fixes that, with a bound that keeps
    the guarantee: for centred vectors of norms >= r, a pair at cosine t is at centred cosine >=
    1 - (1 - t) / r^2 (law of cosines; the distance between them does not change). The LSH_LOW
    vectors nearest the mean set r and are compared with every vector exactly. Of the two
    spaces and 6-16 bits, the cheapest by expected comparisons (sampled) is used, unless `space`
    ("raw" or "centred") says which; all pairs (one matrix product per block) when that is
    cheaper still, as for e5's thresholds, which sit close to where unrelated pairs are."""
    import numpy as np

    n, dim = vecs.shape
    rng = np.random.default_rng(0)
    sample = rng.choice(n, size=min(n, 4096), replace=False)
    center = vecs[sample].mean(axis=0)
    centred = vecs - center
    norms = np.linalg.norm(centred, axis=1)
    low = np.argsort(norms, kind="stable")[:min(LSH_LOW, n)]
    r = float(norms[low[-1]]) if len(low) < n else 0.0
    a, b = sample[: len(sample) // 2], sample[len(sample) // 2: 2 * (len(sample) // 2)]

    def typical(x) -> float:  # the median cosine of random pairs: where unrelated pairs sit
        xa, xb = x[a], x[b]
        cos = np.sum(xa * xb, axis=1) / np.maximum(np.linalg.norm(xa, axis=1) * np.linalg.norm(xb, axis=1), 1e-12)
        return float(np.median(cos))

    def plan(near_cos: float, far_cos: float) -> tuple[float, int, int]:
        near = 1 - math.acos(max(-1.0, min(1.0, near_cos))) / math.pi
        far = 1 - math.acos(max(-1.0, min(1.0, far_cos))) / math.pi
        best = (math.inf, 0, 0)
        for bits in range(6, 17):
            same = near ** bits
            tables = max(1, math.ceil(math.log(miss) / math.log(1 - same))) if same < 1 else 1
            # pairs compared in small bucket blocks cost ~2x a pair of one large matrix product,
            # and each table hashes, sorts and walks its buckets (~64 pair-equivalents a vector)
            cost = tables * (n * n * far ** bits + 64 * n)
            best = min(best, (cost, bits, tables))
        return best

    raw = plan(threshold, typical(vecs))
    bound = 1 - (1 - threshold) / (r * r) if r > 0 else -1.0
    centre = plan(bound, typical(centred)) if bound > 0 else (math.inf, 0, 0)
    centre = (centre[0] + len(low) * n, centre[1], centre[2])  # the low vectors' exact comparisons
    use_centre = centre[0] < raw[0] if space is None else space == "centred" and bound > 0
    cost, bits, tables = centre if use_centre else raw
    LSH_LAST.clear()
    LSH_LAST.update(space="centred" if use_centre else "raw", bits=bits, tables=tables, compared=0)
    if cost >= n * n / 2 and space is None:
        LSH_LAST.update(space="all pairs", compared=n * (n - 1) // 2)
        return close_pairs_exact(vecs, threshold)  # LSH would compare more than all pairs
    hashed = centred if use_centre else vecs
    weights = 1 << np.arange(bits)
    found: dict[tuple[int, int], float] = {}

    def keep(rows, cols, sims, left, right) -> None:
        for x, y in zip(rows.tolist(), cols.tolist()):
            i, j = int(left[x]), int(right[y])
            if i != j:
                found[(min(i, j), max(i, j))] = float(sims[x, y])

    if use_centre:
        step = max(1, min(256, 2**26 // n))
        for start in range(0, len(low), step):
            rows_idx = low[start:start + step]
            sims = vecs[rows_idx] @ vecs.T
            LSH_LAST["compared"] += sims.size
            rows, cols = mask_hits(sims >= threshold)
            keep(rows, cols, sims, rows_idx, np.arange(n))
    for _ in range(tables):
        codes = ((hashed @ rng.standard_normal((dim, bits)).astype(np.float32)) > 0) @ weights
        order = np.argsort(codes, kind="stable")
        edges = np.flatnonzero(np.diff(codes[order])) + 1
        for group in np.split(order, edges):
            if len(group) < 2:
                continue
            sims = vecs[group] @ vecs[group].T
            LSH_LAST["compared"] += len(group) * (len(group) - 1) // 2
            rows, cols = mask_hits(np.triu(sims >= threshold, 1))
            keep(rows, cols, sims, group, group)
    out = [(i, j, s) for (i, j), s in found.items()]
    out.sort(key=lambda p: (-round(p[2], 6), p[0], p[1]))
    return out


def _union_find(n: int, edges: Iterable[tuple[int, int]]) -> list[list[int]]:
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    groups: dict[int, list[int]] = {}
    for i in range(n):
        groups.setdefault(find(i), []).append(i)
    return [g for g in groups.values() if len(g) > 1]


PARTNER_BLOCK = 16384  # stored vectors per block when looking for what resembles a slice


def neighbours(store: "MemoryStore", chunk: dict[int, Memory], threshold: float, upto: int | None = None,
                budget: Budget | None = None):
    """Arrays (row of a memory of `chunk`, row of a stored memory, cosine), in the order of the
    first, for every stored vector (of rows up to `upto`) at cosine >= `threshold` to a vector
    of `chunk` (row number -> memory); a pair of two memories of `chunk` once, and no memory
    with itself. Every vector is read once, a block at a time, so the cost is (chunk x store),
    not (store x store), and a block is all that is held. None: `budget` ran out first."""
    import numpy as np

    _, dim = store.vector_model()
    seqs = np.array(sorted(chunk), dtype=np.int64)
    new = vectors_of(store, [chunk[int(q)] for q in seqs])
    kept = np.flatnonzero(np.any(new != 0, axis=1))
    new, seqs = new[kept], seqs[kept]
    parts: list[tuple[Any, Any, Any]] = [(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))]
    if not dim or not len(new):
        return parts[0]
    # One product and one mask, reused: a fresh 64 MB product each step was page-faulted in
    # again, and a 2-d np.nonzero of the mask cost as much as the product (a 1-d one is ~14
    # times faster). A probe, 20,000 x 16,384 vectors: 1.55-1.62 s -> 0.84-0.92 s (the product
    # alone 0.77 s).
    product = np.empty(1024 * PARTNER_BLOCK, dtype=np.float32)
    mask = np.empty(1024 * PARTNER_BLOCK, dtype=bool)
    for block_seqs, blob in store.vectors.blocks(PARTNER_BLOCK, upto):
        if budget is not None and budget.over():
            return None
        block = np.frombuffer(blob, dtype="<f4").reshape(-1, dim)
        rows = np.array(block_seqs, dtype=np.int64)
        in_chunk = np.isin(rows, seqs)
        for start in range(0, len(new), 1024):
            part = new[start:start + 1024]
            shape = (len(part), len(block))
            sims = np.matmul(part, block.T, out=product[:shape[0] * shape[1]].reshape(shape))
            hit = np.greater_equal(sims, threshold - 1e-6, out=mask[:shape[0] * shape[1]].reshape(shape))
            x, y = mask_hits(hit)
            mine, theirs = seqs[start + x], rows[y]
            once = (theirs < mine) | ~in_chunk[y]  # two of the chunk: the later with the earlier
            parts.append((mine[once], theirs[once], sims[x[once], y[once]]))
    mine, theirs, cos = (np.concatenate(column) for column in zip(*parts))
    order = np.argsort(mine, kind="stable")
    return mine[order], theirs[order], cos[order]

