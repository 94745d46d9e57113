"""``popops.pow2scale_cast``: casts to and from Poplar's QUARTER (8-bit float) types with a
power-of-two scale read from a device tensor at run time (PopLibs' ``cast`` of QUARTER
tensors with their ``QuarterMetadata`` scale).

``out = cast<DST>(t * 2^log2_scale)``, where a quarter ``t`` is first decoded exactly and a
quarter ``DST`` is encoded by ``tremula.poplar.quarter.encode`` (round to nearest even,
subnormals, NaN or saturation on overflow), so the device gives the host conversions' codes
bit for bit. Source and destination types: ``float``, ``half``, ``quarter_f143``,
``quarter_f152`` (float to half with a scale serves the fp8 matmul's output).

The scale is a number (checked when the graph is built) or an ``int`` tensor of one
element, read when the program runs. QuarterMetadata holds it in 6 signed bits, so it must
lie in ``[-32, 31]``: a ``popops::CheckLog2Scale`` vertex on the scale's tile, in the same
compute set, raises :class:`~tremula.errors.ApplicationRuntimeError` naming the op (the
``what`` of the call) and the value otherwise.

Codelets:

* ``popops::Pow2ScaleCast<SRC,DST>``: a worker vertex over one part of the output, placed
  like ``Cast1D`` (``util.partition`` of the output, mapped like the input). Estimator
  [proposal]: ``30 + 6 + (atoms - 1) x c + 2 x remainder`` context cycles over atoms of 4
  elements, ``c = 2`` (one quarter<->half conversion and one scaling multiply per atom)
  plus 2 for each ``float`` end (the f32<->f16 step, as in ``Cast1D``); the base is
  ``Cast1D``'s 20 plus 10 to load the scale and build the multiplier.
* ``popops::CheckLog2Scale``: one worker vertex reading the scale; 12 cycles [proposal]
  (load, two compares, branch). State ``what``: the bytes of the message's subject.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tremula import poplar
from tremula.errors import GraphError
from tremula.libs import util
from tremula.libs.popops.codelets.elementwise import type_arg
from tremula.libs.popops.codelets.fp8 import CODELETS, CheckLog2Scale, Pow2ScaleCast
from tremula.poplar.quarter import LOG2_SCALE_MAX, LOG2_SCALE_MIN
from tremula.poplar.types import Type, as_type

TYPES = (poplar.FLOAT, poplar.HALF, poplar.QUARTER_F143, poplar.QUARTER_F152)


def _checked_type(value: Any, label: str, where: str) -> Type:
    try:
        t = value if isinstance(value, Type) else as_type(value)
    except GraphError:
        t = None
    if t not in TYPES:
        raise GraphError(
            f"{where}: {label} type {value} not supported; expected one of "
            f"{[str(x) for x in TYPES]}"
        )
    return t  # type: ignore[return-value]


def _checked_scale(graph: poplar.Graph, log2_scale: Any, where: str) -> int | poplar.Tensor:
    if isinstance(log2_scale, poplar.Tensor):
        if log2_scale.graph is not graph.state:
            raise GraphError(f"{where}: the scale {log2_scale!r} belongs to another graph")
        if log2_scale.dtype is not poplar.INT or log2_scale.num_elements != 1:
            raise GraphError(
                f"{where}: the scale {log2_scale!r} must be an int tensor of one element, "
                f"got {log2_scale.dtype} {list(log2_scale.shape)}"
            )
        return log2_scale
    if isinstance(log2_scale, bool) or not isinstance(log2_scale, (int, np.integer)):
        raise GraphError(f"{where}: log2_scale must be an int or a tensor, got {log2_scale!r}")
    if not LOG2_SCALE_MIN <= int(log2_scale) <= LOG2_SCALE_MAX:
        raise GraphError(
            f"{where}: log2_scale {int(log2_scale)} is outside [{LOG2_SCALE_MIN}, "
            f"{LOG2_SCALE_MAX}] (6 signed bits)"
        )
    return int(log2_scale)


def pow2scale_cast(
    graph: poplar.Graph,
    t: poplar.Tensor,
    dtype: Type | str,
    log2_scale: int | poplar.Tensor,
    prog: poplar.Sequence,
    nan_on_overflow: bool = True,
    name: str = "",
    what: str = "",
) -> poplar.Tensor:
    """``cast<dtype>(t * 2^log2_scale)``, quarter types decoded and encoded exactly.

    Args:
        graph: The graph to add to.
        t: The tensor to convert (``float``, ``half`` or a quarter type).
        dtype: The destination type (``float``, ``half`` or a quarter type).
        log2_scale: An int in ``[-32, 31]``, or an ``int`` tensor of one element whose value
            is checked when the program runs.
        prog: The sequence the compute set is appended to.
        nan_on_overflow: Encoding to quarter, NaN (else the signed maximum) for values
            beyond the format's range.
        name: Debug prefix of the compute set and the output.
        what: The subject of the run-time range error (default: this call and ``name``).

    Returns:
        A new tensor of ``dtype``, mapped like ``t``.

    Raises:
        GraphError: a type other than the four, a scale that is not an int in range or an
            int tensor of one element, tensors of another graph (the graph is unchanged).
        ApplicationRuntimeError: when the program runs with a scale tensor outside
            ``[-32, 31]``.
    """
    where = f"popops.pow2scale_cast({name or t!r})"
    if not isinstance(t, poplar.Tensor) or t.graph is not graph.state:
        raise GraphError(f"{where}: the source must be a Tensor of this graph, got {t!r}")
    src = _checked_type(t.dtype, "source", where)
    dst = _checked_type(dtype, "destination", where)
    scale = _checked_scale(graph, log2_scale, where)
    base = name or "pow2scaleCast"
    out = graph.add_variable(dst, t.shape, f"{base}/out")
    util.map_like(graph, out, t, graph.target.vector_width(dst.size))
    if out.num_elements == 0:
        return out
    util.ensure_codelets(graph, CODELETS)
    if isinstance(scale, int):
        scale_t = graph.add_constant(poplar.INT, (1,), scale, f"{base}/log2Scale")
        graph.set_tile_mapping(scale_t, 0)
    else:
        scale_t = scale.reshape((1,))
    grain = max(graph.target.vector_width(x.size) for x in (src, dst))
    part = util.partition(graph, out, grain)
    cs = graph.add_compute_set(f"{base}/Pow2ScaleCast<{src},{dst}>")
    each = np.zeros(part.num_vertices, dtype=np.int64)
    fields = {
        "src": part.segments(t),
        "dst": part.segments(out),
        "log2Scale": scale_t[each],
        "nanOnOverflow": bool(nan_on_overflow),
    }
    vtype = f"{Pow2ScaleCast.name}<{type_arg(src)},{type_arg(dst)}>"
    graph.add_vertices(cs, vtype, fields, part.tiles)
    if not isinstance(scale, int):
        subject = np.frombuffer((what or where).encode(), dtype=np.uint8)
        tile = max(int(graph.tiles_of(scale_t)[0]), 0)
        graph.add_vertex(cs, CheckLog2Scale.name, {"log2Scale": scale_t, "what": subject}, tile)
    prog.add(poplar.Execute(cs))
    return out
