"""The LLVM module of ``exact.py``'s kernels, built with ``llvmlite.ir``.

Both functions take ``(x, sxp, sxs, sxk, y, sys, syk, z, szp, szq, P, Q, S, k)`` (float
pointers, element strides, sizes as 64-bit integers), compute, for each tile of ``rows``
values of ``p`` by ``vectors * lanes`` values of ``q``::

    total = 0
    for s in 0 .. S - 1:
        acc = 0
        for i in 0 .. k - 1:                      # one fma per step, in order
            acc = fma(x[p, s, i], y[s, i, q .. q + lanes), acc)
        total = acc if s == 0 else (total if isnan(total) else total + acc)
    z[p, q] = total

and return whether they stored a NaN (a 32-bit integer, 0 or 1). ``vector`` stores each
row of the tile as vectors (``szq`` must be 1), ``scatter`` element by element at stride
``szq``. ``y`` is read as vectors: unit stride along ``q``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ARGS = ("x", "sxp", "sxs", "sxk", "y", "sys", "syk", "z", "szp", "szq", "P", "Q", "S", "k")


def module(rows: int, vectors: int, lanes: int) -> Any:
    """The module with functions ``vector`` and ``scatter`` for a tile of ``rows`` by
    ``vectors`` vectors of ``lanes`` floats."""
    from llvmlite import ir

    mod = ir.Module(name="tremula_poplin_exact")
    f32, i64 = ir.FloatType(), ir.IntType(64)
    vec = ir.VectorType(f32, lanes)
    fma = ir.Function(mod, ir.FunctionType(vec, [vec] * 3), name=f"llvm.fma.v{lanes}f32")
    ptr = f32.as_pointer()
    types = [ptr, i64, i64, i64, ptr, i64, i64, ptr, i64, i64, i64, i64, i64, i64]
    kernels = []
    for name in ("vector", "scatter"):
        fn = ir.Function(mod, ir.FunctionType(ir.IntType(32), types), name=name)
        for i in (0, 4, 7):
            fn.args[i].add_attribute("noalias")
        _Kernel(ir, fn, fma, vec, rows, vectors, lanes, name == "vector").build()
        kernels.append(fn)
    _batch(ir, mod, kernels, types)
    return mod


def _batch(ir: Any, mod: Any, kernels: list[Any], types: list[Any]) -> None:
    """``batch(table, n)``: ``n`` kernel calls in turn, each a row of ``1 + len(ARGS)``
    64-bit integers in ``table`` (0 for ``vector``, 1 for ``scatter``, then its arguments,
    pointers as integers); returns whether any stored a NaN."""
    i32, i64 = ir.IntType(32), ir.IntType(64)
    fn = ir.Function(mod, ir.FunctionType(i32, [i64.as_pointer(), i64]), name="batch")
    table, n = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    entry = b.block
    head, body, done = (fn.append_basic_block(f"j.{part}") for part in ("head", "body", "end"))
    b.branch(head)
    b.position_at_end(head)
    j, nan = b.phi(i64, "j"), b.phi(i32, "nan")
    j.add_incoming(ir.Constant(i64, 0), entry)
    nan.add_incoming(ir.Constant(i32, 0), entry)
    b.cbranch(b.icmp_signed("<", j, n), body, done)
    b.position_at_end(body)
    row = b.mul(j, ir.Constant(i64, 1 + len(ARGS)))
    words = [b.load(b.gep(table, [b.add(row, ir.Constant(i64, i))])) for i in range(1 + len(ARGS))]
    args = [b.inttoptr(w, t) if t.is_pointer else w for w, t in zip(words[1:], types)]
    with b.if_else(b.icmp_signed("==", words[0], ir.Constant(i64, 0))) as (then, otherwise):
        with then:
            vector, from_vector = b.call(kernels[0], args), b.block
        with otherwise:
            scatter, from_scatter = b.call(kernels[1], args), b.block
    stored = b.phi(i32)
    stored.add_incoming(vector, from_vector)
    stored.add_incoming(scatter, from_scatter)
    j.add_incoming(b.add(j, ir.Constant(i64, 1)), b.block)
    nan.add_incoming(b.or_(nan, stored), b.block)
    b.branch(head)
    b.position_at_end(done)
    b.ret(nan)


class _Kernel:
    """One function's body (see the module docstring)."""

    def __init__(self, ir: Any, fn: Any, fma: Any, vec: Any, *tile: Any) -> None:
        self.ir, self.fma, self.vec = ir, fma, vec
        self.rows, self.vectors, self.lanes, self.vector = tile
        self.a = dict(zip(ARGS, fn.args))
        self.i64 = ir.IntType(64)
        self.zero = ir.Constant(vec, [0.0] * self.lanes)
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        self.nan = self.b.alloca(ir.IntType(32), name="nan")  # whether a NaN was stored
        self.b.store(ir.Constant(ir.IntType(32), 0), self.nan)

    def _blocks(self, name: str) -> list[Any]:
        """A loop's head, body and exit blocks."""
        return [self.b.append_basic_block(f"{name}.{part}") for part in ("head", "body", "end")]

    def c(self, n: int) -> Any:
        return self.ir.Constant(self.i64, n)

    def build(self) -> None:
        a, width = self.a, self.lanes * self.vectors
        self._loop(
            self.c(0),
            a["Q"],
            width,
            "q",
            lambda q0: self._loop(self.c(0), a["P"], self.rows, "p", lambda p0: self._tile(p0, q0)),
        )
        self.b.ret(self.b.load(self.nan))

    def _loop(self, start: Any, stop: Any, step: int, name: str, body: Callable) -> None:
        """``for iv in range(start, stop, step): body(iv)``."""
        b = self.b
        before = b.block
        head, inner, done = self._blocks(name)
        b.branch(head)
        b.position_at_end(head)
        iv = b.phi(self.i64, name)
        iv.add_incoming(start, before)
        b.cbranch(b.icmp_signed("<", iv, stop), inner, done)
        b.position_at_end(inner)
        body(iv)
        iv.add_incoming(b.add(iv, self.c(step)), b.block)
        b.branch(head)
        b.position_at_end(done)

    def _tile(self, p0: Any, q0: Any) -> None:
        """The tile at ``(p0, q0)``: the slices' chains added in registers, then stored."""
        b, a, n = self.b, self.a, self.rows * self.vectors
        before = b.block
        head, inner, done = self._blocks("s")
        b.branch(head)
        b.position_at_end(head)
        s = b.phi(self.i64, "s")
        s.add_incoming(self.c(0), before)
        totals = [b.phi(self.vec) for _ in range(n)]
        for t in totals:
            t.add_incoming(self.zero, before)
        b.cbranch(b.icmp_signed("<", s, a["S"]), inner, done)
        b.position_at_end(inner)
        accs = self._chain(p0, q0, s)
        first = b.icmp_signed("==", s, self.c(0))
        for t, acc in zip(totals, accs):
            added = b.select(b.fcmp_unordered("uno", t, t), t, b.fadd(t, acc))
            t.add_incoming(b.select(first, acc, added), b.block)
        s.add_incoming(b.add(s, self.c(1)), b.block)
        b.branch(head)
        b.position_at_end(done)
        self._store(p0, q0, totals)

    def _chain(self, p0: Any, q0: Any, s: Any) -> list[Any]:
        """Slice ``s``'s fma chains of the tile, from zero (the accumulators after its
        last step)."""
        b, a, ir = self.b, self.a, self.ir
        before = b.block
        head, inner, done = self._blocks("k")
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(self.i64, "i")
        i.add_incoming(self.c(0), before)
        accs = [b.phi(self.vec) for _ in range(self.rows * self.vectors)]
        for acc in accs:
            acc.add_incoming(self.zero, before)
        b.cbranch(b.icmp_signed("<", i, a["k"]), inner, done)
        b.position_at_end(inner)
        y_row = b.add(b.add(b.mul(s, a["sys"]), b.mul(i, a["syk"])), q0)
        ys = [
            b.load(self._vptr(a["y"], b.add(y_row, self.c(v * self.lanes))), align=4)
            for v in range(self.vectors)
        ]
        x_col = b.add(b.mul(s, a["sxs"]), b.mul(i, a["sxk"]))
        mask = ir.Constant(ir.VectorType(ir.IntType(32), self.lanes), [0] * self.lanes)
        new = []
        for r in range(self.rows):
            at = b.add(b.mul(b.add(p0, self.c(r)), a["sxp"]), x_col)
            one = b.insert_element(
                ir.Constant(self.vec, ir.Undefined), b.load(b.gep(a["x"], [at])), self.c(0)
            )
            xv = b.shuffle_vector(one, ir.Constant(self.vec, ir.Undefined), mask)
            for v in range(self.vectors):
                new.append(b.call(self.fma, [xv, ys[v], accs[r * self.vectors + v]]))
        for acc, value in zip(accs, new):
            acc.add_incoming(value, b.block)
        i.add_incoming(b.add(i, self.c(1)), b.block)
        b.branch(head)
        b.position_at_end(done)
        return accs

    def _store(self, p0: Any, q0: Any, totals: list[Any]) -> None:
        b, a, ir = self.b, self.a, self.ir
        nans = b.fcmp_unordered("uno", totals[0], totals[0])
        for total in totals[1:]:
            nans = b.or_(nans, b.fcmp_unordered("uno", total, total))
        any_nan = b.icmp_unsigned(
            "!=", b.bitcast(nans, ir.IntType(self.lanes)), ir.Constant(ir.IntType(self.lanes), 0)
        )
        b.store(b.or_(b.load(self.nan), b.zext(any_nan, ir.IntType(32))), self.nan)
        for r in range(self.rows):
            row = b.mul(b.add(p0, self.c(r)), a["szp"])
            for v in range(self.vectors):
                total = totals[r * self.vectors + v]
                q = b.add(q0, self.c(v * self.lanes))
                if self.vector:
                    b.store(total, self._vptr(a["z"], b.add(row, q)), align=4)
                    continue
                for lane in range(self.lanes):
                    at = b.add(row, b.mul(b.add(q, self.c(lane)), a["szq"]))
                    b.store(b.extract_element(total, self.c(lane)), b.gep(a["z"], [at]))

    def _vptr(self, base: Any, offset: Any) -> Any:
        return self.b.bitcast(self.b.gep(base, [offset]), self.vec.as_pointer())
