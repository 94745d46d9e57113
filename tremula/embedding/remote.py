"""Remote-buffer embeddings on the device: the table split between the replicas' remote
buffers (``partition.py``), lookups and updates built from remote-buffer copies, popops
element-wise ops and the gcl collectives (the pseudo-code of Graphcore's TensorFlow host-embedding
documentation), so the profile shows
every remote read and write and every collective.

Per replica (``R`` replicas, ``n`` indices per lookup, ``me`` the replica's index):

* TOKEN lookup: all-gather the indices ``G [R n]``; read slots ``G / R`` of the local
  buffer; zero the rows with ``G % R != me``; reduce-scatter (sum) gives each replica its
  own ``n`` rows (exactly one replica contributes each row).
* ENCODING lookup: all-gather the indices; read their local columns ``[R n, c]``; an
  all-to-all hands each replica the columns of its rows; transpose, flatten, drop padding.
* Updates: the gradients travel the same way back (TOKEN: all-gathered, slots of rows
  another replica owns sent to the junk slot; ENCODING: padded, transposed, all-to-all),
  then one read-add-write of the buffer with repeated slots summed first (a distinct-slot
  list and a scatter-add into it), so that repeated indices and replicas all count:
  ``row += -lr * sum`` (Graphcore's version kept only one of repeated slots).
* Gradient accumulation: each step's distinct slots and sums are stored in a log of
  ``accumulation_factor`` entries (two more remote buffers); the step that fills the log
  applies all of its entries at once (an ``If`` on a step counter), so lookups in between
  see the table as it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tremula import poplar
from tremula.embedding import codelets
from tremula.embedding.partition import Layout
from tremula.libs import gcl, popops
from tremula.libs.popops import expr as pe

if TYPE_CHECKING:
    from tremula.embedding.host_embedding import HostEmbedding
    from tremula.lowering.driver import Lowerer


@dataclass
class RemoteTable:
    """One embedding's remote buffer in one lowered program, and how to fill and read it."""

    layout: Layout
    buffer: poplar.RemoteBuffer
    dtype: poplar.Type
    logs: list[Any] = field(default_factory=list)  # gradient-accumulation logs (for tests)

    @staticmethod
    def create(lw: Lowerer, emb: HostEmbedding) -> RemoteTable:
        t, e = emb.shape
        layout = Layout(emb.partition_strategy, t, e, lw.ir.replication_factor)
        layout.check(emb.name)
        dtype = emb.dtype.as_poplar()
        buf = lw.graph.add_remote_buffer(
            lw.name(f"{emb.name}/table"), dtype, layout.width, layout.rows + 1
        )
        return RemoteTable(layout, buf, dtype)

    # ---- host side ----
    def load(self, engine: poplar.Engine, table: np.ndarray) -> None:
        """Fill every replica's buffer from the host table."""
        for r in range(self.layout.replicas):
            engine.write_remote_buffer(self.buffer.name, self.layout.shard(table, r), r)

    def store(self, engine: poplar.Engine, table: np.ndarray) -> None:
        """Gather the replicas' buffers back into the host table (in place)."""
        for r in range(self.layout.replicas):
            shard = engine.read_remote_buffer(self.buffer.name, r)
            self.layout.unshard(shard.reshape(self.layout.rows + 1, -1), r, table)

    # ---- device side ----
    def read(
        self, lw: Lowerer, slots: poplar.Tensor, prog: poplar.Sequence, name: str
    ) -> poplar.Tensor:
        """Rows ``slots`` of the local buffer, ``[m, width]``."""
        m = slots.num_elements
        rows = lw.new_tensor(None, self.dtype, (m, self.layout.width), f"{name}/rows")
        prog.add(poplar.Copy(self.buffer, rows.flatten(), slots.flatten(), f"{name}/RemoteLoad"))
        return rows

    def write(
        self, rows: poplar.Tensor, slots: poplar.Tensor, prog: poplar.Sequence, name: str
    ) -> None:
        prog.add(poplar.Copy(rows.flatten(), self.buffer, slots.flatten(), f"{name}/RemoteStore"))

    def lookup(
        self, lw: Lowerer, idx: poplar.Tensor, prog: poplar.Sequence, name: str
    ) -> poplar.Tensor:
        """The rows ``[n, encoding]`` of the (in-range) indices ``idx [n]``."""
        L, g = self.layout, lw.graph
        R, n = L.replicas, idx.num_elements
        if R == 1:
            return self.read(lw, idx, prog, name)
        G = gcl.all_gather(g, idx, prog, name=f"{name}/allGatherIndices").flatten()
        if L.strategy == "TOKEN":
            slots = popops.map(g, pe._1 / R, [G], prog, name=f"{name}/slots")
            own = _owned(lw, G, R, prog, name)
            rows = self.read(lw, slots, prog, name)
            masked = popops.map(
                g, pe.Select(pe._1, 0, pe._2), [rows, own.reshape((R * n, 1))], prog,
                name=f"{name}/mask",
            )  # fmt: skip
            red = gcl.reduce_scatter(g, masked, "add", prog, name=f"{name}/reduceScatter")
            return red.reshape((n, L.encoding))
        c = L.width
        part = self.read(lw, G, prog, name).reshape((R, n * c))
        mine = gcl.all_to_all(g, part, prog, name=f"{name}/allToAll")  # block j: replica j's
        cols = mine.reshape((R, n, c)).dim_shuffle([1, 0, 2]).reshape((n, R * c))
        out = lw.new_tensor(None, self.dtype, (n, L.encoding), f"{name}/out")
        prog.add(poplar.Copy(cols[:, : L.encoding], out))
        return out

    def gradients(
        self, lw: Lowerer, idx: poplar.Tensor, grad: poplar.Tensor, prog: poplar.Sequence,
        name: str,
    ) -> tuple[poplar.Tensor, poplar.Tensor]:  # fmt: skip
        """(slots ``[m]``, values ``[m, width]``): the local buffer's share of a step's
        gradients ``grad [n, encoding]`` of indices ``idx [n]``, from every replica."""
        L, g = self.layout, lw.graph
        R, n = L.replicas, idx.num_elements
        if R == 1:
            return idx, grad
        G = gcl.all_gather(g, idx, prog, name=f"{name}/allGatherIndices").flatten()
        if L.strategy == "TOKEN":
            own = _owned(lw, G, R, prog, name)
            slots = popops.map(
                g, pe.Select(pe._1 / R, L.junk, pe._2), [G, own], prog, name=f"{name}/slots"
            )
            vals = gcl.all_gather(g, grad, prog, name=f"{name}/allGatherGrads")
            return slots, vals.reshape((R * n, L.encoding))
        c = L.width
        pad = R * c - L.encoding
        if pad:
            zeros = g.add_constant(self.dtype, (n, pad), 0, f"{name}/padding")
            poplar.map_tensor_linearly(g, zeros)
            grad = poplar.concat([grad, zeros], 1)
        blocks = grad.reshape((n, R, c)).dim_shuffle([1, 0, 2])
        mine = gcl.all_to_all(g, blocks, prog, name=f"{name}/allToAll")  # block k: replica k's
        return G, mine.reshape((R * n, c))

    def apply(
        self, lw: Lowerer, slots: poplar.Tensor, vals: poplar.Tensor, scale: float,
        prog: poplar.Sequence, name: str,
    ) -> None:  # fmt: skip
        """``buffer[s] += scale * (sum of the values of slot s)`` for every distinct slot."""
        uniq, sums = self.sum_repeats(lw, slots, vals, prog, name)
        self.add_rows(lw, uniq, sums, scale, prog, name)

    def sum_repeats(
        self, lw: Lowerer, slots: poplar.Tensor, vals: poplar.Tensor, prog: poplar.Sequence,
        name: str,
    ) -> tuple[poplar.Tensor, poplar.Tensor]:  # fmt: skip
        """(distinct slots ``[m]`` padded with the junk slot, their summed values ``[m, w]``,
        summed in order of occurrence)."""
        g, m = lw.graph, slots.num_elements
        uniq, inv, _ = codelets.unique(g, slots.flatten(), m, self.layout.junk, prog, name)
        sums = popops.create_sliceable_tensor(g, self.dtype, (m, self.layout.width), f"{name}/sums")
        popops.zero(g, sums, prog, name=f"{name}/zeroSums")
        popops.multi_update_add(g, sums, inv, vals, 1.0, prog, name=f"{name}/sumRepeats")
        return uniq, sums

    def add_rows(
        self, lw: Lowerer, uniq: poplar.Tensor, sums: poplar.Tensor, scale: float,
        prog: poplar.Sequence, name: str,
    ) -> None:  # fmt: skip
        rows = self.read(lw, uniq, prog, name)
        popops.map_in_place(lw.graph, pe._1 + pe._2 * scale, [rows, sums], prog, name=f"{name}/add")
        self.write(rows, uniq, prog, name)

    def accumulate(
        self, lw: Lowerer, slots: poplar.Tensor, vals: poplar.Tensor, scale: float,
        factor: int, prog: poplar.Sequence, name: str,
    ) -> None:  # fmt: skip
        """Log this step's summed gradients; the step that fills the log applies it."""
        g, m, w = lw.graph, slots.num_elements, self.layout.width
        uniq, sums = self.sum_repeats(lw, slots, vals, prog, name)
        log_slots = g.add_remote_buffer(lw.name(f"{name}/logSlots"), poplar.INT, m, factor)
        log_vals = g.add_remote_buffer(lw.name(f"{name}/logValues"), self.dtype, m * w, factor)
        self.logs.append((log_slots, log_vals))
        step = g.add_variable(poplar.INT, (1,), f"{name}/step")  # starts at 0
        g.set_tile_mapping(step, 0)
        prog.add(poplar.Copy(uniq, log_slots, step, f"{name}/logSlots"))
        prog.add(poplar.Copy(sums.flatten(), log_vals, step, f"{name}/logValues"))
        popops.map_in_place(g, pe._1 + 1, [step], prog, name=f"{name}/count")
        full = popops.map(g, pe.Equal(pe._1, factor), [step], prog, name=f"{name}/full")
        apply = poplar.Sequence(name=f"{name}/applyLog")
        entries = g.add_constant(poplar.INT, (factor,), np.arange(factor), f"{name}/entries")
        g.set_tile_mapping(entries, 0)
        all_slots = lw.new_tensor(None, poplar.INT, (factor * m,), f"{name}/loggedSlots")
        all_vals = lw.new_tensor(None, self.dtype, (factor * m, w), f"{name}/loggedValues")
        apply.add(poplar.Copy(log_slots, all_slots, entries, f"{name}/readLogSlots"))
        apply.add(poplar.Copy(log_vals, all_vals.flatten(), entries, f"{name}/readLogValues"))
        self.apply(lw, all_slots, all_vals, scale, apply, f"{name}/apply")
        popops.zero(g, step, apply, name=f"{name}/restart")
        prog.add(poplar.If(full, apply, name=f"{name}/ifLogFull"))


def _owned(
    lw: Lowerer, G: poplar.Tensor, R: int, prog: poplar.Sequence, name: str
) -> poplar.Tensor:
    """Whether this replica owns each global row of ``G`` under TOKEN (``G % R == me``)."""
    me = codelets.replication_index(lw.graph, prog, name)
    return popops.map(lw.graph, pe.Equal(pe._1 % R, pe._2), [G, me], prog, name=f"{name}/owned")
