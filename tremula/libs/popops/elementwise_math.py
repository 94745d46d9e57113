"""NumPy implementations of the element-wise semantics NumPy does not give directly: shifts
with a defined amount range, ``erf`` / GELU, bit counts, and the conversions of
``popops.cast``. Integer division, remainder, rounding and conversions are Tremula's shared
rules (:mod:`tremula.numerics`).

Every function is vectorised (no Python loop per element) and takes arrays in the type the
operation runs in (float32 for half data: see ``ops.py``).
"""

from __future__ import annotations

import numpy as np

from tremula import numerics
from tremula.poplar.types import Type

_SQRT_2_OVER_PI = np.float32(np.sqrt(2.0 / np.pi))
_TWO_OVER_SQRT_PI = 2.0 / np.sqrt(np.pi)


def shift_amount(b: np.ndarray, bits: int) -> np.ndarray:
    """Shift amounts are taken modulo the operand's bit width (the IPU's and x86's rule;
    C leaves larger or negative amounts undefined)."""
    return np.bitwise_and(b, bits - 1)


def shift_left(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.left_shift(a, shift_amount(b, 8 * a.dtype.itemsize).astype(a.dtype))


def shift_right(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Logical shift right (zeros in), for signed types too (PopLibs' SHIFT_RIGHT)."""
    unsigned = a.view(np.dtype(f"u{a.dtype.itemsize}"))
    amount = shift_amount(b, 8 * a.dtype.itemsize).astype(unsigned.dtype)
    return np.right_shift(unsigned, amount).view(a.dtype)


def shift_right_sign_extend(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Arithmetic shift right (copies of the sign bit in)."""
    return np.right_shift(a, shift_amount(b, 8 * a.dtype.itemsize).astype(a.dtype))


def count_leading_zeros(a: np.ndarray) -> np.ndarray:
    """Leading zero bits of each element in its own width (``clz(0)`` is the width)."""
    bits = 8 * a.dtype.itemsize
    x = a.view(np.dtype(f"u{a.dtype.itemsize}")).copy()
    shift = 1
    while shift < bits:  # smear the highest set bit down (log2(bits) steps)
        x |= x >> np.asarray(shift, dtype=x.dtype)
        shift *= 2
    return (bits - np.bitwise_count(x)).astype(a.dtype)


def popcount(a: np.ndarray) -> np.ndarray:
    return np.bitwise_count(a).astype(a.dtype)


def erfc(x: np.ndarray) -> np.ndarray:
    """Complementary error function with a fractional error below 1.2e-7 everywhere
    (Numerical Recipes' Chebyshev fit ``erfcc``), computed in float64."""
    x64 = np.asarray(x, dtype=np.float64)
    z = np.abs(x64)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = -1.26551223 + t * (
        1.00002368
        + t
        * (
            0.37409196
            + t
            * (
                0.09678418
                + t
                * (
                    -0.18628806
                    + t
                    * (
                        0.27886807
                        + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))
                    )
                )
            )
        )
    )
    ans = t * np.exp(-z * z + poly)
    return np.where(x64 >= 0, ans, 2.0 - ans)


def erf(x: np.ndarray) -> np.ndarray:
    """Error function: a Taylor series near 0 (relative accuracy where ``erf`` is small),
    ``1 - erfc`` elsewhere."""
    x64 = np.asarray(x, dtype=np.float64)
    x2 = x64 * x64
    series = np.zeros_like(x64)
    term = x64.copy()
    for n in range(12):  # |x| < 0.5: terms fall below 1e-17 of x
        series += term / (2 * n + 1)
        term = -term * x2 / (n + 1)
    far = np.sign(x64) * (1.0 - erfc(np.abs(x64)))
    out = np.where(np.abs(x64) < 0.5, _TWO_OVER_SQRT_PI * series, far)
    return out.astype(np.result_type(x, np.float32), copy=False)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation: ``0.5 x (1 + tanh(u))``, ``u = sqrt(2/pi) (x + 0.044715
    x^3)``, computed as ``x sigmoid(2u)`` (the same function, without the cancellation of
    ``1 + tanh(u)`` for negative ``x``)."""
    with np.errstate(over="ignore"):
        u = _SQRT_2_OVER_PI * (x + np.float32(0.044715) * x * x * x)
    return x * sigmoid(2 * u)


def gelu_erf(x: np.ndarray) -> np.ndarray:
    """GELU, exact form: ``x Phi(x) = 0.5 x erfc(-x / sqrt 2)``."""
    x64 = np.asarray(x, dtype=np.float64)
    out = 0.5 * x64 * erfc(-x64 / np.sqrt(2.0))
    return out.astype(np.result_type(x, np.float32), copy=False)


def sigmoid(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``1 / (1 + exp(-x))`` without overflow and with relative accuracy in both tails:
    with ``e = exp(-|x|)``, ``1 / (1 + e)`` for ``x >= 0`` and ``e / (1 + e)`` below.

    The numerator is ``max([x >= 0], e)``: 1 where ``x >= 0`` (``e <= 1``), ``e`` below
    and for NaN (``maximum`` returns the NaN operand), the same bits as selecting it, in
    two passes without a boolean mask; ``-|x|`` is one ``copysign``. With ``out`` (which
    may be ``x``) the quotient is written there."""
    a = np.asarray(x)
    if a.ndim == 0:  # a constant: through a one-element array
        r = sigmoid(a.reshape(1)).reshape(())
        if out is None:
            return r
        out[...] = r
        return out
    e = np.copysign(a, -1)  # -|x|, NaNs too: the sign bit set, the payload kept
    np.exp(e, out=e)
    w = np.greater_equal(a, 0, out=np.empty_like(e), casting="unsafe")  # 1.0 or 0.0
    np.maximum(w, e, out=w)
    np.add(e, e.dtype.type(1), out=e)
    return np.divide(w, e, out=w if out is None else out)


# ---- conversions (popops.cast) ----


def convert(values: np.ndarray, dst: Type) -> np.ndarray:
    """``values`` converted to ``dst`` with ``popops.cast``'s rules
    (:func:`tremula.numerics.convert`: to bool non-zero is true; float to integer truncates,
    NaN gives 0, out of range saturates; integer narrowing wraps; to float rounds to nearest
    even)."""
    return numerics.convert(values, dst.numpy)
