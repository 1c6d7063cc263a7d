"""Compare a candidate's outputs with the reference's: structure first, then values, at three scales.

1. Non-finite values must sit exactly where the reference has them (NaN where NaN, +Inf where +Inf, -Inf
   where -Inf): nothing is mapped to a number before comparing, so neither unwritten memory (NaN-poisoned)
   nor a NaN hidden as 0 can pass.
2. Element-wise: |got - ref| <= atol + rtol * |ref| (with the task's mismatch budget).
3. Scale-aware: per output and per row (the last dimension; 1024-element tiles for vectors), rows that are
   entirely zero where the reference's are not are named, and where the element-wise tolerance is vacuous
   (zero itself would pass for most elements, as with KernelBench's atol on a softmax) the normalised error
   ||got - ref|| / ||ref|| must stay below `normalised_tolerance`. Optionally, against a float64 reference,
   the candidate's normalised error must stay within a margin of the task-dtype reference's own error.

Rows too small to matter (RMS below 1e-3 of the output's, or only subnormal values) are never judged by the
row checks: their values are rounding noise, which the element-wise atol exists for.

Lazy imports: torch, inside the functions: the CLI and the app load this module at start-up, and the judge
imports it before it spawns its runner, so that both import torch at the same time
(engine/pipeline/judge/evaluation.py).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

TILE = 1024                 # vectors are judged in tiles of this many elements
MIN_ROW = 8                 # shorter last dimensions are judged as tiles of the flattened output
SIGNIFICANT_ROW = 1e-3      # a row is judged when its RMS is at least this fraction of the output's
VACUOUS_FRACTION = 0.5      # the element-wise test is vacuous where zero would pass for this many elements
REF_ERROR_MARGIN = 10.0     # float64 check: allowed multiple of the eager reference's own error
# Smallest normalised-error bound per dtype: far above the rounding error of an honest kernel in that dtype
# (float32 kernels are ~1e-6..1e-4 from eager), far below a wrong or half-written result (~0.5..1.4).
NORM_FLOOR = {"float64": 1e-6, "float32": 1e-2, "float16": 5e-2, "bfloat16": 1e-1}


@dataclass
class Comparison:
    ok: bool
    reason: str = ""
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    mismatch_fraction: float = 0.0
    details: list[str] = field(default_factory=list)
    max_norm_err: float = 0.0          # worst ||got - ref|| / ||ref|| over the outputs
    rows: list[int] = field(default_factory=list)   # the rows (or tiles) named in the reason, first 64

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def normalised_tolerance(rtol: float, dtype: Any) -> float:
    """Bound on ||got - ref|| / ||ref|| where the element-wise tolerance is vacuous."""
    floor = NORM_FLOOR.get(str(dtype).replace("torch.", ""), 1e-2)
    return min(0.5, max(10.0 * rtol, floor))


def compare_outputs(got: tuple, want: tuple, atol: float, rtol: float,
                    max_mismatch_fraction: float = 0.0, *, ref64: tuple | None = None,
                    margin: float = REF_ERROR_MARGIN) -> Comparison:
    """Check every output; the first structural problem or value mismatch is the reason.

    `ref64`, when given, holds the reference's outputs computed in float64 on the same inputs: each
    output's normalised error against it must stay within `margin` times the task-dtype reference's own.
    """
    import torch

    if len(got) != len(want):
        return Comparison(False, f"returned {len(got)} output(s), the reference returns {len(want)}")
    worst = Comparison(True)
    for i, (g, w) in enumerate(zip(got, want)):
        name = f"output {i}" if len(want) > 1 else "output"
        if not isinstance(w, torch.Tensor):
            if isinstance(g, torch.Tensor):
                g = g.item() if g.numel() == 1 else g
            if not isinstance(g, (int, float)) or abs(float(g) - float(w)) > atol + rtol * abs(float(w)):
                return Comparison(False, f"{name}: got {g!r}, expected {w!r}")
            continue
        if not isinstance(g, torch.Tensor):
            return Comparison(False, f"{name}: got {type(g).__name__}, expected a tensor")
        if g.device != w.device:
            return Comparison(False, f"{name}: on {g.device}, expected {w.device}")
        if g.dtype != w.dtype:
            return Comparison(False, f"{name}: dtype {g.dtype}, expected {w.dtype} (lower precision than the task's dtype is not allowed)")
        if tuple(g.shape) != tuple(w.shape):
            return Comparison(False, f"{name}: shape {tuple(g.shape)}, expected {tuple(w.shape)}")
        if w.is_contiguous() and not g.is_contiguous():
            # is_contiguous ignores the strides of size-1 dims, which carry no layout
            return Comparison(False, f"{name}: strides {g.stride()}, expected contiguous {w.stride()}")
        w64 = ref64[i] if ref64 is not None and i < len(ref64) and isinstance(ref64[i], torch.Tensor) else None
        c = _compare_values(g, w, atol, rtol, name, max_mismatch_fraction, w64, margin)
        if not c.ok:
            return c
        worst.max_abs_err = max(worst.max_abs_err, c.max_abs_err)
        worst.max_rel_err = max(worst.max_rel_err, c.max_rel_err)
        worst.max_norm_err = max(worst.max_norm_err, c.max_norm_err)
        worst.mismatch_fraction = max(worst.mismatch_fraction, c.mismatch_fraction)
        worst.details += c.details
    return worst


# -- rows --------------------------------------------------------------------------------------------------

def _rows(t: Any) -> tuple[Any, str]:
    """A 2-D view whose rows are judged one by one, and how to name them."""
    if t.dim() >= 2 and t.shape[-1] >= MIN_ROW:
        lead = tuple(t.shape[:-1])
        what = "rows" if len(lead) == 1 else f"rows (flattened over the leading dims {lead})"
        return t.reshape(-1, t.shape[-1]), what
    flat = t.reshape(-1)
    n = flat.numel() // TILE * TILE
    if n == 0:
        return flat.reshape(1, -1), "elements"
    return flat[:n].reshape(-1, TILE), f"tiles of {TILE} elements"


def _ranges(idx: list[int], limit: int = 8, more: bool = False) -> str:
    """[0,1,2,5,7,8] -> '0-2, 5, 7-8'; `more` says `idx` was cut short."""
    out: list[str] = []
    start = prev = None
    for i in idx:
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            out.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = i
    if start is not None:
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
    if len(out) > limit:
        return ", ".join(out[:limit]) + (", ..." if more else f", ... ({len(out) - limit} more ranges)")
    return ", ".join(out) + (", ..." if more else "")


class _RowSet:
    """Row (or tile) indices gathered slice by slice: an exact count, the first KEEP indices for the reason."""
    KEEP = 4096

    def __init__(self) -> None:
        self.count, self.idx = 0, []

    def add(self, mask: Any, offset: int) -> None:
        import torch
        k = int(mask.sum())
        if k:
            self.count += k
            if len(self.idx) < self.KEEP:
                self.idx += [offset + i for i in torch.nonzero(mask).reshape(-1)[: self.KEEP].tolist()]

    def describe(self, total: int, what: str) -> tuple[str, list[int]]:
        more = self.count > len(self.idx)
        return f"{self.count} of {total} {what}: {_ranges(self.idx, more=more)}", self.idx[:64]


def _row_of(flat_index: int, t: Any) -> str:
    if t.dim() >= 2 and t.shape[-1] >= MIN_ROW:
        return f"row {flat_index // t.shape[-1]}"
    return f"tile {flat_index // TILE}"


# -- values ------------------------------------------------------------------------------------------------
# Outputs are judged slice by slice (about SLICE elements, whole rows each), in float64 within a slice: a
# task's output can be GBs, and the float64 temporaries of a whole-output comparison would be ten times that.
SLICE = 1 << 23


def _slices(g: Any, w: Any) -> tuple[list[tuple[int, int, Any, Any]], int, str]:
    """(first row, first flat index, got rows, reference rows) per slice, the number of rows, their name.

    The flattened tail beyond a vector's last whole tile is judged with that tile (one longer row): a few
    elements on their own would make a row too short for the row rules to mean anything."""
    gr, what = _rows(g)
    wr, _ = _rows(w)
    width = max(int(gr.shape[1]), 1)
    rows = int(gr.shape[0])
    covered = int(gr.numel())
    tail = covered < g.numel()   # a vector's elements beyond its last whole tile: they join that tile
    whole = rows - 1 if tail else rows
    step = max(1, SLICE // width)
    out = [(i, i * width, gr[i:min(i + step, whole)], wr[i:min(i + step, whole)]) for i in range(0, whole, step)]
    if tail:
        start = whole * width
        out.append((whole, start, g.reshape(-1)[start:].reshape(1, -1), w.reshape(-1)[start:].reshape(1, -1)))
    return out, rows, what


_NONFINITE = (("NaN", "isnan"), ("+Inf", "isposinf"), ("-Inf", "isneginf"))


@dataclass
class _Tally:
    """Whole-output figures accumulated over the slices."""
    extra: dict[str, _RowSet] = field(default_factory=lambda: {k: _RowSet() for k, _ in _NONFINITE})
    missing: dict[str, _RowSet] = field(default_factory=lambda: {k: _RowSet() for k, _ in _NONFINITE})
    n_extra: dict[str, int] = field(default_factory=lambda: {k: 0 for k, _ in _NONFINITE})
    n_missing: dict[str, int] = field(default_factory=lambda: {k: 0 for k, _ in _NONFINITE})
    any_finite: bool = False
    got_any: bool = False
    ref_any: bool = False
    ref_absmax: float = 0.0
    max_abs: float = 0.0
    max_rel: float = 0.0
    sq_ref: float = 0.0
    sq_diff: float = 0.0
    n_bad: int = 0
    first_bad: tuple[int, float, float] | None = None   # flat index, got, expected
    bad_rows: _RowSet = field(default_factory=_RowSet)
    zero_passes: int = 0
    nonzero: int = 0


def _finite_parts(gs: Any, ws: Any) -> tuple[Any, Any, Any]:
    import torch
    finite = torch.isfinite(ws)
    zero = torch.zeros((), dtype=torch.float64, device=ws.device)
    return finite, torch.where(finite, gs, zero), torch.where(finite, ws, zero)


def _tally(slices: list[tuple[int, int, Any, Any]], atol: float, rtol: float) -> _Tally:
    import torch
    t = _Tally()
    for row0, flat0, g_s, w_s in slices:
        if not w_s.numel():
            continue
        gs, ws = g_s.double(), w_s.double()
        for label, fn in _NONFINITE:
            tg, tw = getattr(torch, fn)(gs), getattr(torch, fn)(ws)
            extra, missing = tg & ~tw, tw & ~tg
            t.n_extra[label] += int(extra.sum())
            t.n_missing[label] += int(missing.sum())
            t.extra[label].add(extra.any(dim=1), row0)
            t.missing[label].add(missing.any(dim=1), row0)
            del tg, tw, extra, missing
        finite, gf, wf = _finite_parts(gs, ws)
        del gs
        t.any_finite |= bool(finite.any())
        t.got_any |= bool(gf.any())
        t.ref_any |= bool(wf.any())
        aw = wf.abs()
        t.ref_absmax = max(t.ref_absmax, float(aw.max()))
        diff = (gf - wf).abs()
        allowed = atol + rtol * aw
        bad = (diff > allowed) & finite
        t.max_abs = max(t.max_abs, float(diff.max()))
        t.max_rel = max(t.max_rel, float(torch.where(finite, diff / aw.clamp_min(1e-30), 0.0).max()))
        t.sq_ref += float((wf * wf).sum())
        t.sq_diff += float((diff * diff).sum())
        k = int(bad.sum())
        if k and t.first_bad is None:
            local = int(torch.nonzero(bad.reshape(-1))[0])
            t.first_bad = (flat0 + local, float(g_s.reshape(-1)[local]), float(ws.reshape(-1)[local]))
        t.n_bad += k
        t.bad_rows.add(bad.any(dim=1), row0)
        nonzero = finite & (wf != 0)
        t.nonzero += int(nonzero.sum())
        t.zero_passes += int(((aw <= allowed) & nonzero).sum())
    return t


def _row_faults(slices: list[tuple[int, int, Any, Any]], atol: float, rtol: float, out_rms: float, tiny: float,
                tau: float) -> tuple[_RowSet, _RowSet, float]:
    """Rows entirely zero where the reference's are not; rows wrong under a tolerance that cannot judge them
    (and the worst normalised error among those)."""
    import torch
    zero_rows, wrong_rows, worst = _RowSet(), _RowSet(), 0.0
    for row0, _, g_s, w_s in slices:
        if not w_s.numel():
            continue
        finite, gf, wf = _finite_parts(g_s.double(), w_s.double())
        aw = wf.abs()
        allowed = atol + rtol * aw
        bad = ((gf - wf).abs() > allowed) & finite
        ref_max = aw.amax(dim=1)
        significant = (torch.sqrt((wf * wf).mean(dim=1)) >= SIGNIFICANT_ROW * out_rms) & (ref_max > tiny)
        zero_rows.add((gf == 0).all(dim=1) & (ref_max > tiny) & (significant | bad.any(dim=1)), row0)
        nonzero = finite & (wf != 0)
        row_vacuous = ((aw <= allowed) & nonzero).sum(dim=1) >= VACUOUS_FRACTION * nonzero.sum(dim=1).clamp_min(1)
        row_err = torch.sqrt(((gf - wf) ** 2).sum(dim=1)) / torch.sqrt((wf * wf).sum(dim=1)).clamp_min(1e-300)
        wrong = row_vacuous & significant & (row_err > tau) & nonzero.any(dim=1)
        if bool(wrong.any()):
            worst = max(worst, float(row_err[wrong].max()))
        wrong_rows.add(wrong, row0)
    return zero_rows, wrong_rows, worst


def _compare_values(g: Any, w: Any, atol: float, rtol: float, name: str, max_mismatch_fraction: float = 0.0,
                    w64: Any = None, margin: float = REF_ERROR_MARGIN) -> Comparison:
    import torch

    n = max(w.numel(), 1)
    if not w.is_floating_point():
        bad = (g != w)
        n_bad = int(bad.sum())
        if n_bad:
            rows, what = _rows(bad)
            found = _RowSet()
            found.add(rows.any(dim=1), 0)
            desc, idx = found.describe(int(rows.shape[0]), what)
            return Comparison(False, f"{name}: {n_bad} of {w.numel()} integer elements differ, in {desc}",
                              mismatch_fraction=n_bad / n, rows=idx)
        return Comparison(True)
    slices, n_rows, what = _slices(g, w)
    t = _tally(slices, atol, rtol)

    # 1. non-finite values exactly where the reference has them
    for label, _ in _NONFINITE:
        if t.n_extra[label]:
            desc, idx = t.extra[label].describe(n_rows, what)
            k = t.n_extra[label]
            return Comparison(False, f"{name}: {k} {label} value(s) where the reference has none (unwritten or "
                                     f"uninitialised output memory, or overflow), in {desc}",
                              mismatch_fraction=k / n, rows=idx)
        if t.n_missing[label]:
            desc, idx = t.missing[label].describe(n_rows, what)
            k = t.n_missing[label]
            return Comparison(False, f"{name}: {k} element(s) where the reference is {label} and the output is "
                                     f"not (a {label} hidden or never computed), in {desc}",
                              mismatch_fraction=k / n, rows=idx)
    if not t.any_finite:
        return Comparison(True)   # every value is non-finite, and they all match

    # the whole output zero where the reference is not
    if not t.got_any and t.ref_any:
        return Comparison(False, f"{name}: every element is 0 where the reference is not: unwritten or "
                                 "uninitialised output memory, or a kernel that never ran",
                          max_abs_err=t.ref_absmax, mismatch_fraction=1.0)

    max_abs, max_rel, n_bad = t.max_abs, t.max_rel, t.n_bad
    ref_norm = math.sqrt(t.sq_ref)
    norm_err = math.sqrt(t.sq_diff) / ref_norm if ref_norm > 0 else (0.0 if max_abs == 0 else float("inf"))
    tau = normalised_tolerance(rtol, w.dtype)
    zero_rows, wrong_rows, worst_row = _row_faults(slices, atol, rtol, math.sqrt(t.sq_ref / n),
                                                   torch.finfo(w.dtype).tiny * 1e3, tau)

    # 2. rows: named when entirely zero where the reference's are not
    if zero_rows.count:
        desc, idx = zero_rows.describe(n_rows, what)
        return Comparison(False, f"{name}: {desc} are entirely 0 where the reference's are not (unwritten or "
                                 "skipped rows)", max_abs_err=max_abs, max_rel_err=max_rel, max_norm_err=norm_err,
                          mismatch_fraction=n_bad / n, rows=idx)

    # 3. element-wise, within the task's mismatch budget
    details: list[str] = []
    if n_bad and n_bad <= max_mismatch_fraction * w.numel():
        details.append(f"{name}: {n_bad} element(s) outside tolerance, within the task's mismatch budget of "
                       f"{max_mismatch_fraction:g}")
    elif n_bad:
        assert t.first_bad is not None
        first, got_v, want_v = t.first_bad
        index = tuple(int(x) for x in torch.unravel_index(torch.tensor(first), w.shape)) if w.dim() else ()
        desc, idx = t.bad_rows.describe(n_rows, what)
        return Comparison(
            False,
            f"{name}: {n_bad} of {w.numel()} elements outside atol={atol:g} rtol={rtol:g}; max abs err {max_abs:.3g}, "
            f"first at {list(index)}: got {got_v:.6g}, expected {want_v:.6g}; in {desc}",
            max_abs_err=max_abs, max_rel_err=max_rel, mismatch_fraction=n_bad / n, max_norm_err=norm_err, rows=idx)

    # 4. normalised error where the element-wise tolerance cannot judge: zero itself would pass it for most
    # of the reference's nonzero values (exact zeros, as after a ReLU, say nothing about the tolerance)
    if wrong_rows.count:
        desc, idx = wrong_rows.describe(n_rows, what)
        return Comparison(False, f"{name}: {desc} have a normalised error above {tau:.3g} (worst "
                                 f"{worst_row:.3g}) under a tolerance that cannot judge them "
                                 f"(atol={atol:g} exceeds most of their values)", max_abs_err=max_abs,
                          max_rel_err=max_rel, max_norm_err=norm_err, mismatch_fraction=n_bad / n, rows=idx)
    vacuous = t.zero_passes / max(t.nonzero, 1)
    if vacuous >= VACUOUS_FRACTION and ref_norm > 0 and norm_err > tau:
        return Comparison(False, f"{name}: normalised error ||got - ref|| / ||ref|| = {norm_err:.3g} exceeds "
                                 f"{tau:.3g}; atol={atol:g} is larger than {vacuous:.0%} of the reference's values, so "
                                 "the element-wise check cannot judge this output", max_abs_err=max_abs,
                          max_rel_err=max_rel, max_norm_err=norm_err, mismatch_fraction=n_bad / n)

    # 5. against float64: within a margin of the eager reference's own error
    if w64 is not None and tuple(w64.shape) == tuple(w.shape):
        e = reference_error(w, w64)
        r64 = w64.double()
        keep = torch.isfinite(r64)
        den = float(torch.linalg.vector_norm(r64[keep]))
        if den > 0:
            cand = float(torch.linalg.vector_norm((g.double() - r64)[keep])) / den
            allowance = max(margin * e, 8 * torch.finfo(w.dtype).eps)
            if cand > allowance:
                return Comparison(False, f"{name}: normalised error against the float64 reference {cand:.3g} exceeds "
                                         f"{margin:g} x the eager reference's own ({e:.3g})", max_abs_err=max_abs,
                                  max_rel_err=max_rel, max_norm_err=norm_err, mismatch_fraction=n_bad / n)
    return Comparison(True, max_abs_err=max_abs, max_rel_err=max_rel, mismatch_fraction=n_bad / n,
                      details=details, max_norm_err=norm_err)


def reference_error(ref: Any, ref64: Any) -> float:
    """||ref - ref64|| / ||ref64|| over the finite elements: the task dtype's own error on this output."""
    import torch
    r, r64 = ref.double(), ref64.double()
    keep = torch.isfinite(r64) & torch.isfinite(r)
    den = float(torch.linalg.vector_norm(r64[keep]))
    return float(torch.linalg.vector_norm((r - r64)[keep])) / den if den > 0 else 0.0


def vacuous_fraction(ref: Any, atol: float, rtol: float) -> float:
    """Fraction of the reference's finite nonzero elements for which 0 is within atol + rtol * |ref|."""
    import torch
    r = ref.double()
    keep = torch.isfinite(r) & (r != 0)
    if not bool(keep.any()):
        return 0.0
    v = r[keep].abs()
    return float((v <= atol + rtol * v).double().mean())
