"""The LLM proposer: translate, mutate, crossover, repair and meta through an LLM client.

Named after its provider: `anthropic` (the Messages API) or `openai` (an OpenAI-compatible endpoint, see
engine.llm.openai_client); both send the same prompts and read the same tools. Each request renders three
templates (system.md, context.md, <operator>.md), makes one client call with the operator's tool, and checks
the answer with engine.llm.tools. Whatever happens, a Proposal comes back: the prompt and answer are kept on
failures too, and the usage of a failed answer is still counted. A mutation's answer resends the whole
parent, so max_tokens is sized from the parent's length.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from engine.candidates import Candidate
from engine.config.sections import Config
from engine.llm import render
from engine.llm.accounting import Usage
from engine.llm.availability import no_key_message, no_key_notice
from engine.llm.client import LLMReply, LLMRequest
from engine.llm.errors import LLMError
from engine.llm.prompts import PromptError, load_template
from engine.llm.redact import machine_paths, without_paths
from engine.llm.tools import KERNEL_FIELDS, SUBMIT_DIRECTIVES, directives_answer, kernel_answer, submit_kernel_tool
from engine.proposers.base import (Proposal, ProposalRequest, ProposalStatus, check_parents, failed, new_proposal_id,
                                   parent_id, with_provenance)
from engine.tasks.glue.abi import GlueError
from engine.tasks.glue.generated import materialise

if TYPE_CHECKING:
    from engine.llm.client import LLMClient
    from engine.llm.openai_client import OpenAICompatClient

_PARENTS = {"translate": 0, "mutate": 1, "crossover": 2, "repair": 1, "meta": 0}


# Room for thinking and the rationale on top of the files a proposal must send back.
_ANSWER_RESERVE = 12000
PROVIDER_PROPOSER = {"anthropic": "anthropic", "openai-compatible": "openai"}   # inverse of LLM_PROPOSERS


class LLMProposer:
    operators = frozenset(_PARENTS)

    def __init__(self, client: LLMClient | OpenAICompatClient, config: Config, *, target: str = ""):
        self.client = client
        self.config = config
        self.target = target      # the GPU and build flags, as engine.llm.target describes them
        self.name = PROVIDER_PROPOSER.get(client.provider, "anthropic")

    def available(self) -> bool:
        return self.client.available

    def unavailable_reason(self) -> str:
        return "" if self.available() else no_key_message(self.client.config)

    # -- prompts ---------------------------------------------------------------------------------------
    def build_request(self, request: ProposalRequest, key: str | None = None) -> LLMRequest:
        """The LLM request for `request` (raises PromptError for a broken template)."""
        pdir = self.config.llm.prompts_dir
        op = request.operator
        values: dict[str, Any] = {
            **render.context_values(request.task, request.direction, self.target, self.config.llm.languages),
            "directives": request.directives, "insights": render.render_list(request.insights),
            "feedback": request.feedback, "hints": request.hints, "population": request.population,
            "lessons": render.render_list(request.lessons), "elite": "", "elite_name": "", "elite_summary": "",
        }
        summaries = list(request.parent_summaries) + [""] * len(request.parents)
        if op in ("mutate", "repair"):
            p = request.parents[0]
            values.update(parent=render.render_candidate(p), parent_name=p.name, parent_summary=summaries[0])
            elite = request.elite
            if op == "mutate" and elite is not None and elite.source_hash != p.source_hash:
                values.update(elite=render.render_candidate(elite), elite_name=elite.name,
                              elite_summary=request.elite_summary)
        elif op == "crossover":
            a, b = request.parents
            values.update(parent_a=render.render_candidate(a), parent_a_name=a.name, parent_a_summary=summaries[0],
                          parent_b=render.render_candidate(b), parent_b_name=b.name, parent_b_summary=summaries[1])
        # the answer carries one whole candidate: as long as the longest parent, plus thinking and rationale
        resend = max((render.estimate_tokens("".join(p.files.values())) for p in request.parents), default=0)
        paths = machine_paths(request.task.root)     # compiler output and failure reasons quote them
        return LLMRequest(
            system=load_template("system", pdir).render(),
            context=without_paths(load_template("context", pdir).render(values), paths),
            prompt=without_paths(load_template(op, pdir).render(values), paths),
            tool=SUBMIT_DIRECTIVES if op == "meta" else submit_kernel_tool(self.config.llm.languages), key=key,
            purpose=op,
            min_output_tokens=int(resend * 1.25) + _ANSWER_RESERVE if resend else 0)

    # -- propose ---------------------------------------------------------------------------------------
    def propose(self, request: ProposalRequest) -> Proposal:
        op = request.operator
        if op not in self.operators:
            return failed(self.name, request, f"the anthropic proposer does not do {op!r}")
        if problem := check_parents(request, _PARENTS[op]):
            return failed(self.name, request, problem)
        if op == "repair" and not request.feedback.strip():
            return failed(self.name, request, "repair needs the compiler or correctness output as feedback")
        if not self.client.available:
            no_key_notice(None, self.client.config)
            return failed(self.name, request, no_key_message(self.client.config), status=ProposalStatus.STOP,
                          data={"error": "no_key"})
        pid = new_proposal_id()
        try:
            llm_req = self.build_request(request, key=pid)
        except PromptError as exc:
            # A broken template fails every call alike: stop rather than burn through the population.
            return failed(self.name, request, str(exc), status=ProposalStatus.STOP, id=pid,
                          data={"error": "prompt"})
        prompt = prompt_markdown(llm_req, self.client.build_params(llm_req))
        base = Proposal(status=ProposalStatus.OK, proposer=self.name, operator=op, id=pid, prompt=prompt,
                        parents=tuple(parent_id(p) for p in request.parents),
                        model=llm_req.model or self.config.llm.model)
        try:
            replies = self._ask(llm_req)
        except LLMError as exc:
            status = (ProposalStatus.UNAVAILABLE if exc.unavailable else
                      ProposalStatus.STOP if exc.stop else ProposalStatus.FAILED)
            return replace(base, status=status, reason=str(exc),
                           data={"error": exc.kind, "attempts": exc.attempts, "status_code": exc.status_code})
        reply = replies[-1]
        base = replace(base, answer=answers_markdown(replies), usage=sum((r.usage for r in replies), Usage()),
                       cost_usd=sum(r.cost_usd for r in replies), model=reply.model,
                       data={"attempts": sum(r.attempts for r in replies), "request_id": reply.request_id,
                             "stop_reason": reply.stop_reason, "calls": len(replies)})
        try:
            if op == "meta":
                d = directives_answer(reply)
                return replace(base, directives=d.directives, rationale=d.rationale)
            ans = kernel_answer(reply, request.direction, self.config.llm.languages)
        except LLMError as exc:
            why = str(exc) + (" (cut again when asked once more with twice the room)"
                              if len(replies) > 1 and reply.stop_reason == "max_tokens" else "")
            return replace(base, status=ProposalStatus.FAILED, reason=why, data={**base.data, "error": exc.kind},
                           drafts=drafts_of(reply))
        cand = Candidate("triton" if "kernel.py" in ans.files else "native" if "binding.cpp" in ans.files
                         else "kernel-only", ans.files, ans.name)
        try:
            cand = materialise(cand, request.task, request.direction)   # kernel-only: the generated binding
        except GlueError as exc:
            return replace(base, status=ProposalStatus.FAILED, rationale=ans.rationale, reason=str(exc),
                           data={**base.data, "error": "glue"})
        parent_hashes = {p.source_hash for p in request.parents}
        if cand.source_hash in parent_hashes or cand.source_hash in request.known_hashes:
            return replace(base, status=ProposalStatus.FAILED, rationale=ans.rationale,
                           reason="the answer repeats a candidate this session already has (same source)",
                           data={**base.data, "error": "duplicate", "source_hash": cand.source_hash})
        self.client.ledger.rekey(pid, cand.source_hash)
        proposal = replace(base, rationale=ans.rationale)
        # an answer that wrote the call as text (engine.llm.fenced) says so in the candidate's meta
        form = {} if reply.answer_form == "tool_call" else {"answer_form": reply.answer_form}
        return replace(proposal, candidate=with_provenance(cand, proposal, **form))


    def _ask(self, llm_req: LLMRequest) -> list[LLMReply]:
        """The call, and once more with twice the room when the answer was cut at max_tokens (a truncated kernel
        is no kernel; both answers are paid for and kept). A second call that fails keeps the first answer."""
        first = self.client.call(llm_req)
        if first.stop_reason != "max_tokens":
            return [first]
        room = self.client.build_params(llm_req)["max_tokens"]
        again = replace(llm_req, max_tokens=2 * room)
        if self.client.build_params(again)["max_tokens"] <= room:      # already at the model's limit
            return [first]
        try:
            return [first, self.client.call(again)]
        except LLMError:
            return [first]


# The older name: the proposer is provider-neutral now.
AnthropicProposer = LLMProposer


def prompt_markdown(req: LLMRequest, params: dict[str, Any]) -> str:
    settings = {k: params[k] for k in ("model", "max_tokens", "thinking", "tool_choice", "output_config")
                if k in params}
    settings.update(params.get("extra_body") or {})
    return "\n\n".join([
        f"```json\n{json.dumps(settings)}\n```",
        "### System\n\n" + req.system.strip(),
        "### Task context (cached)\n\n" + req.context.strip(),
        "### Request\n\n" + req.prompt.strip(),
    ])


def answers_markdown(replies: list[LLMReply]) -> str:
    """Every answer a proposal paid for: one, or a first one cut at max_tokens and the one asked again."""
    if len(replies) == 1:
        return answer_markdown(replies[0])
    return "\n\n".join(f"### Answer {i} of {len(replies)}\n\n{answer_markdown(r)}" for i, r in enumerate(replies, 1))


def drafts_of(reply: LLMReply) -> dict[str, str]:
    """The files an unusable answer carried, as far as they got (tool fields, else fenced code in its text)."""
    data = reply.tool_input if isinstance(reply.tool_input, dict) else {}
    drafts = {rel: data[f] for f, rel in KERNEL_FIELDS.items() if isinstance(data.get(f), str) and data[f].strip()}
    if drafts:
        return drafts
    blocks = re.findall(r"```(\w*)[^\n]*\n(.*?)(?:```|\Z)", reply.text, re.DOTALL)
    ext = {"cuda": "cu", "cu": "cu", "cpp": "cpp", "c++": "cpp", "python": "py", "py": "py"}
    return {f"draft-{i}.{ext.get(lang.lower(), 'txt')}": code for i, (lang, code) in enumerate(blocks, 1) if code.strip()}


def answer_markdown(reply: LLMReply) -> str:
    parts = [f"stop_reason: {reply.stop_reason}"]
    if reply.thinking.strip():
        parts.append("### Thinking (summary)\n\n" + reply.thinking.strip())
    if reply.text.strip():
        parts.append("### Text\n\n" + reply.text.strip())
    if reply.tool_name:
        read = {"json": " (read from a JSON object in the text: no tool call)",
                "fenced": " (read from fenced code blocks in the text: no tool call)"}.get(reply.answer_form, "")
        parts.append(f"### Tool call: {reply.tool_name}{read}")
        data = dict(reply.tool_input or {})
        for key, lang in (("kernel_cu", "cuda"), ("binding_cpp", "cpp"), ("kernel_py", "python")):
            if isinstance(data.get(key), str):
                parts.append(f"#### {key}\n\n```{lang}\n{data.pop(key).rstrip()}\n```")
        if data:
            parts.append("```json\n" + json.dumps(data, indent=2) + "\n```")
    return "\n\n".join(parts)
