"""Lowering of ``popxl/ops/resize.py``: per resized axis, the input positions of each tap
are gathered as views (integer-array indexing of the Poplar tensor, no compute) and, for
linear and cubic modes, blended by one popops map with constant weights; nearest ends with
one copy."""

from __future__ import annotations

import numpy as np

from tremula import poplar
from tremula.libs import popops
from tremula.libs.popops import expr as pe
from tremula.lowering.driver import Env, Lowerer, rule
from tremula.popxl.ops.base import OpNode
from tremula.popxl.ops.resize import axis_plan


def _take(t: poplar.Tensor, idx: np.ndarray, ax: int) -> poplar.Tensor:
    key: list = [slice(None)] * t.rank
    key[ax] = idx
    return t[tuple(key)]


@rule("Resize")
def resize(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    a, out, name = op.attrs, op.outputs[0], op.outputs[0].id
    if a["mode"] != "nearest" and op.inputs[0].dtype.name not in ("float16", "float32"):
        raise TypeError(  # nearest only gathers: any dtype; the others interpolate
            f"interpolate: {op.inputs[0].id!r} must be float16 or float32 for mode "
            f"{a['mode']!r}, got {op.inputs[0].dtype}"
        )
    v = env[op.inputs[0]]
    computed = False
    for ax, (n_out, scale) in enumerate(zip(a["shape"], a["scales"])):
        if n_out == v.shape[ax] and scale == 1.0:
            continue
        idx, w = axis_plan(v.shape[ax], n_out, scale, a)
        if a["mode"] == "nearest":
            v = _take(v, idx[0], ax)
            continue
        shape = [len(idx), *(n_out if d == ax else 1 for d in range(v.rank))]
        weights = w.astype(v.dtype.numpy).reshape(shape)
        c = lw.graph.add_constant(v.dtype, weights.shape, weights, lw.name(f"{name}/w{ax}"))
        poplar.map_tensor_linearly(
            lw.graph, c, grain_size=lw.graph.target.vector_width(v.dtype.size)
        )
        taps = [_take(v, i, ax) for i in idx]
        k = len(taps)
        e = sum(
            (pe.PlaceHolder(1 + j) * pe.PlaceHolder(1 + k + j) for j in range(k)),
            start=pe.Const(0.0),
        )
        v = popops.map(lw.graph, e, [*taps, *(c[j] for j in range(k))], prog, name=f"{name}/{ax}")
        computed = True
    if not computed:  # views of the input (nearest, or no resize): copy them out
        t = lw.new_tensor(out)
        prog.add(poplar.Copy(v, t))
        v = t
    env[out] = v
