"""The scaled-add codelets: ``popops::ScaledAdd1D``, ``ScaledAdd1DTensor`` and
``AXPlusBY1DTensor`` (``popops.scaled_add_to`` / ``scaled_subtract_from`` /
``a_x_plus_b_y``).

Their cycle estimators are ``popops/estimators.py``'s.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from numpy.lib.stride_tricks import as_strided

from tremula import numerics, poplar
from tremula.libs.popops import estimators as E
from tremula.poplar.types import BOOL


def _scale(
    v: poplar.Batch, name: str, kind: str, negate: np.ndarray | None = None
) -> np.ndarray | float:
    """Scale ``name`` as an operand broadcastable to the data: [R, 1] or [R, n]."""
    if kind == "one":
        return 1.0
    if kind == "state":  # static: derived once per vertex group
        return v.cached(
            ("scale", name, negate is not None),
            lambda: _scale_of(v, v.state(name)[None, :], negate),
        )
    return _scale_of(v, v[name], negate)


def _scale_of(v: poplar.Batch, values: np.ndarray, negate: np.ndarray | None) -> np.ndarray:
    if negate is not None:
        values = np.where(negate, -values, values)
    first = values[..., :1]
    if bool(np.all((values == first) | (values != values))):
        return first
    return v.expand(values, "data")


class Axpy:
    """The prepared run of float32 updates ``data += b * deltas``: each part's ``b * deltas``
    into its piece of the temporary, then one add of the temporary into ``data``.

    Consecutive updates of adjacent data (an optimiser step over variables laid out one
    after the other) join into one (``fuse_next``, see ``Codelet.prepare``): their products,
    then a single add over the joined data. Each element gets the same two float32
    operations as apart, so the bits are the same, provided no part's deltas or scale read
    the joined data (apart, a later part would read what an earlier one wrote): then the
    runs stay apart. With numba the run is one compiled pass making the same two
    operations per element (``axpy_kernel.py``), where it applies and matches and the
    data holds no NaN."""

    def __init__(
        self,
        parts: list[tuple[Any, np.ndarray, np.ndarray]],
        data: np.ndarray,
        tmp: np.ndarray,
        root: np.ndarray | None = None,
    ) -> None:
        self.parts, self.data, self.tmp = parts, data, tmp
        self.root = root if root is not None else _root(data)  # the memory data views
        #: the compiled run (``axpy_kernel.py``), made on the second call (None before the
        #: first, True before the second); False: none
        self._compiled: Any = None

    def __call__(self) -> None:
        run = self._compiled
        if run is None:  # the first call: the NumPy path (a program run once compiles none)
            self._compiled = True
        elif run is True:  # the second call: the compiled run if there is one
            from tremula.libs.popops.codelets.axpy_kernel import compiled

            run = self._compiled = compiled(self.parts, self.data, self.root) or False
        if callable(run) and run():  # (False: a NaN in the data, see ``axpy_kernel.py``)
            return
        for b, deltas, tmp in self.parts:
            np.multiply(b, deltas, out=tmp)
        np.add(self.data, self.tmp, out=self.data)

    def fuse_next(self, after: Any) -> Axpy | None:
        """One run doing this update, then ``after`` (another :class:`Axpy` whose data
        follows this one's in memory, row by row), or None."""
        if not isinstance(after, Axpy) or after.root is not self.root:
            return None
        data = _joined(self.data, after.data)
        if data is None:
            return None
        parts = [*self.parts, *after.parts]
        for b, deltas, tmp in parts:
            if tmp.shape != deltas.shape or deltas.shape[0] != data.shape[0] or tmp.ndim != 2:
                return None
            if np.may_share_memory(deltas, data) or np.may_share_memory(b, data):
                return None
        joined = np.empty(data.shape, np.float32)
        pieces, start = [], 0
        for b, deltas, tmp in parts:
            pieces.append((b, deltas, joined[:, start : start + tmp.shape[1]]))
            start += tmp.shape[1]
        return Axpy(pieces, data, joined, self.root) if start == data.shape[1] else None


def _root(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _joined(x: np.ndarray, y: np.ndarray) -> np.ndarray | None:
    """One ``[rows, n + m]`` view of ``[rows, n]`` and ``[rows, m]`` float32 views of one
    array's memory whose rows are contiguous and ``y``'s follow ``x``'s; None otherwise."""
    item = np.dtype(np.float32).itemsize
    if not (x.ndim == y.ndim == 2 and x.dtype == y.dtype == np.float32):
        return None
    if x.shape[0] != y.shape[0] or x.strides[0] != y.strides[0]:
        return None
    if x.strides[1] != item or y.strides[1] != item or x.shape[1] == 0 or y.shape[1] == 0:
        return None
    ax, ay = x.__array_interface__["data"][0], y.__array_interface__["data"][0]
    if ay != ax + x.shape[1] * item or (
        x.shape[0] > 1 and x.strides[0] < item * (x.shape[1] + y.shape[1])
    ):
        return None  # (rows that would overlap)
    return as_strided(x, shape=(x.shape[0], x.shape[1] + y.shape[1]), strides=x.strides)


class ScaledAdd(poplar.Codelet):
    """data = A data + B deltas (A and B from state or one-element inputs)."""

    templates = ("T", "S")
    data = poplar.InOut("T")
    deltas = poplar.Input("T")
    kinds: ClassVar[tuple[str, str]] = ("one", "state")  # how A and B are given

    @classmethod
    def compute(cls, v: poplar.Batch) -> None:  # type: ignore[override]
        negate = v.state("subtract") if "subtract" in cls.fields else None
        a = _scale(v, "scaleA", cls.kinds[0])
        b = _scale(v, "scaleB", cls.kinds[1], negate)
        data, deltas = v["data"], v.deltas
        with np.errstate(all="ignore"):
            if data.dtype.kind == "f":
                a32, b32 = np.asarray(a, np.float32), np.asarray(b, np.float32)
                data[...] = a32 * data.astype(np.float32) + b32 * deltas.astype(np.float32)
            else:
                dt = data.dtype
                data[...] = np.asarray(a).astype(dt) * data + np.asarray(b).astype(dt) * deltas

    @classmethod
    def prepare(cls, v: poplar.Batch) -> Any:
        """A closure over views of device memory for later runs (None: keep ``compute``):
        ``data`` and ``deltas`` as direct views, number scales derived once, tensor scales
        as one-element views (when every vertex reads the same one and subtracts alike)."""
        data, deltas = v.stable_view("data"), v.stable_view("deltas")
        if data is not None and deltas is None and (shape := v.affine_shape("deltas")):
            # e.g. a transposed gradient: both fields as views of that shape
            data, deltas = v.stable_view("data", shape), v.stable_view("deltas", shape)
        if data is None or deltas is None:
            return None
        negative = False  # a tensor scaleB is subtracted (the same for every vertex)
        if "subtract" in cls.fields:
            subtract = v.state("subtract")
            if subtract.size and not np.all(subtract == subtract[0]):
                return None
            negative = bool(subtract.size and subtract[0])
        scales: list[Any] = []
        for name, kind in zip(("scaleA", "scaleB"), cls.kinds):
            if kind == "one":
                scales.append(None)
            elif kind == "state":
                negate = v.state("subtract") if "subtract" in cls.fields else None
                scales.append(np.asarray(_scale(v, name, kind, negate)))
            else:
                view = v.stable_scalar(name)
                if view is None:
                    return None
                scales.append(view)
        dt = data.dtype
        work = np.dtype(np.float32) if dt.kind == "f" else dt
        a, b = (
            s.astype(work) if s is not None and kind == "state" else s
            for s, kind in zip(scales, cls.kinds)
        )
        a_is_one = a is None or (a.size == 1 and cls.kinds[0] == "state" and a.item() == 1)
        if dt == np.float32 and a_is_one and cls.kinds[1] == "state":  # b carries any sign
            # the common update ``data += b * deltas``: in place, into one kept temporary
            tmp = np.empty(np.broadcast_shapes(np.shape(b), deltas.shape), np.float32)
            return numerics.quiet(Axpy([(b, deltas, tmp)], data, tmp))

        def run() -> None:
            sa = a if a is None or cls.kinds[0] == "state" else a.astype(work)
            sb = b if cls.kinds[1] == "state" else b.astype(work)
            if negative and cls.kinds[1] != "state":
                sb = -sb
            with np.errstate(all="ignore"):
                if dt == np.float32 and a_is_one:
                    data[...] += sb * deltas
                elif dt.kind == "f":
                    x = data.astype(np.float32) if sa is None else sa * data.astype(np.float32)
                    data[...] = x + sb * deltas.astype(np.float32)
                else:
                    x = data if sa is None else sa * data
                    data[...] = x + sb * deltas

        return run

    @classmethod
    def cycles(cls, v: poplar.VertexInfo) -> np.ndarray:  # type: ignore[override]
        return E.scaled_add_cycles(v, cls.kinds)


class ScaledAdd1D(ScaledAdd):
    """Number scales in the vertex state."""

    name = "popops::ScaledAdd1D"
    scaleA = poplar.State("S")
    scaleB = poplar.State("S")
    kinds = ("state", "state")


class ScaledAdd1DTensor(ScaledAdd):
    """data += (subtract ? -1 : 1) scaleB deltas, scaleB a one-element tensor."""

    name = "popops::ScaledAdd1DTensor"
    scaleB = poplar.Input("S", kind="scalar")
    subtract = poplar.State(BOOL, default=False)
    kinds = ("one", "input")


class AXPlusBY1DTensor(ScaledAdd):
    """data = scaleA data + scaleB deltas, both one-element tensors."""

    name = "popops::aXPlusbY1DTensor"
    scaleA = poplar.Input("S", kind="scalar")
    scaleB = poplar.Input("S", kind="scalar")
    kinds = ("input", "input")


CODELETS = (ScaledAdd1D, ScaledAdd1DTensor, AXPlusBY1DTensor)
