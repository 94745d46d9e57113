"""Which tensors of a graph share storage, for the transforms that must not move a read
past a write (``autodiff``, ``decompose_sum``)."""

from __future__ import annotations

from tremula.popxl.graph import Graph
from tremula.popxl.ops.base import OPS
from tremula.popxl.tensor import Tensor


class Aliases:
    """Which tensors of a graph share storage: an in-place op's output is its (first)
    modified input; a view's output (``reshape_``, ``concat_``: ``OpDefinition.view``) views all
    its inputs."""

    def __init__(self, graph: Graph) -> None:
        self._parent: dict[int, int] = {}
        for op in graph.ops:
            d = OPS.get(op.type)
            if not op.outputs or d is None:
                continue
            for i, o in op.attrs.get("aliases", ()):  # a merged exchange's in-place loads
                self._parent[self._find(id(op.outputs[o]))] = self._find(id(op.inputs[i]))
            if d.modifies:
                viewed = [op.inputs[d.modifies[0]]]
            elif d.view:
                viewed = list(op.inputs)
            else:
                continue
            for t in viewed:
                self._parent[self._find(id(op.outputs[0]))] = self._find(id(t))

    def _find(self, x: int) -> int:
        while self._parent.get(x, x) != x:
            x = self._parent[x]
        return x

    def same(self, a: Tensor, b: Tensor) -> bool:
        return self._find(id(a)) == self._find(id(b))
