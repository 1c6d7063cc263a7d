"""Scale-aware correctness (engine.harness.compare) on CPU tensors: outputs that are half-filled, zero-filled or
NaN-filled fail under a vacuous tolerance with a reason naming the rows; honest outputs within float error
pass; NaN and Inf must sit exactly where the reference has them."""

from __future__ import annotations

import pytest
import torch

from engine.harness.compare import (
    compare_outputs,
    normalised_tolerance,
    reference_error,
    vacuous_fraction,
)

# KernelBench's softmax: 16 rows of 16384, atol = rtol = 1e-2. Every softmax value is ~6e-5 << atol.
KB_ATOL = KB_RTOL = 1e-2


@pytest.fixture
def softmax_ref():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 16384, generator=g)
    return x, torch.softmax(x, dim=-1)


def test_the_tolerance_is_vacuous_for_this_shape(softmax_ref):
    _, ref = softmax_ref
    assert vacuous_fraction(ref, KB_ATOL, KB_RTOL) == 1.0


def test_half_filled_rows_fail_and_are_named(softmax_ref):
    _, ref = softmax_ref
    got = ref.clone()
    got[8:] = 0
    c = compare_outputs((got,), (ref,), KB_ATOL, KB_RTOL)
    assert not c.ok
    assert "8 of 16 rows: 8-15 are entirely 0" in c.reason, c.reason
    assert c.rows == list(range(8, 16))


def test_zero_filled_output_fails(softmax_ref):
    _, ref = softmax_ref
    c = compare_outputs((torch.zeros_like(ref),), (ref,), KB_ATOL, KB_RTOL)
    assert not c.ok and "every element is 0" in c.reason


def test_nan_filled_output_fails_naming_rows(softmax_ref):
    _, ref = softmax_ref
    got = ref.clone()
    got[3] = float("nan")
    c = compare_outputs((got,), (ref,), KB_ATOL, KB_RTOL)
    assert not c.ok and "16384 NaN value(s) where the reference has none" in c.reason and "1 of 16 rows: 3" in c.reason


def test_zero_output_does_not_pass_a_reference_full_of_nan():
    ref = torch.full((4, 64), float("nan"))
    c = compare_outputs((torch.zeros_like(ref),), (ref,), KB_ATOL, KB_RTOL)
    assert not c.ok and "where the reference is NaN and the output is not" in c.reason and "4 of 4 rows: 0-3" in c.reason


def test_inf_must_match_in_sign_and_place():
    ref = torch.randn(4, 32)
    ref[1, 5] = float("inf")
    ref[2, 7] = float("-inf")
    assert compare_outputs((ref.clone(),), (ref,), 1e-5, 1e-5).ok
    flipped = ref.clone()
    flipped[2, 7] = float("inf")
    c = compare_outputs((flipped,), (ref,), 1e-5, 1e-5)
    assert not c.ok and "+Inf value(s) where the reference has none" in c.reason and "rows: 2" in c.reason
    finite = ref.clone()
    finite[1, 5] = 3.0e38
    assert "where the reference is +Inf and the output is not" in compare_outputs((finite,), (ref,), 1e9, 1).reason


def test_honest_outputs_within_float_error_pass(softmax_ref):
    x, ref = softmax_ref
    # the same softmax by another route: float64 then rounded, and an exp/sum in float32 without max-shift
    via64 = torch.softmax(x.double(), dim=-1).float()
    manual = torch.exp(x) / torch.exp(x).sum(dim=-1, keepdim=True)
    for got in (via64, manual):
        c = compare_outputs((got,), (ref,), KB_ATOL, KB_RTOL)
        assert c.ok, c.reason
        assert c.max_norm_err < 1e-5
    # the same under a tight tolerance
    assert compare_outputs((via64,), (ref,), 1e-5, 1e-5).ok


def test_uniformly_wrong_output_fails_the_normalised_check(softmax_ref):
    _, ref = softmax_ref
    c = compare_outputs((ref * 1.3,), (ref,), KB_ATOL, KB_RTOL)
    assert not c.ok and "normalised error" in c.reason and "cannot judge" in c.reason
    # a constant (the mean of each row) passes the element-wise check here, not the normalised one
    const = ref.mean(dim=-1, keepdim=True).expand_as(ref).contiguous()
    assert not compare_outputs((const,), (ref,), KB_ATOL, KB_RTOL).ok


def test_a_wrong_row_is_named_under_a_vacuous_tolerance(softmax_ref):
    _, ref = softmax_ref
    got = ref.clone()
    got[5] = got[5].flip(0)            # a row computed from the wrong data
    c = compare_outputs((got,), (ref,), KB_ATOL, KB_RTOL)
    assert not c.ok and "1 of 16 rows: 5 have a normalised error" in c.reason, c.reason


