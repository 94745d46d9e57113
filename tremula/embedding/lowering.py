"""Lowering of the embedding's ops, and the run hook that binds a table to a session.

Host mode (the table in host memory):

* ``HostEmbeddingLookup``: the indices are clamped on the device (``clip_indices``), then a
  Poplar host-function call sends them to the host and receives the rows (one host
  function per lookup, ``<name>/lookup``, connected to a callback that serves all replicas
  at once). With ``deduplicate``, the device first reduces the indices to their distinct
  values (``tremula::EmbeddingUnique``), exchanges those, and expands the rows it gets
  back (``popops.multi_slice``).
* ``HostEmbeddingUpdate``: a host-function call sends the indices and the gradient rows
  (``<name>/update``); the host sums repeats and replicas and applies the optimizer. With
  ``deduplicate`` the device sums the repeats first (``popops.multi_update_add``) and sends
  one row per distinct index.

Remote-buffer mode: ``remote.py``. Each embedding a program uses adds one run hook to the
lowering (``Lowerer.run_hooks``): when the session runs, it checks that the embedding is
registered with that session, connects the host callbacks (or fills the remote buffers the
first time), and marks the remote copy newer than the host table afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tremula import poplar
from tremula.embedding import codelets
from tremula.embedding.ops import LOOKUP, UPDATE
from tremula.embedding.remote import RemoteTable
from tremula.errors import ApplicationRuntimeError, EmbeddingError
from tremula.libs import popops
from tremula.libs.popops import expr as pe
from tremula.lowering.driver import Env, Lowerer, rule
from tremula.popxl.ops.base import OpNode

if TYPE_CHECKING:
    from tremula.embedding.host_embedding import HostEmbedding

_KEY = "host_embeddings"

HostCallback = Callable[[list[np.ndarray], list[np.ndarray]], None]


@dataclass
class Uses:
    """One embedding in one lowered program: its host functions and callbacks, or its
    remote table."""

    embedding: HostEmbedding
    callbacks: dict[str, HostCallback] = field(default_factory=dict)
    remote: RemoteTable | None = None


def uses_of(lw: Lowerer, emb: HostEmbedding) -> Uses:
    """The :class:`Uses` of ``emb`` in ``lw``'s program (made, with its run hook, on the
    first op of ``emb`` lowered)."""
    table: dict[int, Uses] = lw.rule_state.setdefault(_KEY, {})
    uses = table.get(id(emb))
    if uses is None:
        for other in table.values():
            if other.embedding.name == emb.name:
                raise EmbeddingError(
                    f"two host embeddings named {emb.name!r} are used by one program; give "
                    f"each embedding its own name"
                )
        uses = table[id(emb)] = Uses(emb)
        if emb.remote_buffer:
            uses.remote = RemoteTable.create(lw, emb)
        lw.run_hooks.append(lambda session: _run(session, uses))
    return uses


@contextmanager
def _run(session: Any, uses: Uses) -> Iterator[None]:
    """Around one run of ``session``: the embedding must be registered with it."""
    emb = uses.embedding
    if emb._session is not session:
        raise EmbeddingError(
            f"host embedding {emb.name!r} is used by this session's program but is not "
            f"registered with it: run the session inside `with embedding.register(session):` "
            f"(embedding: the HostEmbedding {emb.name!r})"
        )
    engine = session.engine  # type: ignore[union-attr]  # a Session (the check above)
    for name, fn in uses.callbacks.items():
        engine.connect_host_function(name, fn, all_replicas=True)
    remote = uses.remote
    if remote is not None:
        if emb._needs_load:
            remote.load(engine, emb.table.array)
            emb._needs_load = False
        emb._sync = lambda: remote.store(engine, emb.table.array)
    try:
        yield
    finally:
        if remote is not None:
            emb._stale = True


# ---- the rules ----
def _indices(
    lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence, name: str, check: bool
) -> poplar.Tensor:
    """The op's indices, flat ``[n]``: clamped into range (``clip``), or checked on the
    device (``check``, for remote buffers; the host checks its own)."""
    emb = op.attrs["embedding"]
    idx = env[op.inputs[0]].flatten()
    tokens = emb.shape[0]
    if op.attrs["clip"]:
        return popops.map(
            lw.graph, pe.Clamp(pe._1, 0, tokens - 1), [idx], prog, name=f"{name}/clip"
        )
    if check and idx.num_elements:
        codelets.check_indices(lw.graph, idx, tokens, emb.name, prog)
    return idx


@rule(LOOKUP)
def _lookup(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    emb = op.attrs["embedding"]
    uses = uses_of(lw, emb)
    name = lw.name(f"{emb.name}/lookup")
    idx = _indices(lw, op, env, prog, name, check=uses.remote is not None)
    out = op.outputs[0]
    if uses.remote is not None:
        rows = uses.remote.lookup(lw, idx, prog, name)
        env[out] = rows.reshape(out.shape)
        return
    env[out] = _host_lookup(lw, op, idx, uses, prog, name).reshape(out.shape)


@rule(UPDATE)
def _update(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    emb = op.attrs["embedding"]
    uses = uses_of(lw, emb)
    name = lw.name(f"{emb.name}/update")
    idx = _indices(lw, op, env, prog, name, check=uses.remote is not None)
    grad = env[op.inputs[1]].reshape((idx.num_elements, emb.shape[1]))
    remote = uses.remote
    if remote is None:
        _host_update(lw, op, idx, grad, uses, prog, name)
        return
    spec = emb.optimizer_spec
    slots, vals = remote.gradients(lw, idx, grad, prog, name)
    scale = -spec.learning_rate
    if spec.accumulation_factor > 1:
        remote.accumulate(lw, slots, vals, scale, spec.accumulation_factor, prog, name)
    else:
        remote.apply(lw, slots, vals, scale, prog, name)


# ---- host mode ----
def _host_lookup(
    lw: Lowerer, op: OpNode, idx: poplar.Tensor, uses: Uses, prog: poplar.Sequence, name: str
) -> poplar.Tensor:
    emb, dedup, clip = op.attrs["embedding"], op.attrs["dedup"], op.attrs["clip"]
    g, n, e = lw.graph, idx.num_elements, emb.shape[1]
    dtype = emb.dtype.as_poplar()
    if dedup is None:
        rows = lw.new_tensor(None, dtype, (n, e), f"{name}/rows")
        hf = g.add_host_function(name, [(poplar.INT, n)], [(dtype, n * e)])
        prog.add(poplar.Call(hf, [idx], [rows.flatten()], name=f"{name}/HostCall"))
        uses.callbacks[name] = lookup_callback(emb, clip)
        return rows
    uniq, inv, count = codelets.unique(g, idx, dedup, 0, prog, name)
    found = popops.create_sliceable_tensor(g, dtype, (dedup, e), f"{name}/uniqueRows")
    hf = g.add_host_function(name, [(poplar.INT, dedup), (poplar.INT, 1)], [(dtype, dedup * e)])
    prog.add(poplar.Call(hf, [uniq, count], [found.flatten()], name=f"{name}/HostCall"))
    uses.callbacks[name] = lookup_callback(emb, clip, dedup)
    return popops.multi_slice(g, found, inv, prog, name=f"{name}/expand")


def _host_update(
    lw: Lowerer,
    op: OpNode,
    idx: poplar.Tensor,
    grad: poplar.Tensor,
    uses: Uses,
    prog: poplar.Sequence,
    name: str,
) -> None:
    emb, dedup, clip = op.attrs["embedding"], op.attrs["dedup"], op.attrs["clip"]
    g, n, e = lw.graph, idx.num_elements, emb.shape[1]
    dtype = emb.dtype.as_poplar()
    if dedup is None:
        hf = g.add_host_function(name, [(poplar.INT, n), (dtype, n * e)], [])
        prog.add(poplar.Call(hf, [idx, grad.flatten()], [], name=f"{name}/HostCall"))
        uses.callbacks[name] = update_callback(emb, clip)
        return
    uniq, inv, count = codelets.unique(g, idx, dedup, 0, prog, name)
    sums = popops.create_sliceable_tensor(g, dtype, (dedup, e), f"{name}/sums")
    popops.zero(g, sums, prog, name=f"{name}/zeroSums")
    popops.multi_update_add(g, sums, inv, grad, 1.0, prog, name=f"{name}/sumRepeats")
    ins = [(poplar.INT, dedup), (poplar.INT, 1), (dtype, dedup * e)]
    hf = g.add_host_function(name, ins, [])
    prog.add(poplar.Call(hf, [uniq, count, sums.flatten()], [], name=f"{name}/HostCall"))
    uses.callbacks[name] = update_callback(emb, clip, dedup)


def _check_count(emb: HostEmbedding, count: np.ndarray, capacity: int) -> None:
    if count.size and int(count.max()) > capacity:
        r = int(np.argmax(count.reshape(-1)))
        raise ApplicationRuntimeError(
            f"host embedding {emb.name!r}: a lookup has {int(count.reshape(-1)[r])} distinct "
            f"indices (replica {r}), more than its deduplicate capacity {capacity}; give "
            f"lookup(..., deduplicate=True) or a larger capacity"
        )


def lookup_callback(emb: HostEmbedding, clip: bool, dedup: int | None = None) -> HostCallback:
    """The host's side of a lookup of ``emb``: ``fn([indices [R, n]], [rows [R, n e]])``
    (``[unique [R, K], count [R, 1]]`` with deduplication), called once for all replicas."""
    table, e = emb.table, emb.shape[1]

    def lookup(ins: list[np.ndarray], outs: list[np.ndarray]) -> None:
        idx = ins[0]
        if dedup is not None:
            _check_count(emb, ins[1], dedup)
        if not clip:
            table.check(idx, "lookup")
        table.lookup(idx.reshape(-1), outs[0].reshape(-1, e))

    return lookup


def update_callback(emb: HostEmbedding, clip: bool, dedup: int | None = None) -> HostCallback:
    """The host's side of an update of ``emb``: ``fn([indices [R, n], grads [R, n e]], [])``
    (``[unique, count, sums]`` with deduplication), called once for all replicas."""
    table, e = emb.table, emb.shape[1]

    def update(ins: list[np.ndarray], outs: list[np.ndarray]) -> None:
        idx = ins[0]
        if dedup is None:
            grads = ins[1].reshape(-1, e)
        else:  # the distinct indices of each replica and their summed gradients
            _check_count(emb, ins[1], dedup)
            used = np.arange(dedup)[None, :] < ins[1].reshape(-1, 1)
            grads = ins[2].reshape(idx.shape[0], dedup, e)[used]
            idx = idx[used][None, :]
        if not clip:
            table.check(idx, "update")
        table.update(idx.reshape(-1), grads)

    return update
