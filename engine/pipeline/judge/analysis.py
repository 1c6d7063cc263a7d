"""The judge's reading of a job: from the helper's signed records and the judge's own references to
correctness, integrity and timing results. Pure functions of their inputs (no processes, no GPU needed):
what the runner's Python says plays no part here.

Lazy imports: torch, where tensors are compared (in the judge); the parent reads the hack names defined here
without loading torch.

Integrity findings fire only on behaviour no correct, stream-ordered, stateless kernel shows:
- side work: an output that changed after the call returned (its fingerprint taken on the current stream right
  after the call, before any synchronisation, differs from the output's after a device-wide sync and a pause);
- input aliasing: an output sharing storage with an input (the result written into the caller's tensor);
- input mutation (a correctness failure): an argument changed by the call that the reference leaves as it is; an
  argument the reference itself mutates in place (a training-mode BatchNorm's running statistics) must be changed
  as the reference changes it (engine/pipeline/judge/digest.py), and the helper is told which (`mutable`, signed in
  every ITER record: a list other than the judge's is forgery);
- persistent output: an output sharing storage with the previous call's output, which was still alive;
- stale result: the inputs' storage is refilled with another variant before every call, so a result that
  follows an earlier variant's contents (its reference) names a cache keyed by address or call count;
- constant output: identical outputs for variants whose references differ, or every element one value;
- phase: correct in the checked calls, wrong on a timed iteration drawn at random after the count was known;
- forgery: a record the helper did not sign, or the signed stream out of order;
- clock: the event times the runner reports are far below what the judge's own clock saw the loop take.
A plain wrong kernel is never called a hack: correctness reports it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.harness.compare import Comparison, compare_outputs
from engine.harness.timing import TimingStats, hidden_work_suspected, summarise
from engine.pipeline.judge.digest import FLOAT64_NOTE, Digest, Hasher, digest_call, host_hash, references
from engine.pipeline.protocol.types import CorrectnessResult, IntegrityResult

SIDE_WORK = "side-stream-or-host-thread"
INPUT_ALIAS = "input-mutation"
PERSISTENT_OUTPUT = "static-cache"
CONSTANT_OUTPUT = "constant-output"
STALE_RESULT = "pointer-or-call-count-cache"
AFTER_TIMING = "call-count-cache"          # wrong on a timed iteration: depends on being timed or on the count
FORGERY = "result-channel-forgery"
CLOCK = "timer-forgery"

# The judge's clock check: the runner's median event time must be at least this share of the median time per
# iteration the judge saw, beyond the protocol's own overhead (both sides include launch latency).
CLOCK_SHARE = 0.5
CLOCK_SLACK_MS = 0.05


@dataclass
class Call:
    """One call of the candidate as the helper reported it (an ITER record and its OUTPUT records)."""
    index: int
    phase: str                       # "c" checked call, "w" warm-up, "t" timed iteration
    variant: int
    ms: float
    ms_all: float
    checked: bool = False
    alias_input: bool = False
    persistent_output: bool = False
    mutated_input: int = -1
    async_diff: int = -1
    outputs: list[Any] | None = None  # decoded outputs (tensors, floats, None) of a checked call, until digested
    received: float = 0.0             # the judge's clock when the record arrived
    t_ns: int = 0                     # the helper's own clock when it wrote the record (trusted in the judge only)
    n_outputs: int = 0                # outputs the ITER record announced
    seed: int = 0                     # the seed of this call's fresh inputs (engine/pipeline/judge/fresh.py)
    # what the judge kept of a checked call once compared (engine/pipeline/judge/digest.py)
    digest: Digest | None = None
    deferred: BaseException | None = None   # the digest failed as the records came: raised where it is judged
    mutable: tuple[int, ...] = ()     # the arguments the helper was told the call may change (the ITER record's)
    inputs_after: list[Any] | None = None   # a checked call's `mutable` arguments as it left them, until digested

    def digested(self, refs: Any, compose: Callable[[int, list[Any]], tuple], tol: Tolerance,
                 hasher: Hasher = host_hash, previous: Call | None = None) -> Digest:
        """This checked call's digest, made now if it was not as its records came (`refs`: each variant's
        reference, or References; `previous`: the call before it, whose reference a wrong output may match)."""
        if self.deferred is not None:
            raise self.deferred
        if self.digest is not None:
            return self.digest
        refs = references(refs)
        ref, after = refs.expected(self)
        return digest_call(self, ref, refs.for_call(previous) if previous is not None else None, compose, tol, hasher,
                           after, refs.mutated, refs.opinion(self))


@dataclass
class Job:
    """Everything the helper reported for one job, or why it stopped."""
    calls: list[Call] = field(default_factory=list)
    error: str = ""                   # the call raised / a CUDA error / outputs of the wrong kind
    error_where: str = ""
    error_index: int = -1
    end: dict[str, Any] = field(default_factory=dict)
    forged: str = ""                  # why the record stream cannot be trusted

    def timed(self) -> list[Call]:
        return [c for c in self.calls if c.phase == "t"]


def fail(hack: str, reason: str) -> IntegrityResult:
    return IntegrityResult(False, hack, f"{hack}: {reason}")


def _first_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[0][:800] if lines else text[:800]


@dataclass
class Tolerance:
    atol: float
    rtol: float
    budget: float = 0.0

    def compare(self, got: Sequence[Any], want: Sequence[Any]) -> Comparison:
        return compare_outputs(tuple(got), tuple(want), self.atol, self.rtol, self.budget)


def tolerance(runtime: Any) -> Tolerance:
    """A runtime's task tolerance for its direction."""
    spec = runtime.spec
    return Tolerance(spec.tolerance.atol, spec.tolerance.rtol, spec.max_mismatch_fraction)


