"""popxl-addons' ``cross_entropy_sharded_wr_loss``: a cross-entropy whose classes are
sharded across the IPUs of one replica ("within replica"), as its C++ defines it
(``popxl_addons/ops/cross_entropy_sharded_wr_loss``, ``popxl.addons.ops::
CrossEntropyShardedWR:1`` and ``CrossEntropyShardedGradWR:1``; its binding names the class
``CrossEntropyShardedOp``).

Forward ``CrossEntropyShardedWR(logits_0 .. logits_{S-1}, indices_0 .. indices_{S-1};
ipus)``: shard ``s`` (``logits_s [N, C_s]``, ``indices_s [N]``) lives on IPU ``ipus[s]``.
The log-softmax is over all ``sum(C_s)`` classes (the row maxima and the sums of
exponentials all-reduced across the IPUs); the indices are the true classes over the whole
class axis (the same on every shard), shifted by each shard's first class inside the op.
Outputs: ``loss [N]`` on ``ipus[0]`` (the sum over the shards of each shard's picked
``-log_softmax``, 0 where the class is not its), then ``neg_log_softmax_s [N, C_s]`` on
``ipus[s]``; all of the logits' type.

Gradient ``CrossEntropyShardedGradWR(dloss, loss, nls_0.., logits_0.., indices_0..)`` ->
``dlogits_s = dloss[:, None] * (exp(-nls_s) - onehot_s(indices - start_s))`` on
``ipus[s]`` (``dloss`` copied from ``ipus[0]`` to every shard).

Input ``i`` lives on ``ipus[i % S]``; the grad op's first two inputs on ``ipus[0]`` (the
C++ ``getIntrospection*VirtualGraphId``).
Lowering: ``cross_entropy_sharded_wr_loss_lowering.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from tremula.errors import OpSetupError
from tremula.popxl._ir.graph import Graph
from tremula.popxl._ir.op.base import Op
from tremula.popxl._ir.op.classes import define_class
from tremula.popxl.custom_ops._op_binding import connect
from tremula.popxl.custom_ops.cross_entropy_sharded_loss import (
    check_logits_indices,
    onehot_grad,
    picked,
)
from tremula.popxl.ops.base import create_op, defop
from tremula.popxl.tensor import Tensor, TensorSpec
from tremula.popxl.transforms.grads.base import GradContext, Grads, OutputGrads, grad

__all__ = ["CrossEntropyShardedOp"]

WHAT = "CrossEntropyShardedWROp::setup"


def _shards(specs: Sequence[Any], a: dict[str, Any]) -> int:
    s = len(a["ipus"])
    if s == 0 or len(specs) != 2 * s:
        raise OpSetupError(
            f"{WHAT} number of inputs ({len(specs)}) does not equal twice the number of ipus "
            f"({list(a['ipus'])})."
        )
    return s


def _infer(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    s = _shards(specs, a)
    logits0 = specs[0]
    for i in range(s):
        check_logits_indices(specs[i], specs[s + i], WHAT)
        if specs[i].dtype != logits0.dtype or specs[s + i].dtype != specs[s].dtype:
            raise OpSetupError(f"{WHAT} not all logits (or indices) inputs have the same datatype.")
        if specs[i].shape[0] != logits0.shape[0]:
            raise OpSetupError(f"{WHAT} all logits must have the same number of samples.")
    n = logits0.shape[0]
    return [TensorSpec((n,), logits0.dtype)] + [TensorSpec(x.shape, x.dtype) for x in specs[:s]]


def _grad_infer(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    s = len(a["ipus"])
    if len(specs) != 2 + 3 * s:
        raise OpSetupError(f"CrossEntropyShardedGradWROp: {len(specs)} inputs for {s} shards")
    return [specs[2 + s + i] for i in range(s)]


def _starts(logits: Sequence[np.ndarray]) -> list[int]:
    return [int(v) for v in np.cumsum([0] + [np.shape(x)[-1] for x in logits])[:-1]]


def _ref(arrays: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    s = len(a["ipus"])
    logits = [np.asarray(x, np.float64) for x in arrays[:s]]
    whole = np.concatenate(logits, axis=-1)
    mx = whole.max(axis=-1, keepdims=True)
    nls_whole = -(whole - mx - np.log(np.exp(whole - mx).sum(axis=-1, keepdims=True)))
    nls = np.split(nls_whole, np.cumsum([x.shape[-1] for x in logits])[:-1], axis=-1)
    loss = sum(
        picked(nls[i], np.asarray(arrays[s + i], np.int64) - start)
        for i, start in enumerate(_starts(logits))
    )
    dt = np.asarray(arrays[0]).dtype
    return [np.asarray(loss).astype(dt)] + [x.astype(dt) for x in nls]


def _grad_ref(arrays: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    s = len(a["ipus"])
    dloss, nls, logits = arrays[0], arrays[2 : 2 + s], arrays[2 + s : 2 + 2 * s]
    labels = arrays[2 + 2 * s :]
    return [
        onehot_grad(nls[i], np.asarray(labels[i], np.int64) - start, dloss).astype(
            np.asarray(logits[i]).dtype
        )
        for i, start in enumerate(_starts(logits))
    ]


defop("CrossEntropyShardedWR", _infer, _ref)
defop("CrossEntropyShardedGradWR", _grad_infer, _grad_ref, differentiable=False)


def _span(outs: Iterable[Tensor]) -> Op:
    """The op of ``outs``, placed on no single IPU (it spans them: ``ipu_of``)."""
    op = next(iter(outs)).producer
    assert isinstance(op, Op)
    op.ipu = None
    return op


@grad("CrossEntropyShardedWR")
def _grad(c: GradContext, op: Any, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """The C++ ``getGradOps``: one ``CrossEntropyShardedGradWR`` from the loss's gradient."""
    s = len(op.attrs["ipus"])
    ins = [g[0]] + [c.fwd(t) for t in op.outputs] + [c.fwd(t) for t in op.inputs]
    outs = create_op(
        "CrossEntropyShardedGradWR", ins, {"ipus": op.attrs["ipus"]},
        [f"dlogits_{i}" for i in range(s)],
    )  # fmt: skip
    _span(outs)
    return list(outs) + [None] * s


