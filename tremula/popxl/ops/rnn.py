"""``popxl.ops.rnn.gru``: PopLibs' GRU layer (``popnn::gru``) as a differentiable PopXL op.

This is a Tremula extension (PopXL has no recurrent op; TensorFlow-IPU's ``PopnnGRU`` is
the same layer): the time loop runs on the device as one ``Repeat`` (popnn's), not as one
op per step. PopLibs' default cell (``resetAfter = false``), gates in the order reset,
update, candidate::

    r = sigmoid(x_t Wi[0] + h Wo[0] + b[0])      u = sigmoid(x_t Wi[1] + h Wo[1] + b[1])
    c = tanh(x_t Wi[2] + (r * h) Wo[2] + b[2])   h' = u * h + (1 - u) * c

Op types: ``Gru`` (x ``[T, B, I]``, initial_state ``[B, H]``, input_weights ``[3, I, H]``,
output_weights ``[3, H, H]``, biases ``[3, H]``) -> (outputs ``[T, B, H]``, intermediates
``[T, B, 3H]``: r, u, c of every step, for the backward pass); ``GruGrad`` (initial_state,
intermediates, input_weights, output_weights, biases, x, outputs, outputs' gradient) ->
the gradients of x, initial_state and the three weights (``gruBwdWithWU``). References are
NumPy in float64.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tremula.popxl import dtypes
from tremula.popxl.context import make_atomic
from tremula.popxl.ops.base import create_op, defop
from tremula.popxl.ops.shape import check_tensor
from tremula.popxl.tensor import Tensor, TensorSpec

WHAT = "rnn.gru"


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def gru_reference(
    x: np.ndarray, h0: np.ndarray, wi: np.ndarray, wo: np.ndarray, b: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(outputs ``[T, B, H]``, intermediates ``[T, B, 3H]``) in float64."""
    x, h, wi, wo, b = (np.asarray(a, np.float64) for a in (x, h0, wi, wo, b))
    ys, inter = [], []
    for xt in x:
        r = _sigmoid(xt @ wi[0] + h @ wo[0] + b[0])
        u = _sigmoid(xt @ wi[1] + h @ wo[1] + b[1])
        c = np.tanh(xt @ wi[2] + (r * h) @ wo[2] + b[2])
        h = u * h + (1 - u) * c
        ys.append(h)
        inter.append(np.concatenate([r, u, c], axis=-1))
    return np.stack(ys), np.stack(inter)


def gru_grad_reference(
    h0: np.ndarray,
    inter: np.ndarray,
    wi: np.ndarray,
    wo: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    dy: np.ndarray,
) -> tuple[np.ndarray, ...]:
    """(dx, dh0, dWi, dWo, db) in float64 (backpropagation through time)."""
    h0, inter, wi, wo, x, y, dy = (np.asarray(a, np.float64) for a in (h0, inter, wi, wo, x, y, dy))
    T, H = x.shape[0], h0.shape[1]
    h_prev = np.concatenate([h0[None], y[:-1]])
    dx, dwi, dwo = np.zeros_like(x), np.zeros_like(wi), np.zeros_like(wo)
    db, dh = np.zeros((3, H)), np.zeros_like(h0)
    for t in reversed(range(T)):
        r, u, c = inter[t, :, :H], inter[t, :, H : 2 * H], inter[t, :, 2 * H :]
        hp, xt = h_prev[t], x[t]
        dh = dh + dy[t]
        du = dh * (hp - c) * u * (1 - u)
        dc = dh * (1 - u) * (1 - c * c)
        drh = dc @ wo[2].T
        dr = drh * hp * r * (1 - r)
        gates = (dr, du, dc)
        dx[t] = sum(g @ wi[k].T for k, g in enumerate(gates))
        for k, g in enumerate(gates):
            dwi[k] += xt.T @ g
            db[k] += g.sum(0)
        dwo[0] += hp.T @ dr
        dwo[1] += hp.T @ du
        dwo[2] += (r * hp).T @ dc
        dh = dh * u + drh * r + dr @ wo[0].T + du @ wo[1].T
    return dx, dh, dwi, dwo, db


def _shapes(specs: Sequence[TensorSpec]) -> tuple[int, int, int, int]:
    """(T, B, I, H), checking the five operands' shapes and dtypes."""
    x, h0, wi, wo, b = specs
    if len(x.shape) != 3 or len(h0.shape) != 2:
        raise ValueError(
            f"{WHAT}: x must be [time, batch, input] and initial_state [batch, hidden], got "
            f"{x.shape} and {h0.shape}"
        )
    T, B, I = x.shape
    H = h0.shape[1]
    want = {"initial_state": (B, H), "input_weights": (3, I, H), "output_weights": (3, H, H),
            "biases": (3, H)}  # fmt: skip
    for (name, shape), spec in zip(want.items(), (h0, wi, wo, b)):
        if spec.shape != shape:
            raise ValueError(
                f"{WHAT}: {name} must be {list(shape)} for x {list(x.shape)} and a hidden size "
                f"of {H}, got {list(spec.shape)}"
            )
    for spec in specs:
        if spec.dtype != x.dtype:
            raise TypeError(f"{WHAT}: every operand must be {x.dtype} like x, got {spec.dtype}")
    return T, B, I, H


def _gru_spec(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    T, B, _, H = _shapes(specs)
    dt = specs[0].dtype
    return [TensorSpec((T, B, H), dt), TensorSpec((T, B, 3 * H), dt)]


def _gru_ref(xs: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    y, inter = gru_reference(*xs)
    return [y.astype(xs[0].dtype), inter.astype(xs[0].dtype)]


def _grad_spec(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    h0, _, wi, wo, b, x, _, _ = specs
    return [TensorSpec(s.shape, s.dtype) for s in (x, h0, wi, wo, b)]


def _grad_ref(xs: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    h0, inter, wi, wo, _, x, y, dy = xs
    return [g.astype(x.dtype) for g in gru_grad_reference(h0, inter, wi, wo, x, y, dy)]


defop("Gru", _gru_spec, _gru_ref)
defop("GruGrad", _grad_spec, _grad_ref, differentiable=False)


def gru(
    x: Tensor,
    initial_state: Tensor,
    input_weights: Tensor,
    output_weights: Tensor,
    biases: Tensor,
) -> Tensor:
    """Run a GRU layer over a sequence (PopLibs' ``gruFwd``; see the module docstring).

    Args:
        x: ``[time, batch, input]``, float32 or float16 (time-major, as PopnnGRU).
        initial_state: ``[batch, hidden]``, the state before step 0.
        input_weights: ``[3, input, hidden]``, gates reset, update, candidate.
        output_weights: ``[3, hidden, hidden]``.
        biases: ``[3, hidden]``.

    Returns:
        The outputs ``[time, batch, hidden]`` (the last one is the final state).
        Differentiable in all five operands.

    Raises:
        TypeError: an operand that is not a Tensor, or of another dtype than ``x`` (float32
            or float16).
        ValueError: shapes that do not fit together.
    """
    args = (x, initial_state, input_weights, output_weights, biases)
    names = ("x", "initial_state", "input_weights", "output_weights", "biases")
    for t, name in zip(args, names):
        check_tensor(t, WHAT, name)
    if x.dtype not in (dtypes.float32, dtypes.float16):
        raise TypeError(f"{WHAT}: x {x.id!r} must be float32 or float16, got {x.dtype}")
    outputs, _ = create_op("Gru", list(args))
    return outputs


__all__ = ["gru", "gru_grad_reference", "gru_reference"]

make_atomic(globals(), ["gru"])
