"""Slow: an exported package builds with `pip install --no-build-isolation` on this GPU-less machine and passes its
own CPU tests, run from its own folder.

Exports the layernorm task's shipped forward + backward baselines, builds the package into a temporary target
without TORCH_CUDA_ARCH_LIST (the package builds for the architectures chosen at export, 9.0+PTX), then runs
`python -m pytest tests` in the package folder (its CPU tests pass, its `gpu` tests skip) and, in a fresh
interpreter, drives the Python side a GPU would exercise through stand-in CPU kernels. The CUDA kernels themselves
run in tests/export/test_gpu_export.py; tests/acceptance/test_export_readme.py builds an export by its README alone.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

from engine.export import plan_from_dirs, write_package
from tests.paths import REPO

LN = REPO / "tasks" / "layernorm" / "baselines"

CHECK = textwrap.dedent('''
    import torch
    import kbench_layernorm as k
    from kbench_layernorm import reference

    assert k.HAS_BACKWARD
    assert str(torch.ops.kbench_layernorm.forward.default._schema) == (
        "kbench_layernorm::forward(Tensor x, Tensor weight, Tensor bias, float eps) -> Tensor")
    assert str(torch.ops.kbench_layernorm.backward.default._schema) == (
        "kbench_layernorm::backward(Tensor grad_y, Tensor x, Tensor weight, Tensor bias, float eps, "
        "int[] normalized_shape) -> Tensor[]")

    # Stand-in CPU kernels, so the Python side runs without a GPU.
    lib = torch.library.Library("kbench_layernorm", "IMPL")

    def fwd_cpu(x, w, b, eps):
        return reference.forward_fn(x, w, b, eps).contiguous()

    def bwd_cpu(g, x, w, b, eps, normalized_shape):   # robust-kbench's layernorm backward convention
        assert list(normalized_shape) == list(w.shape), normalized_shape
        dims = tuple(range(x.dim() - w.dim(), x.dim()))
        mean = x.mean(dims, keepdim=True)
        rstd = torch.rsqrt(x.var(dims, unbiased=False, keepdim=True) + eps)
        xhat = (x - mean) * rstd
        gw = g * w
        dx = rstd * (gw - gw.mean(dims, keepdim=True) - xhat * (gw * xhat).mean(dims, keepdim=True))
        rows = tuple(range(x.dim() - w.dim()))
        return [dx.contiguous(), (g * xhat).sum(rows), g.sum(rows)]

    lib.impl("forward", fwd_cpu, "CPU")
    lib.impl("backward", bwd_cpu, "CPU")

    torch.manual_seed(0)
    kw = dict(num_features=3, dim1=5, dim2=7, init_method="random")
    ref = reference.Model(**kw)
    model = k.KbenchLayernorm(**kw)
    model.load_state_dict(ref.state_dict())
    x = torch.randn(4, 3, 5, 7)
    xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    compiled = torch.compile(model, fullgraph=True)
    y = compiled(xa)
    y.sum().backward()
    want = ref(xb)
    want.sum().backward()
    torch.testing.assert_close(y, want)
    torch.testing.assert_close(xa.grad, xb.grad)
    torch.testing.assert_close(model.weight.grad, ref.weight.grad)
    torch.testing.assert_close(model.bias.grad, ref.bias.grad)

    args = (x.clone().requires_grad_(True), ref.weight.detach().clone().requires_grad_(True),
            ref.bias.detach().clone().requires_grad_(True), 1e-5)
    torch.library.opcheck(torch.ops.kbench_layernorm.forward.default, args)
    torch.library.opcheck(torch.ops.kbench_layernorm.backward.default,
                          (torch.randn(4, 3, 5, 7), x, ref.weight.detach(), ref.bias.detach(), 1e-5, [3, 5, 7]))
    print("EXPORT-OK")
''')


def _can_build_wheels() -> bool:
    """setuptools >= 70.1 builds wheels itself; older ones need the `wheel` package (no build isolation here)."""
    import importlib.util

    import setuptools

    major, minor = (int(p) for p in setuptools.__version__.split(".")[:2])
    return (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None


@pytest.mark.slow
@pytest.mark.skipif(not _can_build_wheels(), reason="pip --no-build-isolation needs setuptools>=70.1 or wheel")
def test_exported_forward_backward_package_builds_on_cpu_and_passes_its_cpu_tests(tmp_path):
    out = tmp_path / "pkg"
    write_package(plan_from_dirs(LN / "forward", "layernorm", LN / "backward"), out)
    target = tmp_path / "site"
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_CUDA_ARCH_LIST", "PYTHONPATH")}
    env.update({"CUDA_HOME": "/usr/local/cuda", "MAX_JOBS": os.environ.get("MAX_JOBS", "2"),
                "CUDA_VISIBLE_DEVICES": ""})  # no GPU, no arch list: the package builds for the archs chosen at export
    # a compile cache of its own: a graph cached for an op of the same name with another schema would be replayed
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "inductor")
    build = subprocess.run([sys.executable, "-m", "pip", "install", "-v", "--no-build-isolation", "--no-deps",
                            "--no-index", "--target", str(target), str(out)],
                           capture_output=True, text=True, env=env, timeout=1500)
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-6000:]
    log = build.stdout + build.stderr
    assert "building for 9.0+PTX" in log and "CUDA toolkit /usr/local/cuda (found by $CUDA_HOME)" in log
    assert re.search(r"arch=compute_90,code=sm_90", log) and re.search(r"arch=compute_90,code=compute_90", log)
    assert "-s" in log.split() and "-g0" in log.split()          # a stripped release build
    assert list((target / "kbench_layernorm").glob("_C.*.so"))
    assert list((target / "kbench_layernorm").glob("_C_backward.*.so"))

    # The package's own tests, from its own folder: the src/ layout keeps the unbuilt sources off sys.path.
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests"],
                           cwd=out, capture_output=True, text=True, timeout=900,
                           env={**env, "PYTHONPATH": str(target)})
    report = tests.stdout + tests.stderr
    assert tests.returncode == 0, report[-6000:]
    passed = int(re.search(r"(\d+) passed", report).group(1))
    skipped = int(re.search(r"(\d+) skipped", report).group(1))
    n_configs = len(plan_from_dirs(LN / "forward", "layernorm", LN / "backward").task.configs)
    assert passed >= n_configs + 6, report[-3000:]          # every config's fake check, and the rest
    assert skipped >= 2 * n_configs and "needs a CUDA GPU" in report   # the gpu tests, forward and backward

    run = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, cwd=tmp_path,
                         env={**env, "PYTHONPATH": str(target)}, timeout=300)
    assert run.returncode == 0 and "EXPORT-OK" in run.stdout, run.stdout[-3000:] + run.stderr[-6000:]