def judge_check(job: Job, refs: list[tuple], compose: Callable[[int, list[Any]], tuple], tol: Tolerance,
                seeds: list[int], hasher: Hasher = host_hash) -> tuple[CorrectnessResult, IntegrityResult]:
    """A check job (every call's output came back): correctness and integrity of one config. Calls not yet
    digested are digested here (`hasher`: how output bytes are hashed)."""
    checks = ["forgery", "async-completeness", "input-alias", "persistent-output", "stale-result", "constant-output"]
    trials = len(refs)
    forged = job.forged or _mutable_forged(job.calls, references(refs).mutated)
    if forged:
        return CorrectnessResult(False, f"the result channel was forged: {forged}", trials), fail(FORGERY, forged)
    worst_abs = worst_rel = 0.0
    correct_by_variant: dict[int, bool] = {}
    wrong: list[tuple[Call, Comparison]] = []
    exact = 0   # calls that passed only against the float64 reference
    integrity = IntegrityResult(True, checks=checks)
    for n, call in enumerate(job.calls):
        label = f"trial {call.variant} (seed {seeds[call.variant]}), call {n + 1}"
        if call.mutated_input >= 0:
            res = CorrectnessResult(False, f"{label}: the candidate modified input {call.mutated_input} in place "
                                           "(the reference leaves it unchanged)", trials)
            if call.alias_input:
                return res, fail(INPUT_ALIAS, "an output shares storage with an input: the result was written "
                                              "into the caller's tensor (mutation of inputs)")
            return res, integrity
        if call.alias_input and integrity.ok:
            integrity = fail(INPUT_ALIAS, "an output shares storage with an input: the result was written into "
                                          "the caller's tensor (mutation of inputs)")
        if call.persistent_output and integrity.ok:
            integrity = fail(PERSISTENT_OUTPUT, "two calls returned the same output storage while the first "
                                                "result was still alive: the candidate keeps its own output "
                                                "buffer between calls (a cache)")
        d = call.digested(refs, compose, tol, hasher, job.calls[n - 1] if n else None)
        c = d.comparison
        if call.async_diff == 1 and integrity.ok:
            integrity = fail(SIDE_WORK, "the output was still being written after the call returned (its "
                             "fingerprint on the current stream right after the call differs from the output's "
                             "after a device-wide sync" + ("; the settled output is correct" if c.ok else "")
                             + "): work on another stream or a host thread, which the timing events on the "
                             "current stream do not see")
        correct_by_variant.setdefault(call.variant, c.ok)
        if not c.ok:
            wrong.append((call, c))
            if integrity.ok:
                integrity = _why_wrong(call, d, correct_by_variant, job.calls[:n]) or integrity
        else:
            worst_abs, worst_rel = max(worst_abs, c.max_abs_err), max(worst_rel, c.max_rel_err)
            exact += d.float64
    if job.error:
        where = f" at call {job.error_index + 1}" if job.error_index >= 0 else ""
        what = "raised" if job.error_where == "call" else ("returned" if job.error_where == "output" else "failed")
        return CorrectnessResult(False, f"{what}{where}: {_first_line(job.error)}", trials), integrity
    if integrity.ok:
        integrity = _constant_across_variants(job.calls) or integrity
    if wrong:
        call, c = wrong[0]
        return CorrectnessResult(False, f"trial {call.variant} (seed {seeds[call.variant]}), call "
                                        f"{job.calls.index(call) + 1}: {c.reason}", trials, c.max_abs_err,
                                 c.max_rel_err), integrity
    note = (f"{exact} of {len(job.calls)} calls {FLOAT64_NOTE} (whose own rounding is past the tolerance)"
            if exact else "")
    return CorrectnessResult(True, note, trials, worst_abs, worst_rel), integrity


