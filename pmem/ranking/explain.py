"""Each result's way through the stages of its search (`pmem search --explain`).

`way` builds one result's account from what search() kept of each stage: the keyword and dense
candidate lists (rank and BM25; rank, cosine and distance), the thread lift and question penalty
on the dense side, the fusion (the share, why that share, each side's scaled part, the fused
score) and the dense-first move. Every account names its keyword, dense and fusion stages, even
where a stage did not run (a keyword search has no dense side): `stage` says which ran, `used`
whether it did.
"""

from __future__ import annotations

from typing import Any

from .profile import Profile
from .stages import Fusion

KEYWORD = "keyword candidates: FTS5 BM25 (words and thread neighbours' words)"
DENSE = "dense candidates: cosine distance of the query's vector (English pairs by both models)"
FUSIONS = {
    "hybrid": "convex fusion: share * minmax(-bm25) + (1 - share) * minmax(cosine)",
    "keyword": "keyword only: the fused score is -bm25",
    "semantic": "dense only: the fused score is the cosine after thread lift and question penalty",
}


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def share_reason(fusion: Fusion, profile: Profile) -> str:
    """Why the fusion gave the keyword side the share it did, in one line."""
    if fusion.share is None:
        return "one side only: no share"
    if not fusion.adaptive:
        return f"fixed: keyword_weight {profile.keyword_weight}"
    ev = fusion.ev
    assert ev is not None
    terms = sorted(((c * getattr(ev, name), name) for name, c in profile.share_coef), key=lambda t: -abs(t[0]))
    which = "english" if profile.share_coef == profile.english_share_coef else "default"
    lead = ", ".join(f"{name} {value:+.2f}" for value, name in terms[:2])
    return (f"evidence ({which} coefficients): share_max {profile.share_max} * logistic(bias "
            f"{profile.share_bias} + terms); largest terms {lead}")


def way(seq: int, mode: str, profile: Profile, fusion: Fusion, *, kw_rank: int | None, bm25: float | None,
        sem_rank: int | None, distance: float | None, lifted: float | None, question: bool,
        penalty: float, floor: float, score: float, relevance: float) -> dict[str, Any]:
    """One result's account (see the module); `distance`: its own, `lifted`: after the thread lift,
    `penalty`: the step a question moved by, `score`: the fused (rank) score, `relevance`: the Hit's."""
    dense_used = mode != "keyword"
    out: dict[str, Any] = {
        "profile": {"model": profile.model, "version": profile.version},
        "keyword": {"stage": KEYWORD, "used": mode != "semantic", "rank": kw_rank, "bm25": _r(bm25)},
        "dense": {"stage": DENSE, "used": dense_used, "rank": sem_rank, "distance": _r(distance),
                  "cosine": None if distance is None else _r(1.0 - distance),
                  "floor": _r(floor) if dense_used else None},
        "thread_lift": {"used": dense_used and profile.thread_lift > 0.0, "distance": _r(lifted),
                        "moved": None if distance is None or lifted is None else _r(distance - lifted)},
        "question_penalty": {"used": dense_used and profile.question_penalty > 0.0, "question": question,
                             "step": _r(penalty) if question and distance is not None else 0.0},
    }
    fusion_out: dict[str, Any] = {"stage": FUSIONS[mode], "used": True, "score": _r(score)}
    if mode == "hybrid":
        fusion_out.update({
            "share": _r(fusion.share), "why": share_reason(fusion, profile),
            "keyword_part": _r((fusion.kw_part or {}).get(seq)), "dense_part": _r((fusion.sem_part or {}).get(seq)),
        })
        if fusion.ev is not None:
            fusion_out["evidence"] = {k: _r(v) for k, v in vars(fusion.ev).items()}
    out["fusion"] = fusion_out
    moved = fusion.moved is not None and fusion.moved[0] == seq
    out["dense_first"] = {"used": mode == "hybrid" and profile.dense_first, "moved": moved,
                          "why": fusion.moved[1] if moved and fusion.moved else None}
    out["score"] = _r(relevance)
    return out


def line(way: dict[str, Any]) -> str:
    """One account in one line for a terminal: kw #rank bm25 · dense #rank cos (lift, question step) ·
    each side's scaled part (keyword/dense) · fused · dense-first move. The share is the query's:
    the caller shows it once."""
    kw, dense, fusion = way["keyword"], way["dense"], way["fusion"]
    parts = []
    if kw["used"]:
        parts.append(f"kw #{kw['rank']} bm25 {kw['bm25']:.2f}" if kw["rank"] is not None else "kw -")
    if dense["used"]:
        if dense["rank"] is not None:
            extra = ""
            if way["thread_lift"]["moved"]:
                extra += f" lift -{way['thread_lift']['moved']:.3f}"
            if way["question_penalty"]["step"]:
                extra += f" ?+{way['question_penalty']['step']:.3f}"
            parts.append(f"dense #{dense['rank']} cos {dense['cosine']:.3f}{extra}")
        else:
            parts.append("dense -")
    if fusion.get("keyword_part") is not None or fusion.get("dense_part") is not None:
        kp, dp = fusion.get("keyword_part") or 0.0, fusion.get("dense_part") or 0.0
        parts.append(f"parts {kp:.2f}/{dp:.2f}")
    parts.append(f"fused {fusion['score']:.4f}")
    if way["dense_first"]["moved"]:
        parts.append(f"dense-first ({way['dense_first']['why']})")
    return " · ".join(parts)
