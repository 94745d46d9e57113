"""NumPy implementations of the element-wise semantics NumPy does not give directly: C integer
division and remainder, C ``round``, shifts with a defined amount range, ``erf`` / GELU, bit
counts, and the conversions of ``popops.cast``.

Every function is vectorised (no Python loop per element) and takes arrays in the type the
operation runs in (float32 for half data: see ``ops.py``).
"""

from __future__ import annotations

import numpy as np

from tremula.poplar.types import Type

_SQRT_2_OVER_PI = np.float32(np.sqrt(2.0 / np.pi))
_TWO_OVER_SQRT_PI = 2.0 / np.sqrt(np.pi)


def c_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a / b``: true division for floats; for integers C's quotient, truncated toward zero
    (``-7 / 2 == -3``). Integer division by zero gives 0 and ``INT_MIN / -1`` wraps to
    ``INT_MIN`` (C leaves both undefined)."""
    if np.result_type(a, b).kind == "f":
        return np.divide(a, b)
    b_safe = np.where(b == 0, 1, b)
    with np.errstate(over="ignore"):
        q = (a - np.fmod(a, b_safe)) // b_safe
    return np.where(b == 0, 0, q).astype(np.result_type(a, b), copy=False)


def c_rem(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a % b`` with the sign of the dividend (C ``%`` and ``fmod``); integer remainder by
    zero gives 0."""
    if np.result_type(a, b).kind == "f":
        return np.fmod(a, b)
    return np.where(b == 0, 0, np.fmod(a, np.where(b == 0, 1, b))).astype(
        np.result_type(a, b), copy=False
    )


def c_round(x: np.ndarray) -> np.ndarray:
    """C ``round``: halves away from zero (``round(2.5) == 3``, ``round(-0.5) == -1``)."""
    t = np.trunc(x)
    return t + np.where(np.abs(x - t) >= 0.5, np.sign(x), 0).astype(x.dtype, copy=False)


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


def int_sqrt(a: np.ndarray) -> np.ndarray:
    """Integer square root, truncated (``isqrt``); negative inputs give 0."""
    a0 = np.maximum(a, 0)
    r = np.floor(np.sqrt(a0.astype(np.float64)))
    if a.dtype.itemsize < 8:  # float64 holds a exactly: floor(sqrt) is exact
        return r.astype(a.dtype)
    # 64-bit: a was rounded to float64; fix r by one either way in exact uint64 arithmetic
    u = a0.astype(np.uint64)
    r = np.minimum(r, 2**32 - 1).astype(np.uint64)
    r -= (r * r > u).astype(np.uint64)
    up = (r < 2**32 - 1) & ((r + 1) * (r + 1) <= u)
    return (r + up.astype(np.uint64)).astype(a.dtype)


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


def sigmoid(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-x))`` without overflow and with relative accuracy in both tails:
    with ``e = exp(-|x|)``, ``1 / (1 + e)`` for ``x >= 0`` and ``e / (1 + e)`` below."""
    e = np.exp(-np.abs(x))
    one = x.dtype.type(1)
    return np.where(x >= 0, one, e) / (one + e)


# ---- conversions (popops.cast) ----


def _int_bounds(dtype: np.dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _float_to_int(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Truncate toward zero; NaN gives 0; out-of-range values (and infinities) saturate to
    the type's minimum or maximum."""
    lo, hi = _int_bounds(dtype)
    f = np.trunc(np.asarray(values, dtype=np.float64))
    f = np.where(np.isnan(f), 0.0, f)
    too_high = f >= float(hi)  # float(hi) may round up (2**63): decide on the float side
    too_low = f <= float(lo)
    safe = np.where(too_high | too_low, 0.0, f).astype(dtype)
    return np.where(too_high, hi, np.where(too_low, lo, safe)).astype(dtype, copy=False)


def convert(values: np.ndarray, dst: Type) -> np.ndarray:
    """``values`` converted to ``dst`` with ``popops.cast``'s rules:

    * to bool: non-zero (and NaN) is true;
    * float or half to an integer type: truncation toward zero (C); NaN gives 0 and
      out-of-range values saturate to the type's limits (C leaves them undefined);
    * integer to a narrower integer type: wraps modulo 2^bits (two's complement);
    * to half or float: round to nearest even; beyond the range gives +-inf;
    * bool to a number: 0 or 1.
    """
    out = dst.numpy
    values = np.asarray(values)
    if values.dtype == out:
        return values
    with np.errstate(all="ignore"):
        if out == np.bool_:
            return values != 0
        if out.kind in "iu" and values.dtype.kind == "f":
            return _float_to_int(values, out)
        return values.astype(out)