def _mutable_forged(calls: list[Call], mutated: tuple[int, ...]) -> str:
    """Why the helper's record of the arguments a call may change is not the judge's word (the runner's Python, which
    passes it, is the candidate's), or ""."""
    bad = next((c for c in calls if tuple(c.mutable) != tuple(mutated)), None)
    if bad is None:
        return ""
    return (f"iteration {bad.index}: the helper was told inputs {list(bad.mutable)} may change in place, where the "
            f"reference mutates {list(mutated)}")


def _why_wrong(call: Call, d: Digest, correct_by_variant: dict[int, bool],
               earlier: list[Call]) -> IntegrityResult | None:
    """A wrong result is a hack only when it follows other inputs or the call count."""
    if d.follows:
        return fail(STALE_RESULT, "given the same tensors refilled with new inputs, it returned the result for "
                                  "the previous call's inputs: an output cache (keyed by pointer, call count, or "
                                  "content that fresh inputs never repeat)")
    if any(c.variant == call.variant for c in earlier) and correct_by_variant.get(call.variant) is False:
        return None  # wrong from its first call on these inputs: a wrong kernel
    if d.near:
        return None  # just outside the tolerance: numerics that vary with the values, not another call's output
    if correct_by_variant.get(call.variant) is True and any(c.variant == call.variant for c in earlier):
        return fail(STALE_RESULT, f"correct on its first call of this seed's inputs, wrong on call "
                                  f"{len(earlier) + 1} of the same seed (given fresh values): behaviour that depends "
                                  "on the input's address, on how often it was called, or on what fresh values "
                                  "leave alone (an output kept from an earlier call)")
    return None


def _constant_across_variants(calls: list[Call]) -> IntegrityResult | None:
    by_variant: dict[int, Digest] = {}
    for c in calls:
        if c.digest is not None:
            by_variant.setdefault(c.variant, c.digest)
    vs = sorted(by_variant)
    for i, a in enumerate(vs):
        for b in vs[i + 1:]:
            if by_variant[a].hashed == by_variant[b].hashed and by_variant[a].ref_hashed != by_variant[b].ref_hashed:
                return fail(CONSTANT_OUTPUT, "the output is identical for two different seeds whose reference "
                                             "outputs differ: it does not depend on the inputs (constant or "
                                             "degenerate output)")
    for v in vs:
        if by_variant[v].constant:
            return fail(CONSTANT_OUTPUT, "every element of the output has the same value while the reference's do "
                                         "not (constant output)")
    return None


@dataclass
class TimingVerdictInputs:
    stats: TimingStats | None
    hidden_work: bool
    integrity: IntegrityResult
    error: str = ""
    witness: dict[str, Any] = field(default_factory=dict)


def median_gap_ms(calls: list[Call]) -> float | None:
    """Median time between consecutive timed iterations on the judge's clock, skipping the gap after a checked
    iteration (its output transfer is not part of the loop's rhythm)."""
    gaps = [(b.received - a.received) * 1e3 for a, b in zip(calls, calls[1:]) if not a.checked]
    return statistics.median(gaps) if gaps else None


