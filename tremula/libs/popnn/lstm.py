"""LSTM layer, forward and backward (PopLibs' ``popnn::lstm``: ``lstmFwd`` and
``lstmBwdWithWU``).

Gates in PopLibs' default order (forget, input, candidate, output), ``[x_t, h] W_k``
meaning ``x_t W_in[k] + h W_out[k]``:

    f = sigmoid([x_t, h] W_f + b_f)    i = sigmoid([x_t, h] W_i + b_i)
    g = tanh([x_t, h] W_g + b_g)       o = sigmoid([x_t, h] W_o + b_o)
    c' = f * c + i * g                 h' = o * tanh(c')

Forward: a ``Repeat`` over the time steps (``rnn.StepLoop``) whose body slices ``x_t``,
runs ONE matmul ``[x_t, h] @ W`` (``[B, I + H] x [I + H, 4H]``), the activations in place
(sigmoid on f, i and o, tanh on g), the cell and output updates in place, and updates the
output and the intermediates ``[T, B, 5H]`` (f, i, g, o and the new cell state) at step t.

Backward (t = T-1 .. 0), ``dh`` / ``dc`` the gradients reaching ``h_t`` / ``c_t``:
``dc += dh o (1 - tanh(c)^2)``; pre-activation gradients ``D = [df, di, dg, do]`` with
``df = dc c_prev f (1 - f)``, ``di = dc g i (1 - i)``, ``dg = dc i (1 - g^2)``,
``do = dh tanh(c) o (1 - o)``; ``[dx_t, dh_prev] = D W^T`` (one matmul);
``dc_prev = dc f``. The weight gradient is one matmul ``[X, H_prev]^T D`` over all steps
after the loop, the bias gradient a reduction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from tremula import poplar
from tremula.libs import poplin
from tremula.libs.popnn import rnn
from tremula.libs.popnn.common import PopnnError
from tremula.libs.popops.elementwise import map_in_place
from tremula.libs.popops.expr import Sigmoid, Square, Tanh, _1, _2, _3, _4
from tremula.libs.popops.fill import zero
from tremula.libs.popops.reduce import Operation, reduce

FORGET, INPUT, CANDIDATE, OUTPUT = 0, 1, 2, 3


@dataclass(frozen=True)
class LstmParams(rnn.RnnParams):
    """PopLibs' ``LstmParams``: see :class:`~tremula.libs.popnn.rnn.RnnParams`."""

    @property
    def num_units(self) -> int:
        return 4


class LstmState(NamedTuple):
    """The output and cell state ``[batch, output_size]`` each (PopLibs' ``LstmState``)."""

    output: poplar.Tensor
    cell_state: poplar.Tensor


class LstmWeights(NamedTuple):
    """``input_weights [4, I, H]``, ``output_weights [4, H, H]``, ``biases [4, H]`` in gate
    order forget, input, candidate, output (PopLibs' ``LstmWeights``)."""

    input_weights: poplar.Tensor
    output_weights: poplar.Tensor
    biases: poplar.Tensor


class LstmGradients(NamedTuple):
    """What :func:`lstm_bwd` returns."""

    input_grad: poplar.Tensor  # [T, B, I]
    init_state_grad: LstmState
    weights_grad: LstmWeights


def create_weights(graph: poplar.Graph, params: LstmParams, name: str = "") -> LstmWeights:
    """Weights laid out for the per-step matmul: the stacked ``[I + H, 4H]`` matrix is a
    matmul right-hand side and the returned tensors are views of it; biases are mapped
    linearly."""
    p, name = params, name or "lstm/weights"
    i, h = p.input_size, p.output_size
    cat = poplin.create_matmul_input_rhs(
        graph, p.dtype, (p.batch_size, i + h), (i + h, 4 * h), f"{name}/stacked"
    )
    w_in, w_out = rnn.unstack(cat, i, 4)
    return LstmWeights(w_in, w_out, rnn.state_variable(graph, p.dtype, (4, h), f"{name}/biases"))


def _check_fwd(graph, params, init_state, inputs, weights, where):
    p = rnn.check_params(params, LstmParams, where)
    if not isinstance(init_state, LstmState):
        raise PopnnError(
            f"{where}: init_state must be an LstmState(output, cell_state), got "
            f"{type(init_state).__name__}"
        )
    b, h = p.batch_size, p.output_size
    h0 = rnn.check_operand(graph, init_state.output, (b, h), p.dtype, "init_state.output", where)
    c0 = rnn.check_operand(
        graph, init_state.cell_state, (b, h), p.dtype, "init_state.cell_state", where
    )
    shape = (p.time_steps, b, p.input_size)
    inputs = rnn.check_operand(graph, inputs, shape, p.dtype, "inputs", where)
    rnn.check_weights(graph, p, weights, LstmWeights, where)
    return p, h0, c0, inputs


