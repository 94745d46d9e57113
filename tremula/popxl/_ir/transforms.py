"""``popart._internal.ir.transforms``: the PopART transforms PopXL applies through its
bindings, over Tremula's own (``tremula.popxl.transforms``):

- ``DecomposeSum().apply(graph)``: what ``popxl.transforms.decompose_sum`` does (PopXL's
  ``decompose_sum`` is this call);
- ``MergeExchange().applyToOps(graph, opIds)`` / ``apply(graph)``: what
  ``popxl.transforms.merge_exchange`` does at the end of its block, for the given ops /
  every exchange of the graph; the ``MultiExchangeOp`` made.

- ``Autodiff().apply(ir, fwdGraphId, gradsProvided, gradsRequired, calledGraphsGradInfo,
  stitchStrategy)``: what ``popxl.transforms.autodiff`` does (PopXL's ``autodiff`` is this
  call), by tensor ids, returning ``{GraphId: BwdGraphInfo}`` for the graph and each graph
  differentiated on the way.

``Ir.applyTransform(Transform.id(), graph)`` applies a graph transform by its id (PopART's
``Ir::applyTransform``). PopART's other transforms (``Prune``, ...) are not bound:
Tremula's IR keeps every op a program made.
"""

from __future__ import annotations

import zlib
from typing import Any, ClassVar

from tremula.errors import PopartException


def _graph(graph: Any, what: str) -> Any:
    g = getattr(graph, "_g", None)
    if g is None:
        raise TypeError(
            f"{what}: expected a popart._internal.ir.Graph (graph._pb_graph), got "
            f"{type(graph).__name__}"
        )
    return g


class _Named:
    """What every PopART transform has: ``id()`` (a number naming the transform class),
    ``getId()`` and ``getName()``."""

    NAME: ClassVar[str] = ""

    @classmethod
    def id(cls) -> int:
        """A stable number for the transform (PopART's ``Transform::id``, what
        ``Ir.applyTransform`` takes)."""
        return zlib.crc32(cls.NAME.encode())

    def getId(self) -> int:
        return type(self).id()

    def getName(self) -> str:
        return self.NAME


class Transform(_Named):
    """PopART's ``Transform`` of a graph: ``apply(graph)``."""

    def apply(self, graph: Any) -> bool:
        raise NotImplementedError


class DecomposeSum(Transform):
    """Decompose each ``Sum`` of more than two inputs into an ``Init`` and in-place
    additions (``popxl.transforms.decompose_sum``)."""

    NAME = "DecomposeSum"

    def apply(self, graph: Any) -> bool:
        from tremula.popxl.transforms.decompose_sum import decompose_sum

        decompose_sum(_graph(graph, "DecomposeSum.apply"))
        return True


class MergeExchange(Transform):
    """Merge host and remote exchanges into ``MultiExchange`` ops
    (``popxl.transforms.merge_exchange``)."""

    NAME = "MergeExchange"

    def apply(self, graph: Any) -> bool:
        """Merge every exchange of the graph (consecutive ops where they cannot run as
        one)."""
        g = _graph(graph, "MergeExchange.apply")
        _merged(g, list(g._ops))
        return True

    def applyToOps(self, graph: Any, include_ops: Any) -> Any:
        """Merge the exchanges among the ops of ids ``include_ops``; the
        ``MultiExchangeOp`` made (the last one, where they cannot run as one and are merged
        into consecutive ops).

        Raises:
            popart_exception: an id no op of the graph has, or no exchange among the ops
                (the graph is left as it was).
        """
        g = _graph(graph, "MergeExchange.applyToOps")
        wanted = {int(i) for i in include_ops}
        ops = [op for op in g._ops if op.id in wanted]
        missing = wanted - {op.id for op in ops}
        if missing:
            raise PopartException(
                f"MergeExchange.applyToOps: graph {g.name!r} has no op of id {sorted(missing)}"
            )
        merged = _merged(g, ops)
        if not merged:
            raise PopartException(
                f"MergeExchange.applyToOps: no host or remote exchange among the ops "
                f"{sorted(wanted)} of graph {g.name!r}"
            )
        return merged[-1]


class Autodiff(_Named):
    """Differentiate a graph (``popxl.transforms.autodiff``), by ids as PopART's
    ``Autodiff`` transform takes them (of the Ir, not of one graph)."""

    NAME = "Autodiff"

    def apply(
        self,
        ir: Any,
        fwdGraphId: Any,
        gradsProvided: Any = None,
        gradsRequired: Any = None,
        calledGraphsGradInfo: Any = None,
        stitchStrategy: Any = None,
    ) -> dict[Any, Any]:
        """The gradient graph of graph ``fwdGraphId`` of ``ir`` (a binding Ir), taking the
        gradients of the tensors of ids ``gradsProvided`` (None: its outputs) and giving
        those of ``gradsRequired`` (None: its inputs), using ``calledGraphsGradInfo``
        (``{GraphId: BwdGraphInfo}``) for graphs it calls.

        Tremula stitches as ``AddFwdOutputs`` / ``SafeAddFwdOutputs`` do: the forward
        values the gradient needs become outputs of the forward graph.

        Returns:
            ``{GraphId: BwdGraphInfo}``: the forward graph's and those of the graphs it
            calls that were differentiated on the way.

        Raises:
            popart_exception: a stitch strategy that recomputes (``RecomputeMinimal``,
                ``RecomputeAllNonInputs``), no graph or tensor of the ids; and what
                ``popxl.transforms.autodiff`` raises.
        """
        from tremula.popxl._ir.core.enums import AutodiffStitchStrategy as Strategy
        from tremula.popxl.transforms.autodiff import autodiff
        from tremula.popxl.transforms.grad_info import GradGraphInfo

        if stitchStrategy not in (None, Strategy.AddFwdOutputs, Strategy.SafeAddFwdOutputs):
            raise PopartException(
                f"Autodiff.apply: stitch strategy {stitchStrategy!r} is not supported by "
                f"Tremula (it adds the forward values the gradient needs as forward outputs: "
                f"AddFwdOutputs / SafeAddFwdOutputs)"
            )
        fwd = ir.getGraph(fwdGraphId)
        called = {
            ir.getGraph(gid)._g: GradGraphInfo._from_pb(ir, ir.getGraph(gid), info)
            for gid, info in dict(calledGraphsGradInfo or {}).items()
        }

        def tensors(ids: Any) -> Any:
            return None if ids is None else [fwd.getTensor(i)._t for i in ids]

        infos = autodiff(
            fwd._g,
            tensors(gradsProvided),
            tensors(gradsRequired),
            called,
            return_all_grad_graphs=True,
        )
        return {g._pb_graph.id: info._pb_bwd_info for g, info in infos.items()}


def _merged(graph: Any, ops: list[Any]) -> list[Any]:
    from tremula.popxl.transforms.merge_exchange import _merge

    return _merge(graph, ops)


#: the bound transforms by id (``Ir.applyTransform``)
TRANSFORMS: dict[int, type[Transform]] = {t.id(): t for t in (DecomposeSum, MergeExchange)}


def apply_transform(transform_id: int, graph: Any) -> None:
    """``Ir.applyTransform``: apply the transform of id ``transform_id`` to ``graph``.

    Raises:
        popart_exception: no bound transform has that id (naming those that are).
    """
    cls = TRANSFORMS.get(int(transform_id))
    if cls is None:
        known = {t.NAME: i for i, t in TRANSFORMS.items()}
        raise PopartException(
            f"Ir.applyTransform: no transform of id {transform_id} is bound by Tremula "
            f"(bound: {known})"
        )
    cls().apply(graph)
