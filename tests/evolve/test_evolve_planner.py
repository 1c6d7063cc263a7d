"""The generation planner alone: which slot comes next, from which parents, and when a generation is full or
spent. No threads, no workspace, no evaluator: a population built by hand and a seeded generator."""

from __future__ import annotations

import random

from engine.evolve.operators import OperatorPolicy, default_policy
from engine.evolve.planner import Budgets, GenerationPlanner, lessons
from engine.evolve.population import DONE, Member, Population


def member(cid: str, gen: int, speedup: float | None = None, *, failed: str | None = None, waiting: bool = False,
           parents: tuple[str, ...] = (), rejected: bool = False) -> Member:
    return Member(id=cid, generation=gen, operator="mutate", source_hash=f"h-{cid}", parents=parents, state=DONE,
                  speedup=speedup, eligible=speedup is not None, failed_stage=failed, reason=f"{failed} broke",
                  waiting=waiting, rejected=rejected, title=f"title {cid}")


def population(*members: Member) -> Population:
    pop = Population()
    for m in members:
        pop.add(m)
    return pop


def planner(weights: dict[str, float] | None = None, *, baseline: bool = False, seed: int = 0,
            supported: frozenset[str] | None = None, **budgets) -> GenerationPlanner:
    policy = OperatorPolicy(weights or {"mutate": 1.0})
    return GenerationPlanner(policy, random.Random(seed), Budgets(**budgets), seeds_with_baseline=baseline,
                             proposer_name="scripted", supported=supported)


def test_generation_0_is_the_baseline_alone_when_there_is_one():
    p = planner(baseline=True, population=5)
    assert p.target(0) == 1 and p.target(1) == 5
    assert p.next_slot(0, Population()).kind == "baseline"
    assert not p.can_fill(0, population(member("s-g0-1", 0, 1.0)), (), 0, None)   # full with one


def test_without_a_baseline_generation_0_is_translations_or_an_error_for_a_proposer_that_cannot():
    slot = planner(population=3).next_slot(0, Population())
    assert slot.kind == "propose" and slot.operator == "translate" and slot.parents == ()
    tuner = GenerationPlanner(default_policy("tuner"), random.Random(0), Budgets(), seeds_with_baseline=False,
                              proposer_name="tuner")
    slot = tuner.next_slot(0, Population())
    assert slot.kind == "none" and slot.level == "error" and "cannot start without a baseline" in slot.note
    assert 0 in tuner.closed and not tuner.can_fill(0, Population(), (), 0, None)


def test_mutate_draws_a_measured_parent_of_an_earlier_generation_and_the_best_other_as_elite():
    pop = population(member("s-g0-1", 0, 1.0), member("s-g0-2", 0, 2.0), member("s-g1-1", 1, 3.0))
    p = planner()
    slot = p.next_slot(1, pop)
    assert slot.kind == "propose" and slot.operator == "mutate" and len(slot.parents) == 1
    parent = slot.parents[0]
    assert parent.generation < 1 and parent.times_parent == 1                     # the draw is marked
    assert slot.elite is not None and slot.elite.id != parent.id and slot.elite.generation < 1
    assert p.attempts == {1: 1}


def test_the_same_seed_plans_the_same_slots():
    def plan(seed: int) -> list[tuple[str, tuple[str, ...]]]:
        pop = population(*(member(f"s-g0-{i}", 0, 1.0 + i / 10) for i in range(1, 7)))
        p = planner({"mutate": 2.0, "crossover": 1.0}, seed=seed, population=6)
        return [(s.operator, tuple(m.id for m in s.parents)) for s in (p.next_slot(1, pop) for _ in range(6))]

    assert plan(7) == plan(7)
    assert {op for op, _ in plan(7)} <= {"mutate", "crossover"}


def test_a_generation_closes_when_its_attempts_are_spent():
    pop = population(member("s-g0-1", 0, 1.0))
    p = planner(population=2, attempts_per_slot=2)
    for _ in range(3):
        p.next_slot(1, pop)
    assert p.can_fill(1, pop, (), 0, None)
    p.next_slot(1, pop)                                  # 4 attempts = 2 per slot x 2 slots
    assert not p.can_fill(1, pop, (), 0, None) and 1 in p.closed


def test_an_unavailable_api_is_not_an_attempt():
    pop = population(member("s-g0-1", 0, 1.0))
    p = planner()
    p.next_slot(1, pop)
    p.unavailable(1)
    assert p.attempts[1] == 0


