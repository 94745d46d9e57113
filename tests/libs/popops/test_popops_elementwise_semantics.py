"""Documented semantics on hand-picked values: C integer division and remainder, division
by zero, wrapping, shifts, rounding, half rounding after every op, clamp and select."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from tremula import poplar
from tremula.libs.popops import elementwise as ew
from tremula.libs.popops.expr import Clamp, Const, Select, _1, _2, _3


def _helpers():
    name = "tremula_tests_popops_elementwise_helpers"
    if name not in sys.modules:
        path = Path(__file__).with_name("test_popops_elementwise_helpers.py")
        spec = importlib.util.spec_from_file_location(name, path)
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


H = _helpers()


def _run_binary(fn, a, b, t):
    rig = H.Rig()
    out = fn(rig.graph, rig.input(a, t), rig.input(b, t), rig.prog)
    (value,), _ = rig.run([out])
    return value


@pytest.mark.parametrize("t", [poplar.INT, poplar.SHORT, poplar.CHAR, poplar.LONGLONG], ids=str)
def test_integer_division_truncates_toward_zero_and_remainder_follows_the_dividend(t):
    a = np.array([7, -7, 7, -7, 6, -1, 0, 5])
    b = np.array([2, 2, -2, -2, 3, 4, -3, 0])
    np.testing.assert_array_equal(_run_binary(ew.div, a, b, t), [3, -3, -3, 3, 2, 0, 0, 0])
    np.testing.assert_array_equal(_run_binary(ew.rem, a, b, t), [1, -1, 1, -1, 0, -1, 0, 0])


def test_unsigned_division_and_int_min_over_minus_one():
    u = _run_binary(ew.div, np.array([7, 2**32 - 1]), np.array([2, 16]), poplar.UNSIGNED_INT)
    np.testing.assert_array_equal(u, [3, (2**32 - 1) // 16])
    m = _run_binary(ew.div, np.array([-(2**31)]), np.array([-1]), poplar.INT)
    np.testing.assert_array_equal(m, [-(2**31)])  # wraps


def test_integer_overflow_wraps():
    got = _run_binary(ew.add, np.array([2**31 - 1, 250]), np.array([1, 10]), poplar.INT)
    np.testing.assert_array_equal(got, [-(2**31), 260])
    got = _run_binary(ew.mul, np.array([200, 16]), np.array([2, 16]), poplar.UNSIGNED_CHAR)
    np.testing.assert_array_equal(got, [144, 0])


def test_float_remainder_is_fmod():
    got = _run_binary(ew.rem, np.array([5.5, -5.5, 5.5]), np.array([2, 2, -2]), poplar.FLOAT)
    np.testing.assert_array_equal(got, [1.5, -1.5, 1.5])


def test_float_division_by_zero_gives_infinities_and_nan():
    got = _run_binary(ew.div, np.array([1.0, -1.0, 0.0]), np.zeros(3), poplar.FLOAT)
    assert got[0] == np.inf and got[1] == -np.inf and np.isnan(got[2])


def test_shift_amounts_are_taken_modulo_the_width():
    a = np.array([1, 1, -8, -8, -8])
    b = np.array([3, 35, 1, 1, 33])
    assert list(_run_binary(ew.shift_left, a[:2], b[:2], poplar.INT)) == [8, 8]
    assert list(_run_binary(ew.shift_right, a[2:4], b[2:4], poplar.INT)) == [2**31 - 4] * 2
    got = _run_binary(ew.shift_right_sign_extend, a[2:], b[2:], poplar.INT)
    assert list(got) == [-4, -4, -4]


def test_round_halves_away_from_zero_and_nearby_int_to_even():
    rig = H.Rig()
    x = rig.input(np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, -1.25], np.float32))
    r, n = ew.round(rig.graph, x, rig.prog), ew.nearby_int(rig.graph, x, rig.prog)
    (gr, gn), _ = rig.run([r, n])
    np.testing.assert_array_equal(gr, [1, 2, 3, -1, -3, 0, -1])
    np.testing.assert_array_equal(gn, [0, 2, 2, -0.0, -2, 0, -1])


def test_integer_sqrt_abs_signum_and_relu():
    rig = H.Rig()
    x = rig.input(np.array([16, 15, -4, 0, 2**31 - 1]), poplar.INT)
    outs = [f(rig.graph, x, rig.prog) for f in (ew.sqrt, ew.abs, ew.signum, ew.relu)]
    (s, a, g, r), _ = rig.run(outs)
    np.testing.assert_array_equal(s, [4, 3, 0, 0, 46340])
    np.testing.assert_array_equal(a, [16, 15, 4, 0, 2**31 - 1])
    np.testing.assert_array_equal(g, [1, 1, -1, 0, 1])
    np.testing.assert_array_equal(r, [16, 15, 0, 0, 2**31 - 1])


def test_half_rounds_after_every_op_fused_or_not():
    rng = np.random.default_rng(1)
    a, b, c = (rng.standard_normal(101).astype(np.float16) for _ in range(3))
    rig = H.Rig()
    ta, tb, tc = rig.input(a), rig.input(b), rig.input(c)
    expr = (_1 * _2 + _3) / (_2 * _2 + 1)
    fused = ew.map(rig.graph, expr, [ta, tb, tc], rig.prog)
    unfused = ew.map(
        rig.graph, expr, [ta, tb, tc], rig.prog, options={"enableGenerateCodelet": "false"}
    )
    (f, u), _ = rig.run([fused, unfused])
    f32 = np.float32
    ab = (a.astype(f32) * b.astype(f32)).astype(np.float16)
    num = (ab.astype(f32) + c.astype(f32)).astype(np.float16)
    bb = (b.astype(f32) * b.astype(f32)).astype(np.float16)
    den = (bb.astype(f32) + f32(1)).astype(np.float16)
    want = (num.astype(f32) / den.astype(f32)).astype(np.float16)
    np.testing.assert_array_equal(f, want)
    np.testing.assert_array_equal(u, want)


def test_clamp_follows_poplibs_order_and_select_broadcasts_its_condition():
    rig = H.Rig()
    x = rig.input(np.array([[-5.0, 0.5, 3.0], [3.0, 3.0, np.nan]], np.float32))
    lo = rig.input(np.array([0.0, 0.0, 4.0], np.float32))
    hi = rig.input(np.array([1.0, 1.0, 1.0], np.float32))  # lo > hi in the last column
    cond = rig.input(np.array([[True], [False]]))
    c = ew.map(rig.graph, Clamp(_1, _2, _3), [x, lo, hi], rig.prog)
    s = ew.map(rig.graph, Select(_1, 0.0, _2), [x, cond], rig.prog)
    (gc, gs), _ = rig.run([c, s])
    np.testing.assert_array_equal(gc, [[0, 0.5, 4], [1, 1, np.nan]])  # 3 < lo = 4 wins
    np.testing.assert_array_equal(gs, [[-5, 0.5, 3], [0, 0, 0]])


def test_comparisons_and_is_finite_give_bool_and_handle_nan():
    rig = H.Rig()
    x = rig.input(np.array([1.0, np.nan, np.inf, -np.inf], np.float32))
    e = ew.eq(rig.graph, x, x, rig.prog)
    f = ew.is_finite(rig.graph, x, rig.prog)
    (ge, gf), _ = rig.run([e, f])
    assert ge.dtype == np.bool_ and list(ge) == [True, False, True, True]
    assert list(gf) == [True, False, False, False]


def test_constants_take_the_type_they_meet():
    rig = H.Rig()
    h = rig.input(np.array([1.0, 2.0], np.float16))
    i = rig.input(np.array([7, -7]), poplar.INT)
    a = ew.map(rig.graph, _1 * 0.1, [h], rig.prog)  # 0.1 rounded to half
    b = ew.map(rig.graph, _1 / 2, [i], rig.prog)  # C division
    c = ew.map(rig.graph, 2**_1, [h], rig.prog)
    d = ew.map(rig.graph, _1 + Const(1.5, poplar.HALF), [h], rig.prog)
    (ga, gb, gc, gd), _ = rig.run([a, b, c, d])
    f32 = np.float32
    assert ga.dtype == np.float16
    np.testing.assert_array_equal(
        ga, (np.array([1, 2], f32) * f32(np.float16(0.1))).astype(np.float16)
    )
    np.testing.assert_array_equal(gb, [3, -3])
    np.testing.assert_array_equal(gc, [2, 4])
    np.testing.assert_array_equal(gd, [2.5, 3.5])


def _select_sigmoid(x: np.ndarray) -> np.ndarray:
    """The textbook stable form: ``where(x >= 0, 1, e) / (1 + e)``, ``e = exp(-|x|)``."""
    e = np.exp(-np.abs(x))
    one = x.dtype.type(1)
    return np.where(x >= 0, one, e) / (one + e)


@pytest.mark.parametrize(
    "dtype, uint", [(np.float16, np.uint16), (np.float32, np.uint32), (np.float64, np.uint64)]
)
def test_sigmoid_is_the_select_form_bit_for_bit(dtype, uint):
    """SIGMOID's numerator ``max([x >= 0], e)`` (no boolean select) gives the select
    form's bits everywhere: both tails, signed zeros, infinities, NaNs with their payloads
    and signs; written into ``out``, also when ``out`` is the input."""
    from tremula.libs.popops.elementwise_math import sigmoid

    rng = np.random.default_rng(3)
    scale = rng.choice(np.array([1, 10, 100, 1e4], dtype=np.float64), 1 << 16)
    x = (rng.standard_normal(1 << 16) * scale).astype(dtype)
    special = [np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-30, -1e-30, 88, -88, 710, -710]
    x[: len(special)] = np.array(special).astype(dtype)
    bits = x.view(uint)
    nan = np.array([np.nan], dtype).view(uint)[0]
    bits[20:24] = [nan | 1, nan | 3 | np.array(1, uint) << (8 * x.itemsize - 1), nan, nan ^ 2]
    with np.errstate(all="ignore"):
        want = _select_sigmoid(x).view(uint)
        np.testing.assert_array_equal(sigmoid(x).view(uint), want)
        out = np.empty_like(x)
        assert sigmoid(x, out=out) is out
        np.testing.assert_array_equal(out.view(uint), want)
        same = x.copy()
        sigmoid(same, out=same)
        np.testing.assert_array_equal(same.view(uint), want)
        np.testing.assert_array_equal(sigmoid(x[5]).view(uint), want[5])  # a constant


@pytest.mark.parametrize("t", [poplar.FLOAT, poplar.HALF], ids=str)
def test_float_division_writes_its_result_in_place_with_numpy_s_bits(t):
    """Float ``DIVIDE`` runs NumPy's divide into the output (``ElementwiseOp.out_ref``: no
    temporary; integers keep C's rules through ``numerics.divide``): first and replayed
    runs, fused or not, give ``np.divide``'s bits (half: computed in float32, rounded
    once) on signed zeros, infinities, NaNs of two payloads, subnormals and random values."""
    from tremula.libs.popops import ops
    from tremula.libs.popops.expr import BinaryOpType

    div = ops.BY_OP[BinaryOpType.DIVIDE]
    assert div.out_ref(t) is np.divide and div.out_ref(poplar.INT) is None
    bits = [0x7FC00000, 0xFFC12345, 0x7F800000, 0xFF800000, 0, 0x80000000, 1, 0x3F800000]
    special = np.array(bits, np.uint32).view(np.float32)
    rng = np.random.default_rng(3)
    a = np.concatenate([np.repeat(special, 8), rng.standard_normal(50).astype(np.float32)])
    b = np.concatenate([np.tile(special, 8), rng.standard_normal(50).astype(np.float32)])
    a, b = a.astype(t.numpy), b.astype(t.numpy)
    with np.errstate(all="ignore"):
        want = np.divide(a.astype(np.float32), b.astype(np.float32)).astype(t.numpy)
    rig = H.Rig()
    ta, tb = rig.input(a, t), rig.input(b, t)
    unfused = ew.div(rig.graph, ta, tb, rig.prog)
    fused = ew.map(rig.graph, _1 / _2, [ta, tb], rig.prog)
    (u, f), engine = rig.run([unfused, fused])
    uint = np.uint32 if t == poplar.FLOAT else np.uint16
    for got in (u, f):
        assert np.array_equal(got.view(uint), want.view(uint))
    for _ in range(2):  # replayed runs: the prepared steps
        engine.run()
        for name in ("out0", "out1"):
            assert np.array_equal(engine.read_tensor(name).view(uint), want.view(uint))
