"""Dream's pair search by LSH on large stores (pmem.dream): the close pairs all-pairs finds."""

from __future__ import annotations

import pytest


def test_dream_pairs_by_lsh_find_the_close_pairs_that_all_pairs_find():
    np = pytest.importorskip("numpy")
    from pmem import dream

    rng = np.random.default_rng(5)
    base = rng.standard_normal((600, 64)).astype(np.float32)
    near = base[:150] + 0.15 * rng.standard_normal((150, 64)).astype(np.float32)
    vecs = np.vstack([base, near])
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    exact = dream.close_pairs(vecs, 0.9)
    lsh = dream.close_pairs_lsh(vecs, 0.9)
    assert len(exact) >= 140
    assert {(i, j) for i, j, _ in lsh} <= {(i, j) for i, j, _ in exact}  # never a pair below the threshold
    assert len(lsh) >= 0.99 * len(exact)


def test_dream_pairs_by_lsh_on_vectors_that_all_lean_one_way(monkeypatch):
    """e5-like vectors (unrelated pairs near cosine 0.86): hashed raw, every pair shares buckets;
    centred, with the bound that keeps the guarantee, LSH finds what all pairs find and compares
    far fewer pairs."""
    np = pytest.importorskip("numpy")
    from pmem import dream

    rng = np.random.default_rng(7)
    common = rng.standard_normal(64).astype(np.float32)
    common /= np.linalg.norm(common)
    spread = rng.standard_normal((3000, 64)).astype(np.float32)
    spread /= np.linalg.norm(spread, axis=1, keepdims=True)
    base = 2.5 * common + spread
    near = base[:300] + 0.04 * rng.standard_normal((300, 64)).astype(np.float32)
    vecs = np.vstack([base, near])
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    assert 0.8 < float(np.median(np.sum(vecs[:1000] * vecs[1000:2000], axis=1))) < 0.9
    monkeypatch.setattr(dream.pairs, "LSH_LOW", 100)
    for threshold in (0.97, 0.955):
        exact = {(i, j) for i, j, _ in dream.close_pairs_exact(vecs, threshold)}
        assert len(exact) >= 250
        compared = {}
        for space in ("centred", "raw"):
            found = {(i, j) for i, j, _ in dream.close_pairs_lsh(vecs, threshold, space=space)}
            assert found <= exact and len(found) >= 0.99 * len(exact)
            assert dream.LSH_LAST["space"] == space
            compared[space] = dream.LSH_LAST["compared"]
        assert compared["centred"] < compared["raw"] / 2  # raw buckets hold unrelated pairs too


def test_the_hits_of_a_mask_are_numpys_nonzero_in_the_same_order():
    """dream's 1-d search of a pair mask (mask_hits) answers what np.nonzero does, row by row."""
    import numpy as np

    from pmem.dream import mask_hits

    rng = np.random.default_rng(4)
    for shape, share in [((7, 13), 0.3), ((1024, 2000), 0.001), ((3, 1), 1.0), ((0, 5), 0.5), ((4, 6), 0.0)]:
        mask = rng.random(shape) < share
        rows, cols = mask_hits(mask)
        want_rows, want_cols = np.nonzero(mask)
        assert rows.tolist() == want_rows.tolist() and cols.tolist() == want_cols.tolist()

