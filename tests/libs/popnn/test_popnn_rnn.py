"""popnn GRU and LSTM layers over several time steps: forward outputs and intermediates
against a NumPy implementation of the same equations, the backward pass (input, initial
state and weight gradients) against central finite differences of the NumPy forward, the
last-output-only form, half, the time loop's structure, and bad input."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from tremula import poplar
from tremula.libs import popnn
from tremula.libs.popnn import PopnnError, gru, lstm


def _helpers():
    name = "tremula_tests_popnn_helpers"
    if name not in sys.modules:
        path = Path(__file__).with_name("popnn_helpers.py")
        spec = importlib.util.spec_from_file_location(name, path)
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


H = _helpers()
Rig = H.Rig
RNG = np.random.default_rng(21)
T, B, I, HS = 3, 2, 3, 4


def _values(units: int, extra_state: bool) -> dict[str, np.ndarray]:
    v = {
        "x": RNG.standard_normal((T, B, I)),
        "h0": RNG.standard_normal((B, HS)) * 0.5,
        "wi": RNG.standard_normal((units, I, HS)) * 0.6,
        "wo": RNG.standard_normal((units, HS, HS)) * 0.6,
        "b": RNG.standard_normal((units, HS)) * 0.2,
    }
    if extra_state:
        v["c0"] = RNG.standard_normal((B, HS)) * 0.5
    return v


def _feed(rig: Rig, tensors: dict, values: dict) -> None:
    for key, t in tensors.items():
        rig.feed(t, values[key])


def _fd_grads(loss, values: dict) -> dict[str, np.ndarray]:
    out = {}
    for key, base in values.items():
        out[key] = H.finite_diff(lambda z, k=key: loss(**{**values, k: z}), base)
    return out


@pytest.mark.parametrize("full", [True, False], ids=["sequence", "last"])
def test_gru_forward_and_backward(full: bool) -> None:
    rig = Rig()
    g = rig.graph
    p = popnn.GruParams("float", B, T, I, HS, output_full_sequence=full)
    x, h0 = popnn.create_input(g, p, "x"), popnn.create_initial_state(g, p, "h0")
    w = gru.create_weights(g, p)
    out, inter = popnn.gru_fwd(g, p, h0, x, w, rig.prog)
    seq = (
        out
        if full
        else popnn.gru_fwd(g, popnn.GruParams("float", B, T, I, HS), h0, x, w, rig.prog)[0]
    )
    dy_shape = (T, B, HS) if full else (B, HS)
    dy = popnn.rnn.state_variable(g, p.dtype, dy_shape, "dy")
    grads = popnn.gru_bwd(g, p, rig.prog, h0, inter, w, x, seq, dy)
    values = _values(3, False)
    dy_v = RNG.standard_normal(dy_shape)
    _feed(
        rig,
        {"x": x, "h0": h0, "wi": w.input_weights, "wo": w.output_weights, "b": w.biases},
        values,
    )
    rig.feed(dy, dy_v)
    wg = grads.weights_grad
    got = rig.run([out, inter, grads.input_grad, grads.init_state_grad, *wg])
    ref = H.gru_ref(**values)
    np.testing.assert_allclose(got[0], ref if full else ref[-1], rtol=1e-5, atol=1e-6)
    r = H.sigmoid(
        values["x"][0] @ values["wi"][0] + values["h0"] @ values["wo"][0] + values["b"][0]
    )
    np.testing.assert_allclose(got[1][0, :, :HS], r, rtol=1e-5, atol=1e-6)

    def loss(**v) -> float:
        y = H.gru_ref(**v)
        return float(np.sum((y if full else y[-1]) * dy_v))

    fd = _fd_grads(loss, values)
    for key, value in zip(["x", "h0", "wi", "wo", "b"], got[2:]):
        np.testing.assert_allclose(value, fd[key], rtol=1e-4, atol=1e-5, err_msg=key)


@pytest.mark.parametrize("full", [True, False], ids=["sequence", "last"])
def test_lstm_forward_and_backward(full: bool) -> None:
    rig = Rig()
    g = rig.graph
    p = popnn.LstmParams(poplar.FLOAT, B, T, I, HS, output_full_sequence=full)
    x = popnn.create_input(g, p, "x")
    h0, c0 = popnn.create_initial_state(g, p, "h0"), popnn.create_initial_state(g, p, "c0")
    state = popnn.LstmState(h0, c0)
    w = lstm.create_weights(g, p)
    out, cell, inter = popnn.lstm_fwd(g, p, state, x, w, rig.prog)
    full_p = popnn.LstmParams(poplar.FLOAT, B, T, I, HS)
    seq = out if full else popnn.lstm_fwd(g, full_p, state, x, w, rig.prog)[0]
    dy_shape = (T, B, HS) if full else (B, HS)
    dy = popnn.rnn.state_variable(g, p.dtype, dy_shape, "dy")
    dc = popnn.rnn.state_variable(g, p.dtype, (B, HS), "dc")
    grads = popnn.lstm_bwd(g, p, rig.prog, state, inter, w, x, seq, dy, dc)
    values = _values(4, True)
    dy_v, dc_v = RNG.standard_normal(dy_shape), RNG.standard_normal((B, HS))
    tensors = {"x": x, "h0": h0, "c0": c0, "wi": w.input_weights, "wo": w.output_weights}
    _feed(rig, {**tensors, "b": w.biases}, values)
    rig.feed(dy, dy_v)
    rig.feed(dc, dc_v)
    st, wg = grads.init_state_grad, grads.weights_grad
    got = rig.run([out, cell, grads.input_grad, st.output, st.cell_state, *wg])
    args = {k: values[k] for k in ("x", "h0", "c0", "wi", "wo", "b")}
    ref, ref_c = H.lstm_ref(**args)
    np.testing.assert_allclose(got[0], ref if full else ref[-1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], ref_c, rtol=1e-5, atol=1e-6)

    def loss(**v) -> float:
        y, c = H.lstm_ref(**v)
        return float(np.sum((y if full else y[-1]) * dy_v) + np.sum(c * dc_v))

    fd = _fd_grads(loss, args)
    for key, value in zip(["x", "h0", "c0", "wi", "wo", "b"], got[2:]):
        np.testing.assert_allclose(value, fd[key], rtol=1e-4, atol=1e-5, err_msg=key)


def test_half_gru_and_lstm_forward_with_linearly_mapped_operands() -> None:
    rig = Rig()
    gv, lv = _values(3, False), _values(4, True)
    x = rig.input(gv["x"].astype(np.float16))
    h0, c0 = rig.input(gv["h0"].astype(np.float16)), rig.input(lv["c0"].astype(np.float16))
    gw = gru.GruWeights(*(rig.input(gv[k].astype(np.float16)) for k in ("wi", "wo", "b")))
    lw = lstm.LstmWeights(*(rig.input(lv[k].astype(np.float16)) for k in ("wi", "wo", "b")))
    gp = popnn.GruParams("half", B, T, I, HS)
    lp = popnn.LstmParams("half", B, T, I, HS)
    g_out, _ = popnn.gru_fwd(rig.graph, gp, h0, x, gw, rig.prog)
    l_out, l_c, _ = popnn.lstm_fwd(rig.graph, lp, popnn.LstmState(h0, c0), x, lw, rig.prog)
    got_g, got_l, got_c = rig.run([g_out, l_out, l_c])
    cast = {k: v.astype(np.float16).astype(np.float64) for k, v in {**gv, "c0": lv["c0"]}.items()}
    np.testing.assert_allclose(got_g, H.gru_ref(**{k: cast[k] for k in ("x", "h0")},
        **{k: gv[k].astype(np.float16).astype(np.float64) for k in ("wi", "wo", "b")}),
        rtol=2e-2, atol=1e-2)  # fmt: skip
    lcast = {k: lv[k].astype(np.float16).astype(np.float64) for k in ("wi", "wo", "b")}
    ref, ref_c = H.lstm_ref(cast["x"], cast["h0"], cast["c0"], **lcast)
    np.testing.assert_allclose(got_l, ref, rtol=2e-2, atol=1e-2)
    np.testing.assert_allclose(got_c, ref_c, rtol=2e-2, atol=1e-2)
    assert got_g.dtype == np.float16


def test_the_time_loop_is_one_repeat_whose_body_does_not_grow_with_the_steps() -> None:
    sizes = []
    for steps in (2, 7):
        g = poplar.Graph(poplar.IPUModel(tiles_per_ipu=4).create_device().target)
        prog = poplar.Sequence()
        p = popnn.GruParams("float", B, steps, I, HS)
        x, h0 = popnn.create_input(g, p), popnn.create_initial_state(g, p)
        popnn.gru_fwd(g, p, h0, x, gru.create_weights(g, p), prog)
        repeats = [q for q in prog.programs if isinstance(q, poplar.Repeat)]
        assert len(repeats) == 1 and repeats[0].count == steps
        sizes.append(len(g.state.compute_sets))
    assert sizes[0] == sizes[1]


def test_bad_input() -> None:
    rig = Rig()
    g, prog = rig.graph, rig.prog
    p = popnn.GruParams("float", B, T, I, HS)
    lp = popnn.LstmParams("float", B, T, I, HS)
    x, h0 = popnn.create_input(g, p), popnn.create_initial_state(g, p)
    w, lw = gru.create_weights(g, p), lstm.create_weights(g, lp)
    xh = rig.input(np.zeros((T, B, I), np.float16))
    short = rig.input(np.zeros((T, B, I - 1), np.float32))
    out, inter = popnn.gru_fwd(g, p, h0, x, w, prog)
    before = H.graph_size(g)
    bad_w = gru.GruWeights(w.input_weights, w.output_weights, w.biases[:2])
    cases = [
        (lambda: popnn.gru_fwd(g, lp, h0, x, w, prog), "params must be a GruParams"),
        (lambda: popnn.gru_fwd(g, p, h0, short, w, prog), r"inputs is float \(3, 2, 2\)"),
        (lambda: popnn.gru_fwd(g, p, h0, xh, w, prog), "inputs is half"),
        (lambda: popnn.gru_fwd(g, p, h0[0], x, w, prog), "init_state"),
        (lambda: popnn.gru_fwd(g, p, h0, x, bad_w, prog), "weights.biases"),
        (lambda: popnn.gru_fwd(g, p, h0, x, lw, prog), "weights must be a GruWeights"),
        (lambda: popnn.lstm_fwd(g, lp, h0, x, lw, prog), "init_state must be an LstmState"),
        (lambda: popnn.lstm_fwd(g, lp, popnn.LstmState(h0, x), x, lw, prog), "cell_state"),
        (lambda: popnn.gru_bwd(g, p, prog, h0, inter[:, :, :4], w, x, out, out), "fwd_inter"),
        (lambda: popnn.gru_bwd(g, p, prog, h0, inter, w, x, out, out[0]), "output_grad"),
        (lambda: popnn.lstm_bwd(g, lp, prog, popnn.LstmState(h0, h0), inter, lw, x, out, out),
         "fwd_intermediates"),
    ]  # fmt: skip
    for call, text in cases:
        with pytest.raises(PopnnError, match=text):
            call()
    assert H.graph_size(g) == before
    for kwargs, text in [
        (dict(dtype="int"), "float or half"),
        (dict(dtype="quad"), "not a poplar type"),
        (dict(batch_size=0), "batch_size must be a positive integer"),
        (dict(time_steps=2.5), "time_steps"),
        (dict(output_full_sequence=1), "output_full_sequence"),
    ]:
        args = {"dtype": "float", "batch_size": 1, "time_steps": 1, "input_size": 1,
                "output_size": 1, **kwargs}  # fmt: skip
        with pytest.raises(PopnnError, match=text):
            popnn.LstmParams(**args)


def _recurrent_engine(layer: str) -> poplar.Engine:
    """A GRU or LSTM layer's forward and backward pass over 7 steps (B 3, I 5, H 8) on
    the IPU Model (16 tiles), loaded."""
    device = poplar.IPUModel(tiles_per_ipu=16).create_device()
    g = poplar.Graph(device.target)
    prog = poplar.Sequence()
    t, b, i, h = 7, 3, 5, 8
    mod, params = (lstm, popnn.LstmParams) if layer == "lstm" else (gru, popnn.GruParams)
    p = params(poplar.FLOAT, b, t, i, h)
    x = popnn.create_input(g, p, "x")
    h0 = popnn.create_initial_state(g, p, "h0")
    w = mod.create_weights(g, p)
    dy = popnn.rnn.sequence_variable(g, poplar.FLOAT, (t, b, h), "dy")
    if layer == "lstm":
        state = popnn.LstmState(h0, popnn.create_initial_state(g, p, "c0"))
        y, _, inter = popnn.lstm_fwd(g, p, state, x, w, prog)
        popnn.lstm_bwd(g, p, prog, state, inter, w, x, y, dy)
    else:
        y, inter = popnn.gru_fwd(g, p, h0, x, w, prog)
        popnn.gru_bwd(g, p, prog, h0, inter, w, x, y, dy)
    engine = poplar.Engine(g, prog)
    engine.load(device)
    return engine


#: popops' reduction of partials, which the ``all_generic=False`` cases leave prepared on
#: both sides (its prepared run once summed the LSTM's bias gradient, ``ReduceStage2``, in
#: memory order instead of piece order: the last bit of some sums differed)
_REDUCE = "popops::ReducePartials"


@pytest.mark.parametrize(
    "layer, all_generic",
    [
        ("lstm", False),
        ("gru", False),
        ("lstm", True),
    ],
)
def test_replayed_prepared_runs_give_the_generic_computes_bits(layer, all_generic) -> None:
    """A recurrent layer's replayed runs (every vertex group's prepared run: block-copied
    dynamic slices and operand gathers, fused expressions, products, fills) leave device
    memory bit for bit as the codelets' generic ``compute`` does, run after run, from the
    same random contents of every float; with ``all_generic`` False popops' reductions of
    partials keep their prepared runs on both sides (see _REDUCE)."""
    fast, generic = _recurrent_engine(layer), _recurrent_engine(layer)
    for cs in generic.step_plan.compute_sets:  # no group prepares a run: compute each time
        for grp in cs.groups:
            if all_generic or not grp.vertex_type.name.startswith(_REDUCE):
                grp.prepared = lambda storage, ids: None
    rng = np.random.default_rng(8)
    start = (rng.standard_normal(fast.runtime.storage[poplar.FLOAT].shape) * 0.5).astype(np.float32)
    for e in (fast, generic):
        e.runtime.storage[poplar.FLOAT][...] = start
    for _ in range(3):  # interpreted, then replayed
        for e in (fast, generic):
            e.run(0)
        for dtype, arr in fast.runtime.storage.items():
            np.testing.assert_array_equal(arr, generic.runtime.storage[dtype], str(dtype))
    prepared = [g._fast is not None for cs in fast.step_plan.compute_sets for g in cs.groups]
    assert all(prepared)
    computed = [g._fast is None for cs in generic.step_plan.compute_sets for g in cs.groups]
    assert sum(computed) > len(computed) // 2
