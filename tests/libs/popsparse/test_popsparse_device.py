"""The device program of the dynamic sparse layer: new patterns without recompiling (and no
propagation step when nothing spills), where the created tensors live, the propagation
control, the sparse x dense matmul (with ``transpose_lhs``), replicas, the CPU target, the
cycle model against the planner's estimate."""

from __future__ import annotations

import numpy as np
import pytest

from tremula import poplar
from tremula.libs.popsparse import dynamic
from tremula.libs.popsparse.codelets import control
from tremula.profile import validate

ALL = {"doGradAPass": True, "doGradWPass": True}


@pytest.mark.parametrize("block,dtype", [(1, "float"), (4, "half"), (8, "float")])
def test_new_patterns_run_without_recompiling(h, rng, sparse_layer, block, dtype):
    """One compiled engine; patterns written one after the other. A pattern that stays in
    its Z groups runs no propagation step, a skewed one runs exactly the host schedule's
    computes (in each of the three passes), and new values alone change the results."""
    run = sparse_layer(h.layer(block, 0.1, 8, 256, 128), dtype, ALL)
    profile = run.engine.get_graph_profile()
    engine = run.engine
    skewed = h.random_coo(rng, 128, 256, block, 0.1, rect=(0, 16 // block or 1, 0, 256 // block))
    for pattern in (
        h.random_coo(rng, 128, 256, block, 0.05),
        skewed,
        h.random_coo(rng, 128, 256, block, 0.05),
    ):
        res = run.run(pattern, rng)
        info = run.partitioner.overflow_info(res["impl"])
        computes = sum(s.compute for s in dynamic.propagation_steps(run.plan.partition.xyz, info))
        assert run.propagation_computes() == 3 * computes
        if pattern is skewed:
            assert computes > 0
        else:
            assert computes == 0 and list(info[:3]) == [1, 1, run.plan.partition.z]
    # the same meta-info with new values: the cached structure, fresh numbers
    values = pattern.nz_values * -2
    scaled = type(pattern)(
        values, pattern.row_indices, pattern.column_indices, pattern.block_dimensions, 128, 256
    )
    again = run.run(scaled, rng)
    assert np.array_equal(again["impl"].meta_info, res["impl"].meta_info)
    assert run.engine is engine and run.engine.get_graph_profile() == profile


def test_weights_and_input_live_on_the_plan_tiles(h):
    device = poplar.IPUModel("ipu2", tiles_per_ipu=24).create_device()
    g = poplar.Graph(device.target)
    params = h.layer(4, 0.1, 8, 256, 128)
    plan = dynamic.get_plan(device.target, "half", params, ALL)
    w = dynamic.create_fully_connected_weights(g, poplar.HALF, params, ALL)
    assert w.meta_info.dtype is poplar.UNSIGNED_SHORT and w.meta_info.shape == (
        plan.meta_info_elems,
    )
    assert w.nz_values.dtype is poplar.HALF and w.nz_values.shape == (plan.nz_elems,)
    head = plan.num_overflow_info_elems
    assert np.all(g.tiles_of(w.meta_info[:head]) == plan.control_tile)
    tiles = plan.bucket_tiles("fwd")
    mi = g.tiles_of(w.meta_info[head:]).reshape(plan.num_buckets, -1)
    nz = g.tiles_of(w.nz_values).reshape(plan.num_buckets, -1)
    assert np.all(mi == tiles[:, None]) and np.all(nz == tiles[:, None])
    act = dynamic.create_fully_connected_input(g, poplar.HALF, params, ALL)
    assert act.shape == (8, 256)
    # each slice of the input is on tiles of the PNs that read it
    used = g.tiles_of(act)
    ys = np.searchsorted(plan.starts("y"), np.arange(256), side="right") - 1
    _, y, _ = plan.bucket_coordinates()
    for col in (0, 100, 255):
        readers = tiles[(y == ys[col])]
        assert set(used[:, col].tolist()) <= set(readers.tolist())


def test_schedule_codes_follow_the_host_reference():
    """The control vertex's table: one entry per step, shifts only along dimensions of
    more than one partition, the buffer flipping with every shift."""
    info = np.array([2, 3, 2, 3, 0], dtype=np.uint16)
    steps = dynamic.propagation_steps((3, 3, 2), info)
    shift, comp, buf = control.schedule((3, 3, 2), info, False)
    assert comp.size == len(steps) and np.count_nonzero(comp) == sum(s.compute for s in steps)
    assert np.all((comp == 0) | (comp == buf + 1))
    moved = shift > 0
    assert np.all(buf[moved] == (shift[moved] - 1) % 2)
    flips = np.flatnonzero(np.diff(np.r_[0, buf]))
    assert np.array_equal(flips, np.flatnonzero(moved))
    # Pz = 1: the z "shifts" of the reference move nothing and are dropped
    s1, c1, _ = control.schedule((4, 3, 1), np.array([2, 3, 1, 3, 0], dtype=np.uint16), False)
    assert not np.any((s1 - 1) // 2 == 2) and np.count_nonzero(c1) == 5
    # GradW: the partial buckets come home
    s2, c2, _ = control.schedule((3, 3, 2), info, True)
    assert s2.size > shift.size and not np.any(c2[shift.size :])
    offset = np.zeros(3, dtype=int)
    for code in s2[s2 > 0]:
        offset[(code - 1) // 2] += 1
    start = np.array([0, 1, 0])
    assert np.all((offset + start) % np.array([3, 3, 2]) == 0)


@pytest.mark.parametrize("dtype", ["float", "half"])
@pytest.mark.parametrize("block", [1, 8])
def test_sparse_dense_matmul(h, rng, block, dtype):
    m, k, n = 64, 96, 8
    device = poplar.IPUModel("ipu2", tiles_per_ipu=16).create_device()
    g = poplar.Graph(device.target)
    sp = dynamic.SparsityParams(block_dimensions=(block, block))
    params = dynamic.MatMulParams.create_with_nz_ratio(sp, 0.2, 1, m, k, n)
    opts = {"partitioner.forceBucketSpills": True}
    lhs = dynamic.create_sparse_dense_matmul_lhs(g, dtype, params, opts)
    rhs = dynamic.create_sparse_dense_matmul_rhs(g, dtype, params, opts)
    assert rhs.shape == (1, k, n)
    rhs_t = g.add_variable(dtype, (1, m, n), "rhs_t", mapping="linear")
    rhs_tr = g.add_variable(dtype, (1, n, k), "rhs_tr", mapping="linear")
    prog = poplar.Sequence()
    out = dynamic.sparse_dense_matmul(g, lhs, rhs, prog)
    out_t = dynamic.sparse_dense_matmul(g, lhs, rhs_t, prog, transpose_lhs=True)
    out_tr = dynamic.sparse_dense_matmul(g, lhs, rhs_tr, prog, transpose_rhs=True)
    assert out.shape == (1, m, n) and out_t.shape == (1, k, n)
    for name, t in (
        ("mi", lhs.meta_info),
        ("nz", lhs.nz_values),
        ("b", rhs),
        ("bt", rhs_t),
        ("br", rhs_tr),
    ):
        g.create_host_write(name, t)
    for name, t in (("o", out), ("ot", out_t), ("or", out_tr)):
        g.create_host_read(name, t)
    engine = poplar.Engine(g, prog)
    engine.load(device)
    part = dynamic.Partitioner(params, dtype, device.target, opts)
    coo = h.bipolar(h.random_coo(rng, m, k, block, 0.2), rng)
    impl = part.create_sparsity_data_impl(coo)
    t = poplar.as_type(dtype).numpy
    b = rng.choice([-1.0, 1.0], (1, k, n)).astype(t)
    bt = rng.choice([-1.0, 1.0], (1, m, n)).astype(t)
    br = rng.choice([-1.0, 1.0], (1, n, k)).astype(t)
    for name, value in (
        ("mi", impl.meta_info),
        ("nz", impl.nz_values),
        ("b", b),
        ("bt", bt),
        ("br", br),
    ):
        engine.write_tensor(name, value)
    engine.run()
    validate(engine.get_graph_profile(), engine.get_execution_profile())
    w = coo.to_dense(m, k).astype(np.float64)
    assert np.array_equal(engine.read_tensor("o")[0], w @ b[0])
    assert np.array_equal(engine.read_tensor("ot")[0], w.T @ bt[0])
    assert np.array_equal(engine.read_tensor("or")[0], w @ br[0].T)


def test_replicas_each_run_their_own_pattern(h, rng, sparse_layer):
    params = h.layer(1, 0.2, 8, 96, 64)
    opts = {**ALL, "partitioner.forceBucketSpills": True}
    run = sparse_layer(params, "float", opts, tiles=16, replicas=2)
    part = run.partitioner
    patterns = [h.random_coo(rng, 64, 96, 1, 0.2), h.random_coo(rng, 64, 96, 1, 0.1)]
    impls = [part.create_sparsity_data_impl(p) for p in patterns]
    act = rng.standard_normal((2, 8, 96)).astype(np.float32)
    gout = rng.standard_normal((2, 8, 64)).astype(np.float32)
    e = run.engine
    e.write_tensor("meta_info", np.stack([i.meta_info for i in impls]))
    e.write_tensor("nz_values", np.stack([i.nz_values for i in impls]))
    e.write_tensor("act", act)
    e.write_tensor("grad_out", gout)
    e.run()
    validate(e.get_graph_profile(), e.get_execution_profile())
    fwd = e.read_tensor("fwd").reshape(2, 8, 64)
    ga = e.read_tensor("grad_a").reshape(2, 8, 96)
    gw = e.read_tensor("grad_w").reshape(2, -1)
    for r, p in enumerate(patterns):
        w = p.to_dense(64, 96).astype(np.float64)
        np.testing.assert_allclose(fwd[r], act[r] @ w.T, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(ga[r], gout[r] @ w, rtol=1e-5, atol=1e-5)
        got = part.grad_w_to_coo_matrix(impls[r].meta_info, gw[r]).to_dense(64, 96)
        np.testing.assert_allclose(got, (gout[r].T @ act[r]) * (w != 0), rtol=1e-5, atol=1e-5)


def test_cpu_target(h, rng, sparse_layer):
    run = sparse_layer(
        h.layer(4, 0.2, 4, 64, 32), "float", ALL, device=poplar.Device.create_cpu_device()
    )
    assert run.plan.num_buckets == 1
    run.run(h.random_coo(rng, 32, 64, 4, 0.2), rng)


@pytest.mark.parametrize("block,dtype", [(1, "float"), (1, "half"), (8, "half"), (16, "half")])
def test_cycles_match_the_planner_without_spills(h, rng, sparse_layer, block, dtype):
    """With a pattern that stays in its Z groups the simulated forward pass is the
    planner's estimate give or take the control of the (empty) propagation phase."""
    params = h.layer(block, 0.1, 16, 512, 512)
    opts = {"metaInfoBucketOversizeProportion": 1.0}
    run = sparse_layer(params, dtype, opts, passes=("fwd",))
    pattern = h.random_coo(rng, 512, 512, block, 0.05)
    run.run(pattern, rng)
    assert run.propagation_computes() == 0
    cycles = run.engine.get_execution_profile()["simulation"]["cycles"]
    assert 0.5 * run.plan.cost.fwd_cycles < cycles < 2.5 * run.plan.cost.fwd_cycles


@pytest.mark.parametrize(
    "block,dtype,opts",
    [
        (1, "float", {}),
        (1, "half", {**ALL, "sharedBuckets": False}),
        (4, "float", {"doGradWPass": True}),
        (8, "half", {"partitioner.forceBucketSpills": True}),
        (1, "float", {**ALL, "sharedBuckets": False, "partitioner.forceBucketSpills": True}),
    ],
)
def test_device_decoding_matches_the_host_reader(h, rng, block, dtype, opts):
    """``kernels.decode`` (all buckets at once, forward or GradA meta-info) finds the blocks
    and slots the host's reader finds."""
    from tremula.libs.popsparse import decoding, kernels

    part = dynamic.Partitioner(h.layer(block, 0.1, 8, 256, 128), dtype, h.T24, opts)
    impl = part.create_sparsity_data_impl(h.random_coo(rng, 128, 256, block, 0.1))
    plan = part.plan
    rows, cols, slots = decoding.walk(plan, impl.meta_info)
    want = sorted(zip(rows.tolist(), cols.tolist(), slots.tolist()))
    head, fwd = plan.num_overflow_info_elems, plan.fwd_meta_info_elems_per_bucket
    buckets = impl.meta_info[head:].reshape(plan.num_buckets, plan.meta_info_elems_per_bucket)
    _, py, _ = plan.partition.xyz
    for grad_a in [False, True] if plan.has_grad_a_meta_info else [False]:
        words = buckets[:, fwd:] if grad_a else buckets[:, :fwd]
        fmt = kernels.BucketFormat(
            plan.block_dimensions,
            words.shape[1],
            plan.nz_elems_per_bucket,
            plan.type_factor,
            plan.z_tile,
            grad_a,
        )
        e = kernels.decode(words.reshape(1, -1), fmt)
        xp, yp = (e.sid - 1) // py, (e.sid - 1) % py
        got = zip(
            (plan.starts("x")[xp] + e.x).tolist(),
            (plan.starts("y")[yp] + e.y).tolist(),
            e.slot.tolist(),
        )
        assert sorted(got) == want


@pytest.mark.parametrize("missing", ["_sparse", "_csr_matvecs"])
def test_products_without_scipy_or_its_kernel(h, rng, sparse_layer, monkeypatch, missing):
    """Without SciPy the element-wise product is an ELL sweep in NumPy adding into the
    partials in place; without SciPy's CSR kernel, SciPy's public product into a temporary
    that is then written: same results either way."""
    from tremula.libs.popsparse import kernels

    monkeypatch.setattr(kernels, missing, None)
    run = sparse_layer(
        h.layer(1, 0.1, 8, 256, 128), "float", {**ALL, "partitioner.forceBucketSpills": True}
    )
    run.run(h.random_coo(rng, 128, 256, 1, 0.1), rng)
    assert run.propagation_computes() > 0


def test_dense_fallback_all_passes(h, rng, sparse_layer):
    """``useDense``: Fwd and GradA are poplin matmuls of the dense ``[Y][X]`` weights; the
    sparse GradW, which gets no pattern (the meta-info is empty), is the gradient of every
    entry of that dense tensor, ``S^T dQ`` laid out like it."""
    opts = {**ALL, "planConstraints": {"useDense": True}}
    run = sparse_layer(h.layer(1, 0.3, 4, 47, 23), "float", opts)
    assert run.plan.use_dense and run.plan.meta_info_elems == 0
    res = run.run(h.random_coo(rng, 23, 47, 1, 0.3), rng, check=False)
    for name in ("fwd", "grad_a"):
        np.testing.assert_allclose(res["got"][name], res["refs"][name][0], rtol=1e-5, atol=1e-5)
    want = res["act"].astype(np.float64).T @ res["grad_out"].astype(np.float64)
    np.testing.assert_allclose(
        res["got"]["grad_w_vector"].reshape(47, 23), want, rtol=1e-5, atol=1e-5
    )


@pytest.fixture(params=["compiled", "numpy"])
def kernels_on(request):
    """Run with the optional compiled kernels (when numba is installed) and without."""
    from tremula.libs import jit

    if request.param == "compiled" and not jit.available():
        pytest.skip("numba (the fast extra) is not installed")
    previous = jit.set_enabled(request.param == "compiled")
    yield request.param == "compiled"
    jit.set_enabled(previous)


@pytest.mark.parametrize("block,dtype", [(4, "half"), (8, "float"), (16, "half"), (16, "float")])
def test_block_products_compiled_and_in_numpy(
    h, rng, sparse_layer, monkeypatch, kernels_on, block, dtype
):
    """The block products of Fwd and GradA, in the distribution phase (written) and the
    propagation steps of a skewed pattern (added), with the compiled kernel and with NumPy:
    within the tolerance of the float64 reference on random data, exact on +-1 data; the
    kernel runs exactly when it is on."""
    from tremula.libs.popsparse import kernels

    ran = []
    compiled = kernels.block_rows_product

    def spy(*args):
        ran.append(compiled(*args))
        return ran[-1]

    monkeypatch.setattr(kernels, "block_rows_product", spy)
    run = sparse_layer(
        h.layer(block, 0.1, 8, 256, 128), dtype, {"doGradAPass": True}, passes=("fwd", "grad_a")
    )
    skewed = h.random_coo(rng, 128, 256, block, 0.1, rect=(0, 32 // block, 0, 256 // block))
    run.run(skewed, rng)
    assert run.propagation_computes() > 0
    run.run(h.bipolar(skewed, rng), rng, bipolar_data=True)
    run.run(h.random_coo(rng, 128, 256, block, 0.05), rng)
    assert ran and all(r == kernels_on for r in ran)


def test_distribution_vertex_charges_the_product_and_zeroing(h, rng, sparse_layer):
    """The distribution's vertex on a full-size tile costs spec 3.6's element-wise Fwd
    estimate (the worker as the assembly runs it) for the plan's expected rows and
    non-zeros plus zeroing its X x Z float
    partials (spec 4.7 zeroInfo), computed here from the formulas."""
    from tremula.libs.popsparse import cost
    from tremula.libs.popsparse import estimators as est

    params = h.layer(1, 0.1, 16, 512, 512)
    run = sparse_layer(params, "half", {"metaInfoBucketOversizeProportion": 1.0}, passes=("fwd",))
    run.run(h.random_coo(rng, 512, 512, 1, 0.05), rng)
    px, py, pz = run.plan.partition.xyz
    xg, yg, zt = -(-512 // px), -(-512 // py), run.plan.z_tile
    rows = max(-(-int(cost.occupancy(xg, yg, 0.1)[0]) // pz), 1)
    nz = -(-round(512 * 512 * 0.1) // (px * py * pz))
    worker = est.ew_fwd_worker(
        2, zt, -(-rows // 6) if rows > 12 else 1, -(-nz // rows), assembly=True
    )
    zeroing = est.zero_cycles(h.T24, xg * zt * 4)
    expected = est.ew_supervisor(30, pz, pz) + 6 * pz * worker + zeroing
    graph = run.engine.get_graph_profile()
    names = graph["computeSets"]["names"]
    active = graph["computeSets"]["cycleEstimates"]["activeCyclesByTile"]
    cs = next(i for i, n in enumerate(names) if n.endswith("/distribution"))
    assert rows > 12  # contiguous row ranges: the uniform split is exact
    assert active[cs][0] == int(expected)  # tile 0: PN (0, 0, 0), a full-size partition
