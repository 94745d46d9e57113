"""Element-wise ONNX ops: unary and binary (NumPy broadcasting), variadic, comparisons and
activations. Each entry gives the PopXL function and, where values may be host constants
(shape arithmetic), the NumPy function that folds them."""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce
from typing import Any

import numpy as np

from tremula import numerics
from tremula.popxl import ops


def _fold_or(device: Callable[..., Any], host: Callable[..., Any] | None) -> Callable[[Any], list]:
    """A rule applying ``device`` to the inputs, or ``host`` when every input is a host
    value (result cast back to the first input's type)."""

    def rule(node: Any) -> list[Any]:
        n = node.n_inputs
        if host is not None and all(node.is_const(i) for i in range(n)):
            values = [node.const(i) for i in range(n)]
            return [np.asarray(host(*values)).astype(_fold_type(host, values), copy=False)]
        return [device(*node.tensors())]

    return rule


def _fold_type(host: Callable[..., Any], values: list[np.ndarray]) -> np.dtype:
    if host in (
        np.equal,
        np.greater,
        np.less,
        np.logical_and,
        np.logical_or,
        np.logical_xor,
        np.logical_not,
        np.greater_equal,
        np.less_equal,
    ):
        return np.dtype(np.bool_)
    return np.asarray(values[0]).dtype


def _variadic(device2: Callable[..., Any], host: Callable[..., Any]) -> Callable[[Any], list]:
    return _fold_or(lambda *ts: reduce(device2, ts), lambda *vs: reduce(host, vs))


def _mean(node: Any) -> list[Any]:
    ts = node.tensors()
    return [ops.div(reduce(ops.add, ts), float(len(ts)))] if len(ts) > 1 else [ts[0]]


def _leaky(alpha: float, x: Any) -> Any:
    return ops.sub(ops.relu(x), ops.mul(ops.relu(ops.negate(x)), alpha))


def _with_attrs(fn: Callable[..., Any]) -> Callable[[Any], list]:
    return lambda node: [fn(node, node.tensor(0))]


def _elu(node: Any, x: Any) -> Any:
    alpha = float(node.attr("alpha", 1.0))
    negative = ops.negate(ops.relu(ops.negate(x)))  # min(x, 0)
    return ops.add(ops.relu(x), ops.mul(ops.sub(ops.exp(negative), 1.0), alpha))


def _selu(node: Any, x: Any) -> Any:
    gamma = float(node.attr("gamma", 1.0507009873554805))
    alpha = float(node.attr("alpha", 1.6732632423543772))
    negative = ops.negate(ops.relu(ops.negate(x)))
    return ops.mul(ops.add(ops.relu(x), ops.mul(ops.sub(ops.exp(negative), 1.0), alpha)), gamma)


def _hard_sigmoid(node: Any, x: Any) -> Any:
    alpha, beta = float(node.attr("alpha", 0.2)), float(node.attr("beta", 0.5))
    return ops.clip(ops.add(ops.mul(x, alpha), beta), 0.0, 1.0)


def _softplus(x: Any) -> Any:  # log(1 + exp(x)) computed as relu(x) + log(1 + exp(-|x|))
    return ops.add(ops.relu(x), ops.log(ops.add(ops.exp(ops.negate(ops.abs(x))), 1.0)))


def _atan(x: Any) -> Any:
    return ops.atan2(x, 1.0)


def _acos(x: Any) -> Any:  # atan2(sqrt(1 - x^2), x): accurate near +-1, unlike pi/2 - asin
    return ops.atan2(ops.sqrt(ops.mul(ops.sub(1.0, x), ops.add(x, 1.0))), x)  # type: ignore[arg-type]


def _sinh(x: Any) -> Any:
    return ops.mul(ops.sub(ops.exp(x), ops.exp(ops.negate(x))), 0.5)


def _cosh(x: Any) -> Any:
    return ops.mul(ops.add(ops.exp(x), ops.exp(ops.negate(x))), 0.5)


