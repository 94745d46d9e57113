"""PopART's inplacing-ambiguity check (``Session::checkInplacingAmbiguity``, which PopXL's
``Ir`` enables and ``popxl.Session`` runs when it prepares the Ir).

Within a graph PopART may schedule ops in any order that keeps their data dependencies
and topological constraints (``in_sequence``, ``TopoCons``). An op that writes a tensor in
place (``OpDefinition.modifies``: ``add_``, ``+=``, the var updates, a call's by-reference
inputs ...) and another op that reads or writes the same memory (the tensor, a view of it,
an in-place result aliasing it), with neither ordered before the other, give a result that
depends on that schedule: PopART refuses the program with ``popart_exception`` "Inplacing
ambiguity detected.".

The analysis (of the main graph, as PopART's; :func:`find_ambiguity` takes any graph):

- order: the transitive closure of data edges (an op after the producers of its inputs)
  and topological constraints; ops of different execution contexts run in different
  programs, so they are ordered;
- memory: alias classes from the ops whose outputs share their inputs' memory (views,
  in-place results; ``_ir.tensor.aliases_of``), and, within a class, the elements each
  tensor covers (so disjoint in-place slices of one tensor do not conflict);
- a conflict: a modifier and another op using an overlapping alias, unordered. Pure view
  ops (``reshape_``, ``slice_`` ...) only name memory, so they use nothing; ops reading a
  tensor only for its layout (the destination of ``host_load`` / ``remote_load``) neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tremula.errors import PopartException

if TYPE_CHECKING:
    from tremula.popxl.graph import Graph
    from tremula.popxl.ir import Ir
    from tremula.popxl.ops.base import OpNode
    from tremula.popxl.tensor import Tensor

#: inputs an op reads for their layout only (the destination tensor of a load)
_LAYOUT_ONLY = {"HostLoad": (0,), "RemoteLoad": (0,)}

#: alias classes larger than this many elements are taken to overlap wherever they meet
#: (their element maps would cost more than the check is worth)
_REGION_LIMIT = 1 << 22


@dataclass(frozen=True)
class Ambiguity:
    """Two unordered ops of ``graph``: ``modifier`` writes ``modified`` in place and
    ``other`` reads (or also writes) ``used``, which shares memory with it."""

    graph: Graph
    modifier: OpNode
    modified: Tensor
    other: OpNode
    used: Tensor
    other_writes: bool

    def message(self) -> str:
        g = self.graph
        where = "the main graph" if g is g.ir.main_graph else f"graph {g.name!r}"
        how = "also modifies" if self.other_writes else "reads"
        same = self.used is self.modified
        what = "it" if same else f"{self.used.id!r}, which shares memory with it"
        return (
            f"Inplacing ambiguity detected. In {where}, op {self.modifier.describe()} "
            f"modifies tensor {self.modified.id!r} in place and op {self.other.describe()} "
            f"{how} {what}, and neither op is ordered before the other by a data "
            f"dependency or a topological constraint, so the result depends on the "
            f"schedule. Create the ops inside `with popxl.in_sequence():`, or make the "
            f"later op use the output of the earlier one."
        )


def check_inplacing_ambiguity(ir: Ir) -> None:
    """Raise if the main graph of ``ir`` has an inplacing ambiguity. As PopART's check
    (which grows its alias model from the main graph), subgraphs are not searched: a call
    counts as one op that reads its inputs and writes its by-reference ones.

    Raises:
        PopartException: ``popart.popart_exception``, "Inplacing ambiguity detected. ..."
            naming the graph, the two ops and the tensor.
    """
    found = find_ambiguity(ir.main_graph)
    if found is not None:
        raise PopartException(found.message())


def find_ambiguity(graph: Graph) -> Ambiguity | None:
    """The first inplacing ambiguity of ``graph`` (in schedule order), or None."""
    from tremula.popxl._ir.graph import schedule

    ops = schedule(graph)
    if not any(op.modified for op in ops):
        return None
    ancestors = _ancestors(graph, ops)
    index = {id(op): i for i, op in enumerate(ops)}
    classes = _AliasClasses(ops)
    users: dict[int, list[tuple[OpNode, Tensor, bool]]] = {}
    for op in ops:
        if op.definition.view and not op.modified:
            continue  # names memory, uses none
        skip = _LAYOUT_ONLY.get(op.type, ())
        for k, t in enumerate(op.inputs):
            if t is None:
                continue
            writes = k in op.modified
            if k in skip and not writes:
                continue
            users.setdefault(classes.find(t), []).append((op, t, writes))
    for m in ops:
        for k in m.modified:
            t = m.inputs[k]
            if t is None:
                continue
            for other, u, writes in users.get(classes.find(t), ()):
                if other is m or other.execution_context != m.execution_context:
                    continue
                i, j = index[id(m)], index[id(other)]
                if (ancestors[j] >> i) & 1 or (ancestors[i] >> j) & 1:
                    continue
                if classes.overlap(t, u):
                    return Ambiguity(graph, m, t, other, u, writes)
    return None


def _ancestors(graph: Graph, ops: list[OpNode]) -> list[int]:
    """Per op (in ``ops``' topological order), the bit set of the ops ordered before it by
    data dependencies and topological constraints."""
    index = {id(op): i for i, op in enumerate(ops)}
    producer = {id(t): index[id(op)] for op in ops for t in op.outputs if t is not None}
    preds: list[set[int]] = [set() for _ in ops]
    for i, op in enumerate(ops):
        for t in op.inputs:
            if t is not None and id(t) in producer:
                preds[i].add(producer[id(t)])
    for before, after in graph.topocons():
        if id(before) in index and id(after) in index:
            preds[index[id(after)]].add(index[id(before)])
    ancestors = [0] * len(ops)
    for i in range(len(ops)):
        bits = 0
        for p in preds[i]:
            if p != i:
                bits |= ancestors[p] | (1 << p)
        ancestors[i] = bits
    return ancestors


class _AliasClasses:
    """The tensors of a graph grouped by shared memory (union-find over the ops' aliasing
    outputs), with the elements of its class's memory each tensor covers, computed when
    asked (:meth:`overlap`)."""

    def __init__(self, ops: list[OpNode]) -> None:
        from tremula.popxl._ir.tensor import aliases_of

        self._parent: dict[int, int] = {}
        self._tensors: dict[int, Tensor] = {}
        # id(output) -> (op, input indices it aliases), in schedule order
        self._made: dict[int, tuple[OpNode, list[int]]] = {}
        for op in ops:
            for k, t in enumerate(op.inputs):
                if t is None:
                    continue
                for o in aliases_of(op, k):
                    self._union(t, o)
                    self._made.setdefault(id(o), (op, []))[1].append(k)
        self._regions: dict[int, dict[int, np.ndarray] | None] = {}

    def find(self, t: Tensor) -> int:
        key = id(t)
        self._tensors.setdefault(key, t)
        root = self._parent.setdefault(key, key)
        while root != self._parent[root]:
            root = self._parent[root]
        while self._parent[key] != root:  # path compression
            self._parent[key], key = root, self._parent[key]
        return root

    def _union(self, a: Tensor, b: Tensor) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self._parent[rb] = ra

    def overlap(self, a: Tensor, b: Tensor) -> bool:
        """Whether ``a`` and ``b`` (of one class) share an element; True where the
        elements are not known."""
        if a is b:
            return True
        regions = self._class_regions(self.find(a))
        if regions is None or id(a) not in regions or id(b) not in regions:
            return True
        return bool(np.intersect1d(regions[id(a)], regions[id(b)], assume_unique=True).size)

    def _class_regions(self, root: int) -> dict[int, np.ndarray] | None:
        if root not in self._regions:
            self._regions[root] = self._compute(root)
        return self._regions[root]

    def _compute(self, root: int) -> dict[int, np.ndarray] | None:
        """Element numbers of the class's memory per tensor: each tensor no op made as
        an alias gets its own numbers; an alias's are its op's reference applied to its
        inputs' numbers (a view), or those of the input it writes in place."""
        members = [t for key, t in self._tensors.items() if self.find(t) == root]
        bases = [t for t in members if id(t) not in self._made]
        if sum(int(np.prod(t.shape, dtype=np.int64)) for t in bases) > _REGION_LIMIT:
            return None
        regions: dict[int, np.ndarray] = {}
        start = 0
        for t in bases:
            n = int(np.prod(t.shape, dtype=np.int64))
            regions[id(t)] = np.arange(start, start + n, dtype=np.int64).reshape(t.shape)
            start += n
        pending = [t for t in members if id(t) in self._made]
        while pending:
            progress = False
            for t in list(pending):
                op, ks = self._made[id(t)]
                if not all(id(op.inputs[k]) in regions for k in ks):
                    continue
                region = _derive(op, ks, t, regions)
                if region is None:
                    return None
                regions[id(t)] = region
                pending.remove(t)
                progress = True
            if not progress:
                return None
        return {k: np.unique(v) for k, v in regions.items()}


def _derive(op: OpNode, ks: list[int], out: Tensor, regions: dict[int, np.ndarray]) -> Any:
    """The element numbers of ``out``, an output of ``op`` aliasing its inputs ``ks``."""
    d = op.definition
    if d.view and d.reference is not None:
        try:
            made = d.reference([regions[id(t)] for t in op.inputs], op.attrs)
        except Exception:  # a reference that cannot take index arrays: elements unknown
            return None
        k = next((i for i, o in enumerate(op.outputs) if o is out), 0)
        result = np.asarray(made[k])
        return result if result.shape == tuple(out.shape) else None
    src = regions[id(op.inputs[ks[0]])]
    return src if src.shape == tuple(out.shape) else None
