"""Philox4x32-10, the counter-based generator of Salmon et al. (Random123, SC'11), vectorised
over NumPy arrays, and the inverse normal CDF the truncated normal needs.

A Philox call maps a 128-bit counter and a 64-bit key to 128 random bits; the same
(counter, key) always gives the same bits, and distinct counters give independent-looking
outputs. Words are ``uint32``; a round's 32 x 32-bit products are formed in ``uint64`` and
read back as two ``uint32`` halves (views, no copies). The rounds run over pieces of
:data:`CHUNK` blocks so that their temporaries stay in cache.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

_M0 = np.uint64(0xD2511F53)
_M1 = np.uint64(0xCD9E8D57)
_W0 = np.uint64(0x9E3779B9)
_W1 = np.uint64(0xBB67AE85)
ROUNDS = 10
#: Blocks per piece of the rounds.
CHUNK = 1 << 14
_HI, _LO = (1, 0) if np.little_endian else (0, 1)


def _mulhilo(a: np.ndarray, m: np.uint64) -> tuple[np.ndarray, np.ndarray]:
    """High and low 32-bit words of ``a * m`` (views of one 64-bit product, no copies)."""
    product = np.multiply(a, m, dtype=np.uint64)
    halves = product.view(np.uint32).reshape(*product.shape, 2)
    return halves[..., _HI], halves[..., _LO]


def philox4x32(
    counter: Sequence[ArrayLike], key: Sequence[ArrayLike], rounds: int = ROUNDS
) -> np.ndarray:
    """Philox4x32 of ``counter`` (four words) under ``key`` (two words).

    Args:
        counter: four arrays of 32-bit values (any integer dtype), broadcast together.
        key: two arrays of 32-bit values, broadcast with the counter.
        rounds: number of rounds (10 is the standard, crush-resistant choice).

    Returns:
        A ``uint32`` array of the broadcast shape plus a last axis of the 4 output words.
    """
    ctr = [np.asarray(x).astype(np.uint32, copy=False) for x in counter]
    keys = [np.asarray(k).astype(np.uint64, copy=False) for k in key]
    full = np.broadcast_shapes(*(x.shape for x in ctr), *(k.shape for k in keys))
    shape = full or (1,)
    ctr = [np.broadcast_to(x, shape) for x in ctr]
    schedule = [  # the round keys, computed before broadcasting
        [
            np.broadcast_to(((k + r * w) & 0xFFFFFFFF).astype(np.uint32), shape)
            for r in range(rounds)
        ]
        for k, w in zip(keys, (_W0, _W1))
    ]
    out = np.empty((*shape, 4), dtype=np.uint32)
    n = shape[-1]
    step = max(1, CHUNK // max(1, int(np.prod(shape[:-1], dtype=np.int64))))
    for s in range(0, n, step):  # cache blocking: a few pieces, each vectorised
        part = (..., slice(s, s + step))
        keys_part = [[k[part] for k in ks] for ks in schedule]
        words = _rounds([x[part] for x in ctr], keys_part)
        for i, w in enumerate(words):
            at = (*part, i)
            out[at] = w
    return out.reshape(*full, 4)


def _rounds(c: list[np.ndarray], keys: list[list[np.ndarray]]) -> list[np.ndarray]:
    c0, c1, c2, c3 = c
    for k0, k1 in zip(*keys):
        hi0, lo0 = _mulhilo(c0, _M0)
        hi1, lo1 = _mulhilo(c2, _M1)
        c0 = np.bitwise_xor(hi1, c1)
        c0 ^= k0
        c2 = np.bitwise_xor(hi0, c3)
        c2 ^= k1
        c1, c3 = lo1, lo0
    return [c0, c1, c2, c3]


# Acklam's rational approximation of the inverse normal CDF (relative error < 1.2e-9).
_A = (
    -39.69683028665376,
    220.9460984245205,
    -275.9285104469687,
    138.3577518672690,
    -30.66479806614716,
    2.506628277459239,
)
_B = (
    -54.47609879822406,
    161.5858368580409,
    -155.6989798598866,
    66.80131188771972,
    -13.28068155288572,
)
_C = (
    -7.784894002430293e-03,
    -0.3223964580411365,
    -2.400758277161838,
    -2.549732539343734,
    4.374664141464968,
    2.938163982698783,
)
_D = (7.784695709041462e-03, 0.3224671290700398, 2.445134137142996, 3.754408661907416)
_P_LOW = 0.02425


def _poly(coeffs: tuple[float, ...], x: np.ndarray) -> np.ndarray:
    out = x * coeffs[0]
    out += coeffs[1]
    for c in coeffs[2:]:
        out *= x
        out += c
    return out


def ndtri_lower(p: np.ndarray) -> np.ndarray:
    """The standard normal quantile of ``p`` for ``0 < p <= 0.5`` (so the result is <= 0).

    Working in the lower half only keeps full relative precision in the far tail, where
    ``1 - p`` would round to 1. Runs over pieces of the flattened input (cache blocking).
    """
    p = np.ascontiguousarray(p, dtype=np.float64)
    out = np.empty_like(p)
    flat_p, flat_out = p.reshape(-1), out.reshape(-1)
    step = 4 * CHUNK
    for s in range(0, flat_p.size, step):
        _ndtri_piece(flat_p[s : s + step], flat_out[s : s + step])
    return out


def _ndtri_piece(p: np.ndarray, out: np.ndarray) -> None:
    c = p - 0.5
    r = c * c
    num = _poly(_A, r)
    num *= c
    den = _poly(_B, r)
    den *= r
    den += 1.0
    np.divide(num, den, out=out)
    tail = p < _P_LOW
    if tail.any():
        q = np.sqrt(-2.0 * np.log(p[tail]))
        den = _poly(_D, q)
        den *= q
        den += 1.0
        out[tail] = _poly(_C, q) / den
