"""Every op of the table, through its named function, against an independent NumPy oracle,
for every type family it accepts (float, half, int, unsigned, short, unsigned char, bool).

One graph per type runs every op on 2 x 37 elements spread over 4 tiles; the oracles
compute half in float32 and round once, integers with C semantics written out here.
"""

from __future__ import annotations

import importlib.util
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import scipy.special as sp

from tremula import poplar
from tremula.libs.popops import elementwise as ew
from tremula.libs.popops import ops


def _helpers():
    name = "tremula_tests_popops_elementwise_helpers"
    if name not in sys.modules:
        path = Path(__file__).with_name("test_popops_elementwise_helpers.py")
        spec = importlib.util.spec_from_file_location(name, path)
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


H = _helpers()
SHAPE = (2, 37)


def _trunc_div(a, b):
    return np.trunc(a.astype(np.float64) / b.astype(np.float64))


def _clz(a):
    bits = 8 * a.dtype.itemsize
    u = a.view(np.dtype(f"u{a.dtype.itemsize}"))
    return np.array([bits - int(x).bit_length() for x in u.reshape(-1)]).reshape(a.shape)


def _shr(a, b):
    u = a.view(np.dtype(f"u{a.dtype.itemsize}"))
    return np.right_shift(u, b.astype(u.dtype)).view(a.dtype)


def _round(a):
    a = a.astype(np.float64)
    return np.sign(a) * np.floor(np.abs(a) + 0.5)


def _gelu(a):
    # 0.5 a (1 + tanh(u)) == a expit(2u), without float64's cancellation for a << 0
    a = a.astype(np.float64)
    return a * sp.expit(2 * np.sqrt(2 / np.pi) * (a + 0.044715 * a**3))


# name -> (operand domains, oracle, rtol for float/half or None for exact)
ORACLE = {
    "add": (("any", "any"), lambda a, b: a + b, None),
    "sub": (("any", "any"), lambda a, b: a - b, None),
    "mul": (("any", "any"), lambda a, b: a * b, None),
    "div": (
        ("any", "nonzero"),
        lambda a, b: a / b if a.dtype.kind == "f" else _trunc_div(a, b),
        None,
    ),
    "pow": (("pos", "small"), np.power, None),
    "rem": (
        ("any", "nonzero"),
        lambda a, b: np.fmod(a, b) if a.dtype.kind == "f" else a - b * _trunc_div(a, b),
        None,
    ),
    "min": (("dups", "dups"), np.minimum, None),
    "max": (("dups", "dups"), np.maximum, None),
    "atan2": (("any", "any"), np.arctan2, None),
    "variance_to_inv_std_dev": (("pos", "pos"), lambda v, e: 1 / np.sqrt(v + e), None),
    "inv_std_dev_to_variance": (("pos", "pos"), lambda s, e: 1 / (s * s) - e, None),
    "neg": (("any",), lambda a: -a, None),
    "abs": (("any",), np.abs, None),
    "square": (("any",), lambda a: a * a, None),
    "inv": (("nonzero",), lambda a: 1 / a, None),
    "signum": (("dups",), np.sign, None),
    "sqrt": (
        ("pos",),
        lambda a: np.sqrt(a) if a.dtype.kind == "f" else np.floor(np.sqrt(a.astype(float))),
        None,
    ),
    "rsqrt": (("pos",), lambda a: 1 / np.sqrt(a), None),
    "cbrt": (("any",), np.cbrt, None),
    "exp": (("any",), np.exp, None),
    "exp2": (("any",), np.exp2, None),
    "expm1": (("any",), np.expm1, None),
    "log": (("pos",), np.log, None),
    "log2": (("pos",), np.log2, None),
    "log1p": (("pos",), np.log1p, None),
    "sin": (("any",), np.sin, None),
    "cos": (("any",), np.cos, None),
    "tan": (("unit",), np.tan, None),
    "asin": (("unit",), np.arcsin, None),
    "tanh": (("any",), np.tanh, None),
    "sigmoid": (("any",), lambda a: sp.expit(a.astype(np.float64)), 1e-6),
    "relu": (("any",), lambda a: np.where(a > 0, a, 0), None),
    "gelu": (("any",), _gelu, 1e-5),  # float32 rounding of u in the far tail
    "gelu_erf": (("any",), lambda a: a * sp.ndtr(a.astype(np.float64)), 1e-6),
    "erf": (("any",), lambda a: sp.erf(a.astype(np.float64)), 1e-6),
    "ceil": (("any",), np.ceil, None),
    "floor": (("any",), np.floor, None),
    "round": (("halves",), _round, None),
    "trunc": (("any",), np.trunc, None),
    "nearby_int": (("halves",), np.rint, None),
    "is_finite": (("special",), np.isfinite, None),
    "is_inf": (("special",), np.isinf, None),
    "is_nan": (("special",), np.isnan, None),
    "eq": (("dups", "dups"), np.equal, None),
    "neq": (("dups", "dups"), np.not_equal, None),
    "lt": (("dups", "dups"), np.less, None),
    "lteq": (("dups", "dups"), np.less_equal, None),
    "gt": (("dups", "dups"), np.greater, None),
    "gteq": (("dups", "dups"), np.greater_equal, None),
    "logical_and": (("any", "any"), np.logical_and, None),
    "logical_or": (("any", "any"), np.logical_or, None),
    "logical_not": (("any",), np.logical_not, None),
    "bitwise_and": (("any", "any"), np.bitwise_and, None),
    "bitwise_or": (("any", "any"), np.bitwise_or, None),
    "bitwise_xor": (("any", "any"), np.bitwise_xor, None),
    "bitwise_xnor": (("any", "any"), lambda a, b: ~(a ^ b), None),
    "bitwise_not": (("any",), np.invert, None),
    "shift_left": (("any", "shift"), lambda a, b: np.left_shift(a, b.astype(a.dtype)), None),
    "shift_right": (("any", "shift"), _shr, None),
    "shift_right_sign_extend": (
        ("any", "shift"),
        lambda a, b: np.right_shift(a, b.astype(a.dtype)),
        None,
    ),
    "popcount": (("any",), np.bitwise_count, None),
    "count_leading_zeros": (("any",), _clz, None),
    "select": (("any", "any", "bool"), lambda a, b, c: np.where(c, a, b), None),
    "clamp": (
        ("any", "any", "any"),
        lambda x, lo, hi: np.where(x < lo, lo, np.where(x > hi, hi, x)),
        None,
    ),
}

