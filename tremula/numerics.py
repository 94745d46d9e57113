"""Tremula's numeric rules, each defined once: integer division and remainder, rounding,
conversions with saturation, half arithmetic and the NaN rules of comparisons.

Every layer that computes takes these rules from here: popops' codelets (the device), the
NumPy references of PopXL's ops (the host-side evaluation tests compare with) and PopART's
folding of constant sub-graphs (``tremula/popart/rules``). A host result therefore equals
the device's bit for bit where the rule is exact. The module imports NumPy only and sits
below every other layer (``tests/test_layering.py``).

Integer arithmetic is C's (two's complement, wrapping on overflow), and the cases C leaves
undefined are given the values the device gives:

=========================  =====================================================
``a / 0`` (integers)       0
``a % 0``, ``fmod(a, 0)``  0
``INT_MIN / -1``           ``INT_MIN`` (the true quotient ``-INT_MIN`` wraps)
``INT_MIN % -1``           0
float to integer           truncation toward zero; NaN gives 0; out of range
                           (infinities included) saturates to the type's limits
integer narrowing          wraps modulo ``2^bits``
=========================  =====================================================

These are the results of popops' ``BinaryOp1D<DIVIDE,int>`` / ``<REMAINDER,int>`` and
``Cast1D`` codelets (``tremula/libs/popops/ops.py``, "Semantics"): the IPU has no integer
divide instruction, the codelet divides in software and returns 0 for a zero divisor
instead of trapping. The engine option ``debug.checkIntegerDivision`` turns a zero divisor
into an error naming the op (``tremula/engine/options.py``).

Floating point is IEEE 754 without exceptions: ``1 / 0`` is ``inf``, ``0 / 0`` NaN, and no
operation raises or warns. Comparisons with NaN are false except ``!=``.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "HALF_COMPUTE",
    "as_caller",
    "compute_dtype",
    "convert",
    "divide",
    "float_to_int",
    "floor_mod",
    "in_compute_type",
    "int_divide",
    "int_sqrt",
    "quiet",
    "quietly",
    "remainder",
    "round_half_away",
    "round_half_even",
    "sign",
]

#: inside :func:`quietly`: the error state of its caller (NumPy's ``np.geterr()``); None
#: outside (each device computation then sets ``np.errstate(all="ignore")`` itself)
_CALLER_ERRORS: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "tremula_caller_errors", default=None
)


class quietly:  # (named as the function it replaces: ``with quietly():``)
    """A scope of device computations (an engine run): floating-point errors neither raise
    nor warn (``np.errstate(all="ignore")``, the device's IEEE rules), set once for the
    scope, so that the functions :func:`quiet` made skip setting it per call. Code of the
    user's called from inside (host callbacks) runs through :func:`as_caller`. (A class,
    not a generator: every engine run enters one.)"""

    __slots__ = ("_state", "_token")

    def __enter__(self) -> None:
        if _CALLER_ERRORS.get() is not None:  # already quiet (a nested run)
            self._token = None
            return
        state = np.errstate(all="ignore")
        self._token = _CALLER_ERRORS.set(np.geterr())
        try:
            state.__enter__()
        except BaseException:
            _CALLER_ERRORS.reset(self._token)
            raise
        self._state = state

    def __exit__(self, *exc: Any) -> None:
        token = self._token
        if token is None:
            return
        try:
            self._state.__exit__(*exc)
        finally:
            _CALLER_ERRORS.reset(token)


def quiet(run: Callable[[], None]) -> Callable[[], None]:
    """``run`` (a device computation without arguments) under ``np.errstate(all="ignore")``:
    set by the call, or already set by an enclosing :func:`quietly`."""

    def guarded() -> None:
        if _CALLER_ERRORS.get() is not None:
            run()
            return
        with np.errstate(all="ignore"):
            run()

    guarded.unguarded = run  # type: ignore[attr-defined]  # see unguarded()
    return guarded


def unguarded(step: Callable[[], None] | None) -> Callable[[], None] | None:
    """The computation a :func:`quiet` call guards, for a caller that always runs it inside
    :func:`quietly` (the engine's replayed plan: one test of the error state per run, not
    per compute set); any other call as it is."""
    return getattr(step, "unguarded", step)


def as_caller(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` under the error state of the code that entered :func:`quietly` (for
    the user's callbacks made from inside a device computation); a plain call outside."""
    saved = _CALLER_ERRORS.get()
    if saved is None:
        return fn(*args)
    token = _CALLER_ERRORS.set(None)
    try:
        with np.errstate(**saved):
            return fn(*args)
    finally:
        _CALLER_ERRORS.reset(token)


#: half (float16) arithmetic is computed in this type and rounded to half after every op
#: (as the IPU's mixed-precision units do), so fusing ops never changes a result
HALF_COMPUTE = np.dtype(np.float32)


def _is_int(a: Any, b: Any) -> bool:
    return bool(np.result_type(a, b).kind in "iu")


def int_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C's integer quotient ``a / b``, truncated toward zero (``-7 / 2 == -3``), on
    integer arrays (broadcast together).

    By zero the quotient is 0, and ``INT_MIN / -1`` wraps to ``INT_MIN``: the results of
    popops' integer ``DIVIDE`` codelet (C leaves both undefined; see the module docstring).
    Exact for every width (no detour through float64, which would round 64-bit operands).
    """
    out = np.result_type(a, b)
    b_safe = np.where(b == 0, 1, b)
    with np.errstate(all="ignore"):
        q = (a - np.fmod(a, b_safe)) // b_safe  # an exact multiple: floor == truncation
    return np.where(b == 0, 0, q).astype(out, copy=False)


def divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a / b``: IEEE true division for floats (``1 / 0`` is ``inf``, silently), C's
    truncating :func:`int_divide` for integers."""
    if _is_int(a, b):
        return int_divide(a, b)
    with np.errstate(all="ignore"):
        return np.divide(a, b)


