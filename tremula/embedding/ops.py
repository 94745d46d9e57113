"""The host embedding's PopXL ops and the lookup's gradient rule.

* ``HostEmbeddingLookup`` (indices) -> ``[*indices.shape, encoding]`` of the table's dtype.
  Attributes: ``embedding`` (the :class:`~tremula.embedding.HostEmbedding`), ``clip``
  (clamp the indices into ``[0, tokens)``, else refuse out-of-range ones at run time) and
  ``dedup`` (None, or the capacity of the deduplicated index list sent to the host).
* ``HostEmbeddingUpdate`` (indices, grad) -> nothing: sends a step's gradients of the rows
  looked up to the table's optimizer (host mode: to the host; remote-buffer mode: a
  read-add-write of the remote buffer). Same attributes.

The lookup is differentiable with a rule that has a side effect (``grad_side_effect``):
``autodiff`` of a graph that looks a trainable embedding up puts a ``HostEmbeddingUpdate``
in the grad graph whenever a gradient reaches the lookup, whatever ``grads_required`` names
(the indices, integers, get no gradient). An embedding with no optimizer spec (or a
learning rate of 0) gets no update op: inference only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tremula.errors import EmbeddingError
from tremula.popxl import dtypes, ops
from tremula.popxl.context import atomic
from tremula.popxl.ops.base import OpNode, create_op, defop
from tremula.popxl.tensor import Tensor, TensorSpec
from tremula.popxl.transforms.grads.base import GradContext, Grads, OutputGrads, grad

if TYPE_CHECKING:
    from tremula.embedding.host_embedding import HostEmbedding

LOOKUP, UPDATE = "HostEmbeddingLookup", "HostEmbeddingUpdate"


def _lookup_spec(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    emb = a["embedding"]
    return [TensorSpec((*specs[0].shape, emb.shape[1]), emb.dtype)]


def _lookup_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    table = a["embedding"].table.array
    idx = np.asarray(x[0]).astype(np.int64)
    if a["clip"]:
        idx = np.clip(idx, 0, table.shape[0] - 1)
    return [np.take(table, idx, axis=0)]


def _update_spec(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    emb = a["embedding"]
    want = (*specs[0].shape, emb.shape[1])
    if specs[1].shape != want or specs[1].dtype != emb.dtype:
        raise ValueError(
            f"host embedding {emb.name!r}: the gradient must be {emb.dtype} {want} for "
            f"indices of shape {specs[0].shape}, got {specs[1].dtype} {specs[1].shape}"
        )
    return []


defop(LOOKUP, _lookup_spec, _lookup_ref, grad_side_effect=True)
defop(UPDATE, _update_spec, None, differentiable=False)


def _check_dedup(dedup: Any, n: int, tokens: int, name: str) -> int | None:
    if dedup is False or dedup is None:
        return None
    if dedup is True:
        return max(1, min(n, tokens))
    if isinstance(dedup, (int, np.integer)) and not isinstance(dedup, bool) and dedup >= 1:
        return int(min(dedup, max(n, 1)))
    raise EmbeddingError(
        f"host embedding {name!r}: deduplicate must be False, True or a capacity >= 1 (the "
        f"most distinct indices one lookup sends), got {dedup!r}"
    )


@atomic
def lookup(
    embedding: HostEmbedding, indices: Tensor, clip_indices: bool = True, deduplicate: Any = False
) -> Tensor:
    """A ``HostEmbeddingLookup`` of ``embedding`` (see ``HostEmbedding.lookup``)."""
    name = embedding.name
    if not isinstance(indices, Tensor):
        raise TypeError(
            f"host embedding {name!r}: lookup indices must be a popxl Tensor, got "
            f"{type(indices).__name__}"
        )
    if not indices.dtype.is_int:
        raise TypeError(
            f"host embedding {name!r}: lookup indices {indices.id!r} must be integers "
            f"(int32), got {indices.dtype}"
        )
    if not isinstance(clip_indices, bool):
        raise TypeError(f"host embedding {name!r}: clip_indices must be a bool")
    n = int(np.prod(indices.shape, dtype=np.int64))
    dedup = _check_dedup(deduplicate, n, embedding.shape[0], name)
    if indices.dtype != dtypes.int32:
        indices = ops.cast(indices, dtypes.int32)
    attrs = {"embedding": embedding, "clip": clip_indices, "dedup": dedup}
    (out,) = create_op(LOOKUP, [indices], attrs, names=[f"{name}/lookup"])
    return out


@grad(LOOKUP)
def _lookup_grad(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """Send the output's gradient to the table's optimizer (if the embedding trains)."""
    emb = op.attrs["embedding"]
    if emb.trainable:
        create_op(UPDATE, [c.fwd(op.inputs[0]), g[0]], dict(op.attrs))
    return [None]


def uses(graphs: Sequence[Any], embedding: HostEmbedding, op_type: str | None = None) -> bool:
    """Whether an op of ``graphs`` (of ``op_type``, or either type) uses ``embedding``."""
    types = (op_type,) if op_type else (LOOKUP, UPDATE)
    return any(
        op.type in types and op.attrs.get("embedding") is embedding for g in graphs for op in g.ops
    )
