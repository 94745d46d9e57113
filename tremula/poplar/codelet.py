"""Codelets: how a vertex type is defined in Python.

A codelet is a class deriving from :class:`Codelet`. Its fields are class attributes made
with :func:`Input`, :func:`Output`, :func:`InOut` (edges connected to tensor regions) and
:func:`State` (per-vertex values fixed at graph-building time). It gives

* ``compute(v)``: the batched compute of *every* vertex of the type in one compute set.
  ``v`` is a :class:`Batch`; ``v.x`` is the concatenation of field ``x`` of all the
  vertices, shaped ``[replica, element]``, and assigning ``v.y = ...`` writes field ``y`` of
  all of them. Segment helpers (``lengths``, ``offsets``, ``segments``, ``expand``,
  ``reduce``) handle per-vertex structure without a Python loop.
* ``cycles(v)``: the cycle estimator, given a :class:`VertexInfo`; returns one estimate
  per vertex (per-context cycles for worker vertices, tile cycles for supervisor vertices,
  PopLibs' convention).
* optionally ``flops(v)``, ``state_bytes(v)`` (the size of one vertex instance in bytes,
  edge pointers included; by default derived from the fields) and the class constants
  ``code_bytes`` and ``supervisor``.

Template parameters: a codelet with ``templates = ("T",)`` is used as ``"Name<float>"``;
a field whose dtype is the string ``"T"`` takes the type bound there.

Example::

    class Scale(Codelet):
        x = Input("T")
        y = Output("T")
        a = State(FLOAT)
        templates = ("T",)

        @staticmethod
        def compute(v):
            v.y = v.expand(v.a, "x") * v.x

        @staticmethod
        def cycles(v):
            return 20 + 3 * np.ceil(v.lengths("x") / v.vector_width("x"))
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from tremula.errors import CodeletError, GraphError
from tremula.poplar.types import Type, as_type


@dataclass(frozen=True)
class Field:
    """One declared field of a codelet.

    ``direction`` is ``input``, ``output``, ``inout`` (edges) or ``state``. ``kind`` is
    ``scalar`` (one element), ``vector`` (a 1-D region) or ``vector_list`` (a list of 1-D
    regions). ``size`` fixes the number of elements of a vector field when given.
    """

    direction: str
    dtype: Type | str | None
    kind: str = "vector"
    size: int | None = None
    default: Any = None
    name: str = ""

    @property
    def is_edge(self) -> bool:
        return self.direction != "state"

    @property
    def reads(self) -> bool:
        return self.direction in ("input", "inout")

    @property
    def writes(self) -> bool:
        return self.direction in ("output", "inout")


_KINDS = ("scalar", "vector", "vector_list")


def _field(
    direction: str, dtype: Type | str | None, kind: str, size: int | None, default: Any = None
) -> Field:
    if kind not in _KINDS:
        raise CodeletError(f"field kind {kind!r} unknown; expected one of {_KINDS}")
    if dtype is not None and not isinstance(dtype, str):
        dtype = as_type(dtype)
    return Field(direction, dtype, kind, size, default)


def Input(dtype: Type | str | None = None, kind: str = "vector", size: int | None = None) -> Field:
    """An input edge: ``Input<T>`` (kind="scalar"), ``Vector<Input<T>>`` or a vector list."""
    return _field("input", dtype, kind, size)


def Output(dtype: Type | str | None = None, kind: str = "vector", size: int | None = None) -> Field:
    """An output edge; every element is written by the vertex."""
    return _field("output", dtype, kind, size)


def InOut(dtype: Type | str | None = None, kind: str = "vector", size: int | None = None) -> Field:
    """An edge the vertex reads and writes (in-place)."""
    return _field("inout", dtype, kind, size)


def State(dtype: Type | str, kind: str = "scalar", default: Any = None) -> Field:
    """Per-vertex state: a scalar or a vector of plain values set when the vertex is added."""
    if kind not in ("scalar", "vector"):
        raise CodeletError(f"state kind {kind!r} unknown; expected 'scalar' or 'vector'")
    return _field("state", dtype, kind, None, default)


class Codelet:
    """Base class of vertex types; see the module docstring."""

    name: ClassVar[str] = ""
    templates: ClassVar[tuple[str, ...]] = ()
    supervisor: ClassVar[bool] = False
    code_bytes: ClassVar[int] = 192
    fields: ClassVar[dict[str, Field]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields = dict(getattr(cls, "fields", {}))
        for attr, value in list(vars(cls).items()):
            if isinstance(value, Field):
                fields[attr] = Field(
                    value.direction, value.dtype, value.kind, value.size, value.default, attr
                )
        cls.fields = fields
        if not cls.__dict__.get("name"):
            cls.name = cls.__qualname__.replace(".", "::")

    @staticmethod
    def compute(v: Batch) -> None:
        raise NotImplementedError

    @staticmethod
    def cycles(v: VertexInfo) -> np.ndarray:
        """Default estimator: 20 cycles plus one per 64-bit vector of every edge."""
        total = np.full(v.n, 20.0)
        for name, f in v.fields.items():
            if f.is_edge:
                total += np.ceil(v.lengths(name) / v.vector_width(name))
        return total

    @staticmethod
    def flops(v: VertexInfo) -> np.ndarray:
        return np.zeros(v.n)

    # Optional: ``prepare(v) -> Callable[[], None] | None``. Called on a group's first run
    # on all replicas; a returned closure replaces ``compute`` on later runs. It may only
    # use ``v.stable_view`` / ``v.stable_scalar`` (views of device memory, which outlive
    # the run) and values derived from the vertices' structure; return None to keep
    # ``compute``.


_TEMPLATE = re.compile(r"^([^<>]+)<(.*)>$")


def parse_vertex_type(name: str) -> tuple[str, tuple[str, ...]]:
    """Split ``"ns::Name<a, b>"`` into ``("ns::Name", ("a", "b"))``; spaces inside an
    argument are kept (``"unsigned int"``)."""
    m = _TEMPLATE.match(name.strip()) if "<" in name else None
    if not m:
        return name.strip(), ()
    depth, args, cur = 0, [], ""
    for ch in m.group(2):
        if ch == "," and depth == 0:
            args.append(cur)
            cur = ""
            continue
        depth += (ch == "<") - (ch == ">")
        cur += ch
    args.append(cur)
    return m.group(1).strip(), tuple(a.strip() for a in args if a.strip())


@dataclass(frozen=True)
class VertexType:
    """A codelet bound to its template arguments: the unit vertices are grouped by."""

    name: str
    codelet: type[Codelet]
    params: dict[str, str]

    def field_dtype(self, field: Field) -> Type | None:
        if isinstance(field.dtype, str):
            return as_type(self.params[field.dtype])
        return field.dtype


def _check_templates(codelet: type[Codelet]) -> None:
    """A field type given as a string names a template parameter of the codelet."""
    for f in codelet.fields.values():
        if not isinstance(f.dtype, str) or f.dtype in codelet.templates:
            continue
        hint = ""
        with contextlib.suppress(GraphError):  # the string is not a type name either
            hint = f"; for the element type {f.dtype!r} write {as_type(f.dtype)!r}"
        raise CodeletError(
            f"codelet {codelet.name!r} field {f.name!r}: type {f.dtype!r} is a string, which "
            f"names a template parameter, but the codelet's templates are "
            f"{codelet.templates}{hint} (or add {f.dtype!r} to templates)"
        )


class CodeletRegistry:
    """Maps codelet names to classes; ``resolve`` binds template arguments."""

    def __init__(self) -> None:
        self._codelets: dict[str, type[Codelet]] = {}
        self._bound: dict[str, VertexType] = {}

    def add(self, codelets: object) -> None:
        """Register codelet classes: a class, an iterable of classes, or a module whose
        ``CODELETS`` attribute (or public Codelet subclasses) lists them."""
        if isinstance(codelets, type) and issubclass(codelets, Codelet):
            items: Iterable[Any] = [codelets]
        elif hasattr(codelets, "CODELETS"):
            items = codelets.CODELETS
        elif hasattr(codelets, "__dict__") and not isinstance(codelets, Iterable):
            items = [
                v
                for v in vars(codelets).values()
                if isinstance(v, type) and issubclass(v, Codelet) and v is not Codelet
            ]
        elif isinstance(codelets, Iterable):
            items = codelets
        else:
            raise CodeletError(f"add_codelets: {codelets!r} is not a Codelet subclass")
        for c in items:
            if not (isinstance(c, type) and issubclass(c, Codelet)):
                raise CodeletError(f"add_codelets: {c!r} is not a Codelet subclass")
            _check_templates(c)
            existing = self._codelets.get(c.name)
            if existing is not None and existing is not c:
                raise CodeletError(
                    f"codelet name {c.name!r} already registered by "
                    f"{existing.__module__}.{existing.__qualname__}"
                )
            self._codelets[c.name] = c

    def __contains__(self, name: str) -> bool:
        return name in self._codelets

    def resolve(self, name: str) -> VertexType:
        bound = self._bound.get(name)
        if bound is not None:
            return bound
        base, args = parse_vertex_type(name)
        codelet = self._codelets.get(base)
        if codelet is None:
            known = ", ".join(sorted(self._codelets)) or "none"
            raise CodeletError(
                f"vertex type {name!r}: no codelet {base!r} registered "
                f"(call graph.add_codelets first); registered: {known}"
            )
        if len(args) != len(codelet.templates):
            raise CodeletError(
                f"vertex type {name!r}: codelet {base!r} takes "
                f"{len(codelet.templates)} template argument(s) "
                f"{codelet.templates}, got {len(args)}"
            )
        params = dict(zip(codelet.templates, args))
        canonical = f"{base}<{','.join(args)}>" if args else base
        bound = VertexType(canonical, codelet, params)
        for f in codelet.fields.values():
            if isinstance(f.dtype, str):
                if f.dtype not in params:
                    raise CodeletError(
                        f"codelet {base!r} field {f.name!r}: dtype {f.dtype!r} "
                        f"is not one of its templates {codelet.templates}"
                    )
                as_type(params[f.dtype])
        self._bound[name] = bound
        return bound


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
        return self._field(name).reshape(self.replicas, *shape)

    def read_at(self, name: str, positions: np.ndarray) -> np.ndarray:
        """Elements ``positions`` of field ``name``, ``[replica, k]``, read from device memory
        without gathering the rest of the field (``positions``: ``[k]``, or ``[replica, k]``
        when they differ between replicas). For a codelet that touches a few elements of a
        large field (a dynamic slice)."""
        group, storage, rsel = self._ctx
        arr, rows, addr = group.at(name, np.asarray(positions), storage, rsel)
        return arr[rows, addr]

    def write_at(self, name: str, positions: np.ndarray, values: Any) -> None:
        """Write ``values`` (``[replica, k]``) to elements ``positions`` of output field
        ``name`` in device memory, leaving the rest of the field as it is (see
        :meth:`read_at`). Do not also assign the whole field in the same compute."""
        if not self.fields[name].writes:
            raise CodeletError(
                f"codelet {self.vertex_type.name}: field {name!r} is an input and cannot be "
                f"written"
            )
        group, storage, rsel = self._ctx
        arr, rows, addr = group.at(name, np.asarray(positions), storage, rsel)
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
