"""``popops.cast``: element-wise type conversion between all Poplar types.

Rules (``elementwise_math.convert``): to bool, non-zero (and NaN) is true; float or half to
an integer type truncates toward zero like C, NaN gives 0 and out-of-range values
saturate to the type's limits (C leaves them undefined); an integer to a narrower integer
type wraps modulo 2^bits; to half or float rounds to nearest even and overflows to +-inf;
bool converts to 0 or 1.

Codelet ``popops::Cast1D<SRC,DST>``: a worker vertex over one part of the output, placed
like every element-wise op (at most one per worker context on each tile holding the output).
Estimator (PopLibs' Cast: pipelined loops over atoms of 2 or 4 elements):
``20 + 6 + (atoms - 1) x cyclesPerLoop + 2 x remainder`` context cycles [proposal: the
20-cycle base, the 6-cycle fill/drain and the remainder cost], and ``3 + 5 n`` (plus the
base) for 64-bit destinations.
"""

from __future__ import annotations

from tremula import poplar
from tremula.errors import GraphError, TensorError
from tremula.libs import util
from tremula.libs.popops.codelets.cast import Cast1D
from tremula.libs.popops.codelets.elementwise import type_arg
from tremula.poplar.types import QuarterType, Type, as_type


def cast(
    graph: poplar.Graph,
    t: poplar.Tensor,
    dtype: Type | str | poplar.Tensor,
    prog: poplar.Sequence,
    name: str = "",
) -> poplar.Tensor:
    """Convert ``t`` element-wise to another type.

    Args:
        graph: The graph to add to.
        t: The tensor to convert.
        dtype: The destination type, or a destination tensor of ``t``'s shape to write.
        prog: The sequence the compute set (or copy, for the same type) is appended to.
        name: Debug prefix of the compute set and the output.

    Returns:
        The converted tensor: a new one mapped like ``t``, or ``dtype`` when a tensor was
        given. Casting to ``t``'s own type copies.

    Raises:
        GraphError: an unknown type, or tensors that are not of ``graph``.
        TensorError: a destination tensor of another shape or with aliased elements.
    """
    what = f"popops.cast({name or t!r})"
    if not isinstance(t, poplar.Tensor) or t.graph is not graph.state:
        raise GraphError(f"{what}: the source must be a Tensor of this graph, got {t!r}")
    dst_type = dtype.dtype if isinstance(dtype, poplar.Tensor) else as_type(dtype)
    if QuarterType in (type(t.dtype), type(dst_type)) and dst_type is not t.dtype:
        raise GraphError(f"{what}: quarter types convert with popops.pow2scale_cast (a scale)")
    if isinstance(dtype, poplar.Tensor):
        out = dtype
        if out.graph is not graph.state:
            raise GraphError(f"{what}: the destination {out!r} belongs to another graph")
        if out.shape != t.shape:
            raise TensorError(
                f"{what}: destination shape {list(out.shape)} differs from the source "
                f"shape {list(t.shape)}"
            )
        util.refuse_aliased(out, what, role="the destination")
    else:
        dst = as_type(dtype)
        out = graph.add_variable(dst, t.shape, f"{name or 'cast'}/out")
        util.map_like(graph, out, t, graph.target.vector_width(dst.size))
    if out.dtype is t.dtype:
        prog.add(poplar.Copy(t, out))
        return out
    if out.num_elements == 0:
        return out
    grain = max(graph.target.vector_width(x.size) for x in (t.dtype, out.dtype))
    part = util.partition(graph, out, grain)
    util.ensure_codelets(graph, [Cast1D])
    cs = graph.add_compute_set(f"{name or 'cast'}/Cast<{t.dtype},{out.dtype}>")
    vtype = f"{Cast1D.name}<{type_arg(t.dtype)},{type_arg(out.dtype)}>"
    graph.add_vertices(cs, vtype, {"src": part.segments(t), "dst": part.segments(out)}, part.tiles)
    prog.add(poplar.Execute(cs))
    return out