def test_proposals_in_flight_and_the_evaluators_capacity_limit_filling():
    pop = population(member("s-g0-1", 0, 1.0))
    p = planner(population=4, proposals_in_flight=2)
    assert p.can_fill(1, pop, [(1, "mutate")], 0, None)
    assert not p.can_fill(1, pop, [(1, "mutate"), (1, "mutate")], 0, None)   # two proposals running
    assert not p.can_fill(1, pop, (), 3, 3)                                  # the evaluator is full
    assert p.can_fill(1, pop, (), 2, 3)
    full = planner(population=1)
    assert not full.can_fill(1, pop, [(1, "mutate")], 0, None)               # the slot is being proposed


def test_parents_whose_proposal_came_back_empty_are_not_drawn_again():
    pop = population(member("s-g0-1", 0, 1.0), member("s-g0-2", 0, 1.5))
    p = planner()
    first = p.next_slot(1, pop).parents[0]
    p.empty(1, [first])
    for _ in range(5):
        slot = p.next_slot(1, pop)
        if slot.kind == "propose":
            assert slot.parents[0].id != first.id
    last = [m for m in pop if m.id != first.id][0]
    p.empty(1, [last])
    assert p.next_slot(1, pop).kind == "none" and 1 in p.closed                # every parent spent: closed


def test_an_empty_answer_without_parents_closes_the_generation():
    p = planner()
    p.empty(0, [])
    assert 0 in p.closed


def test_crossover_needs_two_measured_parents():
    p = planner({"crossover": 1.0})
    slot = p.next_slot(1, population(member("s-g0-1", 0, 1.0)))
    assert slot.kind == "none" and slot.note == "" and 1 in p.closed
    slot = planner({"crossover": 1.0}).next_slot(1, population(member("s-g0-1", 0, 1.0), member("s-g0-2", 0, 2.0)))
    assert slot.operator == "crossover" and len(slot.parents) == 2


def test_repair_takes_a_failure_and_meta_is_limited_per_generation_counting_those_in_flight():
    pop = population(member("s-g0-1", 0, 1.0), member("s-g0-2", 0, failed="compile"))
    slot = planner({"repair": 1.0}).next_slot(1, pop)
    assert slot.operator == "repair" and [m.id for m in slot.parents] == ["s-g0-2"]
    p = planner({"meta": 1.0})
    assert p.next_slot(1, pop, [(1, "meta")]).kind == "none"                   # one meta already running
    p2 = planner({"meta": 1.0})
    p2.meta_answered(1)
    assert p2.next_slot(1, pop).kind == "none"
    assert planner({"meta": 1.0}).next_slot(1, pop).operator == "meta"


def test_nothing_measured_proposes_from_candidates_waiting_for_a_gpu_one_generation_ahead():
    waiting = population(member("s-g0-1", 0, waiting=True), member("s-g0-2", 0, waiting=True))
    slot = planner().next_slot(1, waiting)
    assert slot.kind == "propose" and slot.parents[0].waiting
    waiting.add(member("s-g1-1", 1, waiting=True, parents=("s-g0-1",)))
    slot = planner().next_slot(2, waiting)                 # not a chain of guesses: a translation from scratch
    assert slot.kind == "propose" and slot.operator == "translate" and slot.parents == ()
    tuner = GenerationPlanner(default_policy("tuner"), random.Random(0), Budgets(), seeds_with_baseline=False,
                              proposer_name="tuner")
    slot = tuner.next_slot(2, waiting)
    assert slot.kind == "none" and slot.level == "warning" and "no eligible candidate" in slot.note


def test_unsupported_operators_are_never_planned():
    pop = population(member("s-g0-1", 0, 1.0), member("s-g0-2", 0, 2.0))
    p = planner({"mutate": 1.0, "crossover": 5.0}, supported=frozenset({"mutate"}))
    assert {p.next_slot(1, pop).operator for _ in range(8)} == {"mutate"}


def test_lessons_list_failures_newest_first_without_the_excluded():
    pop = population(member("s-g0-1", 0, failed="compile"), member("s-g1-1", 1, failed="correctness"),
                     member("s-g1-2", 1, failed="static", rejected=True), member("s-g2-1", 2, failed="compile"))
    got = lessons(pop, 2, exclude={"s-g1-1"})
    assert [line.split(" ")[0] for line in got] == ["s-g1-2", "s-g0-1"]
    assert "rejected before the GPU by the static checks" in got[0] and "failed at compile" in got[1]
