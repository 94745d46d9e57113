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
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from tremula.errors import CodeletError, GraphError
from tremula.poplar.batch import Batch, VertexInfo
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

    # Optional: ``run_cycles(v) -> np.ndarray | None``, for vertices whose time depends on
    # the data they read (PopSparse's products walk meta-info written at run time). Called
    # right after ``compute`` with the same batch: one cycle count per vertex for the first
    # replica the run covers (the timeline follows replica 0), or None to keep the static
    # estimates. The compute set's step then takes the schedule of these counts; the
    # graph profile keeps ``cycles(v)``'s estimates. A codelet with ``run_cycles`` is never
    # prepared (``prepare`` is not called), and a program running one is never replayed.
    #
    # Optional: ``prepare(v) -> Callable[[], None] | None``. Called on a group's first run
    # on all replicas; a returned closure replaces ``compute`` on later runs. It may only
    # use ``v.stable_view`` / ``v.stable_scalar`` (views of device memory, which outlive
    # the run) and values derived from the vertices' structure; return None to keep
    # ``compute``. The returned run may carry ``fuse_next(after) -> Callable | None``: when
    # a replayed program runs another group's prepared run ``after`` right after it
    # (nothing with a data effect between them), the engine asks it for one call doing
    # both, and runs that instead (e.g. a reduction stage whose next stage reads what it
    # wrote while that is still in cache). The call must leave device memory exactly as
    # the two runs in turn do; None keeps them apart. Cycles and profiles do not see it.
    #
    # Optional: ``fuse(before, after) -> (run, unstored) | None`` (a classmethod), for a
    # compute set that consumes what the compute set just before it produced: ``after``
    # are the batches of this compute set's groups (all of this codelet), ``before`` those
    # of the compute set before it, both set up as for ``prepare``. ``run()`` does the work
    # of both compute sets on later replayed runs; ``unstored`` lists ``(index in before,
    # field)`` whose values ``run`` does not store, which the engine accepts only when
    # those fields' variables are written by ``before``, read by ``after`` and used nowhere
    # else (``tremula/engine/fusion.py``); return None to run them apart.


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
