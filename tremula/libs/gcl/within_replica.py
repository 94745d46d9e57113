"""GCL's all-reduce within a replica (``gcl::allReduceWithinReplica``): several tensors of
one shape and type, each on its own IPU, reduced so that every IPU gets the result in a
tensor mapped like its input.

A ring over the ``N`` tensors, all in one program per step. Each tensor is flattened and
cut into ``N`` chunks of ``C = ceil(n / N)`` elements. Reduce-scatter: chunk ``c`` starts
on IPU ``c + 1`` and travels round the ring, each IPU combining it with its own chunk, so
that after ``N - 1`` steps IPU ``c`` holds chunk ``c`` reduced. All-gather: each reduced
chunk travels ``N - 1`` more steps. Every step is one Copy (all chunks moving at once over
the IPU links) and, while reducing, one compute set over the chunks received. The chunks
in flight are kept in the outputs' own slots, so nothing else is allocated. Link traffic
per IPU: ``2 (N - 1) C`` elements.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tremula import poplar
from tremula.libs import popops, util
from tremula.libs.gcl.errors import CollectiveError
from tremula.libs.gcl.operators import CollectiveOperator, as_operator, check_operator
from tremula.libs.popops import expr as pe

_1, _2 = pe.PlaceHolder(1), pe.PlaceHolder(2)

#: operator -> (the received partial _1 combined with the IPU's own chunk _2, the value
#: written in place of _1 from the chunk _2 that starts a ring, or None)
_COMBINE: dict[CollectiveOperator, tuple[Any, Any]] = {
    CollectiveOperator.ADD: (_1 + _2, None),
    CollectiveOperator.MEAN: (_1 + _2, None),
    CollectiveOperator.MUL: (_1 * _2, None),
    CollectiveOperator.MIN: (pe.Min(_1, _2), None),
    CollectiveOperator.MAX: (pe.Max(_1, _2), None),
    CollectiveOperator.LOGICAL_AND: (pe.And(_1, _2), None),
    CollectiveOperator.LOGICAL_OR: (pe.Or(_1, _2), None),
    CollectiveOperator.SQUARE_ADD: (_1 + _2 * _2, _2 * _2),
}


def _check(graph: poplar.Graph, tensors: Sequence[Any], where: str) -> list[poplar.Tensor]:
    ts = list(tensors)
    if not ts:
        raise CollectiveError(f"{where}: needs at least one tensor")
    for i, t in enumerate(ts):
        if not isinstance(t, poplar.Tensor) or t.graph is not graph.state:
            raise CollectiveError(f"{where}: tensor {i} is not a tensor of this graph: {t!r}")
        if t.shape != ts[0].shape or t.dtype is not ts[0].dtype:
            raise CollectiveError(
                f"{where}: tensor {i} is {t.dtype} {list(t.shape)}, tensor 0 is "
                f"{ts[0].dtype} {list(ts[0].shape)}; all must have one shape and type"
            )
        tiles = graph.tiles_of(t)
        if tiles.size and tiles.min() < 0:
            raise CollectiveError(f"{where}: tensor {i} {t!r} is not mapped to tiles")
    return ts


class _Ring:
    """The chunk views of the inputs and outputs, and the step builder."""

    def __init__(self, ins: list[poplar.Tensor], outs: list[poplar.Tensor]) -> None:
        self.N, n = len(ins), ins[0].num_elements
        self.C = -(-n // self.N)
        bounds = [(min(c * self.C, n), min((c + 1) * self.C, n)) for c in range(self.N)]
        self.x = [t.flatten().slices(bounds) for t in ins]
        self.o = [t.flatten().slices(bounds) for t in outs]
        self.live = [hi > lo for lo, hi in bounds]  # chunks beyond n are empty

    def step(self, moves: Callable[[int], tuple[int, int, int]]) -> list[tuple[int, int, int]]:
        """``(chunk, from IPU, to IPU)`` for each live chunk; ``moves(c)`` gives it."""
        return [moves(c) for c in range(self.N) if self.live[c]]


def _copy(
    src: list[poplar.Tensor], dst: list[poplar.Tensor], prog: poplar.Sequence, name: str
) -> None:
    prog.add(poplar.Copy(poplar.concat(src), poplar.concat(dst), name=name))


def all_reduce_within_replica(
    graph: poplar.Graph,
    tensors: Sequence[poplar.Tensor],
    op: CollectiveOperator | str,
    prog: poplar.Sequence,
    name: str = "",
) -> list[poplar.Tensor]:
    """Reduce ``tensors`` (one per IPU of the replica) element-wise; every IPU gets the
    result.

    Args:
        graph: the graph the tensors belong to (the replica's, spanning its IPUs).
        tensors: tensors of one shape and type, each mapped (usually each on one IPU).
        op: a :class:`CollectiveOperator` (or its name) other than LOCAL.
        prog: the sequence the copies and compute sets are appended to.
        name: debug prefix.

    Returns:
        One new tensor per input, of its shape and mapped like it, each holding the
        reduction of all inputs.

    Raises:
        CollectiveError: no tensors, tensors of different shapes or types, unmapped
            tensors, LOCAL or an operator that does not apply to the type.
    """
    where = "all_reduce_within_replica"
    ts = _check(graph, tensors, where)
    op = as_operator(op)
    if op is CollectiveOperator.LOCAL:
        raise CollectiveError(f"{where}: LOCAL is not a reduction")
    check_operator(op, ts[0], where)
    prefix = name or "allReduceWithinReplica"
    outs = [
        util.create_output(graph, t.dtype, t.shape, f"{prefix}/out{k}", like=t)
        for k, t in enumerate(ts)
    ]
    if ts[0].num_elements == 0:
        return outs
    r = _Ring(ts, outs)
    N = r.N
    if N == 1:
        prog.add(poplar.Copy(ts[0], outs[0], name=f"{prefix}/copy"))
        return outs
    combine, pre = _COMBINE[op]
    sources = r.x
    if pre is not None:  # the chunk that starts each ring, mapped, in its final slot
        first = r.step(lambda c: (c, (c + 1) % N, (c + 1) % N))
        dst: Any = poplar.concat([r.o[k][c] for c, k, _ in first])
        popops.map_in_place(graph, pre, [dst, poplar.concat([r.x[k][c] for c, k, _ in first])],
                            prog, name=f"{prefix}/pre")  # fmt: skip
        sources = r.o
    for s in range(N - 1):  # reduce-scatter
        moves = r.step(lambda c, s=s: (c, (c + 1 + s) % N, (c + 2 + s) % N))  # type: ignore[misc]
        src = [(sources if s == 0 else r.o)[a][c] for c, a, _ in moves]
        dst = [r.o[b][c] for c, _, b in moves]
        _copy(src, dst, prog, f"{prefix}/reduce{s}")
        own = poplar.concat([r.x[b][c] for c, _, b in moves])
        popops.map_in_place(graph, combine, [poplar.concat(dst), own], prog,
                            name=f"{prefix}/combine{s}")  # fmt: skip
    if op is CollectiveOperator.MEAN:
        mine = poplar.concat([r.o[c][c] for c in range(N) if r.live[c]])
        popops.map_in_place(graph, _1 * pe.Const(1.0 / N), [mine], prog, name=f"{prefix}/mean")
    for s in range(N - 1):  # all-gather
        moves = r.step(lambda c, s=s: (c, (c + s) % N, (c + s + 1) % N))  # type: ignore[misc]
        _copy([r.o[a][c] for c, a, _ in moves], [r.o[b][c] for c, _, b in moves], prog,
              f"{prefix}/gather{s}")  # fmt: skip
    return outs
