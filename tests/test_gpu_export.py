"""On a GPU: an exported package passes its own tests, and torch.compile(fullgraph=True) through its op matches
the reference, forward and backward (layernorm: a task with both directions).

    pytest -m gpu tests/test_gpu_export.py -v
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engine.export import plan_from_dirs, write_package

REPO = Path(__file__).resolve().parents[1]
LN = REPO / "tasks" / "layernorm" / "baselines"

COMPILE_CHECK = textwrap.dedent('''
    import torch
    import kbench_layernorm as k
    from kbench_layernorm import reference

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for batch, hidden in ((37, 1000), (129, 4095)):
        torch.manual_seed(0)
        ref = reference.Model(hidden=hidden).cuda()
        model = k.KbenchLayernorm(hidden=hidden).cuda()
        model.load_state_dict(ref.state_dict())
        x = torch.randn(batch, hidden, device="cuda") * 2 + 1
        g = torch.randn(batch, hidden, device="cuda")
        torch._dynamo.reset()
        compiled = torch.compile(model, fullgraph=True)
        xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        y = compiled(xa)
        want = ref(xb)
        torch.testing.assert_close(y, want, atol=1e-5, rtol=1e-5)
        y.backward(g)
        want.backward(g)
        torch.testing.assert_close(xa.grad, xb.grad, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(model.weight.grad, ref.weight.grad, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(model.bias.grad, ref.bias.grad, atol=1e-4, rtol=1e-4)
        # the compiled graph calls the exported ops, not an inlined reference
        gm = []
        def backend(graph, example_inputs):
            gm.append(graph)
            return graph.forward
        torch._dynamo.reset()
        torch.compile(model, fullgraph=True, backend=backend)(xa)
        assert "kbench_layernorm.forward" in str(gm[0].graph), gm[0].graph
    print("COMPILE-OK")
''')


@pytest.mark.gpu
@pytest.mark.slow
def test_exported_layernorm_on_gpu(tmp_path):
    out = tmp_path / "pkg"
    write_package(plan_from_dirs(LN / "forward", "layernorm", LN / "backward"), out)
    target = tmp_path / "site"
    env = {**os.environ, "CUDA_HOME": os.environ.get("CUDA_HOME", "/usr/local/cuda")}
    build = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index",
                            "--target", str(target), str(out)], capture_output=True, text=True, env=env, timeout=1200)
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-6000:]
    env["PYTHONPATH"] = str(target)
    # the package's own test: every config vs the reference, opcheck, torch.compile(fullgraph=True)
    own = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(out / "tests")],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=1200)
    assert own.returncode == 0, own.stdout[-6000:] + own.stderr[-3000:]
    assert "passed" in own.stdout and "skipped" not in own.stdout, own.stdout[-3000:]
    run = subprocess.run([sys.executable, "-c", COMPILE_CHECK], capture_output=True, text=True, cwd=tmp_path,
                         env=env, timeout=900)
    assert run.returncode == 0 and "COMPILE-OK" in run.stdout, run.stdout[-3000:] + run.stderr[-6000:]
