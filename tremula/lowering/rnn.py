"""Lowering of ``popxl/ops/rnn.py`` onto ``popnn.gru_fwd`` / ``popnn.gru_bwd``.

The sequence operands are copied into tensors laid out for slicing along time
(``popnn.create_input``: each column's time steps on one tile) and the weights into the
layout ``popnn.gru.create_weights`` plans (the stacked matrices the per-step matmuls read),
so the time loop neither exchanges its slices nor gathers its weights.
"""

from __future__ import annotations

from tremula import poplar
from tremula.libs import popnn
from tremula.lowering.driver import Env, Lowerer, rule
from tremula.popxl.ops.base import OpNode


def _params(lw: Lowerer, x: poplar.Tensor, hidden: int) -> popnn.GruParams:
    T, B, I = x.shape
    return popnn.GruParams(x.dtype, B, T, I, hidden, output_full_sequence=True)


def _operands(
    lw: Lowerer,
    p: popnn.GruParams,
    x: poplar.Tensor,
    weights: tuple[poplar.Tensor, ...],
    prog: poplar.Sequence,
    name: str,
) -> tuple[poplar.Tensor, popnn.GruWeights]:
    """Copies of ``x`` (laid out for slicing) and of the weights (planned for the
    matmuls)."""
    xs = popnn.create_input(lw.graph, p, f"{name}/input")
    prog.add(poplar.Copy(x, xs))
    w = popnn.gru.create_weights(lw.graph, p, f"{name}/weights")
    for src, dst in zip(weights, w):
        prog.add(poplar.Copy(src, dst))
    return xs, w


@rule("Gru")
def gru(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    x, h0, wi, wo, b = (env[t] for t in op.inputs)
    p = _params(lw, x, h0.shape[1])
    name = op.outputs[0].id
    xs, w = _operands(lw, p, x, (wi, wo, b), prog, name)
    y, inter = popnn.gru_fwd(lw.graph, p, h0, xs, w, prog, name=name)
    env[op.outputs[0]], env[op.outputs[1]] = y, inter


@rule("GruGrad")
def gru_grad(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    h0, inter, wi, wo, b, x, y, dy = (env[t] for t in op.inputs)
    p = _params(lw, x, h0.shape[1])
    name = op.outputs[0].id
    xs, w = _operands(lw, p, x, (wi, wo, b), prog, name)
    grads = popnn.gru_bwd(lw.graph, p, prog, h0, inter, w, xs, y, dy, name=name)
    outs = (grads.input_grad, grads.init_state_grad, *grads.weights_grad)
    for t, value in zip(op.outputs, outs):
        env[t] = value
