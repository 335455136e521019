"""The ranking profile (pmem/ranking/profile.py) holds every ranking constant, each with its reason
and decision record, and no module that ranks keeps one of its own."""

from __future__ import annotations

import ast
from dataclasses import fields, replace
from pathlib import Path

import pytest

from pmem.ranking import profile as profile_module
from pmem.ranking.profile import DEFAULT, Profile, for_model

ROOT = Path(__file__).resolve().parents[2]
DECISIONS = ROOT / "docs" / "decisions"
# Where the ranking's constants lived before they moved to the profile: the modules that rank.
RANKING_MODULES = [ROOT / "pmem" / "search.py", *sorted((ROOT / "pmem" / "ranking").glob("*.py"))]
# Modules that keep other numbers (the store's sizes and costs, recall's block), but none of those.
STORE_MODULES = [*sorted((ROOT / "pmem" / "store").glob("*.py")), ROOT / "pmem" / "recall.py"]
# The names the constants had there, and the profile's own names in capitals.
OLD_NAMES = {"CANDIDATES", "BM25_HALF", "SHARE_MAX", "SHARE_BIAS", "SHARE_COEF", "ENGLISH_SHARE_BIAS",
             "ENGLISH_SHARE_COEF", "DENSE_FIRST_WITHIN", "COMMON_EXPONENT", "DENSE_MARGIN", "THREAD_LIFT",
             "QUESTION_PENALTY", "WEIGHT", "POOL", "KNOTS", "COMMON_SHARE", "COMMON_MIN", "COMMON_MAX",
             "COMMON_RECENT", "BIT_POOL", "_QUESTION_MARKS", "MIN_SCORE"}


def _numeric(node: ast.AST) -> bool:
    """A literal number, or a tuple of them (nested), possibly negated."""
    if isinstance(node, ast.UnaryOp):
        return _numeric(node.operand)
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.Tuple):
        return bool(node.elts) and all(_numeric(e) or isinstance(e, ast.Constant) for e in node.elts) \
            and any(_numeric(e) for e in node.elts)
    return False


def _module_constants(path: Path) -> dict[str, ast.AST]:
    """name -> value of every module-level assignment in `path`."""
    out: dict[str, ast.AST] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out[target.id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            out[node.target.id] = node.value
    return out


def test_every_field_has_a_reason_and_an_existing_decision_record():
    listed = (DECISIONS / "index.md").read_text(encoding="utf-8")
    documented = Profile.documented()
    assert [name for name, *_ in documented] == [f.name for f in fields(Profile)]
    for name, _, why, record in documented:
        assert why.strip() and "\n" not in why, name
        assert (DECISIONS / record).is_file(), (name, record)
        assert f"({record})" in listed, (name, record)


@pytest.mark.parametrize("path", RANKING_MODULES, ids=lambda p: p.name)
def test_no_module_that_ranks_keeps_a_number_of_its_own(path):
    """search.py and the ranking package's stages take every number from the profile:
    a module-level numeric constant there is one the profile does not hold (profile.py itself
    keeps only the fitted tables its fields default to)."""
    allowed = {"SHARE_COEF", "ENGLISH_SHARE_COEF", "ENGLISH_KNOTS"} if path.name == "profile.py" else set()
    found = {name for name, value in _module_constants(path).items() if _numeric(value)} - allowed
    assert not found, f"{path.name}: {sorted(found)} belong in pmem/ranking/profile.py"


@pytest.mark.parametrize("path", STORE_MODULES, ids=lambda p: p.name)
def test_the_store_keeps_none_of_the_ranking_constants(path):
    found = OLD_NAMES & set(_module_constants(path))
    assert not found, f"{path.name}: {sorted(found)} belong in pmem/ranking/profile.py"


def test_the_profile_holds_what_the_modules_held():
    held = {f.name.upper() for f in fields(Profile)}
    # each old name is a field, or the English-side one under its English name
    renamed = {"WEIGHT": "ENGLISH_WEIGHT", "POOL": "ENGLISH_POOL", "KNOTS": "ENGLISH_KNOTS",
               "_QUESTION_MARKS": "QUESTION_MARKS", "MIN_SCORE": "RECALL_MIN_SCORE"}
    assert {renamed.get(n, n) for n in OLD_NAMES} <= held


def test_recall_min_score_setting_defaults_to_the_profile():
    from pmem.config import Config

    assert Config().recall_min_score == DEFAULT.recall_min_score


def test_profiles_are_frozen_and_versioned_per_model():
    with pytest.raises(AttributeError):
        DEFAULT.candidates = 1  # type: ignore[misc]
    assert for_model(DEFAULT.model) is DEFAULT
    assert for_model("some-model-without-a-profile") == DEFAULT
    assert all(p.model == name and p.version >= 1 for name, p in profile_module.PROFILES.items())
    english = DEFAULT.english()
    assert (english.share_bias, english.share_coef) == (DEFAULT.english_share_bias, DEFAULT.english_share_coef)
    assert replace(english, share_bias=DEFAULT.share_bias, share_coef=DEFAULT.share_coef) == DEFAULT
