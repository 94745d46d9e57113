"""The per-vertex views a codelet's functions receive: :class:`Batch` for ``compute`` (the
fields of every vertex of one type in a compute set, read from and written to device
memory) and :class:`VertexInfo` for ``cycles`` / ``flops`` (their sizes and state only),
both with the segment helpers of :class:`_Segmented`. See :mod:`tremula.poplar.codelet`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from tremula.errors import CodeletError
from tremula.poplar import blocks

if TYPE_CHECKING:
    from tremula.poplar.codelet import Field, VertexType
    from tremula.poplar.types import Type

__all__ = ["Batch", "VertexInfo"]


class _Segmented:
    """Per-vertex structure of the fields of one vertex group (shared by Batch and
    VertexInfo)."""

    def __init__(
        self,
        vtype: VertexType,
        n: int,
        lengths: dict[str, np.ndarray],
        sub_lengths: dict[str, np.ndarray],
        state: dict[str, np.ndarray],
        target: Any,
    ) -> None:
        self.vertex_type = vtype
        self.n = n
        self._lengths = lengths
        self._sub = sub_lengths
        self._state = state
        self.target = target
        self._offsets: dict[str, np.ndarray] = {}
        self._segments: dict[str, np.ndarray] = {}

    @property
    def fields(self) -> dict[str, Field]:
        return self.vertex_type.codelet.fields

    @property
    def params(self) -> dict[str, str]:
        return self.vertex_type.params

    def dtype(self, name: str) -> Type:
        """The element type of field ``name`` (declared, or bound from a template)."""
        dtype = self.vertex_type.field_dtype(self.fields[name])
        if dtype is None:
            raise CodeletError(
                f"codelet {self.vertex_type.name}: field {name!r} declares no element type"
            )
        return dtype

    def vector_width(self, name: str) -> int:
        return self.target.vector_width(self.dtype(name).size)

    def lengths(self, name: str) -> np.ndarray:
        """Elements of field ``name`` per vertex, shape ``[n]``."""
        return self._lengths[name]

    def sub_lengths(self, name: str) -> np.ndarray:
        """Lengths of the sub-vectors of a vector-list field, flattened over vertices."""
        return self._sub[name]

    def sub_counts(self, name: str) -> np.ndarray:
        """Number of sub-vectors of a vector-list field per vertex."""
        return self._sub[name + "#count"]

    def offsets(self, name: str) -> np.ndarray:
        """Start of each vertex's part of the flat field, shape ``[n + 1]``."""
        off = self._offsets.get(name)
        if off is None:
            off = np.zeros(self.n + 1, dtype=np.int64)
            np.cumsum(self._lengths[name], out=off[1:])
            self._offsets[name] = off
        return off

    def segments(self, name: str) -> np.ndarray:
        """The vertex each flat element of the field belongs to."""
        seg = self._segments.get(name)
        if seg is None:
            seg = np.repeat(np.arange(self.n, dtype=np.int64), self._lengths[name])
            self._segments[name] = seg
        return seg

    def expand(self, per_vertex: np.ndarray, name: str) -> np.ndarray:
        """Repeat one value per vertex to one value per element of field ``name``."""
        return np.asarray(per_vertex)[..., self.segments(name)]

    def state(self, name: str) -> np.ndarray:
        return self._state[name]

    def __getattr__(self, name: str) -> Any:
        state = self.__dict__.get("_state")
        if state is not None and name in state:
            return state[name]
        raise AttributeError(name)


class VertexInfo(_Segmented):
    """What a cycle estimator sees: field lengths and state, no data."""