def _asinh(x: Any) -> Any:  # sign(x) log(|x| + sqrt(x^2 + 1)): no cancellation for x < 0
    a = ops.abs(x)
    return ops.mul(ops.sign(x), ops.log(ops.add(a, ops.sqrt(ops.add(ops.mul(a, a), 1.0)))))


def _acosh(x: Any) -> Any:
    return ops.log(ops.add(x, ops.sqrt(ops.sub(ops.mul(x, x), 1.0))))


def _atanh(x: Any) -> Any:
    return ops.mul(ops.log(ops.div(ops.add(x, 1.0), ops.sub(1.0, x))), 0.5)  # type: ignore[arg-type]


def round_half_even(x: Any) -> Any:
    """ONNX Round: halves to even. ``x - floor(x)`` is exact in floating point, so the
    comparison with 0.5 is too (``floor(x + 0.5)`` would round 0.49999997 up)."""
    r = ops.floor(x)
    frac = ops.sub(x, r)
    odd = ops.logical_not(ops.equal(ops.fmod(r, 2.0), 0.0))
    up = ops.logical_or(ops.greater(frac, 0.5), ops.logical_and(ops.equal(frac, 0.5), odd))
    return ops.add(r, ops.cast(up, x.dtype))


def _xor(a: Any, b: Any) -> Any:
    return ops.logical_and(ops.logical_or(a, b), ops.logical_not(ops.logical_and(a, b)))


def _greater_equal(a: Any, b: Any) -> Any:  # not(a < b) would be True for NaN
    return ops.logical_or(ops.greater(a, b), ops.equal(a, b))


def _less_equal(a: Any, b: Any) -> Any:
    return ops.logical_or(ops.less(a, b), ops.equal(a, b))


def _mod(node: Any) -> list[Any]:
    """ONNX Mod: ``fmod=1`` is C's ``fmod`` (the sign of the dividend), ``fmod=0`` (the
    default, for integers) Python's ``%`` (the sign of the divisor): the remainder plus the
    divisor where they differ in sign."""
    fmod = int(node.attr("fmod", 0))
    if all(node.is_const(i) for i in range(2)):
        a, b = node.const(0), node.const(1)
        folded = numerics.remainder(a, b) if fmod else numerics.floor_mod(a, b)
        return [np.asarray(folded).astype(a.dtype)]
    a, b = node.tensors()
    return [ops.fmod(a, b) if fmod else python_mod(a, b)]


def python_mod(a: Any, b: Any) -> Any:
    """``a % b`` as Python computes it (the sign of ``b``): C's remainder, plus ``b`` where
    the remainder is not 0 and its sign differs from ``b``'s."""
    r = ops.fmod(a, b)
    differ = ops.logical_and(ops.logical_not(ops.equal(r, 0)), _xor(ops.less(r, 0), ops.less(b, 0)))
    return ops.where(differ, ops.add(r, b), r)


def _hard_swish(node: Any, x: Any) -> Any:  # x * hard_sigmoid(x; 1/6, 1/2)
    return ops.mul(x, ops.clip(ops.add(ops.mul(x, 1 / 6), 0.5), 0.0, 1.0))


def _celu(node: Any, x: Any) -> Any:  # max(0, x) + min(0, alpha (exp(x / alpha) - 1))
    alpha = float(node.attr("alpha", 1.0))
    negative = ops.negate(ops.relu(ops.negate(x)))
    return ops.add(ops.relu(x), ops.mul(ops.sub(ops.exp(ops.div(negative, alpha)), 1.0), alpha))


def _mish(node: Any, x: Any) -> Any:  # x tanh(softplus(x))
    return ops.mul(x, ops.tanh(_softplus(x)))


def _thresholded_relu(node: Any, x: Any) -> Any:
    keep = ops.greater(x, float(node.attr("alpha", 1.0)))
    return ops.where(keep, x, 0.0)


