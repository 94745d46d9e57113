"""Lowering of ``Fp8Scale`` (``fp8_mse_scale.py``), program for program as the C++ opx
grows it, so that its cycles are those of the same PopLibs calls and control flow:

- levels: an ``int`` iota of 254 elements from -126 (mapped linearly, one per tile), cast
  to float, ``EXPONENT2`` in place; ``popops::histogram`` of ``|src|`` over the levels cast
  to ``src``'s type; the counts divided by ``N`` in place; the first level squared over 4
  in place (it becomes 0, and is never read);
- one ``Repeat(62)`` of the candidate program (scalars on tile 0): zero the accumulator,
  counter = 1, then three ``RepeatWhileTrue`` loops (underflow, in range, overflow), each
  with its condition (``popops`` comparisons and ``allTrue``, here a ``LOGICAL_AND``
  reduction) and a body of two ``dynamicSlice`` calls (histogram and level at the counter),
  one ``mapInPlace`` accumulation and the counter's increment; then ``dynamicUpdate`` of
  the MSE at the bias and the three increments;
- ``minAndArgMin`` of the 62 MSEs (here ``popops::topK`` with ``k = 1``, smallest, the
  lower index among ties), the tie count (``==`` then an ADD reduction) and the final
  ``mapInPlace`` into the int32 result.

The ``PrintTensor`` programs are left out. Compute sets are named under the op's debug
name (``Fp8Scale``).
"""

from __future__ import annotations

from typing import Any

from tremula import poplar
from tremula.popxl.custom_ops.fp8_mse_scale import CANDIDATES, FIRST_EXP, LEVELS, MAX_BIAS, OP


def _scalar(graph: poplar.Graph, dtype: Any, shape: tuple[int, ...], name: str) -> poplar.Tensor:
    t = graph.add_variable(dtype, shape, name)
    graph.set_tile_mapping(t, 0)
    return t


def _const(graph: poplar.Graph, dtype: Any, shape: tuple[int, ...], value: Any, name: str):
    c = graph.add_constant(dtype, shape, value, name)
    graph.set_tile_mapping(c, 0)
    return c


def _all_true(graph: poplar.Graph, t: poplar.Tensor, prog: poplar.Sequence, name: str):
    """``popops::allTrue``: one bool, the AND of ``t``'s elements."""
    from tremula.libs import popops

    return popops.reduce(graph, t, [0], "LOGICAL_AND", prog, name=name)


def _add_one(
    graph: poplar.Graph, t: poplar.Tensor, one: poplar.Tensor, prog: poplar.Sequence, name: str
) -> None:
    """``popops::addInPlace(t, one)``."""
    from tremula.libs import popops
    from tremula.libs.popops import expr as pe

    popops.map_in_place(graph, pe._1 + pe._2, [t, one], prog, name=name)


def _histogram(
    graph: poplar.Graph, src: poplar.Tensor, prog: poplar.Sequence, name: str
) -> tuple[poplar.Tensor, poplar.Tensor]:
    """(the levels 2^-126 .. 2^127 as float, the 255 counts of ``|src|`` divided by N)."""
    from tremula.libs import popops
    from tremula.libs.popops import expr as pe

    levels = graph.add_variable(poplar.INT, (LEVELS,), f"{name}/bins", mapping="linear")
    popops.iota(graph, levels, FIRST_EXP, prog, name=f"{name}/iota")
    bins = popops.cast(graph, levels, poplar.FLOAT, prog, name=f"{name}/bins")
    popops.map_in_place(graph, pe.Exp2(pe._1), [bins], prog, name=f"{name}/exp2")
    typed = popops.cast(graph, bins, src.dtype, prog, name=f"{name}/levels")
    hist = popops.histogram(
        graph, src, typed, prog, absolute_of_data=True, name=f"{name}/histogram"
    )
    n = float(src.num_elements)
    popops.map_in_place(graph, pe._1 / n, [hist], prog, name=f"{name}/normalise")
    return bins, hist


