"""engine.llm.accounting: usage arithmetic, per-call / per-key / per-session totals, the budget guard."""

from __future__ import annotations

import json
import threading

import pytest

from engine.config import Price
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
