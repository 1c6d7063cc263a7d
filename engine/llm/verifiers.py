"""Three LLM verifiers read a candidate before any GPU time is spent: compile, memory safety, numerics.

Each returns a vote: a Verdict(Stage.LLM_VERIFY) whose data names the verifier, its confidence and
reasons. The votes are aggregated into one pre-GPU verdict by this rule:

1. any vote `fail` with confidence >= [verify] min_confidence  ->  fail (the reasons of those votes);
2. otherwise, if no verifier answered (API error, unusable answer, budget) ->  skipped;
3. otherwise -> pass; low-confidence fails are kept as `doubts` in the data and named in the reason.

A verifier that cannot answer never fails a candidate: the GPU stages are the ground truth, the
verifiers only save GPU time. Votes and the aggregate are all written as notes and can be overridden.
The task context and the candidate form the cached prefix the three reviews share; the first review is sent
alone and writes the cache, the other two follow in parallel and read it. When the API is unavailable (the
outage window ran out) nothing is decided: `Verification.unavailable` says
so, the loop writes no verdict, keeps the candidate off the GPU and pauses; a resume reviews it again.

The verdict tool is forced only where the model lets thinking be switched off ([verify] thinking =
"disabled"); elsewhere it is offered with tool_choice auto (strict where the model has structured outputs)
and a reply without it counts as "no usable verdict".
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from engine.candidates import Candidate
from engine.config.sections import Config
from engine.llm import render
from engine.llm.availability import no_key_notice
from engine.llm.client import LLMClient, LLMRequest
from engine.llm.errors import LLMError
from engine.llm.prompts import PromptError, load_template
from engine.llm.redact import machine_paths, without_paths
from engine.llm.tools import SUBMIT_VERDICT, verdict_answer
from engine.tasks.model import Task
from engine.verdict import Stage, Status, Verdict

STAGE = Stage.LLM_VERIFY
VERIFIERS = ("compile", "memory", "numerics")


@dataclass(frozen=True)
class Verification:
    verdict: Verdict  # the aggregate
    votes: tuple[Verdict, ...]
    stop: str | None = None  # set when a call hit a session-stopping error (budget, key): the loop should stop
    unavailable: str | None = None  # the API was unreachable for the whole outage window: decide nothing


def verify(client: LLMClient, config: Config, task: Task, direction: str, candidate: Candidate, *,
           verifiers: tuple[str, ...] = VERIFIERS, parallel: bool = True, target: str = "") -> Verification:
    """Run the verifiers on `candidate` and aggregate their votes. Never raises for API trouble. `target`: the
    GPU and toolchain (engine.llm.target), as the proposer's prompts show them."""
    if not config.verify.enabled:
        v = Verdict(STAGE, Status.SKIPPED, "LLM verifiers are off ([verify] enabled = false)")
        return Verification(v, ())
    prompts_dir = config.llm.prompts_dir
    values = {**render.context_values(task, direction, target), "candidate": render.render_candidate(candidate)}
    try:
        paths = machine_paths(task.root)
        system = load_template("verify_system", prompts_dir).render()
        # the task and the candidate are what the three reviews share: one cached prefix
        context = without_paths("\n\n".join((load_template("context", prompts_dir).render(values).rstrip(),
                                              load_template("verify_candidate", prompts_dir).render(values).rstrip())),
                                paths)
        prompts = {n: without_paths(load_template(f"verify_{n}", prompts_dir).render(values), paths)
                   for n in verifiers}
    except PromptError as exc:
        # A broken template breaks every later review too: skip, and ask the loop to stop.
        return Verification(Verdict(STAGE, Status.SKIPPED, f"LLM verifiers not run: {exc}"), (), str(exc))

    def one(name: str) -> tuple[Verdict, str | None]:
        req = LLMRequest(system=system, context=context, prompt=prompts[name], tool=SUBMIT_VERDICT,
                         key=candidate.source_hash, purpose=f"verify:{name}",
                         model=config.verify.model or config.llm.model, thinking=config.verify.thinking,
                         max_tokens=config.verify.max_tokens, effort=config.verify.effort)
        return _vote(client, name, req)

    if parallel and len(verifiers) > 1:
        # The first review writes the prompt cache; the others are sent once it has answered, so they read it
        # (a cache entry is usable only once the response that writes it has begun).
        results = [one(verifiers[0]), *_in_parallel(one, verifiers[1:])]
    else:
        results = [one(n) for n in verifiers]
    votes = tuple(v for v, _ in results)
    down = next((v.reason for v in votes if v.data.get("error") == "unavailable"), None)
    if down is not None:
        return Verification(Verdict(STAGE, Status.SKIPPED, f"not reviewed: {down}"), (), None, down)
    stop = next((s for _, s in results if s), None)
    return Verification(aggregate(votes, config.verify.min_confidence), votes, stop)


def _in_parallel(fn, names: tuple[str, ...]) -> list:
    """fn(name) for every name, each on a daemon thread (a quitting process does not wait for an API call)."""
    results: list = [None] * len(names)
    errors: list[BaseException] = []

    def run(i: int, name: str) -> None:
        try:
            results[i] = fn(name)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, n), name=f"kbench-verify-{n}", daemon=True)
               for i, n in enumerate(names)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def _vote(client: LLMClient, name: str, req: LLMRequest) -> tuple[Verdict, str | None]:
    try:
        reply = client.call(req)
    except LLMError as exc:
        if exc.kind == "no_key":
            no_key_notice(None, client.config)
        return Verdict(STAGE, Status.SKIPPED, f"{name} verifier did not answer: {exc}",
                       {"verifier": name, "error": exc.kind}), (str(exc) if exc.stop else None)
    meta = {"verifier": name, "model": reply.model, "usage": reply.usage.to_json(), "cost_usd": reply.cost_usd}
    try:
        ans = verdict_answer(reply)
    except LLMError as exc:
        return Verdict(STAGE, Status.SKIPPED, f"{name} verifier gave no usable verdict: {exc}",
                       {**meta, "error": exc.kind}), None
    status = Status.FAIL if ans.verdict == "fail" else Status.PASS
    first = ans.reasons[0] if ans.reasons else "no reason given"
    reason = f"{name}: {ans.verdict} ({ans.confidence:.2f}): {first}"
    return Verdict(STAGE, status, reason, {**meta, "confidence": ans.confidence, "reasons": ans.reasons}), None


def aggregate(votes: tuple[Verdict, ...] | list[Verdict], min_confidence: float) -> Verdict:
    """The documented rule above, as code."""
    data = {"votes": [v.to_json() for v in votes], "min_confidence": min_confidence,
            "rule": "any fail with confidence >= min_confidence fails; no answers skips; else pass"}
    fails = [v for v in votes if v.status == Status.FAIL]
    confident = [v for v in fails if float(v.data.get("confidence", 0.0)) >= min_confidence]
    if confident:
        return Verdict(STAGE, Status.FAIL, "; ".join(v.reason for v in confident), data)
    answered = [v for v in votes if v.status in (Status.PASS, Status.FAIL)]
    if not answered:
        why = votes[0].reason if votes else "no verifiers ran"
        return Verdict(STAGE, Status.SKIPPED, f"no LLM verifier answered ({why})", data)
    if fails:
        data["doubts"] = [v.reason for v in fails]
        return Verdict(STAGE, Status.PASS, f"{len(answered)} verifier(s) answered; low-confidence doubts: "
                       + "; ".join(v.reason for v in fails), data)
    return Verdict(STAGE, Status.PASS, f"{len(answered)} of {len(votes)} verifier(s) found no defect", data)
