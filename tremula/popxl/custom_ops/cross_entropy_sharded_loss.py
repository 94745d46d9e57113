"""popxl-addons' ``cross_entropy_sharded_loss``: a cross-entropy whose classes are sharded
across the replicas of a group (tensor parallel), as its C++ defines it
(``popxl_addons/ops/cross_entropy_sharded_loss``, ``popxl.addons.ops::CrossEntropySharded:1``
and ``CrossEntropyShardedGrad:1``).

Forward ``CrossEntropySharded(logits [N, C], indices [N]; group, availableMemoryProportion)``
-> ``(loss [N], neg_log_softmax [N, C])``, both of the logits' type. Each replica holds
``C`` of the ``C * G`` classes. The log-softmax is over all of them: the row maximum and the
sum of exponentials are all-reduced over the group (MAX, then ADD), ``neg_log_softmax =
-(x - max - log(sum))``. ``indices`` are this replica's (pre-adjusted: the true class minus
the replica's first class); an index outside ``[0, C)`` picks nothing, so each replica's
partial loss is ``neg_log_softmax[n, indices[n]]`` or 0, and ``loss`` is the sum of the
partials over the group (the same on every member).

Gradient ``CrossEntropyShardedGrad(dloss, loss, neg_log_softmax, logits, indices)`` ->
``dlogits = dloss[:, None] * (exp(-neg_log_softmax) - onehot(indices))`` on each replica
(the one-hot row empty where the index is out of this replica's range).

NumPy references (the op table's): arrays carry a leading replica axis ``[R, ...]``.
Lowering: ``cross_entropy_sharded_loss_lowering.py``.
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

__all__ = ["CrossEntropyShardedGradOp", "CrossEntropyShardedOp"]

FLOATS = (dtypes.float16, dtypes.float32)
INDICES = (dtypes.int32, dtypes.uint32)


def check_logits_indices(logits: TensorSpec, indices: TensorSpec, what: str) -> None:
    """The C++ ``setup``'s checks (and the types the lowering takes)."""
    if logits.dtype not in FLOATS:
        raise OpSetupTypeError(f"{what} logits must be float16 or float32, got {logits.dtype}")
    if indices.dtype not in INDICES:
        raise OpSetupTypeError(f"{what} indices must be int32 or uint32, got {indices.dtype}")
    if len(logits.shape) != 2:
        raise OpSetupError(
            f"{what} logits must be of rank 2. e.g. (n_samples, sharded_n_classes), got "
            f"shape {logits.shape}"
        )
    if len(indices.shape) != 1:
        raise OpSetupError(
            f"{what} indices must be of rank 1. e.g. (n_samples,), got shape {indices.shape}"
        )
    if logits.shape[0] != indices.shape[0]:
        raise OpSetupError(
            f"{what} indices and logits must have the same number of samples: logits "
            f"{logits.shape}, indices {indices.shape}"
        )


