"""popxl-addons' ``layer_norm_distributed``: a layer norm over a hidden dimension sharded
across the replicas of a group (tensor parallel), as its C++ defines it
(``popxl_addons/ops/layer_norm_distributed``, ``popxl.addons.ops::LayerNormDistributed:1``
and ``LayerNormDistributedGrad:1``).

Forward ``LayerNormDistributed(x [N, H], scale [H], bias [H]; epsilon, group)``: each
replica holds ``H`` of the ``H * G`` hidden elements of every sample (``G`` the group's
size). The mean and inverse standard deviation of each sample are over all ``H * G``
elements of its group (``poplin::distributedNormStatistics`` on ``x^T``, the partial sums
all-reduced over the group; the variance ``E[x^2] - mean^2``, or ``E[(x - mean)^2]`` with
PopART's session option ``enableStableNorm``); ``y = (x - mean) * inv_std * scale +
bias`` with this replica's ``scale`` / ``bias`` (``popnn::ln::layerNormalise``). Outputs
``y [N, H]``, ``mean [N]``, ``inv_std_dev [N]``, all of ``x``'s type (float16 / float32).

Gradient ``LayerNormDistributedGrad(x, scale, mean, inv_std_dev, dy)`` -> ``(dx, dscale,
dbias)``, as the C++ ``grow``: with ``xh`` the whitened ``x``, ``dx = inv_std * (dy -
(sum(dy) + xh * sum(dy * xh)) / (H G))`` (``poplin::distributedNormStatisticsGradients``
on ``dy^T``, the two sums all-reduced over the group), ``dscale = sum_N(dy * xh)`` and
``dbias = sum_N(dy)`` on each replica (``popnn::gn::groupNormParamGradients``). As in the
C++, ``dy`` reaches the statistics' gradient unscaled: ``dx`` does not carry the factor
``scale`` that a layer norm's input gradient has, so it is that gradient only where
``scale`` is 1 (popxl-addons' ``LayerNormDistributed`` layer starts from ones). Only ``y``'s
gradient flows back (the C++ ``gradInputInfo``).

NumPy references (the op table's): arrays carry a leading replica axis ``[R, ...]``.
Lowering: ``layer_norm_distributed_lowering.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tremula.errors import OpSetupError, OpSetupTypeError
from tremula.libs.gcl.grouping import ReplicaGrouping as Grouping
from tremula.popxl import dtypes
from tremula.popxl._ir.graph import Graph
from tremula.popxl._ir.op.base import Op
from tremula.popxl._ir.op.classes import define_class
from tremula.popxl.custom_ops._op_binding import connect, grouping
from tremula.popxl.ops.base import create_op, defop
from tremula.popxl.tensor import TensorSpec
from tremula.popxl.transforms.grads.base import GradContext, Grads, OutputGrads, grad

__all__ = ["LayerNormDistributedGradOp", "LayerNormDistributedOp"]

FLOATS = (dtypes.float16, dtypes.float32)


def _check(specs: Sequence[TensorSpec], names: Sequence[str], what: str) -> None:
    x = specs[0]
    if x.dtype not in FLOATS:
        raise OpSetupTypeError(f"{what}: X must be float16 or float32, got {x.dtype}")
    if len(x.shape) != 2:
        raise OpSetupError(f"{what}: X must be [N, H], got shape {x.shape}")
    for name, s in zip(names[1:], specs[1:]):
        if s.dtype != x.dtype:
            raise OpSetupTypeError(f"{what}: {name} is {s.dtype}, X is {x.dtype}")


def _infer(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    what = "LayerNormDistributedOp"
    _check(specs, ("X", "Scale", "Bias"), what)
    x = specs[0]
    for name, s in zip(("Scale", "Bias"), specs[1:]):
        if s.shape != (x.shape[1],):
            raise OpSetupError(
                f"{what}: {name} must be [{x.shape[1]}] (X {x.shape}), got {s.shape}"
            )
    stat = TensorSpec((x.shape[0],), x.dtype)
    return [TensorSpec(x.shape, x.dtype), stat, stat]


def _grad_infer(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    what = "LayerNormDistributedGradOp"
    _check(specs, ("X", "Scale", "Mean", "InvStdDev", "YGrad"), what)
    x = specs[0]
    if specs[4].shape != x.shape or specs[2].shape != specs[3].shape != (x.shape[0],):
        raise OpSetupError(f"{what}: shapes {[s.shape for s in specs]} do not fit X {x.shape}")
    return [TensorSpec(x.shape, x.dtype), specs[1], specs[1]]


def _group_sums(v: np.ndarray, rg: Any) -> np.ndarray:
    """``[R, N]``: each replica's ``v [R, N, H]`` summed over ``H`` and its group."""
    local = v.sum(axis=2)
    return local[rg.grouping.group_matrix].sum(axis=1)[rg.grouping.assignment_array]


