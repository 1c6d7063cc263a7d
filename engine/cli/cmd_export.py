"""`kbench export ID [--out DIR] [--name NAME]`: write a chosen kernel as a torch extension package
(pyproject.toml, setup.py with CUDAExtension, csrc/ with a TORCH_LIBRARY op, register_fake / register_autograd,
an nn.Module drop-in, a README with its verdicts, a test). Also `--from-dir PATH --task TASK` for a folder."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.cli.common import WORKSPACE_HELP, workspace_path
from engine.export import plan_from_dirs, write_package
from engine.export.errors import ExportError
from engine.export.kernelbench import KernelBenchPlan
from engine.export.triton_package import TritonPlan
from engine.service.person_actions import export_candidate
from engine.workspace import Workspace, default_export_dir


def register(sub: argparse._SubParsersAction) -> None:
    help = "export a kernel as a pip-installable torch extension (TORCH_LIBRARY op, torch.compile-ready)"
    p = sub.add_parser("export", help=help, description=help + ". The forward kernel is ID (a workspace "
                       "candidate); a verified backward kernel of the same task in the workspace is wired in as "
                       "its autograd formula. Refuses a kernel without a passing verdict unless --force, and one whose correctness "
                       "was never measured on a GPU whatever the overrides say (an override may change a verdict, never "
                       "invent a measurement). A folder counts as passing after a passing `kbench eval` of its exact "
                       "sources. Written to <workspace>/exports/<name> unless --out.")
    p.add_argument("candidate", nargs="?", metavar="ID",
                   help="forward candidate: id, unique id prefix, ref or revision (not with --from-dir)")
    p.add_argument("--workspace", metavar="PATH", default=argparse.SUPPRESS,
                   help=WORKSPACE_HELP)
    p.add_argument("--out", metavar="DIR", default=None,
                   help="package folder to write (default: <workspace>/exports/<name>)")
    p.add_argument("--name", default=None,
                   help="package, op namespace and distribution name (default: kbench_<task>)")
    p.add_argument("--force", action="store_true",
                   help="export even without a passing verdict (the README then says so)")
    p.add_argument("--overwrite", action="store_true", help="replace a previous export in --out")
    p.add_argument("--backward", metavar="ID", default=None,
                   help="backward candidate to wire in (default: the best verified one of the task)")
    p.add_argument("--no-backward", action="store_true", help="export the forward op without autograd")
    p.add_argument("--from-dir", metavar="PATH", default=None,
                   help="export this candidate folder (or robust-kbench .cu) instead of a workspace candidate")
    p.add_argument("--task", default=None, help="with --from-dir: built-in task name or task folder")
    p.add_argument("--backward-dir", metavar="PATH", default=None,
                   help="with --from-dir: the backward candidate folder (or .cu)")
    p.add_argument("--arch", metavar="LIST", default=None,
                   help="GPUs the package builds for, as TORCH_CUDA_ARCH_LIST reads them (torch's rules: '8.0;9.0', "
                        "'Hopper', '9.0a'); PTX is embedded for the newest "
                        "(default: 9.0+PTX)")
    p.set_defaults(func=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    if args.no_backward and (args.backward or args.backward_dir):
        raise ExportError("--no-backward contradicts --backward / --backward-dir; give one or the other.")
    if args.from_dir:
        if args.candidate:
            raise ExportError("give either a candidate ID or --from-dir, not both.")
        if not args.task:
            raise ExportError("--from-dir needs --task (the task the folder's kernel was written for).")
        if args.backward:
            raise ExportError("--backward names a workspace candidate; with --from-dir use --backward-dir.")
        plan = plan_from_dirs(args.from_dir, args.task, None if args.no_backward else args.backward_dir,
                              name=args.name, force=args.force, archs=args.arch)
        out = Path(args.out) if args.out else _default_out(args, plan.name)
        write_package(plan, out, overwrite=args.overwrite)
    else:
        if not args.candidate:
            raise ExportError("nothing to export: give a candidate ID, or --from-dir PATH --task TASK.")
        if args.task or args.backward_dir:
            raise ExportError("--task and --backward-dir go with --from-dir; a workspace candidate knows its task.")
        ws = Workspace.open(workspace_path(args))
        try:   # the package written and an `exported` event noted, as the app's export does
            done = export_candidate(ws, args.candidate, args.out, by="cli", name=args.name, force=args.force,
                                    overwrite=args.overwrite, backward=args.backward,
                                    with_backward=not args.no_backward, archs=args.arch)
        finally:
            ws.close()
        plan, out = done.plan, done.out
    for w in plan.warnings:
        print(f"kbench: warning: {w} (written into the README)", file=sys.stderr)
    for n in plan.notes:
        print(f"kbench: note: {n}", file=sys.stderr)
    if isinstance(plan, TritonPlan):   # pure Python: Triton compiles at the first launch, for that GPU
        print(f"exported {plan.forward.origin}\n  package {out}/  (torch.ops.{plan.name}.forward, a Triton kernel; "
              f"pure Python, compiled by Triton on the GPU that runs it)\n"
              f"  install: cd {out} && python -m pip install --no-build-isolation .   (its README.md says what it pins)\n"
              f"  test:    python -m pytest tests   (in {out}; the gpu tests skip where no GPU is visible)")
        return 0
    if isinstance(plan, KernelBenchPlan):
        ops = f"{plan.name}.ModelNew with {len(plan.extensions)} prebuilt load_inline extension(s)"
    else:
        ops = ", ".join(f"torch.ops.{plan.name}.{s.op}" for s in (plan.forward_schema, plan.backward_schema) if s)
    print(f"exported {plan.forward.origin}"
          + (f" + backward {plan.backward.origin}" if plan.backward else "")
          + f"\n  package {out}/  ({ops}; builds for {';'.join(plan.archs)})\n"
          f"  build:  cd {out} && python -m pip install --no-build-isolation .   (its README.md says what it needs)\n"
          f"  test:   python -m pytest tests   (in {out}; the gpu tests skip where no GPU is visible)")
    return 0


def _default_out(args: argparse.Namespace, name: str) -> Path:
    """<workspace>/exports/<name>, out of the current directory (often the kbench checkout). An export of a
    folder may come before any session: the workspace is created then (as the app does on first run), so its
    folder never holds anything but a workspace."""
    path = workspace_path(args)
    if args.from_dir:
        Workspace.create(path).close()
    return default_export_dir(path, name)
