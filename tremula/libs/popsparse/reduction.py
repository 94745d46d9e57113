"""The final reduction of a Fwd or GradA pass (the last step of PopLibs' pass): the partials of
the ``P`` partitions of the pass's Y, summed per output element and cast to the data type,
with PopLibs' conv reduction helper, as the planner costs it.

The ``P`` PNs of one (output partition, Z partition) hold one ``[Nt][Zt]`` slab each; the
slab's ``Nt Zt`` outputs are cut into ``P`` pieces of ``ceil(Nt Zt / P)`` (the last one
shorter, trailing ones possibly empty), and the PN of partition ``i`` sums piece ``i`` of
all ``P`` slabs (receiving the ``P - 1`` it does not hold) into the output, cast in the same
pass: one ``poplin::ReducePartials<P,OUT,Px1xRxC>`` vertex per piece (``R C`` its length:
``R`` rows of ``C = Zt`` when the piece is whole rows of the slab, else one row), whose
estimate is the ``ReduceAdd`` one of :func:`estimators.reduce_cycles` (``outs = ceil(Nt Zt /
P)``, depth ``P``). With one partition there is nothing to add: a cast when the partials'
type is not the data type, else the partials are the result.
"""

from __future__ import annotations

import numpy as np

from tremula import poplar
from tremula.libs import popops, util
from tremula.libs.poplin.codelets import CODELETS, GRID
from tremula.libs.popsparse.device import Layer, partition_classes

REDUCE = "poplin::ReducePartials"


def reduce_partials(
    layer: Layer, prog: poplar.Sequence, partials: poplar.Tensor, red: str, tiles: np.ndarray
) -> poplar.Tensor:
    """The sum of the ``[P][N][Z]`` partials over the ``P`` partitions of ``red`` (``"y"``
    for Fwd, ``"x"`` for GradA) in the data type, as the batch-major ``[Z][N]`` result (a
    transposed view); ``tiles`` are the PNs' tiles of the pass."""
    g, prefix = layer.graph, layer.prefix
    if partials.shape[0] == 1:
        if layer.partials is layer.dtype:
            return partials[0].transpose()
        return popops.cast(g, partials[0], layer.dtype, prog, name=f"{prefix}/cast").transpose()
    out = g.add_variable(layer.dtype, partials.shape[1:], f"{prefix}/out")
    cs = g.add_compute_set(f"{prefix}/reduce")
    util.ensure_codelets(g, CODELETS)
    names: set[str] = set()
    out_dim = "x" if red == "y" else "y"
    for j0, j1, nt, c0 in partition_classes(layer.plan, out_dim):
        _add_class(layer, cs, (partials, out), red, (j0, j1, nt, c0), tiles, names)
    prog.add(poplar.Execute(cs, name=f"{prefix}/reduce"))
    return out.transpose()


def pieces(length: int, p: int) -> list[tuple[int, int, int]]:
    """``(first piece, count, elements)`` runs of equal pieces when ``length`` outputs are
    cut in ``p`` pieces of ``ceil(length / p)`` (the last shorter; empty ones dropped);
    piece ``i`` starts at output ``i ceil(length / p)``."""
    per = -(-length // p)
    full = length // per
    runs = [(0, full, per)]
    if length > full * per:
        runs.append((full, 1, length - full * per))
    return runs


def _rows(size: int, zt: int) -> str:
    """A piece of ``size`` outputs of a ``[Nt][Zt]`` slab as ``RxC``: whole rows of ``Zt``
    when it is a multiple of them (the engine then reads each vertex's partials and writes
    its output through strided views of device memory, rather than gathering them), else
    one row. The estimate counts ``R C`` outputs either way."""
    return f"{size // zt}x{zt}" if size % zt == 0 else f"1x{size}"


def _add_class(
    layer: Layer,
    cs: poplar.ComputeSet,
    tensors: tuple[poplar.Tensor, poplar.Tensor],
    red: str,
    cls: tuple[int, int, int, int],
    tiles: np.ndarray,
    names: set[str],
) -> None:
    """The reduce vertices of the output partitions ``j0 <= j < j1`` (``nt`` elements each,
    from element ``c0``): a grid ``[j, Z partition, piece]``, one vertex type per run of
    equal pieces."""
    g, plan = layer.graph, layer.plan
    partials, out = tensors
    j0, j1, nt, c0 = cls
    p, _, z = partials.shape
    _, py, pz = plan.partition.xyz
    gn, zt = j1 - j0, z // pz
    length = nt * zt
    rows = slice(c0, c0 + gn * nt)
    slabs = partials[:, rows, :].reshape((p, gn, nt, pz, zt)).dim_shuffle((1, 3, 0, 2, 4))
    slabs = slabs.reshape((gn, pz, p, length))
    res = out[rows, :].reshape((gn, nt, pz, zt)).dim_shuffle((0, 2, 1, 3)).reshape((gn, pz, length))
    jj, kk, ii = np.meshgrid(np.arange(j0, j1), np.arange(pz), np.arange(p), indexing="ij")
    x, y = (jj, ii) if red == "y" else (ii, jj)
    pn_tiles = tiles[(x * py + y) * pz + kk]  # [gn, pz, p]: the PN of partition i
    per = -(-length // p)
    for first, count, size in pieces(length, p):
        span = slice(first * per, first * per + count * size)
        part = slabs[:, :, :, span].reshape((gn, pz, p, count, size)).dim_shuffle((0, 1, 3, 2, 4))
        dst = res[:, :, span].reshape((gn, pz, count, size))
        where = pn_tiles[:, :, first : first + count]
        g.set_tile_mapping(dst, np.broadcast_to(where[..., None], dst.shape))
        n = gn * pz * count
        fields: dict = {
            "partials": poplar.Segments(part, np.full(n, p * size)),
            "out": poplar.Segments(dst, np.full(n, size)),
        }
        fields.update(zip(GRID, (1, gn, pz, count)))
        base = f"{REDUCE}<{partials.dtype},{out.dtype},{p}x1x{_rows(size, zt)}"
        name, i = f"{base}>", 1
        while name in names:
            name, i = f"{base}.{i}>", i + 1
        names.add(name)
        g.add_vertices(cs, name, fields, where.reshape(-1))
