"""The planner (spec section 3): bucket sizes from the spec's formulas, the memory bound,
minimal cost among all candidates (brute force), constraints, cache, errors, speed."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tremula import target as targets
from tremula.libs.popsparse import PlanningError, dynamic
from tremula.libs.popsparse import planner as plan_mod

MK2 = targets.ipu2()


def _spec_sizes(X, Y, Z, b, d, type_size, partials_size, P, oversize, grad_w, grad_a_own):
    """nz and meta-info words per bucket, written from spec 3.4 (grain = user block)."""
    px, py, pz = P
    area = b * b
    rg = math.ceil(round((Y // b) * (X // b) * d, 9))
    u = -(-rg // (px * py * pz))
    unit = area * type_size
    grain = math.lcm(unit, 8) // unit
    gpb = -(-math.floor(u * (1 + oversize) + 0.5) // grain) * grain
    align = 8 // partials_size if grad_w else 1
    nz = -(-(gpb * area) // align) * align

    def occupancy(xg, yg):
        x_nz = math.ceil(round(xg * (1 - (1 - d) ** yg), 9))
        total = math.ceil(round(xg * yg * d, 9))
        return x_nz, -(-total // x_nz) if x_nz else 0

    xg, yg = -(-(X // b) // px), -(-(Y // b) // py)
    x_nz, y_nz = occupancy(xg, yg)
    over = 1 + oversize
    if b == 1:
        header = (9 + 6 * (5 + (5 if grad_w else 0))) * 2
    else:
        header = (7 + 6 * (4 if grad_w else 0)) * 2
    fwd = header + math.ceil(round(x_nz * (2 + y_nz) * over, 9))
    grad_a = 0
    if grad_a_own:
        tx, ty = occupancy(yg, xg)
        grad_a = -(-((9 + 30) * 2 + math.ceil(round(tx * (2 + 2 * ty) * over, 9))) // 8) * 8
    return nz, -(-fwd // 8) * 8, grad_a


@pytest.mark.parametrize(
    "X, Y, Z, b, d, typ, opts, P",
    [
        (1024, 1024, 8, 1, 0.1, "half", {}, (4, 3, 2)),
        (1024, 1024, 8, 1, 0.1, "float", {"doGradWPass": True}, (3, 5, 1)),
        (1024, 1024, 8, 1, 0.1, "half", {"doGradAPass": True, "sharedBuckets": False}, (2, 5, 2)),
        (512, 256, 16, 4, 0.05, "half", {"metaInfoBucketOversizeProportion": 0.5}, (6, 2, 2)),
        (512, 512, 16, 8, 0.2, "float", {"doGradWPass": True, "doGradAPass": True}, (4, 3, 2)),
        (256, 256, 32, 16, 0.25, "half", {"doGradWPass": True, "partialsType": "half"}, (2, 2, 4)),
    ],
)
def test_bucket_sizes_follow_spec(h, X, Y, Z, b, d, typ, opts, P):
    params = h.layer(b, d, Z, Y, X)
    constraint = {"partition": dict(zip("xyz", P))}
    plan = dynamic.get_plan(h.T24, typ, params, {**opts, "planConstraints": constraint})
    assert plan.partition.xyz == P
    ts = 2 if typ == "half" else 4
    ps = 4 if b == 1 or opts.get("partialsType", "float") == "float" else 2
    want = _spec_sizes(
        X,
        Y,
        Z,
        b,
        d,
        ts,
        ps,
        P,
        opts.get("metaInfoBucketOversizeProportion", 0.3),
        opts.get("doGradWPass", False),
        b == 1 and opts.get("doGradAPass") and not opts.get("sharedBuckets", True),
    )
    got = (
        plan.nz_elems_per_bucket,
        plan.fwd_meta_info_elems_per_bucket,
        plan.grad_a_meta_info_elems_per_bucket,
    )
    assert got == want


def _brute_force(target, typ, params, opts):
    """Every candidate's cost by the single-candidate estimate; invalid ones give None."""
    fc, parsed = plan_mod.resolve(params, opts)
    methods = plan_mod.candidate_methods(fc, typ, parsed)
    exchanges = plan_mod.exchange_options(parsed)
    X, Y, Z = fc.shape
    out = []
    T = target.tiles_per_ipu
    for mi, m in enumerate(methods):
        _, gx, gy, gz = m.grouping
        for px in range(1, T + 1):
            for py in range(1, T // px + 1):
                for pz in range(1, T // (px * py) + 1):
                    for ex in exchanges:
                        cost = plan_mod.estimate_cost(
                            target, typ, params, opts, (px, py, pz), mi, ex
                        )
                        # no empty partition; Pz divides the Z grains
                        ok = all(
                            (p - 1) * -(-(n // g) // p) < n // g
                            for p, n, g in ((px, X, gx), (py, Y, gy))
                        )
                        ok = ok and (-(-Z // gz)) % pz == 0
                        if not ok:
                            assert cost is None
                        elif cost is not None:
                            out.append(((px, py, pz), mi, ex, cost))
    return out


@pytest.mark.parametrize(
    "tiles, X, Y, Z, b, d, typ, opts",
    [
        (16, 64, 64, 8, 1, 0.1, "half", {}),
        (16, 48, 80, 4, 1, 0.2, "float", {"doGradAPass": True, "doGradWPass": True}),
        (12, 64, 32, 16, 4, 0.25, "half", {"doGradWPass": True}),
        (16, 64, 64, 16, 8, 0.3, "float", {"doGradAPass": True, "doGradWPass": True}),
        (8, 64, 64, 8, 1, 0.1, "half", {"doGradAPass": True, "sharedBuckets": False}),
        (16, 512, 512, 8, 1, 0.5, "float", {"availableMemoryProportion": 0.05}),
    ],
)
def test_plan_is_cheapest_fitting_candidate(h, tiles, X, Y, Z, b, d, typ, opts):
    target = targets.ipu2(tiles_per_ipu=tiles)
    params = h.layer(b, d, Z, Y, X)
    plan = dynamic.get_plan(target, typ, params, opts)
    cands = _brute_force(target, typ, params, opts)
    assert cands
    mem = target.memory_bytes_per_tile
    bound = plan_mod.parse_options(opts).available_memory_proportion * mem
    while not any(c.temp_bytes <= bound for *_, c in cands) and bound < 2 * mem:
        bound = min(2 * bound, 2 * mem)
    fitting = [c for c in cands if c[3].temp_bytes <= bound]
    best = min(c.cycles for *_, c in fitting)
    assert plan.cost.cycles == best
    assert plan.cost.temp_bytes <= bound and plan.fits
    mine = [c for c in fitting if c[0] == plan.partition.xyz and c[3] == plan.cost]
    assert mine, "the plan's own partition is a fitting candidate with the same cost"
    assert plan.cost.temp_bytes == min(c.temp_bytes for *_, c in fitting if c.cycles == best)


@settings(max_examples=30, deadline=None)
@given(
    st.sampled_from([1, 4, 8, 16]),
    st.integers(1, 24),
    st.integers(1, 24),
    st.sampled_from([4, 8, 16, 32]),
    st.floats(0.01, 1.0),
    st.sampled_from(["half", "float"]),
    st.sampled_from([0.6, 0.05, 0.01, 1.0]),
    st.booleans(),
    st.booleans(),
)
def test_memory_bound_respected(h, b, xb, yb, Z, d, typ, amp, grad_a, grad_w):
    params = h.layer(b, d, Z, yb * b, xb * b)
    opts = {"availableMemoryProportion": amp, "doGradAPass": grad_a, "doGradWPass": grad_w}
    plan = dynamic.get_plan(h.T24, typ, params, opts)
    mem = h.T24.memory_bytes_per_tile
    assert plan.num_buckets <= 24
    if plan.memory_bound is not None:
        assert plan.cost.temp_bytes <= plan.memory_bound
        if plan.memory_bound > int(amp * mem):  # the bound was raised: nothing fitted
            assert plan.memory_bound <= 2 * mem
    assert (
        plan.cost.cycles == plan.cost.fwd_cycles + plan.cost.grad_a_cycles + plan.cost.grad_w_cycles
    )
    assert (plan.cost.grad_a_cycles > 0) == grad_a and (plan.cost.grad_w_cycles > 0) == grad_w
    # geometry: partitions cover each dim; every bucket on its own tile
    for dim, size in zip("xyz", params.shape):
        starts, sizes = plan.starts(dim), plan.sizes(dim)
        assert starts[0] == 0 and sizes.sum() == size and (sizes > 0).all()
    tiles = plan.bucket_tiles()
    assert sorted(tiles.tolist()) == list(range(plan.num_buckets))
    x, y, z = plan.bucket_coordinates()
    px, _, pz = plan.partition.xyz
    assert np.array_equal(tiles, (y * pz + z) * px + x)
    assert np.array_equal(plan.bucket_tiles("grad_a"), tiles)
    if not plan.exchange_plan.grad_w_exchange_buckets:
        assert np.array_equal(plan.bucket_tiles("grad_w"), np.arange(plan.num_buckets))


def test_plan_constraints_are_honoured(h):
    params = h.layer(1, 0.1, 8, 128, 128)
    for x, y, z in ((1, 1, 1), (6, 4, 1), (2, 3, 4), (16, 1, 1), (1, 22, 1)):
        c = {"partition": {"x": x, "y": y, "z": z}}
        assert dynamic.get_plan(h.T24, "float", params, {"planConstraints": c}).partition.xyz == (
            x,
            y,
            z,
        )
    plan = dynamic.get_plan(h.T24, "float", params, {"planConstraints": {"partition": {"z": 2}}})
    assert plan.partition.z == 2
    for ex in (True, False):
        c = {"exchange": {"gradWExchangeBuckets": ex}}
        plan = dynamic.get_plan(h.T24, "float", params, {"doGradWPass": True, "planConstraints": c})
        assert plan.exchange_plan.grad_w_exchange_buckets is ex
    with pytest.raises(PlanningError, match=r"partition.z = 3 is not valid: .* 4 Z grains"):
        dynamic.get_plan(h.T24, "float", params, {"planConstraints": {"partition": {"z": 3}}})
    with pytest.raises(PlanningError, match=r"partition.x = 200 is not valid: .* 128 X grains"):
        dynamic.get_plan(h.T24, "float", params, {"planConstraints": {"partition": {"x": 200}}})
    with pytest.raises(PlanningError, match="need more than the 24 tiles"):
        dynamic.get_plan(
            h.T24, "float", params, {"planConstraints": {"partition": {"x": 5, "y": 5}}}
        )


def test_planning_cache(h):
    cache = dynamic.PlanningCache()
    params = h.layer(4, 0.1, 8, 128, 128)
    p1 = dynamic.get_plan(h.T24, "half", params, {"doGradWPass": True}, cache)
    p2 = dynamic.get_plan(h.T24, "half", params, {"doGradWPass": "true"}, cache)
    assert p1 is p2 and (cache.hits, cache.misses, len(cache)) == (1, 1, 1)
    part = dynamic.Partitioner(params, "half", h.T24, {"doGradWPass": True}, cache)
    assert part.plan is p1 and cache.hits == 2
    p3 = dynamic.get_plan(h.T24, "float", params, {"doGradWPass": True}, cache)
    assert p3 is not p1 and len(cache) == 2
    assert dynamic.get_plan(h.T24, "half", params, {"doGradWPass": True}) == p1


def test_matmul_plans_with_grad_a(h):
    mm = dynamic.MatMulParams.create_with_nz_ratio(dynamic.SparsityParams(), 0.1, 1, 64, 32, 8)
    plan = dynamic.get_plan(h.T24, "float", mm, {"doGradWPass": True})
    assert plan.options.do_grad_a_pass and not plan.options.do_grad_w_pass
    assert plan.params.shape == (64, 32, 8) and plan.cost.grad_a_cycles > 0


@pytest.mark.parametrize(
    "b, typ, grain, partials",
    [
        (1, "half", (1, 1), "float"),
        (4, "float", (4, 4), "float"),
        (16, "float", (8, 8), "float"),
        (16, "half", (16, 16), "half"),
        (8, "half", (8, 8), "half"),
    ],
)
def test_grain_and_partials(h, b, typ, grain, partials):
    params = h.layer(b, 0.5, 16, 96, 96)
    plan = dynamic.get_plan(h.T24, typ, params, {"partialsType": "half"})
    assert plan.block_dimensions == grain and plan.partials_type == partials
    vw = {"half": 4, "float": 2}[typ]
    assert plan.method.grouping[3] in ((vw,) if b == 1 else (1, 16 if typ == "half" else 8))


@pytest.mark.parametrize(
    "typ, batch, ok",
    [("half", 4, True), ("half", 6, False), ("float", 6, True), ("float", 3, False)],
)
def test_element_wise_batch_must_be_a_multiple_of_the_vector_width(h, typ, batch, ok):
    params = h.layer(1, 0.1, batch, 64, 64)
    if ok:
        dynamic.get_plan(h.T24, typ, params)
    else:
        with pytest.raises(PlanningError, match="Padding of input to meet grouping not yet"):
            dynamic.get_plan(h.T24, typ, params)
    dynamic.get_plan(h.T24, typ, h.layer(4, 0.1, 3, 64, 64))  # block: any batch


def test_input_type_errors(h):
    with pytest.raises(PlanningError, match="input type 'int' is not supported"):
        dynamic.get_plan(h.T24, "int", h.layer(1, 0.1, 4, 64, 64))
    with pytest.raises(PlanningError, match="expected FullyConnectedParams or MatMulParams"):
        dynamic.get_plan(h.T24, "half", (64, 64, 4))


def test_dense_constraint(h):
    params = h.layer(4, 0.1, 16, 64, 128)
    plan = dynamic.get_plan(
        h.T24, "half", params, {"planConstraints": {"useDense": True}, "doGradAPass": True}
    )
    assert plan.use_dense and plan.meta_info_elems == 0 and plan.nz_elems == 64 * 128
    assert plan.cost.fwd_cycles > 0 and plan.cost.grad_a_cycles > 0


@pytest.mark.parametrize(
    "b, opts",
    [
        (1, {}),
        (1, {"doGradAPass": True, "doGradWPass": True}),
        (4, {"doGradAPass": True, "doGradWPass": True}),
        (16, {"doGradAPass": True, "doGradWPass": True}),
    ],
)
def test_planning_4096_fits(b, opts):
    """Planning time is measured in benchmarks/bench_popsparse_host.py (target under 0.5 s)."""
    sp = dynamic.SparsityParams(block_dimensions=(b, b))
    params = dynamic.FullyConnectedParams.create_with_nz_ratio(sp, 1 / 16, 64, 1, 4096, 4096)
    plan = dynamic.get_plan(MK2, "half", params, opts)
    assert plan.fits and plan.num_buckets <= MK2.tiles_per_ipu
    assert plan.num_buckets > MK2.tiles_per_ipu // 2  # a big layer uses most of the chip


def test_bucket_regions(h):
    params = h.layer(4, 0.1, 24, 100, 36)
    plan = dynamic.get_plan(
        h.T24, "float", params, {"planConstraints": {"partition": {"x": 3, "y": 4, "z": 2}}}
    )
    r = plan.bucket_regions()
    assert plan.starts("x").tolist() == [0, 12, 24] and plan.starts("y").tolist() == [0, 28, 56, 84]
    assert r["x_start"].tolist() == [0] * 8 + [12] * 8 + [24] * 8
    assert r["y_size"].tolist()[:8] == [28, 28, 28, 28, 28, 28, 16, 16]
    assert r["z_start"].tolist()[:2] == [0, 12] and set(r["z_size"].tolist()) == {12}
    assert plan.sub_group_ids().tolist()[:4] == [1, 1, 2, 2]
    assert plan.control_tile == 23 and plan.num_overflow_info_elems == 5
