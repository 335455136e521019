"""A dream's summaries keep their episode's facts: a model's summary that drops most of its content
words is refused, and a model whose first summaries are refused writes no more of them."""

from __future__ import annotations

from dream.test_dream import NOW, _loose_merge, add  # noqa: F401 - the fixture applies here too
from dream.test_dream_lanes import Lanes
from pmem import dream, prompts
from pmem.dream import planners

from fakes import FakeGenerator

DAYS = 11


def old_days(store, days: int = DAYS) -> list[list[str]]:
    """`days` old days of three turns each: one summary a day."""
    out = []
    for d in range(days):
        out.append([add(store, f"Caroline: on day {d} we hiked trail {d}{i} by the lake with {name}.", tier="episodic",
                        created_at=f"2023-05-{d + 10:02d}T10:0{i}:00Z").id
                    for i, name in enumerate(["Bob", "Ann", "Joe"])])
    return out


class Summaries(FakeGenerator):
    """A summary of each day: `good` ones keep every turn's words, the others only the first few."""

    def __init__(self, good=lambda k: True):
        super().__init__()
        self.good = good
        self.summaries = 0

    def generate_json(self, messages, schema, max_tokens=256):
        self.calls += 1
        k = self.summaries
        self.summaries += 1
        notes = [line[2:] for line in messages[-1]["content"].splitlines() if line.startswith("- ")]
        if self.good(k):  # every note's words, in fewer tokens
            trails = [n.split("trail ")[1].split()[0] for n in notes]
            names = [n.rstrip(".").split()[-1] for n in notes]
            day = notes[0].split()[3]
            text = f"On day {day} Caroline hiked trails {', '.join(trails)} by the lake with {', '.join(names)}."
            return {"text": text}
        return {"text": notes[0].split(" trail")[0] + "."}  # "Caroline: on day 3 we hiked."


def reasons(plan) -> list[str]:
    return [p.reason for p in plan.proposals if p.kind == "compress"]


def test_a_summary_that_drops_most_of_its_episode_is_refused(store):
    (day,) = old_days(store, 1)
    texts = [store.get(i).text for i in day]
    assert planners.summary_cover("Caroline: on day 0 we hiked.", texts) < planners.SUMMARY_COVER
    (p,) = dream.plan(store, only={"compress"}, now=NOW, generator=Summaries(good=lambda k: False)).proposals
    assert p.details["extractive"] and "content words, under 50%" in p.reason
    assert planners.summary_cover(p.result_text, texts) >= planners.SUMMARY_COVER
    (p,) = dream.plan(store, only={"compress"}, now=NOW, generator=Summaries()).proposals
    assert not p.details["extractive"] and "grounded" in p.reason
    assert p.result_text == "On day 0 Caroline hiked trails 00, 01, 02 by the lake with Bob, Ann, Joe."


def test_a_model_whose_first_summaries_fail_writes_no_more(store):
    old_days(store)
    gen = Summaries(good=lambda k: k == 3)  # one of the first eight passes
    plan = dream.plan(store, only={"compress"}, now=NOW, generator=gen)
    assert gen.calls == planners.SUMMARY_TRIAL
    rs = reasons(plan)
    assert len(rs) == DAYS and sum("grounded" in r for r in rs) == 1
    left = DAYS - planners.SUMMARY_TRIAL
    assert all("the chat model's summaries: 1 of 8 kept" in r for r in rs[-left:])
    assert any("(1 of 8 kept 50%" in n and "this dream's other summaries are extractive" in n for n in plan.notes)
    assert plan.complete


def test_a_model_is_left_once_too_few_of_its_summaries_pass(store):
    old_days(store)
    gen = Summaries(good=lambda k: k in (2, 6))  # a quarter of the first eight, then none
    plan = dream.plan(store, only={"compress"}, now=NOW, generator=gen)
    assert gen.calls == planners.SUMMARY_TRIAL + 1  # 2 of 9 is under a quarter
    assert sum("grounded" in r for r in reasons(plan)) == 2
    assert any("(2 of 9 kept" in n for n in plan.notes)


