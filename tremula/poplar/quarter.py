"""Poplar's QUARTER element type: Graphcore's two 8-bit float formats and the exact
conversions between them and wider floats, with a power-of-two scale (the host side of
Poplar's ``QuarterMetadata``; the device casts in ``popops.pow2scale_cast`` call the same
functions, so host and device agree bit for bit).

Formats (Graphcore's "8-bit numerical formats for deep neural networks", Noune et al.,
2022; the IPU's F143 / F152). A code is ``s eeee mmm`` (F143) or ``s eeeee mm`` (F152)::

    e > 0:  (-1)^s * 2^(e - bias) * (1 + m / 2^M)     normal numbers
    e = 0:  (-1)^s * 2^(1 - bias) * (m / 2^M)         subnormals (and zero)

=========  ====  ========  =====  ===========  ===========  =============
format     E, M  bias      max    min normal   min subnorm  NaN
=========  ====  ========  =====  ===========  ===========  =============
F143       4, 3  8         240    2^-7         2^-10        0x80 only
F152       5, 2  16        57344  2^-15        2^-17        0x80 only
=========  ====  ========  =====  ===========  ===========  =============

Every exponent field, the all-ones one included, holds normal numbers: there are no
infinities. The one code that is not a number is ``0x80``, the pattern of negative zero;
zero is ``0x00`` only, so ``-0.0`` and negative values that round to zero encode as
``0x00``.

Encoding (:func:`encode`) rounds ``x * 2^log2_scale``, computed exactly in float64, to
nearest with ties to even (subnormals included). Its magnitude overflows when it rounds
above the maximum (F143: ``|v| >= 248``, the midpoint between 240 and the next power of
two; F152: ``|v| >= 61440``); then, and for infinities, the code is NaN (``0x80``) when
``nan_on_overflow`` and the signed maximum (``0x7F`` / ``0xFF``) otherwise. NaN encodes as
NaN. Decoding (:func:`decode`) gives ``value(code) * 2^log2_scale`` rounded (once) to the
requested type; NaN decodes as NaN. Both directions *multiply* by ``2^log2_scale``: a round
trip uses opposite scales.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from tremula.errors import GraphError
from tremula.poplar.types import QUARTER_F143, QUARTER_F152, QuarterType, Type

NAN_CODE = 0x80
#: Poplar's QuarterMetadata holds the scale in 6 signed bits
LOG2_SCALE_MIN, LOG2_SCALE_MAX = -32, 31
_FAR = 2200  # beyond it a scale takes every non-zero float64 out of range either way


@dataclass(frozen=True)
class Float8Format:
    """One 8-bit float format: exponent bits, mantissa bits and exponent bias."""

    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int

    @property
    def max_exponent(self) -> int:
        return (1 << self.exponent_bits) - 1 - self.bias

    @property
    def min_exponent(self) -> int:
        """The exponent of the smallest normal number (subnormals share it)."""
        return 1 - self.bias

    @cached_property
    def table(self) -> np.ndarray:
        """``[256]`` float64: the value of every code (NaN at ``0x80``)."""
        codes = np.arange(256, dtype=np.int64)
        m_bits = self.mantissa_bits
        e = (codes >> m_bits) & ((1 << self.exponent_bits) - 1)
        m = codes & ((1 << m_bits) - 1)
        mag = np.where(
            e == 0,
            np.ldexp(m.astype(np.float64), self.min_exponent - m_bits),
            np.ldexp((m + (1 << m_bits)).astype(np.float64), e - self.bias - m_bits),
        )
        out = np.where(codes >> 7, -mag, mag)
        out[NAN_CODE] = np.nan
        out.flags.writeable = False
        return out

    @property
    def max_value(self) -> float:
        return float(self.table[0x7F])


F143 = Float8Format("F143", 4, 3, 8)
F152 = Float8Format("F152", 5, 2, 16)
_FORMATS = {QUARTER_F143: F143, QUARTER_F152: F152}


def format_of(dtype: Type) -> Float8Format:
    """The format of a QUARTER type (``GraphError`` for any other type)."""
    if not isinstance(dtype, QuarterType):
        raise GraphError(f"{dtype} is not a quarter type; expected one of {list(_FORMATS)}")
    return _FORMATS[dtype]


def _scales(log2_scale: Any) -> np.ndarray:
    return np.clip(np.asarray(log2_scale, dtype=np.int64), -_FAR, _FAR).astype(np.int32)


def encode(
    values: Any, fmt: Float8Format, log2_scale: Any = 0, nan_on_overflow: bool = True
) -> np.ndarray:
    """The uint8 codes of ``values * 2^log2_scale`` (``log2_scale`` and
    ``nan_on_overflow`` may be arrays broadcasting with ``values``); see the module
    docstring for rounding and overflow."""
    x = np.asarray(values, dtype=np.float64)
    m_bits = fmt.mantissa_bits
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        x = np.ldexp(x, _scales(log2_scale))
        a = np.abs(x)
        nan = np.isnan(x)
        finite = np.isfinite(x)
        _, e = np.frexp(np.where(finite, a, 0.0))  # a = f 2^e with f in [0.5, 1)
        exp = np.maximum(e.astype(np.int64) - 1, fmt.min_exponent)
        exp = np.where(finite & (a > 0), exp, fmt.min_exponent)  # zero: code 0
        big = exp > fmt.max_exponent
        exp = np.minimum(exp, fmt.max_exponent)
        kept = np.where(finite & ~big, a, 0.0)
        q = np.rint(np.ldexp(kept, (m_bits - exp).astype(np.int32))).astype(np.int64)
    # a carry out of the mantissa (q == 2^(M+1)) lands on the next exponent's code
    code = ((exp + fmt.bias - 1) << m_bits) + q
    over = (~finite & ~nan) | big | (code > 0x7F)
    negative = np.signbit(x)
    code = np.where(negative & (code != 0), code | 0x80, code)
    saturated = np.where(negative, 0xFF, 0x7F)
    code = np.where(over, np.where(nan_on_overflow, NAN_CODE, saturated), code)
    return np.where(nan, NAN_CODE, code).astype(np.uint8)


def decode(
    codes: Any, fmt: Float8Format, log2_scale: Any = 0, dtype: Any = np.float32
) -> np.ndarray:
    """``value(codes) * 2^log2_scale`` as ``dtype``, rounded once to nearest even (to
    infinity past the type's range)."""
    c = np.asarray(codes)
    if c.dtype != np.uint8:
        c = c.astype(np.uint8)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        return np.ldexp(fmt.table[c], _scales(log2_scale)).astype(dtype)
