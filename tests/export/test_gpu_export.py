"""On a GPU: an exported package passes its own tests, and torch.compile(fullgraph=True) through its op matches
the reference, forward and backward (layernorm: a task with both directions).

    pytest -m gpu tests/export/test_gpu_export.py -v
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from engine.export import plan_from_dirs, write_package
from tests.paths import REPO

LN = REPO / "tasks" / "layernorm" / "baselines"

COMPILE_CHECK = textwrap.dedent('''
    import torch
    import kbench_layernorm as k
    from kbench_layernorm import reference

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for batch, c, h, w in ((3, 5, 7, 9), (2, 17, 127, 131)):
        torch.manual_seed(0)
        ref = reference.Model(num_features=c, dim1=h, dim2=w, init_method="random").cuda()
        model = k.KbenchLayernorm(num_features=c, dim1=h, dim2=w).cuda()
        model.load_state_dict(ref.state_dict())
        x = torch.randn(batch, c, h, w, device="cuda") * 2 + 1
        g = torch.randn(batch, c, h, w, device="cuda")
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
    # the package's own tests, from its own folder: every config vs the reference, opcheck, torch.compile
    own = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests"],
                         capture_output=True, text=True, cwd=out, env=env, timeout=1800)
    assert own.returncode == 0, own.stdout[-6000:] + own.stderr[-3000:]
    # the only skip: the forward-only test of the backward error (this export has a backward kernel)
    assert "passed" in own.stdout and "1 skipped" in own.stdout, own.stdout[-3000:]
    run = subprocess.run([sys.executable, "-c", COMPILE_CHECK], capture_output=True, text=True, cwd=tmp_path,
                         env=env, timeout=900)
    assert run.returncode == 0 and "COMPILE-OK" in run.stdout, run.stdout[-3000:] + run.stderr[-6000:]