DTYPES = [
    poplar.FLOAT,
    poplar.HALF,
    poplar.INT,
    poplar.UNSIGNED_INT,
    poplar.SHORT,
    poplar.UNSIGNED_CHAR,
    poplar.BOOL,
]


def _data(rng: np.random.Generator, domain: str, t: poplar.Type) -> np.ndarray:
    """Operand values of ``t`` in ``domain``."""
    if domain == "bool" or t is poplar.BOOL:
        return rng.random(SHAPE) < 0.5
    kind = t.numpy.kind
    if kind == "f":
        x = {
            "any": lambda: rng.standard_normal(SHAPE) * 3,
            "dups": lambda: np.round(rng.standard_normal(SHAPE)),
            "pos": lambda: rng.uniform(0.1, 5, SHAPE),
            "nonzero": lambda: rng.choice([-1, 1], SHAPE) * rng.uniform(0.1, 5, SHAPE),
            "small": lambda: rng.uniform(-2, 2, SHAPE),
            "unit": lambda: rng.uniform(-0.99, 0.99, SHAPE),
            "halves": lambda: rng.integers(-8, 8, SHAPE) / 2 + rng.choice([0, 0.25], SHAPE),
            "special": lambda: rng.choice([1.5, -2.0, np.inf, -np.inf, np.nan, 0.0], SHAPE),
        }[domain]()
        return x.astype(t.numpy)
    info = np.iinfo(t.numpy)
    if domain == "shift":
        return rng.integers(0, 8 * t.size, SHAPE).astype(t.numpy)
    if domain == "any":  # the whole range: overflow wraps in both
        lo, hi = int(info.min), int(info.max)
    else:
        lo, hi = (0 if kind == "u" or domain == "pos" else -100), min(int(info.max), 100)
    x = rng.integers(lo, hi, SHAPE, dtype=np.int64, endpoint=True)
    if domain == "nonzero":
        x[x == 0] = 1
    if domain == "dups":
        x = x % 5
    return x.astype(t.numpy)


