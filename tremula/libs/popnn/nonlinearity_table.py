"""The non-linearity table: ONE record per element-wise non-linearity.

A record gives the function (NumPy, computed in float32), its derivative, whether the
gradient is computed from the forward *output* or *input* (PopLibs' convention, below), and
the cycles per 64-bit vector of the forward and gradient codelets for float and half.
The codelets (``codelets.py``), the functions (``nonlinearity.py``) and the tests' NumPy
references are derived from it.

Gradient convention (PopLibs' ``nonLinearityInputGradient``: "act: the output activations
from the non-linearity; for the GELU and SWISH non-linearities only this is the input"):

====================  ==================================  ===================
type                  f(x)                                 gradient from
====================  ==================================  ===================
SIGMOID               1 / (1 + exp(-x))                   output: y (1 - y)
RELU                  max(x, 0)                           output: y > 0
TANH                  tanh(x)                             output: 1 - y^2
GELU                  0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   input
GELU_ERF              x Phi(x) = 0.5 x (1 + erf(x / sqrt 2))             input
SWISH                 x sigmoid(x)                        input: s (1 + x (1 - s))
HARD_SIGMOID          clamp(0.2 x + 0.5, 0, 1)            input: 0.2 if |x| < 2.5
====================  ==================================  ===================

GELU_ERF and HARD_SIGMOID take their gradient from the input as GELU does (an assumption
for these two: their derivative is not a function of the output alone at every point).

Cycles: the forward costs of SIGMOID, RELU, TANH, GELU and GELU_ERF are popops' (PopLibs'
perf tables); the others, and every gradient cost, are ``# [proposal]``: the ops of the
formula counted at popops' per-op costs.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tremula.libs.popnn.common import PopnnError
from tremula.libs.popops import elementwise_math as m

_SQRT_2_OVER_PI = np.float32(np.sqrt(2.0 / np.pi))
_INV_SQRT_2PI = np.float32(1.0 / np.sqrt(2.0 * np.pi))


class NonLinearityType(enum.Enum):
    """PopLibs' ``popnn::NonLinearityType`` (``LOG_SOFTMAX`` is a Tremula extension: the
    stable log-softmax along the last dimension, PopLibs' ``popnn::logSoftmax``)."""

    SIGMOID = "SIGMOID"
    HARD_SIGMOID = "HARD_SIGMOID"
    RELU = "RELU"
    TANH = "TANH"
    GELU = "GELU"
    GELU_ERF = "GELU_ERF"
    SWISH = "SWISH"
    SOFTMAX = "SOFTMAX"
    SOFTMAX_STABLE = "SOFTMAX_STABLE"
    LOG_SOFTMAX = "LOG_SOFTMAX"


#: The non-linearities applied along the last dimension (not element-wise).
ROW_WISE = (
    NonLinearityType.SOFTMAX,
    NonLinearityType.SOFTMAX_STABLE,
    NonLinearityType.LOG_SOFTMAX,
)


def as_nl_type(value: NonLinearityType | str, where: str) -> NonLinearityType:
    """A :class:`NonLinearityType` from itself or its name."""
    if isinstance(value, NonLinearityType):
        return value
    if isinstance(value, str) and value.upper() in NonLinearityType.__members__:
        return NonLinearityType[value.upper()]
    known = [t.name for t in NonLinearityType]
    raise PopnnError(f"{where}: non-linearity type {value!r} unknown; known: {known}")


@dataclass(frozen=True)
class NonLinearity:
    """One element-wise non-linearity (see the module docstring)."""

    kind: NonLinearityType
    forward: Callable[[np.ndarray], np.ndarray]
    derivative: Callable[[np.ndarray], np.ndarray]  # of ``grad_from``'s value
    grad_from: str  # "output" or "input"
    fwd_cycles: tuple[float, float]  # (float, half) cycles per 64-bit vector
    grad_cycles: tuple[float, float]
    fwd_flops: int = 1
    grad_flops: int = 2

    def cycles_per_vector(self, half: bool, grad: bool) -> float:
        costs = self.grad_cycles if grad else self.fwd_cycles
        return costs[1] if half else costs[0]


def _sigmoid_from_out(y: np.ndarray) -> np.ndarray:
    return y * (1 - y)


def _relu_from_out(y: np.ndarray) -> np.ndarray:
    return (y > 0).astype(y.dtype)


def _tanh_from_out(y: np.ndarray) -> np.ndarray:
    return 1 - y * y


def _gelu_grad(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        u = _SQRT_2_OVER_PI * (x + np.float32(0.044715) * x * x * x)
        du = _SQRT_2_OVER_PI * (1 + np.float32(3 * 0.044715) * x * x)
    s = m.sigmoid(2 * u)  # 0.5 (1 + tanh(u))
    t = 2 * s - 1
    return s + np.float32(0.5) * x * (1 - t * t) * du


def _gelu_erf_grad(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    cdf = 0.5 * m.erfc(-x64 / np.sqrt(2.0))
    pdf = np.exp(-0.5 * x64 * x64) / np.sqrt(2.0 * np.pi)
    return (cdf + x64 * pdf).astype(x.dtype)


def _swish(x: np.ndarray) -> np.ndarray:
    return x * m.sigmoid(x)


def _swish_grad(x: np.ndarray) -> np.ndarray:
    s = m.sigmoid(x)
    return s * (1 + x * (1 - s))


def _hard_sigmoid(x: np.ndarray) -> np.ndarray:
    return np.clip(np.float32(0.2) * x + np.float32(0.5), 0, 1).astype(x.dtype)


def _hard_sigmoid_grad(x: np.ndarray) -> np.ndarray:
    return np.where(np.abs(x) < 2.5, np.float32(0.2), np.float32(0)).astype(x.dtype)


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, x.dtype.type(0))


def _gelu_erf(x: np.ndarray) -> np.ndarray:
    return m.gelu_erf(x).astype(x.dtype)


NL = NonLinearityType
TABLE: dict[NonLinearityType, NonLinearity] = {
    r.kind: r
    for r in (
        NonLinearity(NL.SIGMOID, m.sigmoid, _sigmoid_from_out, "output", (12, 6), (3, 3), 4),
        NonLinearity(NL.RELU, _relu, _relu_from_out, "output", (3, 3), (3, 3), 1, 1),
        NonLinearity(NL.TANH, np.tanh, _tanh_from_out, "output", (12, 4), (3, 3), 4),
        NonLinearity(NL.GELU, m.gelu_tanh, _gelu_grad, "input", (24, 10), (36, 16), 8, 14),
        NonLinearity(NL.GELU_ERF, _gelu_erf, _gelu_erf_grad, "input", (40, 16), (52, 22), 10, 16),
        NonLinearity(NL.SWISH, _swish, _swish_grad, "input", (13, 7), (16, 9), 5, 8),
        NonLinearity(
            NL.HARD_SIGMOID, _hard_sigmoid, _hard_sigmoid_grad, "input", (3, 3), (3, 3), 3, 2
        ),
    )
}
