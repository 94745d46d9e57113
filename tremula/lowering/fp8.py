"""Lowering of ``popxl/ops/fp8.py`` onto ``popops.pow2scale_cast`` (whose vertices encode and
decode exactly, and check at run time that a scale tensor lies in ``[-32, 31]``), poplin and
the convolution rules.

* ``Pow2ScaleCastToFp8`` / ``Pow2ScaleCastFromFp8``: one scaled cast.
* ``MatMulPow2Scaled``: both operands decoded to half (every float8 value is a half value),
  one poplin matmul of half operands with float partials and a float result (so sums beyond
  half's range survive until scaled), then one scaled cast of the result to half. The cost
  is poplin's half-operand AMP plan (the IPU's float8 AMP runs at least at that rate: a
  conservative estimate) plus the three casts.
* ``ConvPow2Scaled`` / ``ConvTransposePow2Scaled``: input and weights decoded to float,
  then the ``Conv`` / ``ConvTranspose`` rule itself (im2col + a grouped poplin matmul, float
  result), then one scaled cast to half. The convolution is costed as a float one (a
  conservative estimate: float AMP is slower than half).
"""

from __future__ import annotations

import math

import numpy as np

from tremula import poplar
from tremula.libs import poplin, popops
from tremula.lowering.driver import LOWERING_RULES, Env, Lowerer, rule
from tremula.lowering.tensor_ops import matmul_options
from tremula.popxl.ops.base import OpNode


def _what(op: OpNode) -> str:
    """The subject of the run-time range error: the op and its scale tensor."""
    return f"{op.type} {op.outputs[0].id!r} (log2_scale tensor {op.inputs[-1].id!r})"


def _scaled(lw: Lowerer, op: OpNode, env: Env, x: poplar.Tensor, prog: poplar.Sequence) -> None:
    """Bind the op's output to ``x * 2^log2_scale`` cast to the output's type."""
    out = op.outputs[0]
    env[out] = popops.pow2scale_cast(
        lw.graph,
        x,
        out.dtype.as_poplar(),
        env[op.inputs[-1]],
        prog,
        nan_on_overflow=op.attrs.get("nan_on_overflow", True),
        name=out.id,
        what=_what(op),
    )


def _decoded(lw: Lowerer, t: poplar.Tensor, dtype: poplar.Type, prog, name: str) -> poplar.Tensor:
    return popops.pow2scale_cast(lw.graph, t, dtype, 0, prog, name=name)


@rule("Pow2ScaleCastToFp8", "Pow2ScaleCastFromFp8")
def pow2scale_cast(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    _scaled(lw, op, env, env[op.inputs[0]], prog)


@rule("MatMulPow2Scaled")
def matmul_pow2scaled(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    name = op.outputs[0].id
    a = _decoded(lw, env[op.inputs[0]], poplar.HALF, prog, f"{name}/lhs")
    b = _decoded(lw, env[op.inputs[1]], poplar.HALF, prog, f"{name}/rhs")
    a2 = a.expand([0]) if a.rank == 1 else a
    b2 = b.expand([1]) if b.rank == 1 else b
    batch = tuple(int(d) for d in np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]))
    m, k, n, g = a2.shape[-2], a2.shape[-1], b2.shape[-1], math.prod(batch)
    options = matmul_options(op)
    if batch:
        ga = a2.broadcast_to((*batch, m, k)).reshape((g, m, k))
        gb = b2.broadcast_to((*batch, k, n)).reshape((g, k, n))
        c = poplin.matmul_grouped(lw.graph, ga, gb, prog, poplar.FLOAT, name, options)
    else:
        c = poplin.matmul(lw.graph, a2, b2, prog, poplar.FLOAT, name, options)
    _scaled(lw, op, env, c.reshape(op.outputs[0].shape), prog)


@rule("ConvPow2Scaled", "ConvTransposePow2Scaled")
def conv_pow2scaled(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    name = op.outputs[0].id
    x = _decoded(lw, env[op.inputs[0]], poplar.FLOAT, prog, f"{name}/input")
    w = _decoded(lw, env[op.inputs[1]], poplar.FLOAT, prog, f"{name}/weights")
    local = Env({op.inputs[0]: x, op.inputs[1]: w})
    LOWERING_RULES[op.type.replace("Pow2Scaled", "")](lw, op, local, prog)  # the float convolution
    _scaled(lw, op, env, local[op.outputs[0]], prog)
