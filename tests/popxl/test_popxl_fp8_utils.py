"""Host float8 numerics (``popxl.fp8_utils``, ``tremula.poplar.quarter``) against hand-computed
codes and an independent oracle: every code's value from its bit fields, and the nearest
value (ties to the even code) found by brute force."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import popxl
import popxl.fp8_utils as fp8
from popxl.fp8_utils import (
    host_fp8_mse_scale,
    host_fp8_mse_scale_pb,
    host_pow2scale_cast_from_fp8,
    host_pow2scale_cast_to_fp8,
)

F143, F152 = popxl.float8_143, popxl.float8_152
#: (exponent bits, mantissa bits, bias) of each format
FIELDS = {F143: (4, 3, 8), F152: (5, 2, 16)}


def oracle_values(dt: popxl.dtype) -> np.ndarray:
    """The value of each code 0..255 from its bit fields (NaN for 0x80)."""
    e_bits, m_bits, bias = FIELDS[dt]
    out = []
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        e = (code >> m_bits) & ((1 << e_bits) - 1)
        m = code & ((1 << m_bits) - 1)
        if e == 0:
            value = 2.0 ** (1 - bias) * m / 2**m_bits
        else:
            value = 2.0 ** (e - bias) * (1 + m / 2**m_bits)
        out.append(sign * value)
    out[0x80] = float("nan")
    return np.array(out)


def oracle_encode(x: np.ndarray, dt: popxl.dtype, nan_on_overflow: bool) -> np.ndarray:
    """Nearest code by brute force (ties to the code with an even mantissa); 0x00 for zero;
    overflow past the midpoint above the maximum."""
    values = oracle_values(dt)
    codes = np.array([c for c in range(256) if c not in (0x80,)])
    cand = values[codes]
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    dist = np.abs(cand[None, :] - x[:, None])
    best = dist.min(axis=1, keepdims=True)
    ties = dist == best
    # prefer an even code among the nearest; +0 over -0 (0x00 is the only zero)
    score = np.where(ties, (codes[None, :] & 1) * 2 + (codes[None, :] == 0x80), 99)
    pick = codes[np.argmin(score, axis=1)]
    pick = np.where(values[pick] == 0, 0, pick)
    top = values[0x7F]
    spacing = top - values[0x7E]
    over = np.abs(x) >= top + spacing / 2
    sat = np.where(x < 0, 0xFF, 0x7F)
    pick = np.where(over, 0x80 if nan_on_overflow else sat, pick)
    return np.where(np.isnan(x), 0x80, pick).astype(np.uint8)


def codes_of(arr: np.ndarray) -> np.ndarray:
    return np.asarray(arr).view(np.uint8)


# ---- hand-computed codes ----

HAND = [
    # (format, value, code with NaN on overflow, code when saturating)
    (F143, 1.0, 0x40, 0x40),
    (F143, -2.0, 0xC8, 0xC8),
    (F143, 0.5, 0x38, 0x38),
    (F143, 3.0, 0x4C, 0x4C),
    (F143, 240.0, 0x7F, 0x7F),  # max normal
    (F143, -240.0, 0xFF, 0xFF),
    (F143, 2.0**-7, 0x08, 0x08),  # min normal
    (F143, 2.0**-10, 0x01, 0x01),  # min subnormal
    (F143, 7 * 2.0**-10, 0x07, 0x07),  # max subnormal
    (F143, 1.0625, 0x40, 0x40),  # tie 1.0 / 1.125 -> even mantissa 0
    (F143, 1.1875, 0x42, 0x42),  # tie 1.125 / 1.25 -> even mantissa 2
    (F143, 2.0**-11, 0x00, 0x00),  # tie 0 / min subnormal -> 0
    (F143, 3 * 2.0**-11, 0x02, 0x02),  # tie 1 / 2 subnormal steps -> 2
    (F143, -1e-9, 0x00, 0x00),  # negative values rounding to zero: +0
    (F143, -0.0, 0x00, 0x00),
    (F143, 247.0, 0x7F, 0x7F),
    (F143, 248.0, 0x80, 0x7F),  # the midpoint to 256 overflows
    (F143, -1000.0, 0x80, 0xFF),
    (F143, float("inf"), 0x80, 0x7F),
    (F143, float("-inf"), 0x80, 0xFF),
    (F143, float("nan"), 0x80, 0x80),
    (F152, 1.0, 0x40, 0x40),
    (F152, -1.5, 0xC2, 0xC2),
    (F152, 57344.0, 0x7F, 0x7F),
    (F152, 2.0**-15, 0x04, 0x04),
    (F152, 2.0**-17, 0x01, 0x01),
    (F152, 61439.0, 0x7F, 0x7F),
    (F152, 61440.0, 0x80, 0x7F),
    (F152, float("-inf"), 0x80, 0xFF),
]


@pytest.mark.parametrize("dt,value,nan_code,sat_code", HAND)
def test_hand_computed_codes(dt, value, nan_code, sat_code):
    for flag, want in ((True, nan_code), (False, sat_code)):
        got = host_pow2scale_cast_to_fp8(np.array([value]), dt, 0, flag)
        assert got.dtype == dt.as_numpy()
        assert codes_of(got)[0] == want, (value, flag, hex(codes_of(got)[0]), hex(want))


@pytest.mark.parametrize("dt", [F143, F152])
def test_every_code_decodes_to_its_bit_field_value(dt):
    codes = np.arange(256, dtype=np.uint8)
    got = host_pow2scale_cast_from_fp8(codes, popxl.float64, src_dtype=dt)
    want = oracle_values(dt)
    np.testing.assert_array_equal(got, want)  # NaN at 0x80 on both sides
    # and every value encodes back to its code (0x80 is NaN)
    back = codes_of(host_pow2scale_cast_to_fp8(got, dt))
    np.testing.assert_array_equal(back, codes)


def test_format_constants():
    v143, v152 = oracle_values(F143), oracle_values(F152)
    assert np.nanmax(v143) == 240 and np.nanmin(v143[v143 > 0]) == 2.0**-10
    assert np.nanmax(v152) == 57344 and np.nanmin(v152[v152 > 0]) == 2.0**-17
    assert np.isnan(v143).sum() == 1 and np.isnan(v152).sum() == 1  # no infinities either
    assert not np.isinf(v143).any() and not np.isinf(v152).any()


# ---- properties ----

FINITE = st.floats(-1e6, 1e6, allow_nan=False, width=32)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([F143, F152]),
    st.lists(FINITE, min_size=1, max_size=40),
    st.integers(-6, 6),
    st.booleans(),
)
def test_encoding_is_the_nearest_value_ties_to_even(dt, xs, scale, flag):
    x = np.array(xs, dtype=np.float32)
    got = codes_of(host_pow2scale_cast_to_fp8(x, dt, scale, flag))
    want = oracle_encode(x.astype(np.float64) * 2.0**scale, dt, flag)
    np.testing.assert_array_equal(got, want)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([F143, F152]), st.lists(FINITE, min_size=1, max_size=40),
       st.integers(-20, 20))  # fmt: skip
def test_round_trip_error_is_at_most_half_a_step(dt, xs, scale):
    _, m_bits, bias = FIELDS[dt]
    x = np.array(xs, dtype=np.float64)
    codes = host_pow2scale_cast_to_fp8(x, dt, scale, nan_on_overflow=True)
    back = host_pow2scale_cast_from_fp8(codes, popxl.float64, -scale)
    v = np.abs(x) * 2.0**scale
    in_range = v < np.nanmax(oracle_values(dt))
    exponent = np.maximum(np.floor(np.log2(np.where(v > 0, v, 1.0))), 1 - bias)
    half_step = 2.0 ** (exponent - m_bits - 1) * 2.0**-scale
    err = np.abs(back - x)
    assert np.all(err[in_range] <= half_step[in_range])
    assert np.all(np.isnan(back[~in_range]) | (err[~in_range] <= half_step[~in_range]))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([F143, F152]), st.lists(FINITE, min_size=2, max_size=40),
       st.booleans())  # fmt: skip
def test_rounding_is_monotonic_and_odd(dt, xs, flag):
    x = np.sort(np.array(xs, dtype=np.float32))
    v = host_pow2scale_cast_from_fp8(host_pow2scale_cast_to_fp8(x, dt, 0, False), popxl.float64)
    assert np.all(np.diff(v) >= 0)
    neg = host_pow2scale_cast_from_fp8(host_pow2scale_cast_to_fp8(-x, dt, 0, flag), popxl.float64)
    pos = host_pow2scale_cast_from_fp8(host_pow2scale_cast_to_fp8(x, dt, 0, flag), popxl.float64)
    np.testing.assert_array_equal(neg, -pos + 0.0)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([F143, F152]), st.lists(FINITE, min_size=1, max_size=20),
       st.integers(-30, 30))  # fmt: skip
def test_scaling_is_multiplying_by_a_power_of_two(dt, xs, scale):
    x = np.array(xs, dtype=np.float64)
    a = codes_of(host_pow2scale_cast_to_fp8(x, dt, scale))
    b = codes_of(host_pow2scale_cast_to_fp8(x * 2.0**scale, dt, 0))
    np.testing.assert_array_equal(a, b)
    values = host_pow2scale_cast_from_fp8(a, popxl.float64, scale, src_dtype=dt)
    base = host_pow2scale_cast_from_fp8(a, popxl.float64, 0, src_dtype=dt)
    np.testing.assert_array_equal(values, base * 2.0**scale)


def test_decoding_rounds_once_to_the_requested_type():
    codes = np.arange(256, dtype=np.uint8)
    exact = oracle_values(F152) * 2.0**3
    with np.errstate(over="ignore"):
        want16 = exact.astype(np.float16)
    got16 = host_pow2scale_cast_from_fp8(codes, popxl.float16, 3, src_dtype=F152)
    assert got16.dtype == np.float16
    np.testing.assert_array_equal(got16, want16)
    assert np.isinf(got16[0x7F]) and got16[0x7F] > 0  # 57344 * 8 overflows half
    got32 = host_pow2scale_cast_from_fp8(codes, popxl.float32, -40, src_dtype=F143)
    np.testing.assert_array_equal(got32, (oracle_values(F143) * 2.0**-40).astype(np.float32))


# ---- the MSE scale ----


def test_mse_scale_prefers_an_exact_scale_nearest_zero():
    assert host_fp8_mse_scale_pb(np.array([1.0, 2.0, -0.5]), F143) == 0
    assert host_fp8_mse_scale_pb(np.zeros(5), F143) == 0
    # 960 = 240 * 4 is exact for scales -16..-2 (below, 960 * 2^s is subnormal and inexact)
    assert host_fp8_mse_scale_pb(np.array([960.0, -960.0]), F143) == -2
    assert host_fp8_mse_scale_pb(np.array([960.0])) == -2  # dtype None: float8_143


def test_mse_scale_returns_popxls_pair_the_least_mse_and_minus_the_bias():
    # exact for biases -16..-2: the least pair in tuple order has the largest bias, -2
    assert host_fp8_mse_scale(np.array([960.0, -960.0]), F143) == (0.0, 2)
    mse, minus_bias = host_fp8_mse_scale(np.array([0.3, -7.0, 100.0]), F152)
    codes = host_pow2scale_cast_to_fp8(np.array([0.3, -7.0, 100.0]), F152, -minus_bias, False)
    back = host_pow2scale_cast_from_fp8(codes, popxl.float64, minus_bias)
    assert mse == np.mean((back - [0.3, -7.0, 100.0]) ** 2)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([F143, F152]), st.lists(FINITE, min_size=1, max_size=30))
def test_mse_scale_minimises_the_round_trip_error(dt, xs):
    x = np.array(xs, dtype=np.float64)
    best = host_fp8_mse_scale_pb(x, dt, log2_scale_range=(-10, 10))
    assert -10 <= best <= 10

    def mse(s):
        codes = oracle_encode(x * 2.0**s, dt, nan_on_overflow=False)
        return np.mean((oracle_values(dt)[codes] * 2.0**-s - x) ** 2)

    errors = [mse(s) for s in range(-10, 11)]
    assert mse(best) == min(errors)
    least, minus_bias = host_fp8_mse_scale(x, dt, log2_scale_range=(-10, 10))
    assert least == min(errors) and mse(-minus_bias) == least


# ---- argument errors ----


def test_bad_arguments():
    with pytest.raises(RuntimeError, match=r"float8_143 or popxl\.float8_152"):
        host_pow2scale_cast_to_fp8([1.0], popxl.float16)  # PopXL: RuntimeError (TypeError too)
    with pytest.raises(TypeError, match="log2_scale must be an int"):
        host_pow2scale_cast_to_fp8([1.0], F143, 1.5)
    with pytest.raises(TypeError, match="already holds float8_143"):
        host_pow2scale_cast_to_fp8(host_pow2scale_cast_to_fp8([1.0]), F143)
    with pytest.raises(TypeError, match="need src_dtype"):
        host_pow2scale_cast_from_fp8(np.array([1], np.uint8))
    with pytest.raises(TypeError, match="must be float8 codes"):
        host_pow2scale_cast_from_fp8(np.array([1.0]))
    with pytest.raises(TypeError, match="float16, float32 or float64"):
        host_pow2scale_cast_from_fp8(host_pow2scale_cast_to_fp8([1.0]), popxl.int32)
    with pytest.raises(TypeError, match="src_dtype says"):
        host_pow2scale_cast_from_fp8(host_pow2scale_cast_to_fp8([1.0]), src_dtype=F152)
    with pytest.raises(ValueError, match="range lo <= hi"):
        host_fp8_mse_scale([1.0], F143, log2_scale_range=(3, 2))


def test_module_is_importable_as_popxl_fp8_utils():
    import tremula.popxl.fp8_utils as real

    assert fp8 is real
    assert set(fp8.__all__) >= {"host_pow2scale_cast_to_fp8", "host_pow2scale_cast_from_fp8",
                                "host_fp8_mse_scale", "host_fp8_mse_scale_pb"}  # fmt: skip
