"""popxl-addons' ``RotaryPosEmbed`` custom op (``rotary_pos_embed_binding``), served in
Python: rotary positional embeddings (RoPE), as its C++ source defines them.

``RotaryPosEmbed(x, sin, cos)``, attribute ``rotary_dim`` (even):

- ``x`` is rank 4, ``[batch, seq, heads, hh]`` (the layout its opx broadcasts the tables
  over; GPT-J passes ``[batch, seq, heads, head_size]``), ``sin`` and ``cos`` rank 3,
  ``[1 or batch, seq, rotary_dim / 2]``;
- the first ``r = min(rotary_dim, hh)`` features are ``r / 2`` complex numbers, real and
  imaginary parts interleaved; each is rotated by its angle:
  ``y[2i] = x[2i] cos_i - x[2i+1] sin_i``, ``y[2i+1] = x[2i+1] cos_i + x[2i] sin_i``,
  with the tables broadcast over the heads; the other features pass unchanged;
- the output has ``x``'s shape and dtype.

``RotaryPosEmbedGrad(dy, sin, cos)`` (its ``getGradOps``) rotates back by the same angles
(the transpose): ``dx[2i] = dy[2i] cos_i + dy[2i+1] sin_i``, ``dx[2i+1] = dy[2i+1] cos_i -
dy[2i] sin_i``. ``sin`` and ``cos`` get no gradient (``gradOutToNonGradIn`` maps only
``x``); the grad op has no gradient of its own.

Beyond the C++ setup's checks (ranks, even ``rotary_dim``), shapes and dtypes that its
``popops::map`` calls would refuse when lowering are refused here, at op creation: the
tables must broadcast against ``[batch, seq, heads, r / 2]`` and share ``x``'s dtype.
Lowering: ``custom_ops/rotary_pos_embed_lowering.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tremula.errors import OpSetupError, OpSetupTypeError
from tremula.popxl.custom_ops._op_binding import OperatorIdentifier, connect
from tremula.popxl.ops.base import OpNode, create_op, defop
from tremula.popxl.tensor import TensorSpec
from tremula.popxl.transforms.grads.base import (
    GradContext,
    Grads,
    OutputGrads,
    grad,
)

__all__ = ["RotaryPosEmbedOp", "rotate", "rotate_grad"]

DOMAIN = "popxl.addons.ops"
FWD = "RotaryPosEmbed"
GRAD = "RotaryPosEmbedGrad"
OPIDS = (
    OperatorIdentifier(DOMAIN, FWD, 1, (3, 3), 1),
    OperatorIdentifier(DOMAIN, GRAD, 1, (3, 3), 1),
)


def rotated_features(hh: int, rotary_dim: int) -> int:
    """How many leading features are rotated: ``rotary_dim``, or all when it is larger
    (the opx slices only when ``rotary_dim < hh``)."""
    return min(int(rotary_dim), int(hh))


def table_shape(x_shape: Sequence[int], r: int) -> tuple[int, ...]:
    """The shape the tables are broadcast to: ``[batch, seq, heads, r / 2]``."""
    b, s, h, _ = x_shape
    return (b, s, h, r // 2)


def _infer(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    x, sin, cos = specs
    op = "RotaryPosEmbedOp"
    rotary_dim = int(a["rotary_dim"])
    if rotary_dim % 2 or rotary_dim < 0:
        raise OpSetupError(f"{op}::{op} rotary_dim must be a multiple of 2 (got {rotary_dim})")
    if len(x.shape) != 4:
        raise OpSetupError(
            f"{op}::setup x should have rank 4 (batch, seq, heads, hh), got shape {x.shape}"
        )
    if len(sin.shape) != 3 or len(cos.shape) != 3:
        raise OpSetupError(
            f"{op}::setup trig functions should have rank 3 (1 or batch, seq, hh/2), got "
            f"sin {sin.shape} and cos {cos.shape}"
        )
    r = rotated_features(x.shape[3], rotary_dim)
    if r % 2:
        raise OpSetupError(
            f"{op}: the {r} rotated features of x {x.shape} must be an even number "
            f"(pairs of real and imaginary parts)"
        )
    want = table_shape(x.shape, r)
    for name, t in (("sin", sin), ("cos", cos)):
        b, s, k = t.shape
        try:
            np.broadcast_shapes((b, s, 1, k), want)
        except ValueError:
            raise OpSetupError(
                f"{op}: {name} of shape {t.shape} does not broadcast over x {x.shape}: it "
                f"must be [1 or {want[0]}, {want[1]}, {want[3]}] (rotary_dim {rotary_dim}: "
                f"{r // 2} angles per position)"
            ) from None
        if t.dtype != x.dtype:
            raise OpSetupTypeError(
                f"{op}: {name} must have the dtype of x ({x.dtype}), got {t.dtype}"
            )
    return [TensorSpec(x.shape, x.dtype)]


def _apply(
    x: np.ndarray, sin: np.ndarray, cos: np.ndarray, rotary_dim: int, sign: int
) -> np.ndarray:
    """Rotate the first ``r`` features of ``x`` by the angles of the tables (``sign=-1``
    backwards), in float64."""
    r = rotated_features(x.shape[3], rotary_dim)
    out = np.array(x, dtype=np.float64)
    pairs = out[..., :r].reshape(*x.shape[:3], r // 2, 2)
    re, im = pairs[..., 0].copy(), pairs[..., 1].copy()
    s = np.asarray(sin, np.float64)[:, :, None, :] * sign
    c = np.asarray(cos, np.float64)[:, :, None, :]
    pairs[..., 0] = re * c - im * s
    pairs[..., 1] = im * c + re * s
    out[..., :r] = pairs.reshape(*x.shape[:3], r)
    return out


def rotate(x: np.ndarray, sin: np.ndarray, cos: np.ndarray, rotary_dim: int) -> np.ndarray:
    """NumPy reference of ``RotaryPosEmbed`` (float64; module docstring)."""
    return _apply(x, sin, cos, rotary_dim, 1)


def rotate_grad(dy: np.ndarray, sin: np.ndarray, cos: np.ndarray, rotary_dim: int) -> np.ndarray:
    """NumPy reference of ``RotaryPosEmbedGrad``: the rotation by the opposite angles."""
    return _apply(dy, sin, cos, rotary_dim, -1)


def _fwd_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    x0, sin, cos = x
    return [rotate(x0, sin, cos, a["rotary_dim"]).astype(x0.dtype)]


def _grad_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    dy, sin, cos = x
    return [rotate_grad(dy, sin, cos, a["rotary_dim"]).astype(dy.dtype)]


defop(FWD, _infer, _fwd_ref)
defop(GRAD, _infer, _grad_ref, differentiable=False)  # the C++ grad op has no getGradOps


@grad(FWD)
def _rotary_grad(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """``dx = RotaryPosEmbedGrad(dy, sin, cos)``; no gradient for the tables."""
    _, sin, cos = op.inputs
    if not need[0]:
        return [None, None, None]
    attrs = {"rotary_dim": op.attrs["rotary_dim"]}
    (dx,) = create_op(GRAD, [g[0], c.fwd(sin), c.fwd(cos)], attrs)
    return [dx, None, None]


class RotaryPosEmbedOp:
    """popxl-addons' ``RotaryPosEmbedOp`` binding (``rotary_pos_embed_binding``)."""

    @staticmethod
    def createOpInGraph(
        graph: Any,
        inputs: Mapping[int, str],
        outputs: Mapping[int, str],
        rotaryDim: int,
        settings: Any = None,
    ) -> OpNode:
        """Connect ``RotaryPosEmbed`` with inputs ``{0: x, 1: sin, 2: cos}``."""
        if isinstance(rotaryDim, bool) or not isinstance(rotaryDim, (int, np.integer)):
            raise TypeError(
                f"RotaryPosEmbedOp.createOpInGraph: rotaryDim must be an int, got "
                f"{type(rotaryDim).__name__}"
            )
        if rotaryDim < 0:  # a uint32_t in C++
            raise TypeError(
                f"RotaryPosEmbedOp.createOpInGraph: rotaryDim must be a non-negative int "
                f"(uint32), got {rotaryDim}"
            )
        attrs = {"rotary_dim": int(rotaryDim)}
        return connect("RotaryPosEmbedOp", graph, FWD, inputs, outputs, 3, attrs)