def _expected(name: str, args: list[np.ndarray], t: poplar.Type) -> np.ndarray:
    _, fn, _ = ORACLE[name]
    rec = ops.BY_NAME[name]
    if t.is_float:
        args = [a.astype(np.float32) if a.dtype == np.float16 else a for a in args]
    with np.errstate(all="ignore"):
        result = np.asarray(fn(*args))
    return result.astype(rec.result_type(t).numpy)


def _operands(rig, rec: ops.ElementwiseOp, t: poplar.Type, seed: str):
    """Random operands of ``rec`` on ``t`` (bool conditions) and their input tensors."""
    rng = np.random.default_rng(zlib.crc32(seed.encode()))
    types = [poplar.BOOL if i == rec.cond else t for i in range(rec.arity)]
    args = [_data(rng, d, tt) for d, tt in zip(ORACLE[rec.name][0], types)]
    return args, [rig.input(a, tt) for a, tt in zip(args, types)]


def _check(name: str, args: list[np.ndarray], rtol: float | None, t: poplar.Type, got) -> None:
    want = _expected(name, args, t)
    assert got.dtype == want.dtype, name
    if rtol is None or not t.is_float:
        np.testing.assert_array_equal(got, want, err_msg=f"{name} on {t}")
    else:
        tol = rtol if t is poplar.FLOAT else 2e-3
        np.testing.assert_allclose(got, want, rtol=tol, atol=1e-30, err_msg=f"{name} on {t}")


def test_every_op_has_an_oracle_here() -> None:
    assert sorted(ORACLE) == sorted(rec.name for rec in ops.ELEMENTWISE_OPS)


@pytest.mark.parametrize("t", DTYPES, ids=lambda t: t.name.replace(" ", "_"))
def test_every_op_matches_numpy(t: poplar.Type) -> None:
    rig = H.Rig()
    cases = []
    for rec in ops.ELEMENTWISE_OPS:
        if not rec.supports(t):
            continue
        args, tensors = _operands(rig, rec, t, f"{rec.name}/{t.name}")
        out = getattr(ew, rec.name)(rig.graph, *tensors, rig.prog)
        cases.append((rec.name, args, ORACLE[rec.name][2], out))
    assert cases
    values, _ = rig.run([c[3] for c in cases])
    for (name, args, rtol, _), got in zip(cases, values):
        _check(name, args, rtol, t, got)


@pytest.mark.parametrize("t", [poplar.FLOAT, poplar.HALF, poplar.INT], ids=str)
def test_in_place_forms_match_numpy(t: poplar.Type) -> None:
    rig = H.Rig()
    cases = []
    for rec in ops.ELEMENTWISE_OPS:
        if not (rec.in_place and rec.supports(t)) or rec.result_type(t) is not t:
            continue
        args, tensors = _operands(rig, rec, t, f"in-place {rec.name}/{t.name}")
        result = getattr(ew, f"{rec.name}_in_place")(rig.graph, *tensors, rig.prog)
        assert result is tensors[0]
        cases.append((rec.name, args, ORACLE[rec.name][2], tensors[0]))
    values, _ = rig.run([c[3] for c in cases])
    for (name, args, rtol, _), got in zip(cases, values):
        _check(name, args, rtol, t, got)


def test_aliases_are_the_same_functions() -> None:
    assert ew.ne is ew.neq and ew.le is ew.lteq and ew.ge is ew.gteq
    assert ew.sign is ew.signum and ew.sign_in_place is ew.signum_in_place
    assert not hasattr(ew, "eq_in_place")  # comparisons change the type
    assert "add_in_place" in ew.__all__ and "map" in ew.__all__


def test_named_functions_have_signatures_and_docs() -> None:
    import inspect

    params = list(inspect.signature(ew.select).parameters)
    assert params == ["graph", "a", "b", "c", "prog", "name", "options"]
    assert "c ? a : b" in ew.select.__doc__
    assert list(inspect.signature(ew.exp).parameters)[:3] == ["graph", "a", "prog"]
