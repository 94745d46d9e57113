"""PopSparse's device codelets: the sparse products of the three passes,
the transpose of block buckets for GradA, and the control of the propagation phase.

Product vertices (supervisor vertices, one per processing node's tile and compute set):

| vertex (``popsparse::...``) | pass | computes (tile frame) |
|---|---|---|
| ``SparseDenseMatMulElementWise<T,P,SHAPE>`` | Fwd | ``Q[x] += r S[y]`` |
| ``SparseDenseMatMulElementWiseTranspose<T,P,SHAPE>`` | GradA (shared) | ``Sg[y] += r Qg[x]`` |
| ``SparseDenseMatMulGradAElementWise<T,P,SHAPE>`` | GradA (own meta-info) | the same |
| ``SparseDenseMatMulBlock<T,P,BLOCK,SHAPE>`` | Fwd | ``Q[x:x+b] += B S[y:y+b]`` |
| ``SparseDenseMatMulBlockGradA<T,P,BLOCK,SHAPE>`` | GradA | ``Sg[y:y+b] += B^T Qg[x:x+b]`` |
| ``SparseDenseMatMulGradWElementWise<T,P,SHAPE>`` | GradW | ``g += sum_z Qg[x] S[y]`` |
| ``SparseDenseMatMulBlockGradW`` / ``...BlockAmpGradW`` | GradW | ``G += Qg[x:x+b] S[y:y+b]^T`` |

The shared-bucket GradA reads the forward meta-info; the other GradA element-wise vertex
reads the bucket's own GradA meta-info; block GradA reads buckets whose blocks were
transposed first (``popsparse::BucketTranspose<T,BLOCK>``).

Each has a ``...Acc`` twin for the propagation phase: the distribution vertex writes its
partials (``Output``: it zeroes them, PopLibs' ``zeroInfo``), the propagation one adds to
them (``InOut``). Fields: ``meta_info`` (the buckets the vertex reads, ``[buckets][words]``
of the meta-info part it uses), ``nz`` (``[buckets][nzPerBucket]``; GradW: ``acc``, the
bucket's partials), the dense input batch-major as the layer's tensors (``s``: ``[Z][C]``,
S for Fwd and GradW, Qgrad for GradA; GradW also ``qgrad`` ``[Z][R]``) and the partials
``q`` (``[R][Z]``, row-major). ``SHAPE`` is ``RxCxZ``: the rows of the partials (of
``qgrad`` for GradW), the columns of the dense input and the batch columns of the tile;
``BLOCK`` the grain block. State: ``sub_group_id`` (the id the vertex processes,
``x Py + y + 1``), the bucket geometry, the cycle-estimate inputs and ``grid_x/y/z``.

The grid (like poplin's) tells the batched compute that the vertices of the type form a
row-major ``[gx, gy, gz]`` grid of processing nodes; the fields are viewed as
``[*grid, *field]`` (zero-copy when the engine can) and operands repeated along a grid axis
(stride 0: the vertices of a Z group read the same buckets, the X partitions the same dense
slice) are used once. It never changes what a vertex computes. The meta-info is decoded
(:mod:`kernels`) and the product's structure built only when the meta-info's content
changes (a small cache keyed by content): a new pattern written into the same engine is
read on the next run. The values are read from the nz field on every run.

Estimators (PopLibs' ``PerformanceEstimation.hpp``, ``popsparse/estimators.py``) are those
of the planner's cost model, per vertex, from the expected rows and blocks of a matching
sub-group per bucket (the uniform-pattern expectation the plan was made with; state
``est_rows`` / ``est_blocks``): the graph profile's estimates. A run is charged what each
product vertex does on the meta-info it reads (``run_cycles``, :mod:`popsparse.run_cost`:
the walk over its buckets, each matching sub-group's workers or blocks), so the slowest tile
of the actual pattern sets a compute set's time; the element-wise Fwd worker as its assembly
runs.

Modules: ``products.py`` (Fwd and GradA), ``grad_w.py``, ``copies.py`` (bucket transpose,
dense slices), ``control.py`` (the propagation control), ``common.py`` (what they share);
this one makes the product families from a table (``VERTICES``) and lists ``CODELETS``.
"""

from __future__ import annotations

from typing import Any

from tremula import poplar
from tremula.libs.popsparse.codelets.common import shape_arg
from tremula.libs.popsparse.codelets.control import PropagationInit, PropagationStep
from tremula.libs.popsparse.codelets.copies import BucketTranspose, DenseSlice
from tremula.libs.popsparse.codelets.grad_w import GradWVertex
from tremula.libs.popsparse.codelets.products import ProductVertex

#: method -> (vertex name, block, transposed, reads GradA meta-info)
PRODUCTS = {
    "Forward": ("SparseDenseMatMulElementWise", False, False, False),
    "Transpose": ("SparseDenseMatMulElementWiseTranspose", False, True, False),
    "GradA": ("SparseDenseMatMulGradAElementWise", False, True, True),
    "ForwardAMPBlock": ("SparseDenseMatMulBlock", True, False, False),
    "TransposeAMPBlock": ("SparseDenseMatMulBlockGradA", True, True, False),
}
#: method -> (vertex name, block)
GRAD_W = {
    "GradW": ("SparseDenseMatMulGradWElementWise", False),
    "GradWBlock": ("SparseDenseMatMulBlockGradW", True),
    "GradWAMPBlock": ("SparseDenseMatMulBlockAmpGradW", True),
}


def _make(base: type, method: str, name: str, block: bool, accumulate: bool, **attrs: Any) -> type:
    body: dict[str, Any] = {
        "name": f"popsparse::{name}{'Acc' if accumulate else ''}",
        "templates": ("T", "P", "BLOCK", "SHAPE") if block else ("T", "P", "SHAPE"),
        "block": block,
        "accumulate": accumulate,
        "method": method,
        **attrs,
    }
    out_field = "acc" if base is GradWVertex else "q"
    if accumulate:
        body[out_field] = poplar.InOut("P")
    return type(f"{name}{'Acc' if accumulate else ''}", (base,), body)


VERTICES: dict[tuple[str, bool], type[poplar.Codelet]] = {}
for _method, (_name, _block, _tr, _ga) in PRODUCTS.items():
    for _acc in (False, True):
        VERTICES[_method, _acc] = _make(
            ProductVertex, _method, _name, _block, _acc, transposed=_tr, grad_a_info=_ga
        )
for _method, (_name, _block) in GRAD_W.items():
    for _acc in (False, True):
        VERTICES[_method, _acc] = _make(GradWVertex, _method, _name, _block, _acc)

CODELETS: list[type[poplar.Codelet]] = [
    *VERTICES.values(),
    BucketTranspose,
    DenseSlice,
    PropagationInit,
    PropagationStep,
]


def vertex_name(method: str, accumulate: bool, dtype: str, partials: str, **sizes: Any) -> str:
    """The vertex type of a method's product: ``popsparse::<name><T,P[,BLOCK],SHAPE>``."""
    cls = VERTICES[method, accumulate]
    args = [dtype, partials]
    if cls.block:  # type: ignore[attr-defined]
        args.append(shape_arg(*sizes["block"]))
    args.append(shape_arg(*sizes["shape"]))
    return f"{cls.name}<{','.join(args)}>"
