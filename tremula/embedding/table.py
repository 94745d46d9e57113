"""The host side of a host embedding: the table, its optimizer state, and what the host does
when the device calls it (look rows up, apply the gradients of a step).

Every update is all or nothing: the rows a call touches are computed and written chunk by
chunk, and a failure part way (a callback that raises) restores the rows already written,
so the table is never left half-updated. Gradients of repeated indices, of several
replicas, and of the steps of an accumulation window are summed before the update (one
update per distinct row).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from tremula.embedding import fused, kernels
from tremula.embedding.optimizers import HostEmbeddingOptimizerSpec
from tremula.errors import ApplicationRuntimeError
from tremula.libs import jit


@dataclass
class Statistics:
    """What the host did for an embedding (its own time, not modelled cycles): calls,
    rows, bytes moved and wall-clock seconds of the lookups and updates."""

    lookups: int = 0
    lookup_rows: int = 0
    lookup_seconds: float = 0.0
    updates: int = 0
    update_rows: int = 0  # gradient rows received
    updated_rows: int = 0  # distinct rows written
    update_seconds: float = 0.0
    bytes_to_device: int = 0
    bytes_from_device: int = 0

    def as_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


@dataclass
class HostTable:
    """A table ``[tokens, encoding]`` in host memory (an array or a memmap) with its
    optimizer state.

    Attributes:
        name: the embedding's name (for messages).
        array: the table, updated in place.
        spec: the optimizer spec, or None (inference only).
        state: the optimizer's state arrays (float32), by name.
        steps: how many updates have been applied.
    """

    name: str
    array: np.ndarray
    spec: HostEmbeddingOptimizerSpec | None = None
    state: dict[str, np.ndarray] = field(default_factory=dict)
    steps: int = 0
    stats: Statistics = field(default_factory=Statistics)
    _pending: list[kernels.RowSums] = field(default_factory=list)
    _calls: int = 0
    _scratch: np.ndarray | None = None  # the old rows of an update (kept for undo)
    _fused: fused.FusedUpdate | None = None  # the compiled updates' scratch, GA window

    def __post_init__(self) -> None:
        if self.spec is not None and not self.state:
            self.state = new_state(self.spec, self.array.shape)

    @property
    def tokens(self) -> int:
        return int(self.array.shape[0])

    @property
    def encoding(self) -> int:
        return int(self.array.shape[1])

    # ---- what the device asks for ----
    def check(self, indices: np.ndarray, what: str) -> None:
        """Refuse indices outside ``[0, tokens)`` (``indices`` is ``[replica, n]``), naming
        the first one."""
        t = self.tokens
        if indices.size == 0 or (indices.min() >= 0 and indices.max() < t):
            return
        r, i = (int(k) for k in np.argwhere((indices < 0) | (indices >= t))[0])
        raise ApplicationRuntimeError(
            f"host embedding {self.name!r}: {what} index {int(indices[r, i])} (replica {r}, "
            f"position {i} of the flattened indices) is outside [0, {t}); lookups with "
            f"clip_indices=True (the default) clamp indices into range"
        )

    def lookup(self, indices: np.ndarray, out: np.ndarray) -> None:
        """``out[i] = table[indices[i]]`` for in-range ``indices`` ``[n]``, ``out`` ``[n, e]``."""
        start = time.perf_counter()
        kernels.lookup(self.array, indices, out)
        s = self.stats
        s.lookups += 1
        s.lookup_rows += indices.size
        s.bytes_from_device += indices.nbytes
        s.bytes_to_device += out.nbytes
        s.lookup_seconds += time.perf_counter() - start

    def update(self, indices: np.ndarray, grads: np.ndarray) -> None:
        """Take the gradients of one step: ``indices`` ``[n]`` (in range), ``grads``
        ``[n, e]``. They are summed per distinct row and applied now, or, with gradient
        accumulation, kept until the window's last step."""
        if self.spec is None or not self.spec.trainable:
            return
        start = time.perf_counter()
        s = self.stats
        s.updates += 1
        s.update_rows += indices.size
        s.bytes_from_device += indices.nbytes + grads.nbytes
        if self._compiled(grads):
            self._update_compiled(indices, grads)
        else:
            self._update_numpy(indices, grads)
        s.update_seconds += time.perf_counter() - start

    def _compiled(self, grads: np.ndarray) -> bool:
        """Whether this update takes a compiled path (:mod:`fused`): numba is installed,
        the spec's rule has a compiled loop (SGD, SGD + GA, Adagrad, Adam; not a subclass's
        own ``apply``), the table and the gradients are float32; an accumulation window
        stays on the path it started on."""
        if self._pending:
            return False
        if self._fused is not None and self._fused.pending:
            return True
        spec = self.spec
        return (
            jit.available()
            and spec is not None
            and spec.compiled_rule is not None
            and self.array.dtype == np.float32
            and grads.dtype == np.float32
        )

    def _update_numpy(self, indices: np.ndarray, grads: np.ndarray) -> None:
        assert self.spec is not None
        self.check(indices.reshape(1, -1), "update")  # as the compiled path: nothing written
        sums = kernels.segment_sum(indices, grads)
        if self.spec.accumulation_factor > 1:
            self._pending.append(sums)
            self._calls += 1
            if self._calls % self.spec.accumulation_factor == 0:
                self.flush()
        else:
            self.apply(sums)

    def _update_compiled(self, indices: np.ndarray, grads: np.ndarray) -> None:
        spec = self.spec
        assert spec is not None and spec.compiled_rule is not None
        f = self._fused
        if f is None:
            f = self._fused = fused.FusedUpdate(self.tokens, self.encoding)
        idx = np.ascontiguousarray(indices)
        g = np.ascontiguousarray(grads, np.float32)
        factor = spec.accumulation_factor
        if factor > 1:
            u = f.accumulate(idx, g)
        else:
            u = _COMPILED[spec.compiled_rule](self, f, spec.constants(self.steps), idx, g)
        if u < 0:
            self.check(idx.reshape(1, -1), "update")  # raises, naming the index
        if factor == 1:
            self.steps += 1
            self.stats.updated_rows += u
            return
        self._calls += 1
        if self._calls % factor == 0:
            self.flush()

    def flush(self) -> None:
        """Apply the gradients accumulated so far (gradient accumulation), if any."""
        if self._fused is not None and self._fused.pending:
            assert self.spec is not None
            table = np.asarray(self.array)  # a memmap's ndarray view (the same memory)
            self.stats.updated_rows += self._fused.flush(table, self.spec.constants(self.steps))
            self.steps += 1
        if not self._pending:
            return
        rows = np.concatenate([p.rows for p in self._pending])
        grads = np.concatenate([p.sums() for p in self._pending])
        self.apply(kernels.segment_sum(rows, grads))  # the steps' sums, in step order
        self._pending.clear()

    def apply(self, sums: kernels.RowSums) -> None:
        """One update: each distinct row of ``sums`` gets its summed gradient through the
        spec; all or nothing (the table and the state)."""
        spec = self.spec
        assert spec is not None
        rows = sums.rows
        gathered = {k: s[rows] for k, s in self.state.items()}  # copies, written at the end

        def step(old: np.ndarray, new: np.ndarray, chunk: slice) -> np.ndarray:
            rows_state = {k: g[chunk] for k, g in gathered.items()}
            return spec.apply(old, sums.take(chunk, new), new, rows_state, self.steps)

        scratch = self._scratch
        if scratch is None or scratch.shape[0] < rows.size:
            scratch = self._scratch = np.empty((rows.size, self.encoding), self.array.dtype)
        kernels.read_modify_write(self.array, rows, step, scratch)
        for k, g in gathered.items():
            self.state[k][rows] = g
        self.steps += 1
        self.stats.updated_rows += rows.size

    def discard_pending(self) -> None:
        """Forget accumulated gradients not yet applied."""
        self._pending.clear()
        if self._fused is not None:
            self._fused.discard()
        self._calls = 0