def test_tiny_cancellation_rows_are_left_to_atol():
    """A layernorm row of equal values is rounding noise in the reference (mean subtraction): an honest kernel
    that computes it exactly as zeros passes, even though the row is 'entirely zero'."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, 256, generator=g)
    x[3] = 0.7
    ref = torch.nn.functional.layer_norm(x, (256,))
    got = ref.clone()
    got[3] = 0.0
    assert compare_outputs((got,), (ref,), 1e-5, 1e-5).ok


def test_vectors_are_judged_in_tiles():
    ref = torch.rand(8192) * 1e-4 + 1e-5   # every value below atol
    got = ref.clone()
    got[2048:3072] = 0
    c = compare_outputs((got,), (ref,), 1e-3, 1e-3)
    assert not c.ok and "tiles of 1024 elements: 2 are entirely 0" in c.reason


def test_mismatch_budget_still_applies():
    ref = torch.relu(torch.randn(64, 64))
    got = ref.clone()
    got[0, 0] += 1.0
    assert not compare_outputs((got,), (ref,), 1e-5, 1e-5).ok
    c = compare_outputs((got,), (ref,), 1e-5, 1e-5, max_mismatch_fraction=1e-3)
    assert c.ok and "mismatch budget" in c.details[0]


def test_float64_reference_bounds_the_error_by_the_eager_one():
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(128, 512, generator=g), torch.randn(512, 64, generator=g)
    ref, ref64 = a @ b, (a.double() @ b.double())
    e = reference_error(ref, ref64)
    assert 0 < e < 1e-5
    honest = (a.double() @ b.double()).float()
    assert compare_outputs((honest,), (ref,), 1e-2, 1e-2, ref64=(ref64,)).ok
    # TF32-like rounding of the inputs: fine for atol=1e-2, 100x worse than the eager reference's own error
    tf32 = lambda t: (t.view(torch.int32) & ~0x1FFF).view(torch.float32)
    sloppy = tf32(a) @ tf32(b)
    assert compare_outputs((sloppy,), (ref,), 1e-1, 1e-1).ok
    c = compare_outputs((sloppy,), (ref,), 1e-1, 1e-1, ref64=(ref64,))
    assert not c.ok and "float64 reference" in c.reason


def test_normalised_tolerance_by_dtype():
    assert normalised_tolerance(1e-5, torch.float32) == 1e-2
    assert normalised_tolerance(1e-2, torch.float32) == pytest.approx(0.1)
    assert normalised_tolerance(0.2, torch.float32) == 0.5
    assert normalised_tolerance(1e-3, torch.bfloat16) == 0.1


@pytest.mark.parametrize("make_bad", [
    lambda r: r.__setitem__((slice(8, 16),), 0.0),                  # half the rows zero
    lambda r: r.__setitem__((13, 7), float("nan")),                 # one NaN in a late row
    lambda r: r.__setitem__((slice(None), slice(0, 5)), 1.0),       # element-wise, every row
    lambda r: None,                                                 # honest
])
def test_sliced_comparison_reads_like_the_whole_one(monkeypatch, softmax_ref, make_bad):
    """Large outputs are compared a slice of rows at a time (their float64 temporaries would not fit on the
    GPU otherwise); the verdict, the counts and the rows named do not depend on the slice size."""
    import engine.harness.compare as cmp
    _, ref = softmax_ref
    got = ref.clone() * (1 + 1e-7)
    make_bad(got)
    whole = compare_outputs((got,), (ref,), 1e-5, 1e-5)
    monkeypatch.setattr(cmp, "SLICE", 3 * 16384)          # 3 rows a slice: 6 slices, the last one short
    sliced = compare_outputs((got,), (ref,), 1e-5, 1e-5)
    assert (sliced.ok, sliced.reason, sliced.rows) == (whole.ok, whole.reason, whole.rows)
    assert sliced.max_abs_err == pytest.approx(whole.max_abs_err) and sliced.max_norm_err == pytest.approx(whole.max_norm_err)


def test_a_partial_tail_tile_is_judged_too(monkeypatch):
    """A vector whose length is not a multiple of the tile: a NaN in the tail beyond the last whole tile is
    found and its tile named."""
    import engine.harness.compare as cmp
    monkeypatch.setattr(cmp, "SLICE", 2048)
    ref = torch.randn(5 * 1024 + 300, generator=torch.Generator().manual_seed(1))
    got = ref.clone()
    got[-3] = float("nan")
    c = compare_outputs((got,), (ref,), 1e-5, 1e-5)
    assert not c.ok and "1 of 5 tiles of 1024 elements: 4" in c.reason, c.reason


def test_a_short_tail_is_judged_with_its_tile_not_alone():
    """An honest bf16-style rounding in the last element of a 1025-element vector (the reference 4e-3, the
    output 0, within atol) passes: the tail element is judged with the tile before it, not as a row of one."""
    ref = torch.rand(1025, generator=torch.Generator().manual_seed(2)) + 0.5
    ref[-1] = 4e-3
    got = ref.clone()
    got[-1] = 0.0
    assert compare_outputs((got,), (ref,), 1e-2, 1e-2).ok
