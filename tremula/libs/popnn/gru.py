"""GRU layer, forward and backward (PopLibs' ``popnn::gru``: ``gruFwd`` and
``gruBwdWithWU``), with PopLibs' default cell (``resetAfter = false``).

Gates in PopLibs' order (reset, update, candidate), ``[x_t, h] W`` meaning
``x_t W_in[u] + h W_out[u]``:

    r = sigmoid([x_t, h] W_r + b_r)       u = sigmoid([x_t, h] W_u + b_u)
    c = tanh(x_t W_in[c] + (r * h) W_out[c] + b_c)
    h' = u * h + (1 - u) * c

Forward: a ``Repeat`` over the time steps (``rnn.StepLoop``) whose body slices ``x_t``,
runs one matmul ``[x_t, h] @ [W_r W_u]`` (``[B, I + H] x [I + H, 2H]``), a fused sigmoid,
the product ``r * h``, a matmul ``[x_t, r h] @ W_c``, a fused tanh, the state update in
place, and updates the output and the intermediates ``[T, B, 3H]`` (r, u, c) at step t.

Backward (the loop runs t = T-1 .. 0): with ``dh`` the gradient reaching ``h_t``,
``D = [dr, du, dc]`` the gradients at the gates' pre-activations:
``du = dh (h_prev - c) u (1 - u)``, ``dc = dh (1 - u) (1 - c^2)``,
``[dx_c, d(rh)] = dc W_c^T``, ``dr = d(rh) h_prev r (1 - r)``, ``[dx_ru, dh_ru] = [dr, du]
[W_r W_u]^T``; ``dx_t = dx_c + dx_ru``; ``dh_prev = dh u + d(rh) r + dh_ru``. ``D`` of every
step is kept, and the weight gradients are two matmuls over all steps after the loop
(``[X, H_prev]^T D_ru`` and ``[X, R H_prev]^T D_c``), the bias gradient a reduction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from tremula import poplar
from tremula.libs import poplin
from tremula.libs.popnn import rnn
from tremula.libs.popops.elementwise import map as pmap
from tremula.libs.popops.elementwise import map_in_place
from tremula.libs.popops.expr import Sigmoid, Tanh, _1, _2, _3, _4, _5
from tremula.libs.popops.fill import zero
from tremula.libs.popops.reduce import Operation, reduce

RESET, UPDATE, CANDIDATE = 0, 1, 2


@dataclass(frozen=True)
class GruParams(rnn.RnnParams):
    """PopLibs' ``GruParams``: see :class:`~tremula.libs.popnn.rnn.RnnParams`."""

    @property
    def num_units(self) -> int:
        return 3


class GruWeights(NamedTuple):
    """``input_weights [3, I, H]``, ``output_weights [3, H, H]``, ``biases [3, H]`` in gate
    order reset, update, candidate (PopLibs' ``GruWeights``)."""

    input_weights: poplar.Tensor
    output_weights: poplar.Tensor
    biases: poplar.Tensor


class GruGradients(NamedTuple):
    """What :func:`gru_bwd` returns."""

    input_grad: poplar.Tensor  # [T, B, I]
    init_state_grad: poplar.Tensor  # [B, H]
    weights_grad: GruWeights


def create_weights(graph: poplar.Graph, params: GruParams, name: str = "") -> GruWeights:
    """Weights laid out for the per-step matmuls: the stacked ``[I + H, 2H]`` (reset,
    update) and ``[I + H, H]`` (candidate) matrices are matmul right-hand sides; the
    returned tensors are views of them. Biases are mapped linearly."""
    p, name = params, name or "gru/weights"
    i, h = p.input_size, p.output_size
    lhs = (p.batch_size, i + h)
    ru = poplin.create_matmul_input_rhs(graph, p.dtype, lhs, (i + h, 2 * h), f"{name}/ru")
    c = poplin.create_matmul_input_rhs(graph, p.dtype, lhs, (i + h, h), f"{name}/c")
    ru_in, ru_out = rnn.unstack(ru, i, 2)
    c_in, c_out = rnn.unstack(c, i, 1)
    biases = rnn.state_variable(graph, p.dtype, (3, h), f"{name}/biases")
    return GruWeights(poplar.concat([ru_in, c_in], 0), poplar.concat([ru_out, c_out], 0), biases)


def _check_fwd(graph, params, init_state, inputs, weights, where):
    p = rnn.check_params(params, GruParams, where)
    b, h = p.batch_size, p.output_size
    init_state = rnn.check_operand(graph, init_state, (b, h), p.dtype, "init_state", where)
    shape = (p.time_steps, b, p.input_size)
    inputs = rnn.check_operand(graph, inputs, shape, p.dtype, "inputs", where)
    rnn.check_weights(graph, p, weights, GruWeights, where)
    return p, init_state, inputs


