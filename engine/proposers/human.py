"""The human proposer: the user edits a candidate in $VISUAL / $EDITOR; the result is a candidate.

The parent's files (or, for translate, a skeleton) are copied to a temporary folder with RATIONALE.md
and the task's reference.py for reading; the editor is run on them and waited for. Unchanged files give
no proposal (EMPTY); edited files give a candidate with meta proposer=human. If the editor fails or the
result is not a readable candidate, the folder is kept and its path is in the reason, so no edit is lost.

The call blocks until the editor exits: a full-screen UI must suspend itself around it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Callable, Mapping

from engine import userfiles
from engine.candidates import Candidate, detect_format
from engine.errors import CandidateError, KbenchError
from engine.proposers.base import Proposal, ProposalRequest, ProposalStatus, failed, parent_id, with_provenance

RATIONALE = "RATIONALE.md"
REFERENCE = "reference.py"  # a read-only copy for the user; never part of the candidate
_RATIONALE_HINT = ("<!-- Write why you made this change below; lines inside these comment markers are ignored. "
                   "Leave it empty to use \"edited by hand\". -->\n")
_IGNORED_SUFFIXES = ("~", ".swp", ".swo", ".orig", ".bak", ".rej")

SKELETON_KERNEL = """\
// kernel.cu: device code and launchers only (no torch headers).
#include <cuda_runtime.h>

#define BLOCK_SIZE 256  // kbench:knob values=128,256,512

__global__ void forward_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];  // TODO: the computation
}

void launch_forward(const float* x, float* y, long n, cudaStream_t stream) {
    int grid = (int)((n + BLOCK_SIZE - 1) / BLOCK_SIZE);
    forward_kernel<<<grid, BLOCK_SIZE, 0, stream>>>(x, y, n);
}
"""

SKELETON_BINDING = """\
// binding.cpp: torch glue: checks, allocation, launch on the current stream.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

void launch_forward(const float* x, float* y, long n, cudaStream_t stream);

torch::Tensor forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x: contiguous CUDA float32");
    auto y = torch::empty_like(x);
    launch_forward(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), at::cuda::getCurrentCUDAStream());
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "forward"); }
"""


def editor_command(env: Mapping[str, str] | None = None) -> list[str] | None:
    env = os.environ if env is None else env
    raw = env.get("VISUAL") or env.get("EDITOR")
    return shlex.split(raw) if raw and raw.strip() else None


class HumanProposer:
    name = "human"
    operators = frozenset({"translate", "mutate", "repair"})

    def __init__(self, editor: list[str] | str | None = None, *, env: Mapping[str, str] | None = None,
                 tmp_root: str | Path | None = None, run: Callable[..., subprocess.CompletedProcess] = subprocess.run):
        self._env = env
        self._editor = shlex.split(editor) if isinstance(editor, str) else editor
        self.tmp_root = tmp_root
        self._run = run

    def editor(self) -> list[str] | None:
        return self._editor or editor_command(self._env)

    def available(self) -> bool:
        return self.editor() is not None

    def unavailable_reason(self) -> str:
        return "" if self.available() else "Set $VISUAL or $EDITOR to edit candidates by hand."

    def propose(self, request: ProposalRequest) -> Proposal:
        editor = self.editor()
        if editor is None:
            return failed(self.name, request, self.unavailable_reason(), status=ProposalStatus.STOP)
        if len(request.parents) > 1:
            return failed(self.name, request, "a hand edit starts from one parent (or none, to translate)")
        parent = request.parents[0] if request.parents else None
        start = dict(parent.files) if parent else {"kernel.cu": SKELETON_KERNEL, "binding.cpp": SKELETON_BINDING}
        folder = Path(tempfile.mkdtemp(prefix="kbench-edit-", dir=self.tmp_root))
        for rel, text in start.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(text)
        (folder / RATIONALE).write_text(_RATIONALE_HINT)
        spec = request.task.directions.get(request.direction)
        ref = spec.reference_path if spec else None
        extras = {RATIONALE}
        if ref is not None and ref.is_file() and REFERENCE not in start:
            shutil.copyfile(ref, folder / REFERENCE)
            (folder / REFERENCE).chmod(0o444)
            extras.add(REFERENCE)
        paths = [str(folder / rel) for rel in sorted(start, key=lambda r: (r != "kernel.cu", r))]
        try:
            done = self._run([*editor, *paths, str(folder / RATIONALE)], cwd=str(folder))
        except OSError as exc:
            return failed(self.name, request, f"cannot start the editor {editor[0]!r} ({exc}); "
                          f"the files are in {folder}")
        if done.returncode != 0:
            return failed(self.name, request, f"the editor exited with status {done.returncode}; "
                          f"nothing was taken, the files are in {folder}")
        try:
            files = _read_back(folder, set(start), extras)
            rationale = _rationale(userfiles.read_text(folder / RATIONALE, error=CandidateError)
                                   if os.path.lexists(folder / RATIONALE) else "")
        except CandidateError as exc:
            return failed(self.name, request, f"{exc} Nothing was taken; the files are in {folder}")
        if files == start:
            shutil.rmtree(folder, ignore_errors=True)
            return failed(self.name, request, "the files were not changed", status=ProposalStatus.EMPTY)
        try:
            fmt = detect_format(files)
        except KbenchError as exc:
            return failed(self.name, request, f"{exc} The edited files are in {folder}")
        cand = Candidate(fmt, files, _name(parent))
        if cand.source_hash in request.known_hashes:
            shutil.rmtree(folder, ignore_errors=True)
            return failed(self.name, request, "the edit gives a candidate the session already has",
                          status=ProposalStatus.EMPTY)
        shutil.rmtree(folder, ignore_errors=True)
        operator = request.operator if parent else "translate"
        proposal = Proposal(status=ProposalStatus.OK, proposer=self.name, operator=operator,
                            parents=(parent_id(parent),) if parent else (), rationale=rationale or "edited by hand",
                            prompt=f"Edit {parent.name if parent else 'a new candidate'} in {' '.join(editor)}.",
                            answer=f"Edited files: {', '.join(sorted(f for f in files if files[f] != start.get(f)))}")
        return replace(proposal, candidate=with_provenance(cand, proposal))


def _read_back(folder: Path, started: set[str], extras: set[str]) -> dict[str, str]:
    """The edited candidate files: those we wrote (unless deleted) plus new source files the user added. One made a
    link or a special file is a CandidateError naming it (engine.userfiles: kbench reads nothing through a link)."""
    files: dict[str, str] = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if rel in extras or any(part.startswith(".") for part in Path(rel).parts) or rel.endswith(_IGNORED_SUFFIXES):
            continue
        if p.is_dir() and not p.is_symlink():
            continue
        if rel in started or p.suffix in (".cu", ".cuh", ".cpp", ".h", ".hpp", ".py"):
            files[rel] = userfiles.read_text(p, error=CandidateError)
    return files


def _rationale(text: str) -> str:
    return re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL).strip()


def _name(parent: Candidate | None) -> str:
    return f"{parent.name}-edit" if parent else "hand-written"