def lstm_fwd(
    graph: poplar.Graph,
    params: LstmParams,
    init_state: LstmState,
    inputs: poplar.Tensor,
    weights: LstmWeights,
    prog: poplar.Sequence,
    name: str = "",
) -> tuple[poplar.Tensor, poplar.Tensor, poplar.Tensor]:
    """Run an LSTM layer over a sequence (PopLibs' ``lstmFwd``).

    Args:
        graph: the graph.
        params: the layer's :class:`LstmParams`.
        init_state: :class:`LstmState` before step 0.
        inputs: ``[time_steps, batch, input_size]``.
        weights: :class:`LstmWeights` of ``params.dtype``.
        prog: the sequence the loop is appended to.
        name: debug prefix.

    Returns:
        ``(output, cell_state, intermediates)``: the outputs ``[T, B, H]`` (the last one
        ``[B, H]`` when ``params.output_full_sequence`` is False), the final cell state
        ``[B, H]`` and ``[T, B, 5H]`` (f, i, g, o, c of each step) for :func:`lstm_bwd`.

    Raises:
        PopnnError: params not LstmParams, operands of the wrong shape or type.
    """
    where = f"popnn.lstm_fwd{f' {name!r}' if name else ''}"
    p, h0, c0, inputs = _check_fwd(graph, params, init_state, inputs, weights, where)
    name = name or "lstmFwd"
    t, b, h = p.time_steps, p.batch_size, p.output_size
    out = rnn.sequence_variable(graph, p.dtype, (t, b, h), f"{name}/output")
    inter = rnn.sequence_variable(graph, p.dtype, (t, b, 5 * h), f"{name}/intermediates")
    hs = rnn.state_variable(graph, p.dtype, (b, h), f"{name}/output/state")
    cs = rnn.state_variable(graph, p.dtype, (b, h), f"{name}/cellState")
    prog.add(poplar.Copy(h0, hs))
    prog.add(poplar.Copy(c0, cs))
    loop = rnn.StepLoop(graph, t, False, prog, name)
    _fwd_step(graph, p, weights, loop, loop.slice(inputs, "x"), hs, cs, out, inter)
    loop.close()
    return (out if p.output_full_sequence else hs), cs, inter


def _fwd_step(graph, p, weights, loop, x, h, c, out, inter) -> None:
    body, hs = loop.body, p.output_size
    w_in, w_out, bias = weights
    w = rnn.stacked(w_in, w_out, slice(0, 4))
    pre = poplin.matmul(graph, poplar.concat([x, h], 1), w, body, name=f"{loop.name}/gatesMatMul")
    b = bias.reshape([1, 4 * hs])
    for lo, hi, act in ((0, 2, Sigmoid), (2, 3, Tanh), (3, 4, Sigmoid)):
        cols = slice(lo * hs, hi * hs)
        map_in_place(graph, act(_1 + _2), [pre[:, cols], b[:, cols]], body)
    f, i, g, o = (pre[:, k * hs : (k + 1) * hs] for k in range(4))
    map_in_place(graph, _1 * _2 + _3 * _4, [c, f, i, g], body, name=f"{loop.name}/cellState")
    map_in_place(graph, _2 * Tanh(_3), [h, o, c], body, name=f"{loop.name}/output")
    loop.update(out, h, "output")
    loop.update(inter, poplar.concat([pre, c], 1), "intermediates")


def _check_bwd(graph, params, init_state, inter, weights, inputs, outputs, output_grad, where):
    p, h0, c0, inputs = _check_fwd(graph, params, init_state, inputs, weights, where)
    t, b, h = p.time_steps, p.batch_size, p.output_size
    inter = rnn.check_operand(graph, inter, (t, b, 5 * h), p.dtype, "fwd_intermediates", where)
    outputs = rnn.check_operand(graph, outputs, (t, b, h), p.dtype, "outputs", where)
    gshape = (t, b, h) if p.output_full_sequence else (b, h)
    output_grad = rnn.check_operand(graph, output_grad, gshape, p.dtype, "output_grad", where)
    return p, h0, c0, inter, inputs, outputs, output_grad


