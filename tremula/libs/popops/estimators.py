"""popops' cycle estimators: one function per vertex type (or family), from the vertex's
sizes (a :class:`poplar.VertexInfo`) and the target, in the shapes of PopLibs' estimators
(``popops/popopsCycleEstimators.cpp`` for element-wise ops, casts and slices,
``popops/reduction/CycleEstimationFunctions.cpp`` for reductions). The
codelets' ``cycles`` call them (``popops/codelets/``); per-op costs are the op tables'
(``ops.py``, ``reduce_ops.py``). Worker vertices are in per-context cycles, supervisor
vertices in tile cycles.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tremula import poplar
from tremula.libs.popops import ops
from tremula.libs.popops.expr_eval import Typed
from tremula.libs.popops.reduce_ops import SPECS, Operation
from tremula.libs.util import worker_cycles
from tremula.poplar.types import FLOAT, HALF, Type, as_type


def op_vector(op: Operation, itemsize: int, target: Any) -> tuple[int, float]:
    """(elements per vector, cycles per vector) of ``op`` on accumulators of ``itemsize``."""
    spec = SPECS[op]
    if spec.op is Operation.LOG_ADD:
        return (2, 23.0) if itemsize == 4 else (4, 13.0)
    if spec.op in (Operation.LOGICAL_AND, Operation.LOGICAL_OR):
        return 1, spec.cycles_per_vector
    if spec.accumulating and itemsize <= 4:
        return (4 if itemsize == 4 else 8), spec.cycles_per_vector
    return target.vector_width(itemsize), spec.cycles_per_vector


def reduce_block_cycles(v: poplar.VertexInfo) -> np.ndarray:
    """Tile cycles of ReduceBlock vertices: ``11 + W x worker`` with the continuous-reduce
    worker shape ``17 + 12 x outputs + cycles x vectors`` when the runs are contiguous
    (``inner > 1``), else the strided shape ``33 + outputVectors x (6 + outer x
    (vw / loadWidth + 1))`` (PopLibs' reduction estimators)."""
    W = v.target.num_worker_contexts
    op = Operation[v.params["OP"]]
    in_size = v.dtype("partials").size
    acc_size = 4 if v.dtype("partials").is_float else in_size
    vw, cpv = op_vector(op, acc_size, v.target)
    load = min(vw, max(1, v.target.data_path_width // (8 * in_size)))
    G = v.groups.astype(np.int64)
    O = v.outer.astype(np.int64)
    I = v.inner.astype(np.int64)
    n_out = v.lengths("out").astype(np.int64)
    elems = v.lengths("partials").astype(np.int64)
    per_worker = -(-elems // W)
    contiguous = 17 + 12 * -(-n_out // W) + (cpv + vw / load) * -(-per_worker // vw)
    out_vecs = G * -(-(n_out // np.maximum(G, 1)) // vw)
    strided = 33 + -(-out_vecs // W) * (6 + O * (vw / load + 1))
    worker = np.where(I > 1, contiguous, strided)
    update = 1 if v.fields["out"].direction == "inout" else 0
    return 11 + W * worker + 3 * update * n_out


def reduce_partials_cycles(v: poplar.VertexInfo) -> np.ndarray:
    """Tile cycles of ReducePartials vertices, PopLibs' generic Reduce vertex estimate with
    the work shared by the workers: ``11 + W x 33 + sum over groups of (28 + 10 x pieces +
    outputVectors x (6 + pieces x (vw / loadWidth + 3)))``."""
    W = v.target.num_worker_contexts
    op = Operation[v.params["OP"]]
    in_type = v.dtype("partials")
    vw, _ = op_vector(op, 4 if in_type.is_float else in_type.size, v.target)
    load = min(vw, max(1, v.target.data_path_width // (8 * in_type.size)))
    L = v.sub_lengths("out").astype(np.int64)
    n_groups = v.sub_counts("out").astype(np.int64)
    C = np.concatenate([np.asarray(c, dtype=np.int64) for c in v.counts]) if v.n else L
    per_group = 28 + 10 * C + -(-L // vw) * (6 + C * (vw / load + 3))
    owner = np.repeat(np.arange(v.n), n_groups)
    per = np.bincount(owner, weights=per_group, minlength=v.n)
    update = 1 if v.fields["out"].direction == "inout" else 0
    return 11 + W * 33 + per + 3 * update * v.lengths("out")


def dynamic_slice_cycles(v: poplar.VertexInfo) -> np.ndarray:
    """Per region and sub-row: a row copy of ``ceil(len / vw)`` vectors plus 10 cycles of
    addressing, shared by the workers (DynamicSlice2d's shape)."""
    vw = v.vector_width("sub")
    counts = v.sub_counts("sub").astype(np.int64)
    per_row = 10 + -(-v.sub_lengths("sub").astype(np.int64) // vw)
    owner = np.repeat(np.arange(v.n), counts)
    work = np.bincount(owner, weights=per_row, minlength=v.n)
    W = v.target.num_worker_contexts
    return 11 + W * 13 + work + 4 * counts


def _multi_cycles(v: poplar.VertexInfo, extra: float) -> np.ndarray:
    """PopLibs' MultiSlice estimate with every index assumed in range (the worst case):
    ``W x (30 + ceil(n / W) x (19 + ceil(rowElems / vw) x cyclesPerVector))``."""
    size = v.dtype("base").size
    vw, cpv = {1: (4, 3), 2: (2, 2)}.get(size, (max(1, v.target.data_path_width // 32), 2))
    E = v.rowElems.astype(np.int64)
    per_index = 19 + -(-E // vw) * (cpv + extra)
    n = v.lengths("indices").astype(np.int64)
    W = v.target.num_worker_contexts
    return 11 + W * (30 + -(-n // W) * per_index)


#: Extra cycles per vector of each multi-slice vertex over a plain copy of the row.
MULTI_EXTRA = {"MultiSlice": 0, "MultiUpdate": 0, "MultiUpdateAdd": 2, "MultiUpdateOp": 1}


def multi_slice_cycles(v: poplar.VertexInfo, vertex: str) -> np.ndarray:
    """``popops::MultiSlice`` / ``MultiUpdate`` / ``MultiUpdateAdd`` / ``MultiUpdateOp``
    (``vertex``): the rows of the indices, each a copy (or an update) of ``rowElems``."""
    return _multi_cycles(v, MULTI_EXTRA[vertex])


def sort_cycles(v: poplar.VertexInfo, field: str, per_element: np.ndarray) -> np.ndarray:
    """``11 + W x (20 + ceil(columns / W) x (30 + length x per_element))``."""
    W = v.target.num_worker_contexts
    D = np.maximum(v.length.astype(np.int64), 1)
    cols = v.lengths(field).astype(np.int64) // D
    per_col = 30 + D * per_element
    return 11 + W * (20 + -(-cols // W) * per_col)


def cycles_per_vector(t: Typed, vector_width: int, natural: Callable[[Type], int]) -> float:
    """Cycles of a fused loop iteration over ``vector_width`` elements: the table's cycles
    per element of every op (and cast), times the width. ``natural(type)`` is the natural
    vector width of a type."""
    total = 0.0
    for node in t.nodes():
        if node.op is not None:
            cost = node.op.cost(node.in_type)  # type: ignore[arg-type]
        elif node.args:
            cost = ops.cast_cost(node.in_type, node.dtype)  # type: ignore[arg-type]
        else:
            continue
        total += cost.per_element(natural(node.in_type)) * vector_width  # type: ignore[arg-type]
    return total


# ---- element-wise (PopLibs' popopsCycleEstimators.cpp) ----


def _fast(rec: ops.ElementwiseOp, t: Type) -> bool:
    return rec.fast and ops.family(t) in ("float", "half")


#: Family kind -> (in_place, op, type) -> (worker base cycles, loop overhead per natural
#: vector).
FAMILY_BASE: dict[str, Callable[[bool, ops.ElementwiseOp, Type], tuple[float, float]]] = {
    "unary": lambda in_place, rec, t: (
        (55, 4) if in_place else ((33 if rec.op.name == "EXPONENT" else 17), 4)
    ),
    "binary": lambda in_place, rec, t: (
        58 if in_place else (26 if t is HALF else 29),
        2 if _fast(rec, t) else 5,
    ),
    "broadcast": lambda in_place, rec, t: (20, 1 if _fast(rec, t) else 4),
    "ternary": lambda in_place, rec, t: (30, 6),  # [proposal]
}


def family_cycles(
    kind: str, in_place: bool, rec: ops.ElementwiseOp, t: Type, n: np.ndarray, vw: int
) -> np.ndarray:
    """A family vertex (``UnaryOp1D``, ``BinaryOp1D``, ``BroadcastScalar1D``, ``Select``,
    ``Clamp`` and their in-place forms) applying ``rec`` to ``n`` elements of ``t``."""
    base, overhead = FAMILY_BASE[kind](in_place, rec, t)
    return base + rec.cost(t).loop_cycles(n, vw, overhead)


def fused_cycles(
    typed: Typed,
    input_types: Sequence[Type],
    scalars: Sequence[bool],
    in_place: bool,
    n: np.ndarray,
    target: Any,
) -> np.ndarray:
    """A fused expression vertex over ``n`` elements: the natural vector of its narrowest
    vector operand, the expression's cycles per vector plus a load per vector operand."""
    types = [*input_types, typed.dtype]
    vectors = [not s for s in scalars] + [not in_place]
    widths = [target.vector_width(t.size) for t, vec in zip(types, vectors) if vec]
    vw = min(widths)
    nvec, nscalar = sum(not s for s in scalars), sum(scalars)
    per_vector = cycles_per_vector(typed, vw, lambda t: target.vector_width(t.size))
    base = 17 + 6 * (nvec - 1) + 4 * nscalar  # [proposal]
    return base + -(-n // vw) * (per_vector + 3 + nvec)


def cast_cycles(v: poplar.VertexInfo) -> np.ndarray:
    """``popops::Cast1D``: pipelined loops over atoms of 2 or 4 elements; 64-bit
    destinations element by element."""
    src, dst = v.dtype("src"), v.dtype("dst")
    n = v.lengths("src").astype(np.int64)
    base = 20  # [proposal] worker entry, pointer and count unpacking
    if dst.size == 8:
        return base + 3 + 5 * n
    cost = ops.cast_cost(src, dst)
    atom = cost.elements
    atoms = n // atom
    return base + 6 + np.maximum(atoms - 1, 0) * cost.cycles + 2 * (n % atom)


def fill_cycles(v: poplar.VertexInfo) -> np.ndarray:
    """``popops::Fill``: 64-bit stores (bytes 4 or 8 at a time)."""
    n = v.lengths("out").astype(np.int64)
    size = v.dtype("out").size
    if size == 1:
        return np.where(n < 64, 28 + n / 4, 39 + n / 8)
    if size == 8:
        return 5 + n
    return 16 + -(-n * size // 8)  # [proposal]


#: Elements a ``Pow2ScaleCast`` converts per pipelined step.
FP8_ATOM = 4


def pow2scale_cast_cycles(v: poplar.VertexInfo) -> np.ndarray:
    """``popops::Pow2ScaleCast``: atoms of four elements, two more cycles per float side."""
    n = v.lengths("src").astype(np.int64)
    per_atom = 2 + 2 * sum(v.dtype(f) is poplar.FLOAT for f in ("src", "dst"))
    atoms = n // FP8_ATOM
    return 30 + 6 + np.maximum(atoms - 1, 0) * per_atom + 2 * (n % FP8_ATOM)


def check_log2_scale_cycles(v: poplar.VertexInfo) -> np.ndarray:
    """``popops::CheckLog2Scale``: one comparison of a scalar."""
    return np.full(v.n, 12)


def scaled_add_cycles(v: poplar.VertexInfo, kinds: Sequence[str]) -> np.ndarray:
    """``popops::ScaledAdd1D`` / ``...Tensor`` / ``AXPlusBY1DTensor``: ``kinds`` says how
    each scale is given (``state`` or ``input``)."""
    n = v.lengths("data").astype(np.int64)
    t, s = v.dtype("data"), as_type(v.params["S"])
    tensors = sum(k == "input" for k in kinds)
    if t.numpy.kind in "iu":
        return 53 + 26 * (n // 3) + 9 * (n % 3) + 4 * tensors
    vw = v.target.vector_width(t.size)
    kind_a = kinds[0]
    scaled_a = v.state("scaleA") != 1 if kind_a == "state" else kind_a == "input"
    cpv = (5 if t is HALF and s is FLOAT else 3) + np.asarray(scaled_a, np.int64)
    return 25 + cpv * np.maximum(n // vw - 1, 0) + 4 * (n % vw) + 4 * tensors


def iota_cycles(v: poplar.VertexInfo) -> np.ndarray:
    """``popops::Iota``: a worker's vectors of consecutive integers."""
    return worker_cycles(v.lengths("out"), v.vector_width("out"), 2, 12)


def histogram_cycles(v: poplar.VertexInfo) -> np.ndarray:
    """``popops::Histogram``: a binary search over the levels per element."""
    search = np.ceil(np.log2(np.maximum(v.lengths("counts"), 2)))
    return 20 + v.lengths("data") * (8 + 4 * search)


# ---- sorting ----


def sort_values_cycles(v: poplar.VertexInfo) -> np.ndarray:
    """``popops::Sort``."""
    D = np.maximum(v.length.astype(np.int64), 2)
    return sort_cycles(v, "data", 4 * np.ceil(np.log2(D)))


def sort_key_value_cycles(v: poplar.VertexInfo) -> np.ndarray:
    """``popops::SortKeyValue``."""
    D = np.maximum(v.length.astype(np.int64), 2)
    return sort_cycles(v, "keys", 6 * np.ceil(np.log2(D)))


def top_k_cycles(v: poplar.VertexInfo) -> np.ndarray:
    """``popops::TopK``."""
    k = np.maximum(v.k.astype(np.int64), 1)
    return sort_cycles(v, "data", 4 * np.ceil(np.log2(k + 1)) + 2)
