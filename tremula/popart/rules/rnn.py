"""Recurrent ONNX ops (LSTM, GRU, RNN) unrolled into PopXL ops over the time steps: the input
projections of every step in one matmul, then per step the recurrent matmul and the gates.
Autodiff differentiates the unrolled graph like any other.

ONNX layouts: X ``[seq, batch, input]``, W ``[dirs, gates * H, input]``, R ``[dirs, gates *
H, H]``, B ``[dirs, 2 * gates * H]`` (input biases, then recurrent ones), initial states
``[dirs, batch, H]``; outputs Y ``[seq, dirs, batch, H]`` and the last state(s)
``[dirs, batch, H]``. Gate order: LSTM ``i o f c``, GRU ``z r h``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tremula.popxl import ops

_ACTIVATIONS = {"Sigmoid": ops.sigmoid, "Tanh": ops.tanh, "Relu": ops.relu}
_DEFAULTS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}
_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _gate(t: Any, k: int, H: int) -> Any:
    return ops.slice(t, [k * H], [(k + 1) * H], [1], [1])


def _check(node: Any, dirs: int) -> list[Callable[..., Any]]:
    kind = node.op_type
    if node.has(4):
        raise node.error("sequence_lens is not supported (every sequence has the full length)")
    if kind == "LSTM" and node.has(7):
        raise node.error("LSTM peepholes (input P) are not supported")
    if node.attr("clip") is not None or int(node.attr("layout", 0)):
        raise node.error("clip and layout=1 are not supported")
    if kind == "LSTM" and int(node.attr("input_forget", 0)):
        raise node.error("input_forget=1 is not supported")
    names = node.attr("activations") or _DEFAULTS[kind] * dirs
    unknown = [a for a in names if a not in _ACTIVATIONS]
    if unknown or node.attr("activation_alpha") or node.attr("activation_beta"):
        raise node.error(f"activations {names} are not supported (supported: {list(_ACTIVATIONS)})")
    return [_ACTIVATIONS[a] for a in names]


def _state(node: Any, i: int, d: int, batch: int, H: int, dtype: Any) -> Any:
    if node.has(i):
        return ops.reshape(ops.slice(node.tensor(i), [d], [d + 1], [1], [0]), (batch, H))
    zeros = np.zeros((batch, H), dtype.as_numpy())
    return node.cx.constant(f"{node.proto.output[0] or node.where}/zero_state", zeros)


def _lstm_step(g: Any, h: Any, c: Any, H: int, act: list) -> tuple[Any, Any]:
    i, o, f, cc = (_gate(g, k, H) for k in range(4))
    i, o, f, cc = act[0](i), act[0](o), act[0](f), act[1](cc)
    c = ops.add(ops.mul(f, c), ops.mul(i, cc))
    return ops.mul(o, act[2](c)), c


def _gru_step(gx: Any, h: Any, R: Any, rb: Any, H: int, act: list, lbr: bool) -> Any:
    rz = ops.matmul(h, _gate_rows(R, 0, 2 * H))
    if rb is not None:
        rz = ops.add(rz, ops.slice(rb, [0], [2 * H], [1], [0]))
    z = act[0](ops.add(_gate(gx, 0, H), _gate(rz, 0, H)))
    r = act[0](ops.add(_gate(gx, 1, H), _gate(rz, 1, H)))
    rh = _gate_rows(R, 2 * H, 3 * H)
    bh = None if rb is None else ops.slice(rb, [2 * H], [3 * H], [1], [0])
    if lbr:
        hr = ops.matmul(h, rh)
        hr = hr if bh is None else ops.add(hr, bh)
        cand = act[1](ops.add(_gate(gx, 2, H), ops.mul(r, hr)))
    else:
        hr = ops.matmul(ops.mul(r, h), rh)
        hr = hr if bh is None else ops.add(hr, bh)
        cand = act[1](ops.add(_gate(gx, 2, H), hr))
    return ops.add(ops.mul(ops.sub(1.0, z), cand), ops.mul(z, h))  # type: ignore[arg-type]


def _gate_rows(RT: Any, lo: int, hi: int) -> Any:
    """Columns ``lo:hi`` of a transposed weight ``[H, gates * H]``."""
    return ops.slice(RT, [lo], [hi], [1], [1])


def _direction(node: Any, d: int, reverse: bool, act: list) -> tuple[list[Any], list[Any]]:
    """Run one direction: the per-step hidden states (in time order) and the last state(s)."""
    kind, x = node.op_type, node.tensor(0)
    T, batch, _ = x.shape
    G, H = _GATES[kind], int(node.attr("hidden_size"))
    W = ops.reshape(ops.slice(node.tensor(1), [d], [d + 1], [1], [0]), (G * H, x.shape[2]))
    R = ops.reshape(ops.slice(node.tensor(2), [d], [d + 1], [1], [0]), (G * H, H))
    WT, RT = ops.transpose(W), ops.transpose(R)
    gx = ops.matmul(ops.reshape(x, (T * batch, x.shape[2])), WT)  # every step's projection
    wb = rb = None
    if node.has(3):
        B = ops.reshape(ops.slice(node.tensor(3), [d], [d + 1], [1], [0]), (2 * G * H,))
        wb, rb = ops.slice(B, [0], [G * H], [1], [0]), ops.slice(B, [G * H], [2 * G * H], [1], [0])
        gx = ops.add(gx, wb)
    if kind != "GRU" and rb is not None:
        gx = ops.add(gx, rb)
        rb = None
    gx = ops.reshape(gx, (T, batch, G * H))
    h = _state(node, 5, d, batch, H, x.dtype)
    c = _state(node, 6, d, batch, H, x.dtype) if kind == "LSTM" else None
    lbr = bool(node.attr("linear_before_reset", 0))
    hs = []
    for t in reversed(range(T)) if reverse else range(T):
        g = ops.reshape(ops.slice(gx, [t], [t + 1], [1], [0]), (batch, G * H))
        if kind == "GRU":
            h = _gru_step(g, h, RT, rb, H, act, lbr)
        else:
            g = ops.add(g, ops.matmul(h, RT))
            h, c = _lstm_step(g, h, c, H, act) if kind == "LSTM" else (act[0](g), None)
        hs.append(h)
    if reverse:
        hs.reverse()
    return hs, [h] if c is None else [h, c]


def _recurrent(node: Any) -> list[Any]:
    direction = node.attr("direction", "forward")
    dirs = 2 if direction == "bidirectional" else 1
    act = _check(node, dirs)
    n_act = len(_DEFAULTS[node.op_type])
    runs = [
        _direction(node, d, direction == "reverse" or d == 1, act[d * n_act : (d + 1) * n_act])
        for d in range(dirs)
    ]
    T = len(runs[0][0])
    batch, H = runs[0][0][0].shape
    per_step = [
        ops.concat([ops.reshape(run[0][t], (1, 1, batch, H)) for run in runs], 1) for t in range(T)
    ]
    Y = ops.concat(per_step, 0) if T > 1 else per_step[0]
    last = [
        ops.concat([ops.reshape(run[1][k], (1, batch, H)) for run in runs], 0)
        for k in range(len(runs[0][1]))
    ]
    return [Y, *last]


RNN: dict[str, Callable[[Any], list]] = {"LSTM": _recurrent, "GRU": _recurrent, "RNN": _recurrent}