class _Candidates:
    """The scalars of the candidate loop (on tile 0) and its program (step 2)."""

    def __init__(self, graph: poplar.Graph, m: int, w: int, prog: poplar.Sequence, name: str):
        from tremula.libs import popops

        UINT = poplar.UNSIGNED_INT
        self.graph, self.name = graph, name
        self.bias = _scalar(graph, UINT, (1,), f"{name}/bias")
        prog.add(poplar.Copy(_const(graph, UINT, (1,), 0, f"{name}/bias_init"), self.bias))
        self.one = _const(graph, UINT, (), 1, f"{name}/one")
        self.hist_size = _const(graph, UINT, (), LEVELS, f"{name}/fp32_hist_size")
        self.mse = _scalar(graph, poplar.FLOAT, (CANDIDATES,), f"{name}/mse")
        popops.zero(graph, self.mse, prog, name=f"{name}/mse")
        self.under_max = _scalar(graph, UINT, (), f"{name}/underflow")
        under_init = _const(graph, UINT, (), m, f"{name}/under_init")
        prog.add(poplar.Copy(under_init, self.under_max))
        self.over_min = _scalar(graph, UINT, (), f"{name}/overflow")
        self.over_init = _const(graph, UINT, (), m + w, f"{name}/over_init")
        prog.add(poplar.Copy(self.over_init, self.over_min))
        self.acc = _scalar(graph, poplar.FLOAT, (1,), f"{name}/mse_bias")
        self.counter = _scalar(graph, UINT, (1,), f"{name}/counter")
        self.body = poplar.Sequence(name=f"{name}/mse")

    def loop(
        self,
        kind: str,
        conds: list[tuple[str, poplar.Tensor, poplar.Tensor]],
        term: Any,
        tables: tuple[poplar.Tensor, poplar.Tensor],
        extra: list[poplar.Tensor],
    ) -> poplar.Tensor:
        """``RepeatWhileTrue`` while every ``(comparison, a, b)`` holds, accumulating
        ``term`` over ``[acc, hist[c], bins[c], *extra]``; returns the body's level."""
        from tremula.libs import popops
        from tremula.libs.popops import expr as pe

        g, name, counter = self.graph, f"{self.name}/{kind}", self.counter
        cond = poplar.Sequence(name=f"{name}/cond")
        flags = [getattr(popops, op)(g, a, b, cond, name=name) for op, a, b in conds]
        for f in flags[1:]:
            popops.map_in_place(g, pe.And(pe._1, pe._2), [flags[0], f], cond, name=name)
        pred = _all_true(g, flags[0].reshape((flags[0].num_elements,)), cond, name)
        step = poplar.Sequence(name=f"{name}/body")
        hist, bins = tables
        h = popops.dynamic_slice(g, hist, counter, [0], [1], step, name=f"{name}_slice")
        level = popops.dynamic_slice(g, bins, counter, [0], [1], step, name=f"{name}_slice")
        popops.map_in_place(g, term, [self.acc, h, level, *extra], step, name=f"{name}/mse")
        _add_one(g, counter, self.one, step, f"{self.name}/counterIncrement")
        self.body.add(poplar.RepeatWhileTrue(cond, pred, step))
        return level


def _mse_per_bias(
    graph: poplar.Graph,
    bins: poplar.Tensor,
    hist: poplar.Tensor,
    m: int,
    w: int,
    q: float,
    prog: poplar.Sequence,
    name: str,
) -> poplar.Tensor:
    """The 62 MSEs (``Repeat(62)`` of the three loops and the updates)."""
    from tremula.libs import popops
    from tremula.libs.popops import expr as pe

    c = _Candidates(graph, m, w, prog, name)
    body = c.body
    popops.zero(graph, c.acc, body, name=f"{name}/mse_bias")
    popops.map_in_place(graph, pe._1 * pe._1 / 4, [bins.slice(0, 1, 0)], prog, name=f"{name}/bin0")
    tables = (hist.slice(1, LEVELS + 1, 0), bins)
    popops.zero(graph, c.counter, body, name=f"{name}/counter")
    _add_one(graph, c.counter, c.one, body, f"{name}/counterIncrement")
    qc = pe.Const(q, poplar.FLOAT)
    c.loop("under", [("lt", c.counter, c.under_max)], pe._1 + pe._2 * pe._3 * pe._3, tables, [])
    in_range = [("gteq", c.counter, c.under_max), ("gt", c.over_min, c.counter)]
    top = c.loop("in", in_range, pe._1 + pe._2 * pe._3 * pe._3 * qc, tables, [])
    over = [("gteq", c.counter, c.over_min), ("lt", c.counter, c.hist_size)]
    d = pe._4 - pe._3
    c.loop("over", over, pe._1 + pe._2 * d * d, tables, [top])
    prog.add(poplar.Copy(c.over_init, c.over_min))
    popops.dynamic_update(graph, c.mse, c.acc, c.bias, [0], [1], body, name=f"{name}/updateMSE")
    for t in (c.bias, c.under_max, c.over_min):
        _add_one(graph, t, c.one, body, f"{name}/biasIncrement")
    prog.add(poplar.Repeat(CANDIDATES, body, name=f"{name}/mse"))
    return c.mse


def best_scale(
    graph: poplar.Graph,
    src: poplar.Tensor,
    m: int,
    w: int,
    q: float,
    prog: poplar.Sequence,
    name: str,
) -> poplar.Tensor:
    """The int32 scalar scaling bias of ``src`` (module docstring of ``fp8_mse_scale``)."""
    from tremula.libs import popops
    from tremula.libs.popops import expr as pe

    bins, hist = _histogram(graph, src.flatten(), prog, name)
    mse = _mse_per_bias(graph, bins, hist, m, w, q, prog, name)
    # step 3: the first smallest MSE, the number of ties, the bias
    low, first = popops.top_k(graph, mse.expand([0]), 1, prog, largest=False, name=f"{name}/argmin")
    popops.map_in_place(
        graph, pe.Cast(pe.Equal(pe._1, pe._2), poplar.FLOAT), [mse, low.reshape((1,))], prog,
        name=f"{name}/min_mse",
    )  # fmt: skip
    ties = popops.reduce(graph, mse, [0], "ADD", prog, name=f"{name}/delta")
    out = popops.cast(graph, first.reshape(()), poplar.INT, prog, name=f"{name}/scaling_bias")
    popops.map_in_place(
        graph, -(pe._1 + pe.Cast(pe._2 / 2, poplar.INT) - MAX_BIAS), [out, ties], prog,
        name=f"{name}/scaling bias",
    )  # fmt: skip
    return out


def _lower(lw: Any, op: Any, env: Any, prog: poplar.Sequence) -> None:
    a = op.attrs
    env[op.outputs[0]] = best_scale(
        lw.graph, env[op.inputs[0]], a["min_fp32_exp_index"], a["format_span"],
        a["quantisation_error"], prog, op.debug_name,
    )  # fmt: skip


#: op type -> lowering rule (``tremula/lowering/custom_ops.py`` registers them)
LOWERING_RULES = {OP: _lower}
