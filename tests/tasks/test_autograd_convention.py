"""The native runtime under robust-kbench's backward convention (a reference.py with AutogradFunction: the built-in
mnist_linear, unet_linear, mnist_pool, mnist_conv_relu_pool, layernorm), on the CPU: the judge's call plan is what upstream's
AutogradFunction.backward passes, a kernel that returns the right gradients for those arguments composes into the
reference's gradients and a wrong one does not, and a call given fresh values is judged against the reference for
those values."""

from __future__ import annotations

import types

import pytest
import torch
import torch.nn.functional as F

from engine.harness.runtimes import runtime_for
from engine.harness.runtimes.autograd_fn import tensor_leaves
from engine.harness.compare import compare_outputs
from engine.tasks.loader import load_task


@torch.enable_grad()
def _linear(g, x, w):
    g2, x2 = g.reshape(-1, g.shape[-1]), x.reshape(-1, x.shape[-1])
    return [g @ w, g2.t() @ x2, g2.sum(0)]


@torch.enable_grad()
def _pool(saved, g):
    x = saved[0].clone().requires_grad_()
    return [torch.autograd.grad(F.max_pool2d(x, 2, 2), x, g)[0]]


@torch.enable_grad()
def _conv(x, w, b, g):
    x, w, b = (t.clone().requires_grad_() for t in (x, w, b))
    return list(torch.autograd.grad(F.max_pool2d(F.relu(F.conv2d(x, w, bias=b)), 2), (x, w, b), g))


@torch.enable_grad()
def _layernorm(g, x, w, b, eps, normalized_shape):
    # upstream's layernorm backward takes normalized_shape after eps, a tuple of ints: used as such here
    assert isinstance(normalized_shape, tuple) and all(type(n) is int for n in normalized_shape)
    x, w, b = (t.clone().requires_grad_() for t in (x, w, b))
    return list(torch.autograd.grad(F.layer_norm(x, normalized_shape, w, b, eps), (x, w, b), g))


KERNELS = {"mnist_linear": _linear, "unet_linear": _linear, "mnist_pool": _pool, "mnist_conv_relu_pool": _conv,
           "layernorm": _layernorm}


def _setup(name):
    task = load_task(name)
    assert task.spec("backward").autograd_backward
    rt = runtime_for(task, "backward")
    cfg = min(task.configs, key=lambda c: sum(v for v in {**c.model_kwargs, **c.input_kwargs}.values()
                                              if isinstance(v, int)))
    rt.setup(cfg, 11, "cpu")
    return rt


def _close(a, b, rt):
    tol = rt.spec.tolerance
    return compare_outputs(tuple(a), tuple(b), tol.atol, tol.rtol, rt.spec.max_mismatch_fraction).ok


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_a_right_kernel_composes_into_the_reference_and_a_wrong_one_does_not(name):
    rt = _setup(name)
    inputs = rt.inputs()
    plan = rt.call_plan(inputs)
    out = KERNELS[name](*plan.args)
    ref = rt.reference(inputs)
    assert _close(rt.compose(inputs, out), ref, rt)
    assert _close(rt.candidate(types.SimpleNamespace(backward=KERNELS[name]), rt.inputs()), ref, rt)
    wrong = [o * 1.5 + 0.1 for o in out]
    assert not _close(rt.compose(inputs, wrong), ref, rt)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_fresh_values_are_judged_against_their_own_reference(name):
    rt = _setup(name)
    plan = rt.call_plan(rt.inputs())
    leaves = tensor_leaves(plan.args)
    assert all(rt.freshable(leaves))          # every argument is grad_output or one of fn's arguments
    gen = torch.Generator().manual_seed(5)

    def fresh(v):
        if isinstance(v, torch.Tensor):
            return torch.randn(v.shape, generator=gen, dtype=v.dtype)
        return tuple(fresh(t) for t in v) if isinstance(v, tuple) else v
    args = tuple(fresh(a) for a in plan.args)
    expect = KERNELS[name](*args)
    got = rt.fresh_reference(args)
    assert _close(rt.compose(rt.inputs(), expect), got, rt)          # fresh kernel result == fresh reference
    assert not _close(rt.reference(rt.inputs()), got, rt)             # and it is not the old reference


def test_layernorm_backward_gets_upstreams_arguments_in_its_order():
    """robust-kbench's layernorm backward_fn call: (grad_output, x, weight, bias, eps, normalized_shape), with
    normalized_shape the trailing weight.dim() sizes of x as a tuple of ints, and eps the config's float."""
    rt = _setup("layernorm")
    inputs = rt.inputs()
    x, weight, bias, eps = rt.fn_args(inputs)
    args = rt.call_plan(inputs).args
    assert len(args) == 6
    g, x2, w2, b2, eps2, shape = args
    assert g.shape == x.shape and torch.equal(x2, x) and torch.equal(w2, weight) and torch.equal(b2, bias)
    assert eps2 == eps and isinstance(eps2, float)
    assert shape == tuple(x.shape[1:]) == tuple(weight.shape) and type(shape) is tuple
