"""popxl-addons' ``layer_norm_distributed`` (a C++ custom op served in Python:
``tremula/popxl/custom_ops/layer_norm_distributed.py``), run through its public wrapper
and autodiff as models use it, over replica groups, against NumPy written from the C++
semantics (``layer_norm_distributed.cpp`` / ``layer_norm_distributedx.cpp``)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import popxl
from popxl import ops

ADDONS = Path(__file__).resolve().parents[3].parent / "shared" / "clients" / "popxl-addons"
if not (ADDONS / "popxl_addons").exists():
    pytest.skip(f"popxl-addons not found at {ADDONS}", allow_module_level=True)
if str(ADDONS) not in sys.path:
    sys.path.insert(0, str(ADDONS))

from popxl_addons.layers.layer_norm_distributed import LayerNormDistributed  # noqa: E402
from popxl_addons.ops.layer_norm_distributed import layer_norm_distributed  # noqa: E402

R, N, H = 4, 3, 8
EPS = 1e-5
RNG = np.random.default_rng(7)
X = RNG.normal(1.0, 2.0, (R, N, H)).astype(np.float32)
W = RNG.normal(1.0, 0.5, (R, H)).astype(np.float32)
B = RNG.normal(0.0, 0.5, (R, H)).astype(np.float32)
DY = RNG.normal(0.0, 1.0, (R, N, H)).astype(np.float32)


def _groups(stride: int, size: int) -> list[list[int]]:
    firsts = [g0 for g0 in range(R) if g0 % (stride * size) < stride]
    return [[g0 + k * stride for k in range(size)] for g0 in firsts]


def reference(groups: list[list[int]], w_is_used_in_dx: bool = False) -> dict[str, np.ndarray]:
    """The C++ semantics in float64, one group at a time: the group's shards of each sample
    concatenated along the hidden axis form the layer norm's row."""
    out = {k: np.zeros((R, N, H)) for k in ("y", "dx")}
    out.update({k: np.zeros((R, H)) for k in ("dw", "db")})
    out.update({k: np.zeros((R, N)) for k in ("mean", "inv")})
    for members in groups:
        x = np.concatenate([X[r] for r in members], axis=1).astype(np.float64)  # [N, H G]
        dy = np.concatenate([DY[r] for r in members], axis=1).astype(np.float64)
        w = np.concatenate([W[r] for r in members]).astype(np.float64)
        b = np.concatenate([B[r] for r in members]).astype(np.float64)
        mean = x.mean(axis=1, keepdims=True)
        inv = 1 / np.sqrt(x.var(axis=1, keepdims=True) + EPS)
        xh = (x - mean) * inv
        g = dy * w if w_is_used_in_dx else dy  # the C++ passes dy unscaled
        dx = inv * (g - g.mean(axis=1, keepdims=True) - xh * (g * xh).mean(axis=1, keepdims=True))
        for k, r in enumerate(members):
            cols = slice(k * H, (k + 1) * H)
            out["y"][r] = (xh * w + b)[:, cols]
            out["dx"][r] = dx[:, cols]
            out["dw"][r] = (dy * xh)[:, cols].sum(axis=0)
            out["db"][r] = dy[:, cols].sum(axis=0)
            out["mean"][r], out["inv"][r] = mean[:, 0], inv[:, 0]
    return out


def _run(stride: int, size: int, dtype=np.float32, stable: bool = False):
    ir = popxl.Ir(replication=R)
    ir._pb_ir.getSessionOptions().enableStableNorm = stable  # PopART's option, as the Opx reads
    one_each = ir.replica_grouping(group_size=1)
    outs = {}
    with ir.main_graph:
        x, w, b, dy = (
            popxl.variable(v.astype(dtype), name=n, replica_grouping=one_each)
            for v, n in ((X, "x"), (W, "w"), (B, "b"), (DY, "dy"))
        )
        rg = ir.replica_grouping(stride=stride, group_size=size)

        def fwd(x, w, b):
            return layer_norm_distributed(x, w, b, epsilon=EPS, group=rg)

        g = ir.create_graph(fwd, x, w, b)
        info = popxl.transforms.autodiff(g)
        call = ops.call_with_info(g, x, w, b)
        y = call.outputs[0]  # autodiff added the values the gradient needs
        dx, dw, db = ops.call(info.graph, dy, inputs_dict=info.inputs_dict(call))
        fwd_op = g.ops[0]
        stats = fwd_op.outputs[1:]
        for name, t in (("y", y), ("dx", dx), ("dw", dw), ("db", db)):
            s = popxl.d2h_stream(t.shape, t.dtype, name=f"{name}_stream")
            ops.host_store(s, t)
            outs[name] = s
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run()
        profile = session.engine.get_graph_profile()
    return {k: got[s] for k, s in outs.items()}, g, info.graph, stats, profile


