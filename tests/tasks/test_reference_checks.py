"""A task whose reference.py and signatures disagree is refused when it loads, by `kbench show`, `check-task` and
`glue` alike (exit 2, the file, the line and what to write), instead of loading and failing only on a GPU. The task
is README's own example ("Bring your own task"), as a user writes it, with one mistake each; the installed
`kbench`, with a HOME of the test's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.installed import kbench

REFERENCE = '''import torch, torch.nn as nn

def forward_fn(x, scale):                      # what a kernel replaces
    return torch.tanh(x) * scale

class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(hidden))
    def forward(self, x, fn=forward_fn):       # inputs, then fn=
        return fn(x, self.scale)

def get_inputs(batch, hidden):
    return [torch.randn(batch, hidden)]
'''

TOML = '''name = "scaled_tanh"
directions = ["forward"]
configs = [{ name = "odd", args = { batch = 37, hidden = 1001 } },
           { name = "wide", args = { batch = 3, hidden = 65537 }, init = "wide" },
           { name = "bench", args = { batch = 4096, hidden = 4096 } }]
[forward]
signature = "forward(x: f32[B,N], scale: f32[N]) -> f32[B,N]"
atol = 1e-5
rtol = 1e-5
flops = "2 * batch * hidden"
bytes = "dtype_bytes * (2 * batch * hidden + hidden)"
'''

BACKWARD = '''
[backward]
signature = "backward(grad_y: f32[B,N], x) -> (grad_x, grad_scale)"
atol = 1e-4
rtol = 1e-4
'''


def task(tmp_path: Path, reference: str = REFERENCE, toml: str = TOML) -> Path:
    folder = tmp_path / "my_tasks" / "scaled_tanh"
    folder.mkdir(parents=True)
    (folder / "reference.py").write_text(reference)
    (folder / "task.toml").write_text(toml)
    return folder


MISTAKES = {
    "forward without fn": (
        lambda r, t: (r.replace("def forward(self, x, fn=forward_fn):", "def forward(self, x):")
                       .replace("return fn(x, self.scale)", "return forward_fn(x, self.scale)"), t),
        ["reference.py:10: Model.forward(self, x) takes no `fn`", "no candidate would ever run"]),
    "fn never called": (
        lambda r, t: (r.replace("return fn(x, self.scale)", "return torch.tanh(x) * self.scale"), t),
        ["reference.py:10: Model.forward never calls fn"]),
    "signature with fewer arguments": (
        lambda r, t: (r, t.replace('"forward(x: f32[B,N], scale: f32[N]) -> f32[B,N]"',
                                   '"forward(x: f32[B,N]) -> f32[B,N]"')),
        ["task.toml: [forward] signature has 1 argument (x)", "reference.py:11 `fn(x, self.scale)` passes 2"]),
    "get_inputs arity": (
        lambda r, t: (r.replace("return [torch.randn(batch, hidden)]",
                                "return [torch.randn(batch, hidden), torch.randn(hidden)]"), t),
        ["reference.py:14: get_inputs returns 2 inputs, but Model.forward (line 10) takes 1 input before fn"]),
    "backward signature": (
        lambda r, t: (r, t.replace('directions = ["forward"]', 'directions = ["forward", "backward"]') + BACKWARD),
        ["[backward] signature has 2 arguments (grad_y, x)", "3 in all"]),
}


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_a_reference_that_disagrees_with_its_signature_is_refused(tmp_path, mistake):
    edit, needles = MISTAKES[mistake]
    folder = task(tmp_path, *edit(REFERENCE, TOML))
    for args in (("show", str(folder)), ("check-task", str(folder)), ("glue", str(folder), "--binding")):
        out = kbench(tmp_path / "home", *args)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert out.stdout == "" and "Traceback" not in out.stderr, (args, out.stdout, out.stderr)
        err = out.stderr.strip()
        assert err.startswith("kbench: error: ") and len(err.splitlines()) == 1, err
        for n in needles:
            assert n in err, err
        assert str(folder) in err


def test_the_readme_example_itself_loads(tmp_path):
    folder = task(tmp_path)
    out = kbench(tmp_path / "home", "show", str(folder))
    assert out.returncode == 0, out.stderr
    out = kbench(tmp_path / "home", "glue", str(folder))
    assert out.returncode == 0 and "const float* scale" in out.stdout, out.stdout + out.stderr
