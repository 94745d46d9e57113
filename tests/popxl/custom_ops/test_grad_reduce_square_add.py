"""popxl-addons' ``grad_reduce_square_add`` (a C++ custom op served in Python:
``tremula/popxl/custom_ops/grad_reduce_square_add.py``), through its public wrapper,
against NumPy written from the C++ (``scale * sum(t ** 2)`` in float32)."""

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

from popxl_addons.ops.grad_reduce_square_add import grad_reduce_square_add  # noqa: E402

G = np.random.default_rng(3).normal(0, 40.0, (2, 37, 5))  # two replicas' gradients


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("scaling", [64, 0.5, "tensor"])
def test_the_scaled_sum_of_squares_per_replica(dtype, scaling) -> None:
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        g = popxl.variable(
            G.astype(dtype), name="g", replica_grouping=ir.replica_grouping(group_size=1)
        )
        ls = popxl.constant(8.0, popxl.float32, name="ls") if scaling == "tensor" else scaling
        out = grad_reduce_square_add(g, loss_scaling=ls)
        norm = ops.sqrt(out)
        s = popxl.d2h_stream(norm.shape, norm.dtype)
        ops.host_store(s, norm)
    assert [op.opType() for op in ir.main_graph.ops].count("GradReduceSquareAdd") == 1
    assert out.dtype == popxl.float32 and out.shape == ()
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run()[s]
        names = session.engine.get_graph_profile()["computeSets"]["names"]
    factor = 8.0 if scaling == "tensor" else float(scaling)
    data = G.astype(dtype).astype(np.float64)
    ref = np.sqrt((data**2).sum(axis=(1, 2)) / factor**2)
    np.testing.assert_allclose(got, ref, rtol=1e-5)
    assert any(n.startswith("GradReduceSquareAdd/") for n in names), names


def test_it_is_not_differentiable() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(3, np.float32))
        g = ir.create_graph(lambda t: grad_reduce_square_add(t, 2.0), x)
    from tremula.popxl.ops.base import OPS

    assert not OPS["GradReduceSquareAdd"].differentiable
    assert [op.opType() for op in g.ops] == ["GradReduceSquareAdd"]