def gru_fwd(
    graph: poplar.Graph,
    params: GruParams,
    init_state: poplar.Tensor,
    inputs: poplar.Tensor,
    weights: GruWeights,
    prog: poplar.Sequence,
    name: str = "",
) -> tuple[poplar.Tensor, poplar.Tensor]:
    """Run a GRU layer over a sequence (PopLibs' ``gruFwd``).

    Args:
        graph: the graph.
        params: the layer's :class:`GruParams`.
        init_state: ``[batch, output_size]``, the output before step 0.
        inputs: ``[time_steps, batch, input_size]`` (e.g. from ``create_input``).
        weights: :class:`GruWeights` of ``params.dtype``.
        prog: the sequence the loop is appended to.
        name: debug prefix.

    Returns:
        ``(output, intermediates)``: the outputs ``[T, B, H]`` (``[B, H]``, the last
        one, when ``params.output_full_sequence`` is False) and ``[T, B, 3H]`` (reset,
        update and candidate values of each step) for :func:`gru_bwd`.

    Raises:
        PopnnError: params not GruParams, operands of the wrong shape or type.
    """
    where = f"popnn.gru_fwd{f' {name!r}' if name else ''}"
    p, init_state, inputs = _check_fwd(graph, params, init_state, inputs, weights, where)
    name = name or "gruFwd"
    t, b, h = p.time_steps, p.batch_size, p.output_size
    out = rnn.sequence_variable(graph, p.dtype, (t, b, h), f"{name}/output")
    inter = rnn.sequence_variable(graph, p.dtype, (t, b, 3 * h), f"{name}/intermediates")
    state = rnn.state_variable(graph, p.dtype, (b, h), f"{name}/state")
    prog.add(poplar.Copy(init_state, state))
    loop = rnn.StepLoop(graph, t, False, prog, name)
    _fwd_step(graph, p, weights, loop, loop.slice(inputs, "x"), state, out, inter)
    loop.close()
    return (out if p.output_full_sequence else state), inter


def _fwd_step(graph, p, weights, loop, x, h, out, inter) -> None:
    body, hs = loop.body, p.output_size
    w_in, w_out, bias = weights
    xh = poplar.concat([x, h], 1)
    w_ru = rnn.stacked(w_in, w_out, slice(0, 2))
    ru = poplin.matmul(graph, xh, w_ru, body, name=f"{loop.name}/ruMatMul")
    map_in_place(graph, Sigmoid(_1 + _2), [ru, bias[:2].reshape([1, 2 * hs])], body)
    r, u = ru[:, :hs], ru[:, hs:]
    rh = pmap(graph, _1 * _2, [r, h], body, name=f"{loop.name}/resetState")
    xrh = poplar.concat([x, rh], 1)
    w_c = rnn.stacked(w_in, w_out, slice(2, 3))
    c = poplin.matmul(graph, xrh, w_c, body, name=f"{loop.name}/candMatMul")
    map_in_place(graph, Tanh(_1 + _2), [c, bias[2:].reshape([1, hs])], body)
    map_in_place(graph, _3 + _2 * (_1 - _3), [h, u, c], body, name=f"{loop.name}/newState")
    loop.update(out, h, "output")
    loop.update(inter, poplar.concat([ru, c], 1), "intermediates")


def _check_bwd(graph, params, init_state, inter, weights, inputs, outputs, output_grad, where):
    p, init_state, inputs = _check_fwd(graph, params, init_state, inputs, weights, where)
    t, b, h = p.time_steps, p.batch_size, p.output_size
    inter = rnn.check_operand(graph, inter, (t, b, 3 * h), p.dtype, "fwd_intermediates", where)
    outputs = rnn.check_operand(graph, outputs, (t, b, h), p.dtype, "outputs", where)
    gshape = (t, b, h) if p.output_full_sequence else (b, h)
    output_grad = rnn.check_operand(graph, output_grad, gshape, p.dtype, "output_grad", where)
    return p, init_state, inter, inputs, outputs, output_grad


