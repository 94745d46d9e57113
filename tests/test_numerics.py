"""tremula.numerics: the shared numeric rules against Python's exact integer arithmetic and
hand-computed values, and the places where two copies of a rule disagreed before they were
made one (each such test runs the device and the host-side evaluation on the same values).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import popxl
import popxl.ops as ops
from tremula import numerics as nx
from tremula.errors import ApplicationRuntimeError
from tremula.popxl.ops.base import OPS

I32 = np.iinfo(np.int32)
I64 = np.iinfo(np.int64)


def _c_quotient(a: int, b: int) -> int:
    """C's truncating quotient in exact Python integers (0 for b == 0)."""
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _wrap(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


INT64 = st.integers(int(I64.min), int(I64.max))


@given(st.lists(st.tuples(INT64, INT64), min_size=1, max_size=20))
def test_int_divide_is_cs_quotient_exactly_for_int64(pairs: list[tuple[int, int]]) -> None:
    a = np.array([p[0] for p in pairs] + [I64.min, 7, -7], np.int64)
    b = np.array([p[1] for p in pairs] + [-1, 0, 2], np.int64)
    want = [_wrap(_c_quotient(int(x), int(y)), 64) for x, y in zip(a, b)]
    got = nx.int_divide(a, b)
    assert got.dtype == np.int64
    assert got.tolist() == want


def test_division_by_zero_and_int_min_by_minus_one_hand_values() -> None:
    a = np.array([7, -7, 0, I32.min, I32.min, -7, 7], np.int32)
    b = np.array([0, 0, 0, -1, 1, 2, -2], np.int32)
    assert nx.divide(a, b).tolist() == [0, 0, 0, I32.min, I32.min, -3, -3]
    assert nx.remainder(a, b).tolist() == [0, 0, 0, 0, 0, -1, 1]
    assert nx.floor_mod(a, b).tolist() == [0, 0, 0, 0, 0, 1, -1]
    f = nx.divide(np.array([1.0, -1.0, 0.0], np.float32), np.zeros(3, np.float32))
    assert f[0] == np.inf and f[1] == -np.inf and np.isnan(f[2])


@given(st.integers(-1000, 1000), st.integers(-1000, 1000).filter(lambda b: b != 0))
def test_remainder_and_floor_mod_are_c_and_python(a: int, b: int) -> None:
    x, y = np.array([a], np.int32), np.array([b], np.int32)
    assert int(nx.remainder(x, y)[0]) == int(math.fmod(a, b))
    assert int(nx.floor_mod(x, y)[0]) == a % b
    xf, yf = x.astype(np.float64), y.astype(np.float64)
    assert float(nx.floor_mod(xf, yf)[0]) == a % b


def test_float_to_int_truncates_saturates_and_maps_nan_to_zero() -> None:
    v = np.array([2.7, -2.7, np.nan, np.inf, -np.inf, 3e9, -3e9, 2**31 - 1.0], np.float64)
    got = nx.convert(v, np.dtype(np.int32))
    assert got.tolist() == [2, -2, 0, I32.max, I32.min, I32.max, I32.min, I32.max]
    assert nx.convert(np.array([300, -1], np.int32), np.dtype(np.uint8)).tolist() == [44, 255]
    assert nx.convert(np.array([0.0, np.nan, -0.5]), np.dtype(np.bool_)).tolist() == [
        False,
        True,
        True,
    ]


def test_rounding_rules() -> None:
    x = np.array([2.5, -2.5, 0.5, -0.5, 1.49999], np.float32)
    assert nx.round_half_away(x).tolist() == [3, -3, 1, -1, 1]
    assert nx.round_half_even(x).tolist() == [2, -2, 0, -0.0, 1]


def test_half_is_computed_in_float32_and_rounded_once() -> None:
    a, b = np.float16(2049), np.float16(1)  # 2049 + 1 - 1 in half-only steps loses the 1
    got = nx.in_compute_type(lambda x, y: x + y - y, np.array([a]), np.array([b]))
    assert got.dtype == np.float16
    assert got[0] == np.float16(np.float32(a) + np.float32(b) - np.float32(b))


# ---- the copies that disagreed: the host-side evaluation now gives the device's values ----


def _device(fn, a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    ir = popxl.Ir()
    with ir.main_graph:
        ta = popxl.variable(a, popxl.dtypes.dtype.as_dtype(a.dtype))
        args = [ta]
        if b is not None:
            args.append(popxl.variable(b, popxl.dtypes.dtype.as_dtype(b.dtype)))
        out = fn(*args)
        stream = popxl.d2h_stream(out.shape, out.dtype)
        ops.host_store(stream, out)
    with popxl.Session(ir, "ipu_model") as session:
        return session.run()[stream]


DIV_A = np.array([7, -7, 0, I32.min, I32.min, 2**30 + 1, -9], np.int32)
DIV_B = np.array([0, 0, 0, -1, 0, 3, 4], np.int32)


@pytest.mark.parametrize("op, fn", [("Div", ops.div), ("Fmod", ops.fmod)])
def test_popxl_reference_of_integer_div_and_fmod_is_the_devices(op: str, fn) -> None:
    """Was: PopXL's reference divided in float64 (``trunc(a / b)``: by zero ``INT_MIN``
    with a warning) and the fuzz test patched it; now both are ``numerics``'."""
    device = _device(fn, DIV_A, DIV_B)
    (host,) = OPS[op].reference([DIV_A, DIV_B], {})
    assert host.dtype == np.int32
    np.testing.assert_array_equal(host, device)
    want = [_wrap(_c_quotient(int(a), int(b)), 32) for a, b in zip(DIV_A, DIV_B)]
    if op == "Fmod":
        want = [
            0 if b == 0 else _wrap(int(a) - int(b) * q, 32) for a, b, q in zip(DIV_A, DIV_B, want)
        ]
    assert device.tolist() == want


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_sign_of_nan_is_zero_on_device_and_in_popxl_reference(dtype: type) -> None:
    """popops' SIGNUM is ``(0 < x) - (x < 0)``: 0 for NaN, as PopXL's ``ops.sign`` and
    ``torch.sign`` give (``np.sign`` gives NaN). Was NaN."""
    x = np.array([np.nan, -np.nan, -2.0, -0.0, 0.0, 3.0, -np.inf, np.inf], dtype)
    device = _device(ops.sign, x)
    (host,) = OPS["Sign"].reference([x], {})
    np.testing.assert_array_equal(host, device)
    assert device.tolist() == [0, 0, -1, 0, 0, 1, -1, 1]
    for value, want in ((np.nan, 0), (-2.0, -1)):  # 0-d operands: NumPy gives scalars
        got = nx.sign(np.array(value, dtype))
        assert got == want and got.dtype == dtype


def test_popxl_reference_of_half_ops_rounds_once_as_the_device() -> None:
    a = np.array([2049, 1000, 0.1], np.float16)
    b = np.array([1, 3, 3], np.float16)
    device = _device(ops.div, a, b)
    (host,) = OPS["Div"].reference([a, b], {})
    assert host.dtype == np.float16
    np.testing.assert_array_equal(host, device)


def test_integer_ops_refuse_dtypes_their_record_does_not_take() -> None:
    """PopART makes the op (its setup takes any dtype); the session refuses it, as Poplar
    does when the program is built."""
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(np.array([1, 2], np.int32))
        ops.exp(t)
    with pytest.raises(TypeError, match=r"lowering op Exp .*exp.*int32.*float16, float32"):
        popxl.Session(ir, "ipu_model")


# ---- debug.checkIntegerDivision ----


def test_check_integer_division_names_the_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", '{"debug.checkIntegerDivision": "true"}')
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.array([6, 4], np.int32))
        b = popxl.variable(np.array([3, 2], np.int32))
        z = popxl.variable(np.array([1, 0], np.int32))
        with popxl.name_scope("ratio"):
            q = ops.fmod(ops.div(a, b), z)
        stream = popxl.d2h_stream(q.shape, q.dtype)
        ops.host_store(stream, q)
    session = popxl.Session(ir, "ipu_model")
    with session, pytest.raises(ApplicationRuntimeError, match=r"'ratio.*REMAINDER of int"):
        session.run()


def test_check_integer_division_passes_non_zero_divisors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", '{"debug.checkIntegerDivision": "true"}')
    got = _device(ops.div, np.array([7, -7], np.int32), np.array([2, 2], np.int32))
    assert got.tolist() == [3, -3]
    floats = _device(ops.div, np.array([1.0], np.float32), np.array([0.0], np.float32))
    assert floats[0] == np.inf  # floats are not checked: IEEE division by zero is defined


def test_quiet_guards_outside_a_run_and_unguarded_is_the_bare_computation() -> None:
    """A ``quiet`` computation ignores floating-point errors when called on its own; the
    engine's replayed plan (always inside ``quietly``) binds ``unguarded``, the same
    computation without the per-call test; other calls pass through ``unguarded``."""
    seen: list[str] = []

    def divide() -> None:
        seen.append(np.geterr()["divide"])
        np.float32(1) / np.zeros(1, np.float32)

    guarded = nx.quiet(divide)
    with np.errstate(divide="raise"):
        guarded()  # no FloatingPointError: set to "ignore" by the call
        with nx.quietly():
            nx.unguarded(guarded)()  # ignore: set once by the scope
        with pytest.raises(FloatingPointError):
            nx.unguarded(guarded)()  # the bare computation, outside a scope
    assert nx.unguarded(guarded) is divide
    assert nx.unguarded(divide) is divide and nx.unguarded(None) is None
    assert seen == ["ignore", "ignore", "raise"]


def test_quietly_restores_the_caller_s_error_state_after_nesting_and_errors() -> None:
    """``quietly`` ignores floating-point errors inside, nests (the inner scope keeps the
    outer's caller state for ``as_caller``) and restores the caller's state on leaving,
    whether the scope ends normally or by an exception."""
    seen: list[str] = []
    with np.errstate(divide="raise", over="warn"):
        with nx.quietly():
            seen.append(np.geterr()["divide"])
            with nx.quietly():
                seen.append(nx.as_caller(lambda: np.geterr()["divide"]))
            seen.append(np.geterr()["divide"])
        with pytest.raises(KeyError), nx.quietly():
            raise KeyError("x")
        seen.append(np.geterr()["divide"])
        seen.append(nx.as_caller(lambda: np.geterr()["over"]))  # outside: a plain call
    assert seen == ["ignore", "raise", "ignore", "raise", "warn"]