@pytest.mark.parametrize(
    "stride, size, stable",
    [(1, 2, False), (2, 2, False), (1, 4, False), (1, 1, False), (2, 2, True)],
)
def test_forward_and_gradients_match_the_cpp_semantics_over_each_group(stride, size, stable):
    got, fwd, bwd, stats, profile = _run(stride, size, stable=stable)
    ref = reference(_groups(stride, size))
    for k in ("y", "dx", "dw", "db"):
        np.testing.assert_allclose(got[k], ref[k], rtol=2e-5, atol=2e-5, err_msg=k)
    # the op is one op of its own, in the IR and in the profile, forward and backward
    assert [op.opType() for op in fwd.ops] == ["LayerNormDistributed"]
    assert fwd.ops[0].opType() == "LayerNormDistributed"
    assert [op.type for op in bwd.ops] == ["LayerNormDistributedGrad"]
    assert fwd.ops[0].getEpsilon() == pytest.approx(EPS)
    assert [s.shape for s in stats] == [(N,), (N,)]
    names = profile["computeSets"]["names"]
    assert any(n.startswith("LayerNormDistributed/") for n in names), names
    assert any(n.startswith("LayerNormDistributedGrad/") for n in names), names
    # the stable algorithm centres before the variance (a second all-reduce)
    assert any(n.startswith("LayerNormDistributed/") and "/centre" in n for n in names) == stable


def test_the_input_gradient_is_the_layer_norms_where_the_scale_is_one() -> None:
    """Checked against finite differences of the forward reference: with ``scale = 1``
    the C++ gradient is the true one; elsewhere it lacks the scale factor (module note)."""
    groups = _groups(1, 2)
    ref = reference(groups)
    assert not np.allclose(ref["dx"], reference(groups, w_is_used_in_dx=True)["dx"])
    global W
    saved, W = W, np.ones_like(W)
    try:
        ref = reference(groups)
        loss = lambda: float((reference(groups)["y"] * DY).sum())  # noqa: E731
        r, n, h, eps = 1, 2, 5, 1e-3
        X[r, n, h] += eps
        up = loss()
        X[r, n, h] -= 2 * eps
        down = loss()
        X[r, n, h] += eps
        assert (up - down) / (2 * eps) == pytest.approx(ref["dx"][r, n, h], rel=1e-4, abs=1e-6)
    finally:
        W = saved


def test_half_precision_and_the_layer_module() -> None:
    """The popxl-addons layer (weights ones / zeros, grouped per shard) on float16."""
    ir = popxl.Ir(replication=R)
    with ir.main_graph:
        x = popxl.variable(
            X.astype(np.float16), name="x", replica_grouping=ir.replica_grouping(group_size=1)
        )
        rg = ir.replica_grouping(stride=1, group_size=2)
        facts, graph = LayerNormDistributed(rg).create_graph(x.spec)
        variables = facts.init()
        (y,) = graph.bind(variables).call(x)
        s = popxl.d2h_stream(y.shape, y.dtype)
        ops.host_store(s, y)
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run()[s]
    global W, B
    saved = W, B
    W, B = np.ones_like(W), np.zeros_like(B)
    try:
        ref = reference(_groups(1, 2))
    finally:
        W, B = saved
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, ref["y"], rtol=2e-2, atol=2e-2)


def test_bad_shapes_are_refused_naming_the_op() -> None:
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        x = popxl.variable(np.zeros((2, 4), np.float32))
        w = popxl.variable(np.zeros(3, np.float32))
        with pytest.raises(ValueError, match="LayerNormDistributedOp: Scale must be \\[4\\]"):
            layer_norm_distributed(x, w, w)
        assert not ir.main_graph.ops