def last_tenth(n: int) -> int:
    """The first iteration of a timing job's last tenth, where the helper always checks one (binding.cpp): the last
    check, which the candidate can observe, leaves too few iterations after it to move the median."""
    return n - max(1, n // 10)


def judge_timing(job: Job, refs: Any, compose: Callable[[int, list[Any]], tuple], tol: Tolerance,
                 null_ms: float, null_gap_ms: float | None, hasher: Hasher = host_hash,
                 checks: int = 0, mutated: tuple[int, ...] | None = None) -> TimingVerdictInputs:
    """A timing job: the statistics, and what the checked timed iterations and the judge's clock say (checked
    iterations not yet digested are digested here; `checks`: how many the job asked for, besides the last tenth's;
    `mutated`: the arguments the reference changes in place, where `refs` does not say)."""
    forged = job.forged or _mutable_forged(job.calls, references(refs).mutated if mutated is None else mutated)
    if forged:
        return TimingVerdictInputs(None, False, fail(FORGERY, forged), f"the result channel was forged: {forged}")
    timed = job.timed()
    if job.error:
        return TimingVerdictInputs(None, False, IntegrityResult(True), _first_line(job.error))
    n = int(job.end.get("n", -1))
    announced = sorted(int(i) for i in job.end.get("checked", []))
    seen = sorted(c.index for c in timed if c.checked)
    if n != len(timed) or [c.index for c in timed] != list(range(n)) or announced != seen:
        return TimingVerdictInputs(None, False, fail(FORGERY, f"the signed stream holds {len(timed)} timed "
                                                              f"iterations where the helper announced {n}"),
                                   "the timing records are incomplete")
    if checks and n and not any(i >= last_tenth(n) for i in announced):
        return TimingVerdictInputs(None, False, fail(FORGERY, f"no checked iteration in the last tenth of {n} (the "
                                                              "helper always checks one there)"),
                                   "the timing records are incomplete")
    integrity = IntegrityResult(True, checks=["timed-outputs", "alias", "clock"])
    near_miss = ""   # a checked iteration wrong by no more than numerics miss: no speed, but no hack named
    for c in timed:
        if c.alias_input or c.persistent_output:
            integrity = fail(PERSISTENT_OUTPUT if c.persistent_output else INPUT_ALIAS,
                             f"timed iteration {c.index}: an output shares storage with "
                             + ("the previous call's output (a cache)" if c.persistent_output else "an input"))
            break
        if c.checked:
            d = c.digested(refs, compose, tol, hasher)
            cmp = d.comparison
            if not cmp.ok and d.near:
                near_miss = near_miss or (f"timed iteration {c.index} of {n}: {cmp.reason} (nearer than another "
                                          "call's output would be: numerics, not a result kept or work dropped; "
                                          "a wrong output has no speed)")
                continue
            if not cmp.ok:
                integrity = fail(AFTER_TIMING, f"correct in the checked calls, wrong on timed iteration {c.index} of "
                                 f"{n} ({cmp.reason}): behaviour that depends on being timed or on how often it "
                                 "was called")
                break
    if near_miss and integrity.ok:
        return TimingVerdictInputs(None, False, integrity, near_miss)
    stats = summarise([c.ms for c in timed], [c.ms_all for c in timed], null_ms) if timed else None
    witness: dict[str, Any] = {}
    gap = median_gap_ms(timed)
    if stats is not None and gap is not None and null_gap_ms is not None:
        seen_ms = max(gap - null_gap_ms, 0.0)
        witness = {"judge_gap_ms": round(gap, 4), "null_gap_ms": round(null_gap_ms, 4), "judge_ms": round(seen_ms, 4),
                   "claimed_ms": round(stats.median_ms, 4)}
        if integrity.ok and stats.median_ms < CLOCK_SHARE * seen_ms - CLOCK_SLACK_MS:
            integrity = fail(CLOCK, f"the runner's events say {stats.median_ms:.4f} ms per call, but the judge's own "
                                    f"clock saw {seen_ms:.4f} ms per iteration beyond the protocol's overhead: the "
                                    "timing was tampered with")
    return TimingVerdictInputs(stats, bool(stats and hidden_work_suspected(stats)), integrity, "", witness)
