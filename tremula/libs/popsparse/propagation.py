"""The propagation phase of a pass (PopLibs' ``FullyConnected.cpp``): buckets shifted around
the X, Y and Z partitions through double-buffered exchanges, each PN computing on the bucket
it holds, only as far as the pattern requires.

The schedule is read on the device at run time: a control vertex on the control tile
(:class:`codelets.PropagationInit`) reads the overflow info at the head of the meta-info
and says whether there is anything to do; the pass is an ``If`` on that, so a pattern
that never left its Z groups runs no step: its distribution compute set reads the dense
operands from the layer's tensors (one exchange). Otherwise the dense slices are first
copied into per-PN buffers (as PopLibs does before every distribution), the distribution
reads them there, and after the fill of buffer 0 with the buckets at the start offset, a
``RepeatWhileTrue`` runs :class:`codelets.PropagationStep` (the codes of the next step)
then the step: a ``Switch`` over the precompiled shifts (one
``Copy`` per dimension and destination buffer: every PN receives the buffer of its
predecessor along the dimension) and a ``Switch`` over the two compute sets (one per
buffer). The same schedule serves every pass (the sub-groups reach every Z tile of their
partition exactly once in it); GradW, whose partial buckets travel, continues until every
bucket is home and copies them back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tremula import poplar
from tremula.libs.popsparse.device import Layer, map_buckets
from tremula.libs.popsparse.layout import bucket_coordinates


@dataclass(frozen=True)
class Moving:
    """A ``[buckets, len]`` tensor whose rows travel (row ``b`` is PN ``b``'s bucket), and
    whether the travelled buckets are copied back at the end (GradW's partials)."""

    rows: poplar.Tensor
    name: str
    copy_back: bool = False


@dataclass(frozen=True)
class Phase:
    """What a pass's propagation phase is made of: the tensors whose buckets travel, the
    tile of each PN, the vertices of one buffer's compute set (``add_compute(cs,
    buffers)``), the copies of the dense operands into per-PN buffers (``prepare``), and
    the distribution compute set reading those buffers (``local``) or, when nothing
    propagates, the layer's tensors (``direct``)."""

    moving: list[Moving]
    tiles: np.ndarray
    add_compute: Callable[[poplar.ComputeSet, list[poplar.Tensor]], None]
    prepare: poplar.Program
    local: poplar.Program
    direct: poplar.Program


def needed(layer: Layer) -> bool:
    """Can any pattern need propagation? Not when one X/Y partition holds everything."""
    px, py, _ = layer.plan.partition.xyz
    return px * py > 1


def _source(plan_xyz: tuple[int, int, int], offset: Sequence[int]) -> np.ndarray:
    """For each PN, the PN whose bucket it holds after shifting by ``offset``."""
    sizes = np.array(plan_xyz)
    coords = np.stack(bucket_coordinates(plan_xyz))
    src = (coords - np.asarray(offset)[:, None]) % sizes[:, None]
    return (src[0] * sizes[1] + src[1]) * sizes[2] + src[2]


def build(layer: Layer, prog: poplar.Sequence, meta_info: poplar.Tensor, phase: Phase) -> None:
    """Append the distribution and propagation phases to ``prog``: the control reads the
    overflow info first; when the schedule is empty the distribution reads the layer's
    dense tensors directly (one exchange), else the dense slices are copied into per-PN
    buffers once, the distribution and every propagation step read them there."""
    moving, tiles, add_compute = phase.moving, phase.tiles, phase.add_compute
    g, plan = layer.graph, layer.plan
    xyz = plan.partition.xyz
    prefix = f"{layer.name or layer.where}/propagation"
    ctl = plan.control_tile
    names = ("step", "compute", "shift", "buffer", "more")
    state = {k: g.add_variable(poplar.UNSIGNED_INT, (1,), f"{prefix}/{k}") for k in names}
    for t in state.values():
        g.set_tile_mapping(t, ctl)
    head = meta_info[: plan.num_overflow_info_elems]

    def control(kind: str) -> poplar.ComputeSet:
        cs = g.add_compute_set(f"{prefix}/{kind}")
        g.add_vertex(
            cs,
            f"popsparse::Propagation{kind.capitalize()}",
            {
                "overflow_info": head,
                "step": state["step"][0],
                "compute_code": state["compute"][0],
                "shift_code": state["shift"][0],
                "buffer": state["buffer"][0],
                "more": state["more"][0],
                "px": xyz[0],
                "py": xyz[1],
                "pz": xyz[2],
                "return_home": int(any(m.copy_back for m in moving)),
            },
            tile=ctl,
        )
        return cs

    prog.add(poplar.Execute(control("init"), name=f"{prefix}/init"))
    buffers = []
    for k in range(2):
        bufs = []
        for m in moving:
            b = g.add_variable(m.rows.dtype, m.rows.shape, f"{prefix}/{m.name}{k}")
            map_buckets(g, b, plan, tiles)
            bufs.append(b)
        buffers.append(bufs)
    start = [0, 1, 0] if xyz[1] > 1 else [1, 0, 0]
    fill = _source(xyz, start)
    steps = poplar.Sequence([phase.prepare, phase.local], name=f"{prefix}/phase")
    for m, b in zip(moving, buffers[0]):
        steps.add(poplar.Copy(m.rows[fill], b, name=f"{prefix}/fill/{m.name}"))
    shifts = []
    for d in range(3):
        if xyz[d] == 1:
            continue
        e = [0, 0, 0]
        e[d] = 1
        src = _source(xyz, e)
        for k in range(2):
            copies = [
                poplar.Copy(old[src], new, name=f"{prefix}/shift{'xyz'[d]}/{m.name}{k}")
                for m, old, new in zip(moving, buffers[1 - k], buffers[k])
            ]
            shifts.append((1 + 2 * d + k, poplar.Sequence(copies)))
    computes = []
    for k in range(2):
        cs = g.add_compute_set(f"{prefix}/compute{k}")
        add_compute(cs, buffers[k])
        computes.append((1 + k, poplar.Execute(cs)))
    body = poplar.Sequence(
        [poplar.Switch(state["shift"], shifts), poplar.Switch(state["compute"], computes)]
    )
    steps.add(poplar.RepeatWhileTrue(poplar.Execute(control("step")), state["more"], body))
    for i, m in enumerate(moving):
        if m.copy_back:
            back = [(k, poplar.Copy(buffers[k][i], m.rows)) for k in range(2)]
            steps.add(poplar.Switch(state["buffer"], back))
    prog.add(poplar.If(state["more"], steps, phase.direct, name=f"{prefix}/if"))