def gru_bwd(
    graph: poplar.Graph,
    params: GruParams,
    prog: poplar.Sequence,
    init_state: poplar.Tensor,
    fwd_intermediates: poplar.Tensor,
    weights: GruWeights,
    inputs: poplar.Tensor,
    outputs: poplar.Tensor,
    output_grad: poplar.Tensor,
    name: str = "",
) -> GruGradients:
    """Backward pass and weight update of a GRU layer (PopLibs' ``gruBwdWithWU``).

    Args:
        graph, params, prog, name: as :func:`gru_fwd`.
        init_state, weights, inputs: the forward pass's.
        fwd_intermediates: the ``[T, B, 3H]`` intermediates :func:`gru_fwd` returned.
        outputs: the forward output sequence ``[T, B, H]`` (run the forward pass with
            ``output_full_sequence=True`` params to have it).
        output_grad: the gradient of the loss with respect to the outputs: ``[T, B, H]``,
            or ``[B, H]`` (the last output) when ``params.output_full_sequence`` is False.

    Returns:
        :class:`GruGradients`: ``(input_grad [T, B, I], init_state_grad [B, H],
        weights_grad)``, the weight gradients shaped as :class:`GruWeights`.

    Raises:
        PopnnError: params not GruParams, operands of the wrong shape or type.
    """
    where = f"popnn.gru_bwd{f' {name!r}' if name else ''}"
    p, h0, inter, x, y, dy = _check_bwd(
        graph, params, init_state, fwd_intermediates, weights, inputs, outputs, output_grad, where
    )
    name = name or "gruBwd"
    t, b, i, h = p.time_steps, p.batch_size, p.input_size, p.output_size
    dh = rnn.state_variable(graph, p.dtype, (b, h), f"{name}/stateGrad")
    if p.output_full_sequence:
        zero(graph, dh, prog, name=f"{name}/zeroStateGrad")
    else:
        prog.add(poplar.Copy(dy, dh))
    dx = rnn.sequence_variable(graph, p.dtype, (t, b, i), f"{name}/inputGrad")
    d_all = rnn.sequence_variable(graph, p.dtype, (t, b, 3 * h), f"{name}/gateGrads")
    h_prev = rnn.previous_steps(h0, y)
    loop = rnn.StepLoop(graph, t, True, prog, name)
    if p.output_full_sequence:
        _accumulate(graph, loop, dh, dy)
    _bwd_step(graph, p, weights, loop, h_prev, inter, dh, dx, d_all)
    loop.close()
    wgrad = _weight_update(graph, p, x, h_prev, inter, d_all, prog, name)
    return GruGradients(dx, dh, wgrad)


def _accumulate(graph, loop, dh, dy) -> None:
    map_in_place(graph, _1 + _2, [dh, loop.slice(dy, "outGrad")], loop.body)


def _bwd_step(graph, p, weights, loop, h_prev, inter, dh, dx, d_all) -> None:
    body, hs, i = loop.body, p.output_size, p.input_size
    w_in, w_out, _ = weights
    gates = loop.slice(inter, "gates")
    r, u, c = gates[:, :hs], gates[:, hs : 2 * hs], gates[:, 2 * hs :]
    hp = loop.slice(h_prev, "prevState")
    d = rnn.state_variable(graph, p.dtype, (p.batch_size, 3 * hs), f"{loop.name}/gateGrad")
    d_r, d_u, d_c = d[:, :hs], d[:, hs : 2 * hs], d[:, 2 * hs :]
    map_in_place(graph, _2 * (_5 - _4) * _3 * (1 - _3), [d_u, dh, u, c, hp], body)
    map_in_place(graph, _2 * (1 - _3) * (1 - _4 * _4), [d_c, dh, u, c], body)
    wc = rnn.stacked(w_in, w_out, slice(2, 3)).transpose()
    dxc = poplin.matmul(graph, d_c, wc, body, name=f"{loop.name}/candGradMatMul")
    drh = dxc[:, i:]
    map_in_place(graph, _2 * _3 * _4 * (1 - _4), [d_r, drh, hp, r], body)
    wru = rnn.stacked(w_in, w_out, slice(0, 2)).transpose()
    dxru = poplin.matmul(graph, d[:, : 2 * hs], wru, body, name=f"{loop.name}/ruGradMatMul")
    dxt = pmap(graph, _1 + _2, [dxc[:, :i], dxru[:, :i]], body, name=f"{loop.name}/inputGrad")
    loop.update(dx, dxt, "inputGrad")
    expr = _1 * _2 + _3 * _4 + _5
    map_in_place(graph, expr, [dh, u, drh, r, dxru[:, i:]], body, name=f"{loop.name}/stateGrad")
    loop.update(d_all, d, "gateGrads")


def _weight_update(graph, p, x, h_prev, inter, d_all, prog, name) -> GruWeights:
    t, b, i, h = p.time_steps, p.batch_size, p.input_size, p.output_size
    rows = t * b
    xf = x.reshape([rows, i])
    df = d_all.reshape([rows, 3 * h])
    rh = pmap(graph, _1 * _2, [inter[:, :, :h], h_prev], prog, name=f"{name}/resetState")
    lhs_ru = poplar.concat([xf, h_prev.reshape([rows, h])], 1).transpose()
    lhs_c = poplar.concat([xf, rh.reshape([rows, h])], 1).transpose()
    g_ru = poplin.matmul(graph, lhs_ru, df[:, : 2 * h], prog, name=f"{name}/ruWeightGrad")
    g_c = poplin.matmul(graph, lhs_c, df[:, 2 * h :], prog, name=f"{name}/candWeightGrad")
    db = reduce(graph, df, [0], Operation.ADD, prog, name=f"{name}/biasGrad")
    ru_in, ru_out = rnn.unstack(g_ru, i, 2)
    c_in, c_out = rnn.unstack(g_c, i, 1)
    return GruWeights(
        poplar.concat([ru_in, c_in], 0), poplar.concat([ru_out, c_out], 0), db.reshape([3, h])
    )