def _is_inf(node: Any) -> list[Any]:
    """Infinities of the signs ``detect_positive`` / ``detect_negative`` select."""
    pos, neg = bool(node.attr("detect_positive", 1)), bool(node.attr("detect_negative", 1))
    v = node.value(0)
    if isinstance(v, np.ndarray):
        return [np.isinf(v) & ((v > 0) & pos | (v < 0) & neg)]
    inf = ops.isinf(v)
    if pos and neg:
        return [inf]
    if pos or neg:
        return [ops.logical_and(inf, ops.greater(v, 0.0) if pos else ops.less(v, 0.0))]
    return [ops.logical_and(inf, ops.logical_not(inf))]  # all false


ELEMENTWISE: dict[str, Callable[[Any], list]] = {
    **{
        name: _fold_or(dev, host)  # type: ignore[arg-type]
        for name, (dev, host) in {
            "Abs": (ops.abs, np.abs),
            "Neg": (ops.negate, np.negative),
            "Exp": (ops.exp, np.exp),
            "Log": (ops.log, np.log),
            "Sqrt": (ops.sqrt, np.sqrt),
            "Relu": (ops.relu, None),
            "Sigmoid": (ops.sigmoid, None),
            "Tanh": (ops.tanh, None),
            "Sin": (ops.sin, np.sin),
            "Cos": (ops.cos, np.cos),
            "Tan": (ops.tan, np.tan),
            "Asin": (ops.asin, np.arcsin),
            "Acos": (_acos, np.arccos),
            "Atan": (_atan, np.arctan),
            "Sinh": (_sinh, np.sinh),
            "Cosh": (_cosh, np.cosh),
            "Asinh": (_asinh, np.arcsinh),
            "Acosh": (_acosh, np.arccosh),
            "Atanh": (_atanh, np.arctanh),
            "Erf": (ops.erf, None),
            "Round": (round_half_even, numerics.round_half_even),
            "Floor": (ops.floor, np.floor),
            "Ceil": (ops.ceil, np.ceil),
            "Sign": (ops.sign, numerics.sign),
            "Not": (ops.logical_not, np.logical_not),
            "Reciprocal": (lambda x: ops.div(1.0, x), np.reciprocal),  # type: ignore[arg-type]
            "Softsign": (lambda x: ops.div(x, ops.add(ops.abs(x), 1.0)), None),
            "Softplus": (_softplus, None),
            "IsNaN": (ops.isnan, np.isnan),
            "Add": (ops.add, np.add),
            "Sub": (ops.sub, np.subtract),
            "Mul": (ops.mul, np.multiply),
            "Div": (ops.div, numerics.divide),
            "Pow": (ops.pow, np.power),
            "MatMul": (ops.matmul, None),
            "Equal": (ops.equal, np.equal),
            "Greater": (ops.greater, np.greater),
            "Less": (ops.less, np.less),
            "And": (ops.logical_and, np.logical_and),
            "Or": (ops.logical_or, np.logical_or),
            "Xor": (_xor, np.logical_xor),
            "GreaterOrEqual": (_greater_equal, np.greater_equal),
            "LessOrEqual": (_less_equal, np.less_equal),
            "PRelu": (
                lambda x, slope: ops.sub(ops.relu(x), ops.mul(ops.relu(ops.negate(x)), slope)),
                None,
            ),
            "Where": (ops.where, np.where),
        }.items()
    },
    "Identity": lambda node: [node.value(0)],
    "Max": _variadic(ops.maximum2, np.maximum),
    "Min": _variadic(ops.minimum2, np.minimum),
    "Sum": _variadic(ops.add, np.add),
    "Mean": _mean,
    "LeakyRelu": lambda node: [_leaky(float(node.attr("alpha", 0.01)), node.tensor(0))],
    "Elu": _with_attrs(_elu),
    "Selu": _with_attrs(_selu),
    "HardSigmoid": _with_attrs(_hard_sigmoid),
    "HardSwish": _with_attrs(_hard_swish),
    "Celu": _with_attrs(_celu),
    "ThresholdedRelu": _with_attrs(_thresholded_relu),
    "Mish": _with_attrs(_mish),
    "Mod": _mod,
    "IsInf": _is_inf,
}
