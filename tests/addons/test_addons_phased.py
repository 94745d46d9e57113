"""popxl-addons' batch serialisation (its phased-execution building block): a Linear layer's
forward and accumulated gradient over serial micro-batches, loaded from host streams, with
activations kept in remote buffers, on compute tiles, on IO tiles and overlapped, against
NumPy."""

from __future__ import annotations

import numpy as np
import popxl_addons as addons
import pytest
from popxl_addons.layers import Linear
from popxl_addons.transforms.batch_serialisation import batch_serialise_fwd_and_grad

import popxl

B, S = 2, 3  # micro-batch rows, serial steps
RNG = np.random.default_rng(11)


@pytest.mark.parametrize("io_mode", ["compute", "io", "io_overlapped"])
def test_batch_serialised_forward_and_accumulated_gradient(io_mode: str) -> None:
    ir = popxl.Ir()
    ir.num_host_transfers = S
    if io_mode != "compute":
        ir._pb_ir.getSessionOptions().numIOTiles = 32
    with ir.main_graph:
        x_h2d = popxl.h2d_stream((B, 3), popxl.float32, "x")
        dy_h2d = popxl.h2d_stream((B, 2), popxl.float32, "dy")
        y_d2h = popxl.d2h_stream((B, 2), popxl.float32, "y")
        facts, fwd = Linear(2).create_graph(popxl.TensorSpec((B, 3), popxl.float32))
        accum_facts, bwd = addons.autodiff_with_accumulation(fwd, fwd.args.tensors)
        fwd_bs, bwd_bs = batch_serialise_fwd_and_grad(
            fwd,
            bwd,
            fwd.args,
            S,
            load_handles={fwd.graph.inputs[0]: x_h2d, bwd.graph.inputs[0]: dy_h2d},
            store_streams={fwd.graph.outputs[0]: y_d2h},
            store_buffers={},
            io_mode=io_mode,  # type: ignore[arg-type]
        )
        v, acc = facts.init(), accum_facts.init()
        fwd_bs.graph.bind(v).call(0)
        # the grad graph reads the weight (PopART's grad of the matmul's input is grown,
        # then pruned, and what it reads kept): bound with the forward variables, as
        # Graphcore's phased models bind theirs
        bwd_vars = acc.copy()
        bwd_vars.update(v)
        bwd_bs.graph.bind(bwd_vars).call(0)
    xs = RNG.standard_normal((S, B, 3)).astype(np.float32)
    dys = RNG.standard_normal((S, B, 2)).astype(np.float32)
    with popxl.Session(ir, "ipu_model") as s:
        out = s.run({x_h2d: xs, dy_h2d: dys})
        got = s.get_tensors_data(v.tensors + acc.tensors)
    w, b, a = got[v.weight], got[v.bias], acc.to_dict()
    np.testing.assert_allclose(out[y_d2h], xs @ w + b, rtol=1e-5, atol=1e-5)
    ref_w = np.mean([x.T @ dy for x, dy in zip(xs, dys)], axis=0)
    np.testing.assert_allclose(got[a["accum.weight"]], ref_w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[a["accum.bias"]], dys.sum(1).mean(0), rtol=1e-5, atol=1e-5)
    assert got[a["mean_accum_counter"]] == S
