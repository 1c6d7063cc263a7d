"""Workspace commands: `kbench sessions`, `log`, `show-candidate`, `diff`, `checkout`, `override`,
`init-workspace`. All read or write the git workspace through engine.workspace.Workspace."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.cli.common import WORKSPACE_HELP, workspace_path
from engine.gpu_wait import HOW_TO_GO_ON, WAITING_FOR_GPU, waiting_for_gpu
from engine.verdict import STAGES, Stage, Status
from engine.workspace import CandidateView, Workspace
from engine.workspace.failed import is_failed_id
from engine.workspace.head import ensure_head
from engine.workspace.views import CandidateStatus

MARKS = {Status.PASS: "+", Status.FAIL: "x", Status.SKIPPED: "-", Status.SUSPICIOUS: "?"}
STAGE_ABBR = {Stage.STATIC: "st", Stage.LLM_VERIFY: "llm", Stage.COMPILE: "cmp", Stage.CORRECTNESS: "cor",
              Stage.TIMING: "tim", Stage.INTEGRITY: "int", Stage.PROFILE: "prf"}
LEGEND = ("verdicts: + pass  x fail  - skipped  ? suspicious  w waiting for a GPU  . none  * overridden;  "
          "> best")
WAITING_STAGES = (Stage.CORRECTNESS, Stage.TIMING)   # what a candidate compiled without a GPU still waits for


def register(sub: argparse._SubParsersAction) -> None:
    def add(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument("--workspace", metavar="PATH", default=argparse.SUPPRESS,
                       help=WORKSPACE_HELP)
        return p

    p = add("sessions", "list the workspace's sessions: task, direction, proposer, candidates, best")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_sessions)

    p = add("log", "a session's candidates by generation: operator, verdicts, speedup")
    p.add_argument("session")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--generation", "-g", type=int, default=None, help="only this generation")
    p.set_defaults(func=cmd_log)

    p = add("show-candidate", "one candidate: provenance, lineage, verdicts, measurements, overrides; or one "
                              "failed proposal (<session>-g<N>-f<M>): why, and the whole prompt and answer")
    p.add_argument("candidate", help="candidate id, unique id prefix, ref or revision; or a failed proposal's id")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--prompt", action="store_true", help="also print .kbench/prompt.md")
    p.set_defaults(func=cmd_show_candidate)

    p = add("diff", "unified diff between two candidates' files")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--all", action="store_true", help="include .kbench/ (prompt and metadata)")
    p.add_argument("--stat", action="store_true", help="a diffstat instead of the patch")
    p.set_defaults(func=cmd_diff)

    p = add("checkout", "write a candidate's files (or a failed proposal's, as far as its answer got) into a folder")
    p.add_argument("candidate")
    p.add_argument("directory")
    p.add_argument("--with-task", action="store_true", help="also write the task's files and .kbench/")
    p.add_argument("--force", action="store_true", help="overwrite files that already exist")
    p.set_defaults(func=cmd_checkout)

    p = add("override", "overrule a stage's verdict on a candidate (recorded with who and why, never a rewrite)")
    p.add_argument("candidate")
    p.add_argument("stage", help=f"one of: {', '.join(STAGES)}")
    p.add_argument("status", choices=["pass", "fail"])
    p.add_argument("--reason", required=True, help="why (kept in the note)")
    p.add_argument("--by", default=None, help="who (default: git's user.name <user.email>)")
    p.set_defaults(func=cmd_override)

    p = add("init-workspace", "create the workspace repository (or adopt an existing folder or repository)")
    p.add_argument("--adopt", action="store_true",
                   help="allow a non-empty folder or a foreign git repository (files and refs are left as they are)")
    p.set_defaults(func=cmd_init)


def _path(args: argparse.Namespace) -> Path:
    return workspace_path(args)


def _open(args: argparse.Namespace) -> Workspace:
    return Workspace.open(_path(args))


def _fmt_x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _marks(status: CandidateStatus) -> list[str]:
    waiting = waiting_for_gpu(status)
    out = []
    for stage in STAGES:
        st = status.stages.get(stage)
        if st is None:
            out.append("w" if waiting and stage in WAITING_STAGES else ".")
        else:
            out.append(MARKS.get(st.status, "?") + ("*" if st.overridden else ""))
    return out


def _title(subject: str) -> str:
    parts = subject.split(" · ", 2)
    return parts[2] if len(parts) == 3 and parts[0].startswith("gen ") else subject


def cmd_init(args: argparse.Namespace) -> int:
    with Workspace.create(_path(args), adopt=args.adopt) as ws:
        print(f"workspace ready at {ws.path}")
        # a workspace made before kbench gave new ones a HEAD (an adopted repository's HEAD is its owner's)
        if not args.adopt and ensure_head(ws.git_dir):
            print("HEAD is now the branch 'index': plain `git log` and tig open the workspace")
    return 0


def cmd_sessions(args: argparse.Namespace) -> int:
    with _open(args) as ws:
        sessions = ws.sessions()
        if args.json:
            print(json.dumps({"workspace": str(ws.path), "sessions": [s.to_json() for s in sessions]}, indent=2))
            return 0
        if not sessions:
            print(f"no sessions yet in {ws.path}")
            return 0
        w = max(7, *(len(s.name) for s in sessions))
        print(f"{'session':<{w}}  {'task':<16} {'direction':<9} {'proposer':<10} {'cands':>5}  {'best':<{w + 8}} created")
        for s in sessions:
            print(f"{s.name:<{w}}  {s.task:<16} {s.direction:<9} {s.proposer:<10} {s.candidates:>5}  "
                  f"{s.best or '-':<{w + 8}} {s.created[:19].replace('T', ' ')}")
        for s in sessions:
            if s.problem:
                print(f"{s.name}: {s.problem}")
    return 0


def cmd_log(args: argparse.Namespace) -> int:
    with _open(args) as ws:
        info = ws.session(args.session)
        views = ws.candidates(args.session)
        if args.generation is not None:
            views = [v for v in views if v.generation == args.generation]
        failed = ws.failed.list(args.session)
        if args.generation is not None:
            failed = [f for f in failed if f.generation == args.generation]
        if args.json:
            print(json.dumps({"session": info.to_json(), "candidates": [v.to_json() for v in views],
                              "failed_proposals": [f.to_json() for f in failed]}, indent=2))
            return 0
        best = info.best
        print(f"session {info.name} · {info.task} · {info.direction} · proposer {info.proposer}"
              f"{' · model ' + info.model if info.model else ''} · {info.candidates} candidates · best "
              f"{best or 'none yet'}")
        if not views:
            print("no candidates yet")
            _print_failed(failed)
            return 0
        w = max(max(len(v.id) for v in views), 9)
        stage_cols = " ".join(f"{STAGE_ABBR.get(s, s[:3]):<3}" for s in STAGES)
        print(f"  {'gen':>3}  {'candidate':<{w}}  {'operator':<10} {stage_cols}  {'speedup':>8} {'vs compile':>10}  title")
        out = sys.stdout
        for v in views:
            marks = " ".join(f"{m:<3}" for m in _marks(v.status))
            flag = ">" if v.id == best else " "
            out.write(f"{flag} {v.generation:>3}  {v.id:<{w}}  {v.record.operator:<10} {marks}  "
                      f"{_fmt_x(v.status.speedup):>8} {_fmt_x(v.status.speedup_compile):>10}  "
                      f"{_title(v.record.subject)}\n")
        print(LEGEND)
        _print_failed(failed)
    return 0


def _print_failed(failed: list) -> None:
    """The answers that gave no candidate: paid for and kept, each readable with show-candidate."""
    if not failed:
        return
    print(f"\nfailed proposals: {len(failed)} answer(s) gave no candidate (kept whole: `kbench show-candidate ID`; "
          "their files, as far as they got: `kbench checkout ID DIR`)")
    w = max(len(f.id) for f in failed)
    for f in failed:
        print(f"  {f.generation:>3}  {f.id:<{w}}  {f.operator:<10} {_title(f.reason)}")


def _describe(ws: Workspace, view: CandidateView, show_prompt: bool) -> None:
    r, st = view.record, view.status
    print(f"candidate  {r.id}   commit {r.commit}")
    print(f"session    {r.session} · generation {r.generation} · {r.operator} · proposer {r.proposer}"
          f"{' · model ' + r.model if r.model else ''}")
    print(f"parents    {', '.join(r.parents) or '(session root: a translation)'}")
    print(f"created    {r.created.replace('T', ' ')}   author {r.author}")
    print(f"subject    {r.subject}")
    cand = ws.files(r.id)
    print(f"files      {', '.join(sorted(cand.files))}  ({cand.format}, source {r.source_hash or cand.source_hash})")
    lineage = ws.lineage(r.id)
    print(f"lineage    {' <- '.join(x.id for x in lineage)} <- root")
    if r.rationale:
        print("\nrationale")
        for line in r.rationale.splitlines():
            print(f"  {line}")
    if waiting_for_gpu(st):
        print(f"state      {WAITING_FOR_GPU}: compiled where no GPU was visible; correctness and timing not "
              f"measured yet ({HOW_TO_GO_ON.replace('them', 'it')})")
    print("\nverdicts")
    if not st.stages:
        print("  none yet")
    for s in st.stages.values():
        line = f"  {s.stage:<12} {s.status.value:<10}"
        if s.override is not None:
            o = s.override
            line += (f" overridden by {o.by} at {o.at}: {o.reason} (was {o.from_status or 'none'}"
                     f"{'; verdict said ' + s.verdict.verdict.status.value if s.verdict else ''})")
        elif s.verdict is not None:
            line += f" {s.verdict.verdict.reason}"
            if s.verdicts > 1:
                line += f"  [{s.verdicts} evaluations, latest {s.verdict.at}]"
        print(line.rstrip())
    print("\nmeasurements" + (" (latest first; the first one counts)" if len(st.measurements) > 1 else ""))
    if not st.measurements:
        print("  none yet")
    for m in reversed(st.measurements):
        env = ", ".join(x for x in (m.gpu, f"driver {m.driver}" if m.driver else "", f"torch {m.torch}" if m.torch
                                    else "", f"CUDA {m.cuda}" if m.cuda else "") if x)
        print(f"  {m.at}  {_fmt_x(m.speedup_eager)} vs eager, {_fmt_x(m.speedup_compile)} vs compile  {env}")
        for c in m.configs:
            extra = ", ".join(x for x in (f"iqr {c.iqr_ms:.4f}" if c.iqr_ms is not None else "",
                                         f"eager {c.eager_ms:.4f}" if c.eager_ms else "",
                                         f"compile {c.compile_ms:.4f}" if c.compile_ms else "") if x)
            print(f"      {c.config:<24} {c.ms:.4f} ms  {extra}")
    if st.overrides:
        print("\noverrides")
        for o in st.overrides:
            print(f"  {o.at}  {o.stage}: {o.from_status or 'none'} -> {o.to_status.value}  by {o.by}: {o.reason}")
    if st.events or st.comments:
        print("\nevents and comments")
        for e in st.events:
            print(f"  {e.at}  {e.event} {json.dumps(e.data) if e.data else ''}".rstrip())
        for c in st.comments:
            print(f"  # {c.text}")
    if show_prompt:
        print("\nprompt (.kbench/prompt.md)")
        print(ws.prompt(r.id).rstrip())


def _describe_failed(ws: Workspace, fid: str, as_json: bool) -> None:
    f = ws.failed.get(fid)
    prompt = ws.failed.prompt(fid)
    if as_json:
        print(json.dumps({"failed_proposal": f.to_json(), "prompt": prompt}, indent=2))
        return
    print(f"failed proposal  {f.id}   commit {f.commit}")
    print(f"session    {f.session} · generation {f.generation} · {f.operator} · proposer {f.proposer}"
          f"{' · model ' + f.model if f.model else ''}")
    print(f"parents    {', '.join(f.parents) or '(session root: a translation)'}")
    print(f"why        {f.reason}")
    print(f"cost       ${f.cost_usd:.4f}" + (f" ({sum((f.usage or {}).values())} tokens)" if f.usage else ""))
    print(f"files      {', '.join(f.files) + ' (as far as the answer got: kbench checkout ' + f.id + ' DIR)' if f.files else 'none'}")
    print("\nprompt and answer (.kbench/prompt.md)")
    print(prompt.rstrip())


def cmd_show_candidate(args: argparse.Namespace) -> int:
    with _open(args) as ws:
        if is_failed_id(args.candidate):
            _describe_failed(ws, args.candidate, args.json)
            return 0
        view = ws.view(args.candidate)
        if args.json:
            cand = ws.files(view.id)
            obj = {"candidate": view.record.to_json(), "status": view.status.to_json(),
                   "lineage": [r.id for r in ws.lineage(view.id)], "files": sorted(cand.files),
                   "format": cand.format}
            if args.prompt:
                obj["prompt"] = ws.prompt(view.id)
            print(json.dumps(obj, indent=2))
            return 0
        _describe(ws, view, args.prompt)
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    with _open(args) as ws:
        sys.stdout.write(ws.diff(args.a, args.b, meta=args.all, stat=args.stat))
    return 0


def cmd_checkout(args: argparse.Namespace) -> int:
    with _open(args) as ws:
        if is_failed_id(args.candidate):
            written = ws.failed.checkout(args.candidate, args.directory, force=args.force)
        else:
            written = ws.checkout(args.candidate, args.directory, with_task=args.with_task, force=args.force)
        print(f"wrote {len(written)} file(s) to {args.directory}: "
              f"{', '.join(str(p.relative_to(args.directory)) for p in written)}")
    return 0


def cmd_override(args: argparse.Namespace) -> int:
    with _open(args) as ws:
        o = ws.override(args.candidate, args.stage, args.status, args.reason, by=args.by)
        rec = ws.resolve(args.candidate)
        print(f"{rec.id}: {o.stage} {o.from_status or 'none'} -> {o.to_status.value} (by {o.by}: {o.reason})")
    return 0