class Batch(_Segmented):
    """What a codelet's ``compute`` sees: the data of all vertices of one type in a compute
    set. Edge fields are arrays shaped ``[replica, element]`` (gathered on first use);
    ``view(name, shape)`` gives a field as ``[replica, *shape]``, zero-copy when the
    connected tensor allows it. State fields are arrays shaped ``[vertex]`` (``[element]``
    for vector state). ``replica_ids`` names the replica of each row (all replicas, unless
    replicas took different branches of a program)."""

    def __init__(
        self,
        vtype: VertexType,
        n: int,
        lengths: dict[str, np.ndarray],
        sub_lengths: dict[str, np.ndarray],
        state: dict[str, np.ndarray],
        target: Any,
        data: dict[str, np.ndarray],
        replicas: int,
    ) -> None:
        super().__init__(vtype, n, lengths, sub_lengths, state, target)
        self.__dict__["_data"] = data
        self.__dict__["_scatter"] = set()
        self.__dict__["_ctx"] = None
        self.__dict__["_cache"] = {}
        self.replicas = replicas
        self.replica_ids = np.arange(replicas)
        #: every replica of this process runs (False under control flow on which they differ)
        self.all_replicas = True
        #: the run-time checks the engine's ``debug.check*`` options ask codelets for
        #: (``"integerDivision"``), and the compute set the batch runs in, for their messages
        self.checks: frozenset[str] = frozenset()
        self.compute_set = ""

    def _begin(self, group: Any, storage: dict, rsel: Any, replica_ids: np.ndarray) -> None:
        """Called by the engine before each compute: a fresh set of lazily gathered fields."""
        d = self.__dict__  # plain attributes: skip __setattr__'s field lookup
        d["_data"].clear()
        d["_scatter"].clear()
        d["_ctx"] = (group, storage, rsel)
        d["replicas"] = int(replica_ids.size)
        d["replica_ids"] = replica_ids
        d["all_replicas"] = isinstance(rsel, slice)

    def _field(self, name: str) -> np.ndarray:
        data = self._data
        if name not in data:
            group, storage, rsel = self._ctx
            data[name], scatter = group.materialize(name, storage, rsel, self.replicas)
            if scatter:
                self._scatter.add(name)
        return data[name]

    def __getattr__(self, name: str) -> Any:
        ctx = self.__dict__.get("_ctx")
        if ctx is not None and name in ctx[0].gathers:
            return self._field(name)
        return super().__getattr__(name)

    def __setattr__(self, name: str, value: Any) -> None:
        ctx = self.__dict__.get("_ctx")
        if ctx is not None and name in ctx[0].gathers:
            if not self.fields[name].writes:
                raise CodeletError(
                    f"codelet {self.vertex_type.name}: field {name!r} is an "
                    f"input and cannot be assigned"
                )
            target = self._field(name)
            try:
                target[...] = value
            except (ValueError, TypeError) as exc:
                raise CodeletError(
                    f"codelet {self.vertex_type.name}: compute wrote field {name!r} with a value "
                    f"of shape {np.shape(value)}; the field is {target.shape} ([replica, "
                    f"element] of every vertex in the group) of {target.dtype}: {exc}"
                ) from None
            return
        super().__setattr__(name, value)

    def __getitem__(self, name: str) -> np.ndarray:
        return self._field(name)

    def __setitem__(self, name: str, value: Any) -> None:
        self.__setattr__(name, value)

    def cached(self, key: Any, build: Callable[[], Any]) -> Any:
        """``build()`` once per vertex group, kept across runs: for index tables and plans
        a codelet derives from its vertices' structure (not from data). Keys name that
        structure, never ``id()`` of an object made for one run (a gathered field's view):
        a later run's object at a recycled address would be served the stale entry."""
        cache = self._cache
        if key not in cache:
            cache[key] = build()
        return cache[key]

    def reads_one_address(self, name: str) -> bool:
        """True when every element of field ``name`` (all vertices) is the same element of
        device memory, e.g. one scalar tensor connected to every vertex (decided once)."""

        def check() -> bool:
            starts, lengths = self._ctx[0].gathers[name].runs()
            return bool(starts.size == 0 or (np.all(starts == starts[0]) and np.all(lengths == 1)))

        return self.cached(("one-address", name), check)

    def stable_view(self, name: str, shape: tuple[int, ...] | None = None) -> np.ndarray | None:
        """A zero-copy view of field ``name`` (flat ``[replica, element]`` or
        ``[replica, *shape]``) that stays valid across runs, or None when the field needs a
        gather (for ``Codelet.prepare``)."""
        group, storage, rsel = self._ctx
        if not isinstance(rsel, slice):
            return None
        if shape is not None:
            return group.strided(name, tuple(int(x) for x in shape), storage, rsel)
        g = group.gathers[name]
        if not g.is_view:
            return None
        view = storage[g.dtype][:, g.index]
        if not self.fields[name].writes:
            view = view.view()
            view.flags.writeable = False
        return view

    def stable_gather(
        self, name: str, shape: tuple[int, ...] | None = None
    ) -> tuple[np.ndarray, Callable[[], None]] | None:
        """Read-only field ``name`` in a buffer kept across runs (flat ``[replica, element]``
        or ``[replica, *shape]``, ``shape`` in the field's order) and ``refresh()``, which
        gathers it from device memory into the buffer again: call it at the start of each
        run. For ``Codelet.prepare`` when :meth:`stable_view` finds no view; None for a
        field the codelet writes or on a subset of the replicas."""
        group, storage, rsel = self._ctx
        if not isinstance(rsel, slice) or self.fields[name].writes:
            return None
        g = group.gathers[name]
        size = g.size
        if shape is not None and int(np.prod(shape, dtype=np.int64)) != size:
            return None
        arr, index = storage[g.dtype], g.index
        buf = np.empty((arr.shape[0], size), dtype=arr.dtype)
        if isinstance(index, slice):

            def refresh() -> None:
                np.copyto(buf, arr[:, index])
        else:  # strided block copies where the addresses form a few, else one take
            refresh = blocks.gatherer(arr, index, buf)

        view = buf if shape is None else buf.reshape(arr.shape[0], *shape)
        return view, refresh

    def stable_repeated(
        self, name: str, shape: tuple[int, ...]
    ) -> tuple[np.ndarray, Callable[[], None]] | None:
        """Read-only field ``name`` as ``[replica, *shape]`` when its addresses repeat
        along some axes of ``shape`` (see :meth:`view`): a read-only broadcast of a buffer
        of the distinct elements kept across runs, and ``refresh()`` that gathers them
        from device memory again (call it at the start of each run); None when no axis
        repeats, for a field the codelet writes or on a subset of the replicas. For
        ``Codelet.prepare``."""
        group, storage, rsel = self._ctx
        if not isinstance(rsel, slice):
            return None
        return group.stable_repeated(name, tuple(int(x) for x in shape), storage)

    def stable_runs(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Field ``name`` in device memory: ``(storage, starts, lengths)``, the ``[replica,
        address]`` array of its type (valid across runs) and the runs of consecutive
        addresses of the field in field order; None on a subset of the replicas. For
        ``Codelet.prepare`` building its own views (it writes only fields that write)."""
        group, storage, rsel = self._ctx
        if not isinstance(rsel, slice):
            return None
        g = group.gathers[name]
        starts, lengths = g.runs()
        return storage[g.dtype], starts, lengths

    def stable_cover(self, name: str) -> tuple[np.ndarray, np.ndarray] | None:
        """Read-only field ``name`` whose addresses increase (with a few gaps): the
        zero-copy ``[replica, span]`` view of device memory covering them, valid across
        runs, and each element's position in it; or None. For ``Codelet.prepare``."""
        group, storage, rsel = self._ctx
        return group.cover(name, storage, rsel)

    def stable_grid(
        self, name: str, block: tuple[int, ...]
    ) -> tuple[np.ndarray, np.ndarray, int] | None:
        """Read-only field ``name`` as equal blocks of shape ``block`` lying on an affine
        grid of device memory in a permuted order: ``(view, order, rank)``, ``view`` a
        zero-copy ``[replica, *grid, *block]`` view valid across runs (grid in address
        order, ``rank`` axes; the block's first axis possibly split in two) and ``order[i]``
        the flat grid position of the field's ``i``-th block; or None (see
        ``CompiledGroup.permuted_grid``). For ``Codelet.prepare``."""
        group, storage, rsel = self._ctx
        return group.permuted_grid(name, tuple(int(x) for x in block), storage, rsel)

    def affine_shape(self, name: str) -> tuple[int, ...] | None:
        """A shape under which ``stable_view(name, shape)`` succeeds although the field is
        not one flat run (e.g. ``(rows, row)`` for a transposed matrix), or None."""
        return self._ctx[0].affine_shape(name)

    def stable_scalar(self, name: str) -> np.ndarray | None:
        """A ``[replica, 1]`` view of the one element every vertex of field ``name`` reads
        (see ``reads_one_address``), or None."""
        group, storage, rsel = self._ctx
        if not isinstance(rsel, slice) or not self.reads_one_address(name):
            return None
        g = group.gathers[name]
        starts, _ = g.runs()
        if starts.size == 0:
            return None
        a = int(starts[0])
        view = storage[g.dtype][:, a : a + 1].view()
        view.flags.writeable = False
        return view

    def source_shape(self, name: str) -> tuple[int, ...] | None:
        """The shape of the tensor field ``name`` was connected to in bulk (its flat order
        is the field's), or None (lists of tensors, several ``add_vertices`` calls)."""
        source = self._ctx[0].sources.get(name)
        return None if source is None else tuple(source.shape)

    def view(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """Field ``name`` of all vertices as ``[replica, *shape]`` (``shape`` covers the
        field's elements in vertex order). When the tensor connected in bulk reshapes to
        ``shape`` as a view of one variable, this is a zero-copy strided view of device
        memory (writes to an output land directly); otherwise the gathered field reshaped.
        Use either views or the flat field for one output, not both."""
        group, storage, rsel = self._ctx
        shape = tuple(int(s) for s in shape)
        strided = group.strided(name, shape, storage, rsel)
        if strided is not None:
            return strided
        if name not in self._data:
            repeated = group.repeated(name, shape, storage, rsel)
            if repeated is not None:
                return repeated
        return self._field(name).reshape(self.replicas, *shape)

    def read_at(self, name: str, positions: np.ndarray) -> np.ndarray:
        """Elements ``positions`` of field ``name``, ``[replica, k]``, read from device memory
        without gathering the rest of the field (``positions``: ``[k]``, or ``[replica, k]``
        when they differ between replicas). For a codelet that touches a few elements of a
        large field (a dynamic slice)."""
        group, storage, rsel = self._ctx
        positions = np.asarray(positions)
        if positions.ndim == 1 and isinstance(rsel, slice):  # one set for every replica
            return self.read_addresses(name, group.addresses(name, positions))
        arr, rows, addr = group.at(name, positions, storage, rsel)
        return arr[rows, addr]

    def addresses(self, name: str, positions: np.ndarray) -> np.ndarray:
        """The device-memory addresses of elements ``positions`` (``[k]``) of field
        ``name``: static, so a codelet may keep them for :meth:`read_addresses` and
        :meth:`write_addresses` in later runs."""
        return self._ctx[0].addresses(name, np.asarray(positions))

    def read_addresses(self, name: str, addresses: np.ndarray) -> np.ndarray:
        """Elements of field ``name`` at ``addresses`` (from :meth:`addresses`),
        ``[replica, k]``, read from device memory."""
        group, storage, rsel = self._ctx
        arr = storage[group.gathers[name].dtype]
        if isinstance(rsel, slice):
            return arr[rsel].take(addresses, axis=1)
        return arr[rsel[:, None], addresses[None, :]]

    def write_addresses(self, name: str, addresses: np.ndarray, values: Any) -> None:
        """Write ``values`` (``[replica, k]``) to output field ``name`` at ``addresses``
        (from :meth:`addresses`), leaving the rest of the field as it is."""
        if not self.fields[name].writes:
            raise CodeletError(
                f"codelet {self.vertex_type.name}: field {name!r} is an input and cannot be written"
            )
        group, storage, rsel = self._ctx
        arr = storage[group.gathers[name].dtype]
        if isinstance(rsel, slice):
            arr[rsel, addresses] = values
        else:
            arr[rsel[:, None], addresses[None, :]] = values

    def write_at(self, name: str, positions: np.ndarray, values: Any) -> None:
        """Write ``values`` (``[replica, k]``) to elements ``positions`` of output field
        ``name`` in device memory, leaving the rest of the field as it is (see
        :meth:`read_at`). Do not also assign the whole field in the same compute."""
        if not self.fields[name].writes:
            raise CodeletError(
                f"codelet {self.vertex_type.name}: field {name!r} is an input and cannot be written"
            )
        group, storage, rsel = self._ctx
        positions = np.asarray(positions)
        if positions.ndim == 1 and isinstance(rsel, slice):  # one set for every replica
            self.write_addresses(name, group.addresses(name, positions), values)
            return
        arr, rows, addr = group.at(name, positions, storage, rsel)
        arr[rows, addr] = values

    def reduce(self, ufunc: np.ufunc, values: np.ndarray, name: str) -> np.ndarray:
        """Reduce ``values`` (laid out like field ``name``) per vertex with ``ufunc``
        (e.g. ``np.add``); vertices with an empty field get the ufunc's identity."""
        off = self.offsets(name)
        lengths = self.lengths(name)
        out_shape = (*values.shape[:-1], self.n)
        if self.n == 0:
            return np.zeros(out_shape, dtype=values.dtype)
        if np.all(lengths > 0):  # starts strictly increase and stay inside ``values``
            return ufunc.reduceat(values, off[:-1], axis=-1)
        pad = np.full((*values.shape[:-1], 1), ufunc.identity, dtype=values.dtype)
        out = ufunc.reduceat(np.concatenate([values, pad], axis=-1), off[:-1], axis=-1)
        out[..., lengths == 0] = ufunc.identity
        return out