def _infer(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    logits, indices = specs
    check_logits_indices(logits, indices, "CrossEntropyShardedOp::setup")
    return [TensorSpec((logits.shape[0],), logits.dtype), TensorSpec(logits.shape, logits.dtype)]


def _grad_infer(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    dloss, _, nls, logits, indices = specs
    check_logits_indices(logits, indices, "CrossEntropyShardedGradOp::setup")
    if nls.shape != logits.shape or dloss.shape != indices.shape:
        raise OpSetupError(
            f"CrossEntropyShardedGradOp::setup shapes {[s.shape for s in specs]} do not fit "
            f"logits {logits.shape}"
        )
    return [logits]


def neg_log_softmax(logits: np.ndarray, members: np.ndarray, assignment: np.ndarray) -> np.ndarray:
    """Float64 ``-log_softmax`` of ``logits [R, N, C]`` over each group's classes
    (``members``: ``[groups, G]`` replicas; ``assignment``: each replica's group)."""
    x = np.asarray(logits, np.float64)
    mx = x.max(axis=2)[members].max(axis=1)[assignment]  # [R, N]
    e = np.exp(x - mx[..., None]).sum(axis=2)[members].sum(axis=1)[assignment]
    return -(x - mx[..., None] - np.log(e)[..., None])


def picked(nls: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """``nls[r, n, indices[r, n]]`` where the index is in range, else 0: ``[R, N]``."""
    c = nls.shape[-1]
    idx = np.asarray(indices, np.int64)
    ok = (idx >= 0) & (idx < c)
    taken = np.take_along_axis(nls, np.where(ok, idx, 0)[..., None], axis=-1)[..., 0]
    return np.where(ok, taken, 0.0)


def _ref(arrays: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    logits, indices = arrays
    g = a["group"].grouping
    nls = neg_log_softmax(logits, g.group_matrix, g.assignment_array)
    loss = picked(nls, indices)[g.group_matrix].sum(axis=1)[g.assignment_array]
    dt = np.asarray(logits).dtype
    return [loss.astype(dt), nls.astype(dt)]


def onehot_grad(nls: np.ndarray, indices: np.ndarray, dloss: np.ndarray) -> np.ndarray:
    """``dloss[..., None] * (exp(-nls) - onehot(indices))`` in float64, empty rows of the
    one-hot where an index is out of ``[0, C)``."""
    c = nls.shape[-1]
    idx = np.asarray(indices, np.int64)
    onehot = (idx[..., None] == np.arange(c)).astype(np.float64)
    return np.asarray(dloss, np.float64)[..., None] * (
        np.exp(-np.asarray(nls, np.float64)) - onehot
    )


def _grad_ref(arrays: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    dloss, _, nls, logits, indices = arrays
    return [onehot_grad(nls, indices, dloss).astype(np.asarray(logits).dtype)]


defop("CrossEntropySharded", _infer, _ref)
defop("CrossEntropyShardedGrad", _grad_infer, _grad_ref, differentiable=False)


@grad("CrossEntropySharded")
def _grad(c: GradContext, op: Any, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """The C++ ``getGradOps``: one ``CrossEntropyShardedGrad`` from the loss's gradient
    (its inputs as the C++ ``gradInputInfo`` lists them)."""
    logits, indices = op.inputs
    loss, nls = op.outputs
    ins = [g[0], c.fwd(loss), c.fwd(nls), c.fwd(logits), c.fwd(indices)]
    attrs = {"available_memory_proportion": op.attrs["available_memory_proportion"]}
    (dlogits,) = create_op("CrossEntropyShardedGrad", ins, attrs, ["dlogits"])
    return [dlogits, None]


class _MemoryProportion:
    """The C++ ops' ``availableMemoryProportion`` accessors (popxl-addons' transform
    ``available_memory_proportion`` sets it on every op that has the setter)."""

    attrs: dict[str, Any]

    def getAvailableMemoryProportion(self) -> float:
        return float(self.attrs["available_memory_proportion"])

    def setAvailableMemoryProportion(self, value: Any) -> None:
        self.attrs["available_memory_proportion"] = proportion(value)


def proportion(value: Any) -> float:
    """An available memory proportion (a number or an ``OptionalFloat``) in ``(0, 1]``."""
    v = getattr(value, "value", value)
    if v is None or isinstance(v, bool) or not 0 < float(v) <= 1:
        raise OpSetupError(f"availableMemoryProportion {v!r} is not in (0, 1]")
    return float(v)


@define_class
class CrossEntropyShardedOp(_MemoryProportion, Op):
    """popxl-addons' ``CrossEntropyShardedOp``."""

    @staticmethod
    def createOpInGraph(
        graph: Graph,
        inputs: Mapping[int, str],
        outputs: Mapping[int, str],
        group: Grouping,
        availableMemoryProportion: float,
        settings: Any = None,
    ) -> Op:
        rg = grouping(graph._g.ir, group)
        attrs = {
            "group": rg,
            "available_memory_proportion": proportion(availableMemoryProportion),
        }
        what = "CrossEntropyShardedOp"
        return connect(what, graph, "CrossEntropySharded", inputs, outputs, 2, attrs)

    def getGroup(self) -> Grouping:
        return self.attrs["group"]._pb_replica_grouping


@define_class
class CrossEntropyShardedGradOp(_MemoryProportion, Op):
    """popxl-addons' ``CrossEntropyShardedGradOp`` (made by autodiff)."""