def remainder(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C's ``%`` and ``fmod``: ``a - b * trunc(a / b)``, with the sign of the dividend.

    Integer remainder by zero is 0 (popops' integer ``REMAINDER`` codelet; C leaves it
    undefined) and ``INT_MIN % -1`` is 0. Floats: ``fmod(x, 0)`` is NaN, silently."""
    with np.errstate(all="ignore"):
        if not _is_int(a, b):
            return np.fmod(a, b)
        r = np.fmod(a, np.where(b == 0, 1, b))
    return np.where(b == 0, 0, r).astype(np.result_type(a, b), copy=False)


def floor_mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Python's ``a % b`` (the sign of the divisor; ONNX ``Mod`` with ``fmod=0``): the C
    remainder, plus ``b`` where it is not 0 and its sign differs from ``b``'s. Integer
    modulo by zero is 0, as :func:`remainder`'s; a float NaN remainder stays NaN."""
    r = remainder(a, b)
    with np.errstate(all="ignore"):
        differ = (r != 0) & ((r < 0) != (b < 0))
        return np.where(differ, r + b, r).astype(r.dtype, copy=False)


def round_half_away(x: np.ndarray) -> np.ndarray:
    """C ``round``: halves away from zero (``round(2.5) == 3``, ``round(-0.5) == -1``);
    popops' ``ROUND``."""
    t = np.trunc(x)
    return t + np.where(np.abs(x - t) >= 0.5, np.sign(x), 0).astype(x.dtype, copy=False)


#: Round to nearest, halves to even (``nearbyint`` in the default rounding mode): popops'
#: ``NEARBY_INT`` and ONNX ``Round`` (a ufunc: it takes ``out=``)
round_half_even: np.ufunc = np.rint


def sign(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """-1, 0 or 1 by the sign of ``x``, and 0 for NaN: popops' ``SIGNUM`` is
    ``(0 < x) - (x < 0)``, both false for NaN (PopXL's ``ops.sign`` and ``torch.sign``
    agree; ``np.sign`` gives NaN). Takes ``out=``, which may be ``x``."""
    r = np.sign(x, out=out)
    if r.dtype.kind != "f":
        return r
    if not isinstance(r, np.ndarray):  # a 0-d operand without ``out``: a NumPy scalar
        return r.dtype.type(0) if np.isnan(r) else r
    np.copyto(r, 0, where=np.isnan(r))
    return r


def int_sqrt(a: np.ndarray) -> np.ndarray:
    """Integer square root, truncated (``isqrt``); negative inputs give 0 (popops'
    ``SQRT`` on integers)."""
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


# ---- conversions ----


def float_to_int(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Float values as integers of ``dtype``: truncation toward zero; NaN gives 0;
    out-of-range values (and infinities) saturate to the type's minimum or maximum."""
    dtype = np.dtype(dtype)
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    f = np.trunc(np.asarray(values, dtype=np.float64))
    f = np.where(np.isnan(f), 0.0, f)
    too_high = f >= float(hi)  # float(hi) may round up (2**63): decide on the float side
    too_low = f <= float(lo)
    safe = np.where(too_high | too_low, 0.0, f).astype(dtype)
    return np.where(too_high, hi, np.where(too_low, lo, safe)).astype(dtype, copy=False)


def convert(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``values`` converted to ``dtype`` (popops' ``cast``):

    * to bool: non-zero (and NaN) is true;
    * float to an integer type: :func:`float_to_int` (truncation, NaN 0, saturation);
    * integer to a narrower integer type: wraps modulo ``2^bits`` (two's complement);
    * to half or float: round to nearest even; beyond the range gives +-inf;
    * bool to a number: 0 or 1.

    Returns ``values`` itself when it already has ``dtype``.
    """
    out = np.dtype(dtype)
    values = np.asarray(values)
    if values.dtype == out:
        return values
    with np.errstate(all="ignore"):
        if out == np.bool_:
            return values != 0
        if out.kind in "iu" and values.dtype.kind == "f":
            return float_to_int(values, out)
        return values.astype(out)


# ---- half ----


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """The type arithmetic on ``dtype`` is computed in: float32 for half, else itself."""
    dtype = np.dtype(dtype)
    return HALF_COMPUTE if dtype == np.float16 else dtype


def in_compute_type(fn: Callable[..., Any], *args: np.ndarray) -> np.ndarray:
    """``fn(*args)`` with half operands computed in float32 and the result rounded back to
    half once (to nearest even); other types as they are. Floating-point warnings are
    silenced (the device raises none)."""
    arrays = [np.asarray(a) for a in args]
    half = any(a.dtype == np.float16 for a in arrays)
    if half:
        arrays = [a.astype(HALF_COMPUTE) if a.dtype == np.float16 else a for a in arrays]
    with np.errstate(all="ignore"):
        out = np.asarray(fn(*arrays))
    if half and out.dtype == HALF_COMPUTE:
        return out.astype(np.float16)
    return out