def lstm_bwd(
    graph: poplar.Graph,
    params: LstmParams,
    prog: poplar.Sequence,
    init_state: LstmState,
    fwd_intermediates: poplar.Tensor,
    weights: LstmWeights,
    inputs: poplar.Tensor,
    outputs: poplar.Tensor,
    output_grad: poplar.Tensor,
    last_cell_state_grad: poplar.Tensor | None = None,
    name: str = "",
) -> LstmGradients:
    """Backward pass and weight update of an LSTM layer (PopLibs' ``lstmBwdWithWU``).

    Args:
        graph, params, prog, name: as :func:`lstm_fwd`.
        init_state, weights, inputs: the forward pass's.
        fwd_intermediates: the ``[T, B, 5H]`` intermediates :func:`lstm_fwd` returned.
        outputs: the forward output sequence ``[T, B, H]``.
        output_grad: ``[T, B, H]``, or ``[B, H]`` when ``params.output_full_sequence`` is
            False.
        last_cell_state_grad: optional ``[B, H]`` gradient at the final cell state.

    Returns:
        :class:`LstmGradients`: ``(input_grad [T, B, I], init_state_grad (LstmState),
        weights_grad (LstmWeights))``.

    Raises:
        PopnnError: params not LstmParams, operands of the wrong shape or type.
    """
    where = f"popnn.lstm_bwd{f' {name!r}' if name else ''}"
    p, h0, c0, inter, x, y, dy = _check_bwd(
        graph, params, init_state, fwd_intermediates, weights, inputs, outputs, output_grad, where
    )
    t, b, i, h = p.time_steps, p.batch_size, p.input_size, p.output_size
    if last_cell_state_grad is not None:
        last_cell_state_grad = rnn.check_operand(
            graph, last_cell_state_grad, (b, h), p.dtype, "last_cell_state_grad", where
        )
    name = name or "lstmBwd"
    dh, dc = _initial_grads(graph, p, dy, last_cell_state_grad, prog, name)
    dx = rnn.sequence_variable(graph, p.dtype, (t, b, i), f"{name}/inputGrad")
    d_all = rnn.sequence_variable(graph, p.dtype, (t, b, 4 * h), f"{name}/gateGrads")
    h_prev = rnn.previous_steps(h0, y)
    c_prev = rnn.previous_steps(c0, inter[:, :, 4 * h :])
    loop = rnn.StepLoop(graph, t, True, prog, name)
    if p.output_full_sequence:
        map_in_place(graph, _1 + _2, [dh, loop.slice(dy, "outGrad")], loop.body)
    _bwd_step(graph, p, weights, loop, c_prev, inter, dh, dc, dx, d_all)
    loop.close()
    wgrad = _weight_update(graph, p, x, h_prev, d_all, prog, name)
    return LstmGradients(dx, LstmState(dh, dc), wgrad)


def _initial_grads(graph, p, dy, dc_last, prog, name):
    b, h = p.batch_size, p.output_size
    dh = rnn.state_variable(graph, p.dtype, (b, h), f"{name}/outputGrad")
    dc = rnn.state_variable(graph, p.dtype, (b, h), f"{name}/cellStateGrad")
    if p.output_full_sequence:
        zero(graph, dh, prog, name=f"{name}/zeroOutputGrad")
    else:
        prog.add(poplar.Copy(dy, dh))
    if dc_last is None:
        zero(graph, dc, prog, name=f"{name}/zeroCellStateGrad")
    else:
        prog.add(poplar.Copy(dc_last, dc))
    return dh, dc


def _bwd_step(graph, p, weights, loop, c_prev, inter, dh, dc, dx, d_all) -> None:
    body, hs, i, n = loop.body, p.output_size, p.input_size, loop.name
    st = loop.slice(inter, "gates")
    f, ig, g, o, c = (st[:, k * hs : (k + 1) * hs] for k in range(5))
    cp = loop.slice(c_prev, "prevCellState")
    d = rnn.state_variable(graph, p.dtype, (p.batch_size, 4 * hs), f"{n}/gateGrad")
    map_in_place(graph, _1 + _2 * _3 * (1 - Square(Tanh(_4))), [dc, dh, o, c], body)
    map_in_place(graph, _2 * Tanh(_3) * _4 * (1 - _4), [d[:, 3 * hs :], dh, c, o], body)
    fi = st[:, : 2 * hs]
    both = [d[:, : 2 * hs], poplar.concat([dc, dc], 1), poplar.concat([cp, g], 1), fi]
    map_in_place(graph, _2 * _3 * _4 * (1 - _4), both, body, name=f"{n}/forgetInputGrad")
    map_in_place(graph, _2 * _3 * (1 - _4 * _4), [d[:, 2 * hs : 3 * hs], dc, ig, g], body)
    map_in_place(graph, _1 * _2, [dc, f], body, name=f"{n}/prevCellStateGrad")
    w = rnn.stacked(weights.input_weights, weights.output_weights, slice(0, 4)).transpose()
    dxh = poplin.matmul(graph, d, w, body, name=f"{n}/gradMatMul")
    loop.update(dx, dxh[:, :i], "inputGrad")
    body.add(poplar.Copy(dxh[:, i:], dh))
    loop.update(d_all, d, "gateGrads")


def _weight_update(graph, p, x, h_prev, d_all, prog, name) -> LstmWeights:
    t, b, i, h = p.time_steps, p.batch_size, p.input_size, p.output_size
    rows = t * b
    df = d_all.reshape([rows, 4 * h])
    lhs = poplar.concat([x.reshape([rows, i]), h_prev.reshape([rows, h])], 1).transpose()
    gw = poplin.matmul(graph, lhs, df, prog, name=f"{name}/weightGrad")
    db = reduce(graph, df, [0], Operation.ADD, prog, name=f"{name}/biasGrad")
    w_in, w_out = rnn.unstack(gw, i, 4)
    return LstmWeights(w_in, w_out, db.reshape([4, h]))