def _sgd(t: HostTable, f: fused.FusedUpdate, k: np.ndarray, idx: np.ndarray, g: np.ndarray) -> int:
    return f.sgd(np.asarray(t.array), idx, g, k)


def _adagrad(
    t: HostTable, f: fused.FusedUpdate, k: np.ndarray, idx: np.ndarray, g: np.ndarray
) -> int:
    return f.adagrad(np.asarray(t.array), t.state["accumulator"], idx, g, k)


def _adam(t: HostTable, f: fused.FusedUpdate, k: np.ndarray, idx: np.ndarray, g: np.ndarray) -> int:
    return f.adam(np.asarray(t.array), t.state["m"], t.state["v"], idx, g, k)


#: the compiled update of each rule (``spec.compiled_rule``) without accumulation; the table
#: as an ndarray (a memmap's view of the same memory)
_COMPILED = {"sgd": _sgd, "adagrad": _adagrad, "adam": _adam}


def new_state(spec: HostEmbeddingOptimizerSpec, shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    """Fresh state arrays for ``spec`` (zeros are allocated lazily by the OS, so a large
    table's untouched state costs no memory)."""
    t, e = int(shape[0]), int(shape[1])
    out = {}
    for name, s in spec.state_shapes((t, e)).items():
        init = spec.initial_state(name)
        out[name] = np.zeros(s, np.float32) if init == 0 else np.full(s, init, np.float32)
    return out