def test_a_model_whose_summaries_keep_passing_writes_every_one(store):
    old_days(store)
    gen = Summaries(good=lambda k: k % 3 == 0)  # a third of them
    plan = dream.plan(store, only={"compress"}, now=NOW, generator=gen)
    assert gen.calls == DAYS
    assert sum("grounded" in r for r in reasons(plan)) == 4
    assert not any("extractive" in n for n in plan.notes)
    gen = Summaries()
    assert all("grounded" in r for r in reasons(dream.plan(store, only={"compress"}, now=NOW, generator=gen)))


class FailingLanes(Lanes):
    """Two lanes whose summaries drop most of their episode after the first `good` (the even
    answers slower)."""

    def __init__(self, n: int, good: int = 0, delay: float = 0.05, odd: float = 0.0):
        super().__init__(n, delay, odd)
        self.good, self.summaries = good, 0

    def generate_json(self, messages, schema, max_tokens=256):
        out = super().generate_json(messages, schema, max_tokens)
        if messages[0]["content"] == prompts.DREAM_SYSTEM["compress"]:
            with self._lock:
                k = self.summaries
                self.summaries += 1
            if k >= self.good:
                return {"text": out["text"].split(" trail")[0] + "."}
        return out


def plain(plan) -> dict:
    d = plan.to_dict()
    d.pop("elapsed_s"), d.pop("generator", None)
    return d


def test_the_trial_on_two_lanes_makes_the_one_lane_plan(store):
    old_days(store)
    one, two = FailingLanes(1), FailingLanes(2)
    serial = dream.plan(store, only={"compress"}, now=NOW, generator=one)
    both = dream.plan(store, only={"compress"}, now=NOW, generator=two)
    assert len(one.started) == planners.SUMMARY_TRIAL
    assert len(two.started) == planners.SUMMARY_TRIAL  # the lanes run no further ahead than the trial
    assert plain(both) == plain(serial)


def test_lanes_that_run_ahead_after_the_trial_make_the_one_lane_plan(store):
    old_days(store, 2 * DAYS)
    one, two = FailingLanes(1, good=2), FailingLanes(2, good=2, delay=0.03, odd=0.03)
    serial = dream.plan(store, only={"compress"}, now=NOW, generator=one)
    both = dream.plan(store, only={"compress"}, now=NOW, generator=two)
    assert len(one.started) == planners.SUMMARY_TRIAL + 1  # 2 of 9: left
    assert planners.SUMMARY_TRIAL + 1 <= len(two.started) < 2 * DAYS  # a few begun before it, not the rest
    assert plain(both) == plain(serial)
    assert sum("grounded" in r for r in reasons(serial)) == 2


def test_a_large_stores_plan_asks_for_the_trials_summaries_only(store, monkeypatch):
    monkeypatch.setattr(dream.planning, "INCREMENTAL_FROM", 20)  # a large store, compared in slices
    monkeypatch.setattr(dream.planning, "SLICE", 9)
    old_days(store, 2 * DAYS)  # 66 turns: 8 slices
    gen = Summaries(good=lambda k: False)
    plan = dream.plan(store, only={"compress"}, now=NOW, generator=gen)
    assert plan.complete and plan.considered == 6 * DAYS
    assert len(reasons(plan)) > planners.SUMMARY_TRIAL and gen.calls == planners.SUMMARY_TRIAL
    assert sum("summaries kept too few facts" in n for n in plan.notes) == 1


def test_a_summary_in_another_language_is_measured_in_its_own_words():
    """Russian declines its nouns: a summary that says the same things in other cases still keeps
    them (sameness.content stems in the text's language), one that drops them does not."""
    turns = ["Анна: Вчера мы с Сергеем ходили в горы и видели озеро.",
             "Анна: Потом мы купили новую палатку и карту маршрута."]
    kept = "Вчера Анна с Сергеем ходила в горы к озеру, видела его, купила новую палатку и карты маршрутов."
    dropped = "Анна ходила гулять."
    assert planners.summary_cover(kept, turns) == 1.0  # "озеру", "карты", "маршрутов", "ходила": the same words
    assert planners.summary_cover(dropped, turns) < planners.SUMMARY_COVER