@define_class
class CrossEntropyShardedWROp(Op):
    """popxl-addons' ``CrossEntropyShardedWROp`` (bound as ``CrossEntropyShardedOp``)."""

    @staticmethod
    def createOpInGraph(
        graph: Graph,
        inputs: Mapping[int, str],
        outputs: Mapping[int, str],
        ipus: Sequence[int],
        settings: Any = None,
    ) -> Op:
        ipus = tuple(int(i) for i in ipus)
        op = connect(
            "CrossEntropyShardedWROp", graph, "CrossEntropyShardedWR", inputs, outputs,
            2 * len(ipus), {"ipus": ipus},
        )  # fmt: skip
        return _span(op.outputs)

    def getIpus(self) -> list[int]:
        return list(self.attrs["ipus"])

    def ipu_of(self, t: Any) -> int | None:
        """Input ``i`` on ``ipus[i % S]``; output 0 on ``ipus[0]``, output ``1 + s`` on
        ``ipus[s]``."""
        ipus = self.attrs["ipus"]
        for i, x in enumerate(self.inputs):
            if x is t:
                return int(ipus[i % len(ipus)])
        for i, x in enumerate(self.outputs):
            if x is t:
                return int(ipus[max(i - 1, 0)])
        return None


@define_class
class CrossEntropyShardedGradWROp(Op):
    """popxl-addons' ``CrossEntropyShardedGradWROp`` (made by autodiff)."""

    def getIpus(self) -> list[int]:
        return list(self.attrs["ipus"])

    def ipu_of(self, t: Any) -> int | None:
        """Inputs 0 and 1 on ``ipus[0]``, input ``2 + k`` on ``ipus[k % S]``; output ``s``
        on ``ipus[s]``."""
        ipus = self.attrs["ipus"]
        for i, x in enumerate(self.inputs):
            if x is t:
                return int(ipus[0 if i < 2 else (i - 2) % len(ipus)])
        for i, x in enumerate(self.outputs):
            if x is t:
                return int(ipus[i])
        return None


CrossEntropyShardedOp = CrossEntropyShardedWROp
