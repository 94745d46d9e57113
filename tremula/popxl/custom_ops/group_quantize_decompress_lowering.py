"""Lowering of ``GroupQuantizeDecompress`` (``group_quantize_decompress.py``), as the C++
opx grows it: a ``half`` tensor of the unpacked shape ``[rows, groups, ids * 4]``, each
element on the tile of the packed element it comes from; one compute set
(``<op>/unpack4bit``) with, per tile interval of ``x``, six ``DecompressPacked4BitTensor``
workers over near-equal parts of it (the first ``n % 6`` one longer; empty parts get no
vertex); then ``popops::map(_1 * _2 + _3)`` with the scale and bias broadcast over each
group, reshaped to ``[rows, groups * ids * 4]``. Cycles: the codelet's estimator
(``group_quantize_decompress_codelet.py``) and popops' element-wise estimate.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tremula import poplar
from tremula.errors import GraphError
from tremula.popxl.custom_ops.group_quantize_decompress import OP
from tremula.popxl.custom_ops.group_quantize_decompress_codelet import (
    CODELETS,
    DecompressPacked4BitTensor,
)

#: workers per tile interval (the opx's ``numWorkers``)
WORKERS = 6


def _worker_parts(tiles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lengths, tiles) of the workers' parts of a flat tensor whose element ``k`` is on
    ``tiles[k]``: each run of one tile in six near-equal parts, empty parts dropped."""
    starts = np.r_[0, np.flatnonzero(tiles[1:] != tiles[:-1]) + 1]
    lengths = np.diff(np.r_[starts, tiles.size])
    base, extra = lengths // WORKERS, lengths % WORKERS
    parts = base[:, None] + (np.arange(WORKERS)[None, :] < extra[:, None])
    keep = parts > 0
    return parts[keep], np.repeat(tiles[starts], WORKERS).reshape(-1, WORKERS)[keep]


def decompress(
    graph: poplar.Graph,
    x: poplar.Tensor,
    scale: poplar.Tensor,
    bias: poplar.Tensor,
    prog: poplar.Sequence,
    name: str,
) -> poplar.Tensor:
    """``[rows, groups * ids * 4]`` half: the nibbles of ``x`` scaled and shifted."""
    from tremula.libs import popops
    from tremula.libs.popops import expr as pe
    from tremula.libs.util import ensure_codelets

    rows, groups, ids = x.shape
    unpacked = graph.add_variable(poplar.HALF, (rows, groups, ids * 4), f"{name}/x_unpacked")
    flat = x.flatten()
    if flat.num_elements:
        tiles = graph.tiles_of(flat).reshape(-1)
        if tiles.min() < 0:
            first = int(np.flatnonzero(tiles < 0)[0])
            raise GraphError(f"{name}: element {first} (flat) of x is not mapped")
        graph.set_tile_mapping(unpacked, np.repeat(tiles, 4))
        lengths, vtiles = _worker_parts(tiles)
        ensure_codelets(graph, list(CODELETS))
        cs = graph.add_compute_set(f"{name}/unpack4bit")
        fields = {
            "input": poplar.Segments(flat, lengths),
            "output": poplar.Segments(unpacked.flatten(), lengths * 4),
        }
        graph.add_vertices(cs, DecompressPacked4BitTensor.name, fields, vtiles)
        prog.add(poplar.Execute(cs))
    scaled = popops.map(
        graph, pe._1 * pe._2 + pe._3, [unpacked, scale, bias], prog, name=f"{name}/scale"
    )
    return scaled.reshape((rows, groups * ids * 4))


def _lower(lw: Any, op: Any, env: Any, prog: poplar.Sequence) -> None:
    x, scale, bias = (env[t] for t in op.inputs)
    env[op.outputs[0]] = decompress(lw.graph, x, scale, bias, prog, op.debug_name)


#: op type -> lowering rule (``tremula/lowering/custom_ops.py`` registers them)
LOWERING_RULES = {OP: _lower}
