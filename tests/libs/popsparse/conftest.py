"""Helpers of the popsparse tests: random block patterns as COO matrices, layer params."""

from __future__ import annotations

import numpy as np
import pytest

from tremula import target as targets
from tremula.libs.popsparse import COOMatrix, dynamic

#: The spec's test target ("T=24", spec 5.3).
T24 = targets.ipu2(tiles_per_ipu=24)


def layer(block: int, ratio: float, batch: int, in_: int, out: int) -> dynamic.FullyConnectedParams:
    sp = dynamic.SparsityParams(
        dynamic.SparsityType.Block, dynamic.SparsityStructure.Unstructured, (block, block)
    )
    return dynamic.FullyConnectedParams.create_with_nz_ratio(sp, ratio, batch, 1, in_, out)


def random_coo(
    rng: np.random.Generator,
    rows: int,
    cols: int,
    block: int,
    density: float,
    dtype=np.float32,
    shuffle: bool = True,
    rect: tuple | None = None,
) -> COOMatrix:
    """A COO of ``round(density x blocks)`` distinct blocks, unsorted when ``shuffle``;
    ``rect = (r0, r1, c0, c1)`` (in blocks) confines them to a sub-rectangle."""
    r0, r1, c0, c1 = rect or (0, rows // block, 0, cols // block)
    n = (r1 - r0) * (c1 - c0)
    k = min(n, round(density * (rows // block) * (cols // block)))
    idx = rng.choice(n, size=k, replace=False)
    if not shuffle:
        idx = np.sort(idx)
    r, c = np.divmod(idx, c1 - c0)
    values = rng.standard_normal(k * block * block).astype(dtype)
    values[values == 0] = 1  # no explicit zeros: scipy drops them
    return COOMatrix(values, (r + r0) * block, (c + c0) * block, (block, block), rows, cols)


class Helpers:
    """What the tests share, handed out by the session fixture ``h``."""

    T24 = T24
    layer = staticmethod(layer)
    random_coo = staticmethod(random_coo)


@pytest.fixture(scope="session")
def h() -> type[Helpers]:
    return Helpers


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# ---- the device program ----

PASSES = ("fwd", "grad_a", "grad_w")
#: Relative error bound of a result against ``|a| @ |b|`` (the summation error scale).
TOLERANCE = {"float": 1e-5, "half": 1e-2}


def weighted_coo(
    rng: np.random.Generator,
    rows: int,
    cols: int,
    block: int,
    density: float,
    area: tuple[int, int, int, int],
    weight: float,
    dtype=np.float32,
) -> COOMatrix:
    """A pattern drawn block by block with probability ``density``, ``weight`` times that
    inside ``area = (r0, r1, c0, c1)`` (elements): PopLibs' ``--weighted-area`` options."""
    gr, gc = rows // block, cols // block
    r, c = np.divmod(np.arange(gr * gc), gc)
    r0, r1, c0, c1 = (a // block for a in area)
    inside = (r >= r0) & (r < r1) & (c >= c0) & (c < c1)
    p = np.where(inside, min(1.0, density * weight), density)
    keep = rng.random(r.size) < p
    values = rng.standard_normal(int(keep.sum()) * block * block).astype(dtype)
    values[values == 0] = 1
    return COOMatrix(values, r[keep] * block, c[keep] * block, (block, block), rows, cols)


def bipolar(m: COOMatrix, rng: np.random.Generator) -> COOMatrix:
    """The pattern of ``m`` with +-1 values (results are then exact)."""
    values = rng.choice(np.array([-1.0, 1.0], dtype=m.nz_values.dtype), m.nz_values.size)
    return COOMatrix(
        values, m.row_indices, m.column_indices, m.block_dimensions, m.num_rows, m.num_columns
    )


class LayerRun:
    """A compiled and loaded sparse layer: ``run(pattern)`` loads a pattern with the host
    partitioner, runs the program once and returns the results with their float64
    references."""

    def __init__(self, params, dtype, options, tiles, passes, replicas, device):
        from tremula import poplar
        from tremula.libs.popsparse import dynamic

        self.params, self.options, self.passes = params, options, passes
        self.dtype = poplar.as_type(dtype)
        self.device = device or poplar.IPUModel("ipu2", tiles_per_ipu=tiles).create_device()
        g = self.graph = poplar.Graph(self.device.target, replication_factor=replicas)
        x, _, z = params.shape
        self.weights = dynamic.create_fully_connected_weights(g, self.dtype, params, options)
        self.act = dynamic.create_fully_connected_input(g, self.dtype, params, options)
        self.grad_out = g.add_variable(self.dtype, (z, x), "grad_out", mapping="linear")
        prog = poplar.Sequence()
        outs = {}
        if "fwd" in passes:
            outs["fwd"] = dynamic.fully_connected_fwd(
                g, self.weights, self.act, params, prog, options
            )
        if "grad_a" in passes:
            outs["grad_a"] = dynamic.fully_connected_grad_a(
                g, self.weights, self.grad_out, params, prog, options
            )
        if "grad_w" in passes:
            outs["grad_w"] = dynamic.fully_connected_sparse_grad_w(
                g, self.weights.meta_info, self.grad_out, self.act, params, prog, options
            )
        for name, t in (
            ("meta_info", self.weights.meta_info),
            ("nz_values", self.weights.nz_values),
            ("act", self.act),
            ("grad_out", self.grad_out),
        ):
            g.create_host_write(name, t)
        for name, t in outs.items():
            g.create_host_read(name, t)
        self.outputs = outs
        self.engine = poplar.Engine(g, prog)
        self.engine.load(self.device)
        self.partitioner = dynamic.Partitioner(params, self.dtype, self.device.target, options)
        self.plan = self.partitioner.plan

    def run(self, pattern, rng, bipolar_data: bool = False, check: bool = True) -> dict:
        """Load ``pattern`` and random (or +-1) dense data, run, check the results."""
        from tremula.profile import validate

        impl = self.partitioner.create_sparsity_data_impl(pattern)
        x, y, z = self.params.shape
        t = self.dtype.numpy
        if bipolar_data:
            act = rng.choice(np.array([-1.0, 1.0]), (z, y)).astype(t)
            gout = rng.choice(np.array([-1.0, 1.0]), (z, x)).astype(t)
        else:
            act = rng.standard_normal((z, y)).astype(t)
            gout = rng.standard_normal((z, x)).astype(t)
        e = self.engine
        e.reset_execution_profile()
        e.write_tensor("meta_info", impl.meta_info)
        e.write_tensor("nz_values", impl.nz_values)
        e.write_tensor("act", act)
        e.write_tensor("grad_out", gout)
        e.run()
        validate(e.get_graph_profile(), e.get_execution_profile())
        got = {name: e.read_tensor(name) for name in self.outputs}
        w = pattern.to_dense(x, y).astype(t).astype(np.float64)
        a, g = act.astype(np.float64), gout.astype(np.float64)
        refs = {"fwd": (a @ w.T, np.abs(a) @ np.abs(w.T)), "grad_a": (g @ w, np.abs(g) @ np.abs(w))}
        if "grad_w" in got:
            got["grad_w_vector"] = got["grad_w"]
            got["grad_w"] = self.partitioner.grad_w_to_coo_matrix(
                impl.meta_info, got["grad_w"]
            ).to_dense(x, y)
            mask = np.zeros((x, y), dtype=bool)
            b = pattern.block_dimensions
            for i in range(b[0]):
                for j in range(b[1]):
                    mask[pattern.row_indices + i, pattern.column_indices + j] = True
            refs["grad_w"] = ((g.T @ a) * mask, (np.abs(g.T) @ np.abs(a)) * mask)
        out = {"impl": impl, "got": got, "refs": refs, "act": act, "grad_out": gout}
        if check:
            exact = bipolar_data and bool(np.all(np.abs(pattern.nz_values) == 1))
            for name in self.outputs:
                assert_close(got[name], *refs[name], self.plan, exact, name)
        return out

    def propagation_computes(self) -> int:
        """Propagation compute sets executed by the last run."""
        steps = self.engine.get_execution_profile()["simulation"]["steps"]
        return sum(
            1 for s in steps if s["type"] == "OnTileExecute" and "/propagation/compute" in s["name"]
        )


def assert_close(got, want, scale, plan, exact: bool, what: str) -> None:
    """``got`` equals ``want`` exactly (``exact``) or within the tolerance of the layer's
    types relative to ``scale`` (``|a| @ |b|``)."""
    assert got.shape == want.shape, (what, got.shape, want.shape)
    if exact:
        np.testing.assert_array_equal(got.astype(np.float64), want, err_msg=what)
        return
    tol = TOLERANCE["half" if "half" in (plan.input_type, plan.partials_type) else "float"]
    err = np.abs(got.astype(np.float64) - want)
    bad = err > tol * scale + 1e-6
    assert not bad.any(), (
        f"{what}: {int(bad.sum())} of {bad.size} values off, worst {err.max()} "
        f"(scale {scale.max()}), plan {plan.describe()}"
    )


@pytest.fixture
def sparse_layer():
    """``sparse_layer(params, dtype, options, tiles=24, passes=PASSES)`` -> a LayerRun."""

    def make(params, dtype, options=None, tiles=24, passes=PASSES, replicas=1, device=None):
        return LayerRun(params, dtype, options or {}, tiles, passes, replicas, device)

    return make


Helpers.weighted_coo = staticmethod(weighted_coo)
Helpers.bipolar = staticmethod(bipolar)
Helpers.PASSES = PASSES
