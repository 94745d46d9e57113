"""popxl-addons' ``Fp8Scale`` custom op (``fp8_mse_scale_impl``, a PopART
``ParameterizedOp`` whose binding class is ``Fp8FindBestScaleOp``), served in Python: the
float8 scaling bias that minimises the mean squared error of a histogram of the input, as
its C++ opx computes it.

``Fp8Scale(src)``, parameters ``min_fp32_exp_index`` (m), ``format_span`` (w) and
``quantisation_error`` (q) (``Fp8ScalingBiasParams``); output an int32 scalar. With
``N`` the number of elements of ``src`` (float16 or float32):

1. levels ``l[k] = 2^(k - 126)``, ``k = 0 .. 253`` (float32; cast to ``src``'s type for
   the histogram, half rounding 2^-25 and below to 0 and 2^16 and above to inf);
   ``h[c]`` for ``c = 1 .. 253``: the fraction of elements with ``l[c] <= |x| < l[c+1]``
   (``c = 253``: ``|x| >= l[253]``, NaN included), as ``popops::histogram`` bins them;
   ``b[c] = l[c]`` as float32;
2. for each bias ``j = 0 .. 61`` (62 candidates), with ``u = m + j`` and ``o = m + w + j``,
   accumulated one bin at a time in float32, products left to right as the opx's
   expressions are written:
   ``mse[j] = sum_{c=1}^{u-1} h[c] b[c] b[c]`` (underflow)
   ``+ sum_{c=u}^{o-1} h[c] b[c] b[c] q`` (in range)
   ``+ sum_{c=o}^{253} h[c] (b[o-1] - b[c]) (b[o-1] - b[c])`` (overflow, against the
   largest in-range bin);
3. ``j*`` the first index of the smallest ``mse``, ``n`` how many equal it; the result is
   ``-(j* + floor(n / 2) - 31)`` (the middle of a run of ties, negated for PopART).

The opx's ``PrintTensor`` calls (debug prints of the MSEs, the tie count and the bias) are
not reproduced. Its loops start each candidate at counter 1 and slice the histogram at the
counter: ``m >= 1``, ``w >= 1`` and ``m + w + 61 <= 254`` keep every slice inside it
(popxl-addons' wrapper gives m = 85, w = 18 for float8_143 and 78, 33 for float8_152);
other parameters are refused when the op is created. Not differentiable (no
``getGradOps``). Lowering: ``fp8_mse_scale_lowering.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tremula.errors import OpSetupTypeError
from tremula.popxl import dtypes
from tremula.popxl.custom_ops._op_binding import OperatorIdentifier, parameterized_binding
from tremula.popxl.ops.base import defop
from tremula.popxl.tensor import TensorSpec

__all__ = ["Fp8FindBestScaleOp", "Fp8ScalingBiasParams", "best_scaling_bias"]

OP = "Fp8Scale"
OPID = OperatorIdentifier("popxl.addons.ops", OP, 1, (1, 1), 1)
#: candidate biases (the opx's ``Repeat(62, ...)``) and the largest bias
CANDIDATES = 62
MAX_BIAS = 31
#: histogram levels 2^-126 .. 2^127
FIRST_EXP = -126
LEVELS = 254


class Fp8ScalingBiasParams:
    """``Fp8ScalingBiasParams(min_fp32_exp_index, format_span, quantisation_error)``."""

    def __init__(self, min_fp32_exp_index: int, format_span: int, quantisation_error: float):
        self.min_fp32_exp_index = min_fp32_exp_index
        self.format_span = format_span
        self.quantisation_error = quantisation_error

    def __repr__(self) -> str:
        return (
            f"Fp8ScalingBiasParams(min_fp32_exp_index={self.min_fp32_exp_index}, "
            f"format_span={self.format_span}, quantisation_error={self.quantisation_error})"
        )


def _attrs(params: Any) -> dict[str, Any]:
    what = "Fp8FindBestScaleOp.create_op_in_graph"
    if not isinstance(params, Fp8ScalingBiasParams):
        raise TypeError(f"{what}: params must be Fp8ScalingBiasParams, got {type(params).__name__}")
    m, w = params.min_fp32_exp_index, params.format_span
    for name, v in (("min_fp32_exp_index", m), ("format_span", w)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{what}: {name} must be an int, got {v!r}")
    if m < 1 or w < 1 or m + w + CANDIDATES - 1 > LEVELS:
        raise ValueError(
            f"{what}: min_fp32_exp_index {m} and format_span {w} must be >= 1 with "
            f"min_fp32_exp_index + format_span + {CANDIDATES - 1} <= {LEVELS}, so that the "
            f"op's loops stay inside its {LEVELS}-bin histogram for all {CANDIDATES} biases"
        )
    q = float(np.float32(params.quantisation_error))
    return {"min_fp32_exp_index": int(m), "format_span": int(w), "quantisation_error": q}


def _infer(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    (src,) = specs
    if src.dtype not in (dtypes.float16, dtypes.float32):
        raise OpSetupTypeError(
            f"Fp8FindBestScaleOp: src must be float16 or float32, got {src.dtype}"
        )
    return [TensorSpec((), dtypes.int32)]


def histogram_fractions(src: np.ndarray) -> np.ndarray:
    """``h[0 .. 253]`` (``h[0]`` unused): step 1 of the module docstring, float32."""
    x = np.asarray(src).reshape(-1)
    levels = np.exp2(np.arange(FIRST_EXP, FIRST_EXP + LEVELS, dtype=np.float32))
    with np.errstate(over="ignore"):
        levels = levels.astype(x.dtype)  # half: round to nearest even, overflow to inf
    a = np.abs(x)
    bins = np.searchsorted(levels, np.where(np.isnan(a), np.inf, a), side="right")
    counts = np.bincount(bins, minlength=LEVELS + 1).astype(np.float32)
    return (counts / np.float32(x.size))[1:]


def mse_per_bias(src: np.ndarray, m: int, w: int, q: float) -> np.ndarray:
    """The 62 MSEs of step 2, accumulated in float32 in the opx's order."""
    h = histogram_fractions(src)
    b = np.exp2(np.arange(FIRST_EXP, FIRST_EXP + LEVELS, dtype=np.float32))
    qf = np.float32(q)
    out = np.zeros(CANDIDATES, np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for j in range(CANDIDATES):
            u, o = m + j, m + w + j
            acc = np.float32(0)
            for c in range(1, u):
                acc = acc + h[c] * b[c] * b[c]
            for c in range(u, o):
                acc = acc + h[c] * b[c] * b[c] * qf
            top = b[o - 1]
            for c in range(o, LEVELS):
                acc = acc + h[c] * (top - b[c]) * (top - b[c])
            out[j] = acc
    return out


def best_scaling_bias(src: np.ndarray, m: int, w: int, q: float) -> np.int32:
    """NumPy reference of ``Fp8Scale`` (module docstring)."""
    mse = mse_per_bias(src, m, w, q)
    first = int(np.argmin(mse))
    ties = int(np.sum(mse == mse[first]))
    return np.int32(-(first + ties // 2 - MAX_BIAS))


def _ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    m, w, q = a["min_fp32_exp_index"], a["format_span"], a["quantisation_error"]
    return [np.asarray(best_scaling_bias(x[0], m, w, q))]


defop(OP, _infer, _ref, differentiable=False)

Fp8FindBestScaleOp = parameterized_binding(
    "Fp8FindBestScaleOp", OPID, _attrs, "popxl-addons' ``Fp8FindBestScaleOp`` binding."
)
