"""engine.llm.accounting: usage arithmetic, per-call / per-key / per-session totals, the budget guard."""

from __future__ import annotations

import json
import random
import threading
import time

import pytest

from engine.config.prices import Price
from engine.llm.accounting import CallRecord, CostLedger, Usage
from engine.llm.errors import BudgetExhausted

PRICE = Price(input=5.0, output=25.0, cache_write=6.25, cache_read=0.5)


def call(key, usd, purpose="mutate"):
    return CallRecord("m", Usage(100, 10, 5, 1), usd, key, purpose)


def test_usage_sum_and_cost():
    u = Usage(1_000_000, 100_000, 200_000, 2_000_000)
    assert u.cost(PRICE) == pytest.approx(5.0 + 2.5 + 1.25 + 1.0)
    assert (u + Usage(1, 2, 3, 4)).total_tokens == u.total_tokens + 10
    assert Usage.from_api({"input_tokens": 3, "output_tokens": 4, "cache_creation_input_tokens": None}) == Usage(3, 4)
    assert Usage.from_json(u.to_json()) == u


def test_ledger_totals_and_rekey():
    ledger = CostLedger(budget_usd=1.0)
    ledger.record(call("p1", 0.1))
    ledger.record(call("p1", 0.2, "repair"))
    ledger.record(call("p2", 0.05))
    ledger.record(call(None, 0.01))
    assert ledger.session().calls == 4 and ledger.spent_usd == pytest.approx(0.36)
    assert ledger.for_key("p1").cost_usd == pytest.approx(0.3) and ledger.for_key("p1").usage.input_tokens == 200
    ledger.rekey("p1", "hash-abc")  # the proposal became a candidate
    assert ledger.for_key("p1").calls == 0 and ledger.for_key("hash-abc").calls == 2
    assert set(ledger.by_key()) == {"hash-abc", "p2"}
    assert ledger.remaining_usd == pytest.approx(0.64)
    assert json.loads(json.dumps(ledger.to_json()))["spent_usd"] == pytest.approx(0.36)


def test_budget_guard():
    ledger = CostLedger(budget_usd=0.25, spent_before=0.2)
    ledger.check()
    ledger.record(call("p", 0.06))
    with pytest.raises(BudgetExhausted) as err:
        ledger.check()
    assert err.value.stop and "$0.2600 spent of $0.25" in str(err.value)
    CostLedger(None).check()  # no limit


def test_ledger_is_thread_safe():
    ledger = CostLedger()
    threads = [threading.Thread(target=lambda: [ledger.record(call("k", 0.001)) for _ in range(200)])
               for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert ledger.session().calls == 800 and ledger.spent_usd == pytest.approx(0.8)


# -- holds: each call's worst case is reserved before it is sent ------------------------------------------------

CHEAP = Price(input=1.0, output=10.0, cache_write=1.25, cache_read=0.1)   # worst case of 1000 in, 1000 out: $0.01125


def test_a_hold_becomes_the_bill_or_is_dropped_or_kept_whole():
    ledger = CostLedger(budget_usd=1.0)
    with ledger.reserve(CHEAP, input_tokens=1000, max_tokens=1000, key="p", purpose="mutate") as hold:
        assert hold.usd == pytest.approx(0.01125) and hold.max_tokens == 1000
        assert ledger.held_usd == pytest.approx(0.01125) and ledger.spent_usd == 0
        hold.settle(call("p", 0.004))
    assert ledger.held_usd == 0 and ledger.spent_usd == pytest.approx(0.004)
    with ledger.reserve(CHEAP, input_tokens=1000, max_tokens=1000):
        pass                                             # failed without an answer: nothing billed
    assert ledger.held_usd == 0 and ledger.spent_usd == pytest.approx(0.004)
    with ledger.reserve(CHEAP, input_tokens=1000, max_tokens=1000, model="m", key="q", purpose="verify:memory") as h:
        h.keep()                                         # the answer may have been produced and lost
    last = ledger.calls[-1]
    assert last.worst_case and last.cost_usd == pytest.approx(0.01125) and (last.key, last.purpose) == ("q", "verify:memory")
    assert ledger.spent_usd == pytest.approx(0.01525)


def test_alone_a_call_gets_what_is_left_down_to_what_it_needs_else_is_refused():
    ledger = CostLedger(budget_usd=0.01)
    # $0.01 less the input's worst case ($0.00125) leaves 875 output tokens at $10/M
    with ledger.reserve(CHEAP, input_tokens=1000, max_tokens=4000, min_tokens=500) as hold:
        assert hold.max_tokens == 875 and hold.usd <= 0.01
    with pytest.raises(BudgetExhausted) as err:
        ledger.reserve(CHEAP, input_tokens=1000, max_tokens=4000, min_tokens=900)
    assert "$0.0000 spent of $0.01" in str(err.value) and "could cost up to $0.0103" in str(err.value)
    with pytest.raises(BudgetExhausted):
        ledger.reserve(CHEAP, input_tokens=1000, max_tokens=4000)      # no minimum given: all or nothing
    assert ledger.held_usd == 0 and ledger.calls == []


def test_earlier_runs_count_against_the_budget():
    ledger = CostLedger()
    ledger.limit(0.05, earlier_usd=0.045)
    with pytest.raises(BudgetExhausted) as err:
        ledger.reserve(CHEAP, input_tokens=1000, max_tokens=1000)
    assert "$0.0450 spent of $0.05" in str(err.value) and ledger.spent_usd == 0
    ledger.limit(float("inf"))
    with ledger.reserve(CHEAP, input_tokens=1000, max_tokens=10**6) as hold:
        assert hold.max_tokens == 10**6


def test_a_call_that_does_not_fit_beside_others_waits_for_their_bills():
    ledger = CostLedger(budget_usd=0.02)
    first = ledger.reserve(CHEAP, input_tokens=1000, max_tokens=1000)
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(ledger.reserve(CHEAP, input_tokens=1000, max_tokens=1000)))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and got == []       # $0.01125 held, $0.00875 left: it waits rather than shrink
    first.settle(call("a", 0.002))
    waiter.join(5)
    assert not waiter.is_alive() and got[0].max_tokens == 1000    # sent in full once the bill was known
    got[0].release()


def test_concurrent_calls_never_hold_or_spend_more_than_the_budget():
    budget = 0.1
    ledger = CostLedger(budget_usd=budget)
    over: list[float] = []
    refused: list[BudgetExhausted] = []
    sent = [0]
    lock = threading.Lock()

    def caller(seed: int) -> None:
        rng = random.Random(seed)
        while True:
            try:
                with ledger.reserve(CHEAP, input_tokens=1000, max_tokens=1000) as hold:
                    committed = ledger.spent_usd + ledger.held_usd
                    if committed > budget + 1e-12:
                        over.append(committed)
                    with lock:
                        sent[0] += 1
                    time.sleep(rng.random() * 0.002)
                    hold.settle(CallRecord("m", Usage(1000, 100), rng.uniform(0.1, 1.0) * hold.usd, f"k{seed}"))
            except BudgetExhausted as exc:
                refused.append(exc)
                return

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert over == [] and len(refused) == 8
    assert ledger.held_usd == 0 and ledger.session().calls == sent[0] > 8
    # every call stopped only when what was left could not cover one more worst case
    assert budget - 0.01125 < ledger.spent_usd <= budget
