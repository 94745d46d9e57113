"""Neural-network ops: ``softmax``, ``nll_loss``, ``nll_loss_with_softmax_grad``,
``group_norm``, ``layer_norm`` and ``batch_norm_inference``.

Losses take probabilities (or log-probabilities) ``[..., classes]`` (the last axis holds the
classes, as PopART flattens them) and integer labels, one per row: shaped like the
probabilities without that axis, or any shape of as many elements (PopART flattens the
labels too); a ``"none"`` loss is shaped like the labels. ``reduction`` is ``"mean"`` (over
the samples not ignored), ``"sum"`` or ``"none"``; a label equal to ``ignore_index``
contributes no loss and no gradient.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, get_args

import numpy as np

from tremula.errors import OpSetupTypeError
from tremula.popxl.ops.base import create_op, defop
from tremula.popxl.ops.shape import check_tensor, norm_axis
from tremula.popxl.tensor import Tensor, TensorSpec, constant

#: The loss reductions (PopXL's ``negative_log_likelihood.REDUCTION_TYPE``).
REDUCTION_TYPE = Literal["mean", "sum", "none"]
REDUCTIONS: tuple[str, ...] = get_args(REDUCTION_TYPE)


def _same(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    return [specs[0]]


def _softmax_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    v = x[0].astype(np.float64)
    e = np.exp(v - np.max(v, axis=a["axis"], keepdims=True))
    return [(e / np.sum(e, axis=a["axis"], keepdims=True)).astype(x[0].dtype)]


defop("Softmax", _same, _softmax_ref, float_inputs=(0,))


def softmax(t: Tensor, axis: int) -> Tensor:
    """Normalised exponentials of ``t`` along ``axis`` (computed stably).

    Raises:
        TypeError: ``t`` is not float16 / float32,
            when the session lowers it (PopART makes the op with any dtype).
        ValueError: ``axis`` is out of range.
    """
    check_tensor(t, "softmax")
    (out,) = create_op("Softmax", [t], {"axis": norm_axis(axis, t.rank, "softmax", repr(t.id))})
    return out


# ---- losses ----


def _check_loss_args(
    probs: Tensor, labels: Tensor, ignore_index: Any, reduction: str, what: str
) -> None:
    check_tensor(probs, what, "probs")
    check_tensor(labels, what, "labels")
    if not labels.dtype.is_int:  # PopART's NllOp::setup: any fixed-point type
        raise OpSetupTypeError(
            f"Expected the label tensor NllOp to be fixed point, not the case for "
            f"{labels.id!r} ({labels.dtype}): {what}: labels must be of an integer type"
        )
    if probs.rank < 1 or labels.nelms != int(np.prod(probs.shape[:-1], dtype=np.int64)):
        raise ValueError(
            f"{what}: labels {labels.id!r} of shape {labels.shape} must hold one label per "
            f"row of probs {probs.id!r} {probs.shape} (its shape without the last (class) "
            f"axis, or any shape of as many elements: PopART flattens both)"
        )
    if reduction not in REDUCTIONS:
        raise ValueError(
            f"Not a valid reduction: {reduction!r} ({what}). Must choose from: {REDUCTIONS}"
        )
    if ignore_index is not None and int(ignore_index) != ignore_index:
        raise ValueError(f"{what}: ignore_index must be an integer, got {ignore_index!r}")


def _loss_shape(probs: TensorSpec, labels: TensorSpec, a: dict[str, Any]) -> TensorSpec:
    """A scalar, or with ``"none"`` one loss per label, shaped like the labels (PopART's)."""
    shape = labels.shape if a["reduction"] == "none" else ()
    return TensorSpec(shape, probs.dtype)


def _gathered(x: np.ndarray, labels: np.ndarray, ignore: int | None) -> tuple[np.ndarray, ...]:
    """(rows [N, C] in float64, labels [N], in range [N], kept (not ignored) [N])."""
    rows = x.reshape(-1, x.shape[-1]).astype(np.float64)
    lab = labels.reshape(-1).astype(np.int64)
    in_range = (lab >= 0) & (lab < rows.shape[1])
    kept = lab != ignore if ignore is not None else np.ones(lab.shape, bool)
    return rows, lab, in_range & kept, kept


def _reduce_ref(per: np.ndarray, kept: np.ndarray, a: dict[str, Any], shape: tuple) -> np.ndarray:
    if a["reduction"] == "none":
        return per.reshape(shape)
    if a["reduction"] == "sum":
        return np.asarray(per.sum())
    return np.asarray(per.sum() / max(kept.sum(), 1))


def _nll_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    rows, lab, valid, kept = _gathered(x[0], x[1], a["ignore_index"])
    picked = rows[np.arange(lab.size), np.where(valid, lab, 0)]
    with np.errstate(divide="ignore"):
        per = np.where(valid, -(picked if a["log_prob"] else np.log(picked)), 0.0)
    return [_reduce_ref(per, kept, a, x[1].shape).astype(x[0].dtype)]


defop(
    "Nll",
    lambda specs, a: [_loss_shape(specs[0], specs[1], a)],
    _nll_ref,
    float_inputs=(0,),
    out="nll_loss_out",
)


def nll_loss(
    probs: Tensor,
    labels: Tensor,
    ignore_index: int | None = None,
    reduction: str = "mean",
    log_prob: bool = False,
) -> Tensor:
    """Negative log-likelihood of ``labels`` under ``probs`` (log-probabilities with
    ``log_prob``): ``-log(probs[..., label])`` per sample, reduced by ``reduction``.

    Raises:
        TypeError: labels that are not integers (``popart.popart_exception`` too, from
            PopART's op setup); probabilities that are not float16 / float32 when the
            session lowers it (PopART makes the op with any dtype).
        ValueError: mismatched shapes, an unknown reduction.
    """
    _check_loss_args(probs, labels, ignore_index, reduction, "nll_loss")
    attrs = {"ignore_index": ignore_index, "reduction": reduction, "log_prob": bool(log_prob)}
    (out,) = create_op("Nll", [probs, labels], attrs)
    return out


def _nll_grad_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    probs, labels, grad = x
    loss = _nll_ref([probs, labels], {**a, "log_prob": False})[0]
    rows, lab, valid, kept = _gathered(probs, labels, a["ignore_index"])
    onehot = np.zeros_like(rows)
    onehot[np.flatnonzero(valid), lab[valid]] = 1.0
    scale = float(np.asarray(grad, dtype=np.float64).reshape(()))
    if a["reduction"] == "mean":
        scale /= max(kept.sum(), 1)
    d = np.where(kept[:, None], (rows - onehot) * scale, 0.0)
    return [loss, d.reshape(probs.shape).astype(probs.dtype)]


defop(
    "NllWithSoftmaxGrad",
    lambda specs, a: [_loss_shape(specs[0], specs[1], a), specs[0]],
    _nll_grad_ref,
    differentiable=False,
    float_inputs=(0, 2),
    out="nll_loss_with_softmax_grad_out",
)


def nll_loss_with_softmax_grad(
    probs: Tensor,
    labels: Tensor,
    loss_grad: float | Tensor = 1,
    ignore_index: int | None = None,
    reduction: str = "mean",
) -> tuple[Tensor, Tensor]:
    """The NLL loss of ``probs`` (a softmax output) and the gradient of the loss with
    respect to the softmax's input: ``loss_grad * (probs - onehot(labels))``, divided by
    the number of samples for ``"mean"``, zero for ignored samples.

    Returns:
        ``(loss, dlogits)``; ``dlogits`` is shaped like ``probs``.

    Raises:
        TypeError, ValueError: as :func:`nll_loss`; a ``loss_grad`` tensor must have one
            element.
    """
    what = "nll_loss_with_softmax_grad"
    _check_loss_args(probs, labels, ignore_index, reduction, what)
    if not isinstance(loss_grad, Tensor):
        loss_grad = constant(float(loss_grad), probs.dtype, name="loss_grad")
    if loss_grad.nelms != 1:
        raise ValueError(f"{what}: loss_grad {loss_grad.id!r} must have one element")
    attrs = {"ignore_index": ignore_index, "reduction": reduction}
    loss, dx = create_op("NllWithSoftmaxGrad", [probs, labels, loss_grad], attrs)
    return loss, dx


# ---- normalisation ----


def _group_norm_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    t, w, b = (v.astype(np.float64) for v in x)
    n, c = t.shape[:2]
    g = t.reshape(n, a["num_groups"], -1)
    mean = g.mean(axis=2, keepdims=True)
    var = g.var(axis=2, keepdims=True)
    inv = 1 / np.sqrt(var + a["eps"])
    y = ((g - mean) * inv).reshape(t.shape)
    bshape = (1, c) + (1,) * (t.ndim - 2)
    dt = x[0].dtype
    return [(y * w.reshape(bshape) + b.reshape(bshape)).astype(dt), *(
        v.reshape(-1).astype(dt) for v in (mean, inv))]  # fmt: skip


def _group_norm_specs(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    stats = TensorSpec((specs[0].shape[0] * a["num_groups"],), specs[0].dtype)
    return [specs[0], stats, stats]


#: outputs: the result, and per sample and group (index ``b * num_groups + g``) the mean
#: and the inverse standard deviation, as PopART's GroupNormOp (its gradient reads them)
defop("GroupNorm", _group_norm_specs, _group_norm_ref, float_inputs=(0, 1, 2))


def group_norm(
    t: Tensor, weight: Tensor, bias: Tensor, num_groups: int, eps: float = 1e-5
) -> Tensor:
    """Group normalisation of ``t`` ``[batch, channels, *field]``: per sample and group of
    ``channels / num_groups`` consecutive channels, ``(x - mean) / sqrt(var + eps)``, then
    ``* weight + bias`` per channel (``weight``, ``bias``: ``[channels]``).

    Raises:
        ValueError: a rank below 2, ``num_groups`` not dividing the channels, parameters of
            another shape.
        TypeError: mixed dtypes; non-float tensors
            when the session lowers it (PopART makes the op with any dtype).
    """
    for arg, v in (("t", t), ("weight", weight), ("bias", bias)):
        check_tensor(v, "group_norm", arg)
    if t.rank < 2:
        raise ValueError(f"group_norm: {t.id!r} of shape {t.shape} must be [batch, channels, ...]")
    c = t.shape[1]
    if int(num_groups) != num_groups or num_groups < 1 or c % num_groups:
        raise ValueError(
            f"group_norm: num_groups {num_groups!r} must divide the {c} channels of {t.id!r}"
        )
    for v in (weight, bias):
        if v.shape != (c,) or v.dtype != t.dtype:
            raise ValueError(
                f"group_norm: {v.id!r} ({v.dtype} {v.shape}) must be {t.dtype} ({c},), "
                f"one value per channel of {t.id!r}"
            )
    attrs = {"num_groups": int(num_groups), "eps": float(eps)}
    out, _mean, _inv_std = create_op("GroupNorm", [t, weight, bias], attrs)
    return out


def layer_norm(t: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    """Layer normalisation: :func:`group_norm` with one group (per sample over every
    non-batch axis; ``weight`` and ``bias`` per channel, axis 1)."""
    return group_norm(t, weight, bias, 1, eps)


def _bn_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    t, scale, bias, mean, var = (v.astype(np.float64) for v in x)
    shape = (1, -1) + (1,) * (t.ndim - 2)
    y = (t - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + a["epsilon"])
    return [(y * scale.reshape(shape) + bias.reshape(shape)).astype(x[0].dtype)]


defop("BatchNormInference", _same, _bn_ref, float_inputs=(0, 1, 2, 3, 4))


def batch_norm_inference(
    t: Tensor,
    scale: Tensor,
    bias: Tensor,
    mean: Tensor,
    var: Tensor,
    epsilon: float = 1e-5,
    momentum: float = 0.9,
) -> Tensor:
    """Batch normalisation with given statistics: per channel (axis 1) of ``t``,
    ``(x - mean) / sqrt(var + epsilon) * scale + bias``; ``momentum`` is unused here.
    It has no gradient: autodiff through it raises (see ``transforms/grads/nn.py``).

    Raises:
        ValueError: a rank below 2 or parameters not ``[channels]``.
        TypeError: non-float tensors,
            when the session lowers it (PopART makes the op with any dtype).
    """
    args = (("t", t), ("scale", scale), ("bias", bias), ("mean", mean), ("var", var))
    for arg, v in args:
        check_tensor(v, "batch_norm_inference", arg)
    if t.rank < 2:
        raise ValueError(f"batch_norm_inference: {t.id!r} of shape {t.shape} must be [N, C, ...]")
    for arg, v in args[1:]:
        if v.shape != (t.shape[1],) or v.dtype != t.dtype:
            raise ValueError(
                f"batch_norm_inference: {arg} {v.id!r} ({v.dtype} {v.shape}) must be "
                f"{t.dtype} ({t.shape[1]},)"
            )
    attrs = {"epsilon": float(epsilon), "momentum": float(momentum)}
    (out,) = create_op("BatchNormInference", [t, scale, bias, mean, var], attrs)
    return out


__all__ = [
    "batch_norm_inference",
    "group_norm",
    "layer_norm",
    "nll_loss",
    "nll_loss_with_softmax_grad",
    "softmax",
]