def _statistics(x: np.ndarray, a: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Float64 ``(mean, inv_std_dev)`` ``[R, N]`` of ``x [R, N, H]`` over each group."""
    size = x.shape[2] * a["group"].group_size
    mean = _group_sums(x, a["group"]) / size
    var = _group_sums((x - mean[..., None]) ** 2, a["group"]) / size
    return mean, 1.0 / np.sqrt(var + a["epsilon"])


def _ref(arrays: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    x, w, b = (np.asarray(v, np.float64) for v in arrays)
    mean, inv = _statistics(x, a)
    y = (x - mean[..., None]) * inv[..., None] * w[:, None, :] + b[:, None, :]
    dt = np.asarray(arrays[0]).dtype
    return [y.astype(dt), mean.astype(dt), inv.astype(dt)]


def _grad_ref(arrays: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    x, _, mean, inv, dy = (np.asarray(v, np.float64) for v in arrays)
    size = x.shape[2] * a["group"].group_size
    xh = (x - mean[..., None]) * inv[..., None]
    sum_g = _group_sums(dy, a["group"])[..., None]
    sum_gx = _group_sums(dy * xh, a["group"])[..., None]
    dx = inv[..., None] * (dy - (sum_g + xh * sum_gx) / size)
    dt = np.asarray(arrays[0]).dtype
    return [dx.astype(dt), (dy * xh).sum(axis=1).astype(dt), dy.sum(axis=1).astype(dt)]


defop("LayerNormDistributed", _infer, _ref)
defop("LayerNormDistributedGrad", _grad_infer, _grad_ref, differentiable=False)


@grad("LayerNormDistributed")
def _grad(c: GradContext, op: Any, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """The C++ ``getGradOps``: one ``LayerNormDistributedGrad`` from ``y``'s gradient."""
    x, w, _ = op.inputs
    _, mean, inv = op.outputs
    ins = [c.fwd(x), c.fwd(w), c.fwd(mean), c.fwd(inv), g[0]]
    attrs = {"epsilon": op.attrs["epsilon"], "group": op.attrs["group"]}
    dx, dw, db = create_op("LayerNormDistributedGrad", ins, attrs, ["dx", "dscale", "dbias"])
    return [dx, dw, db]


class _Attributes:
    """The C++ ops' getters."""

    attrs: dict[str, Any]

    def getEpsilon(self) -> float:
        return float(self.attrs["epsilon"])

    def getReplicaGrouping(self) -> Grouping:
        return self.attrs["group"]._pb_replica_grouping


@define_class
class LayerNormDistributedOp(_Attributes, Op):
    """popxl-addons' ``LayerNormDistributedOp`` (a ``CollectivesBaseOp`` in PopART)."""

    @staticmethod
    def createOpInGraph(
        graph: Graph,
        inputs: Mapping[int, str],
        outputs: Mapping[int, str],
        epsilon: float,
        group: Grouping,
        settings: Any = None,
    ) -> Op:
        rg = grouping(graph._g.ir, group)
        attrs = {"epsilon": float(epsilon), "group": rg}
        what = "LayerNormDistributedOp"
        return connect(what, graph, "LayerNormDistributed", inputs, outputs, 3, attrs)


@define_class
class LayerNormDistributedGradOp(_Attributes, Op):
    """popxl-addons' ``LayerNormDistributedGradOp`` (made by autodiff)."""
