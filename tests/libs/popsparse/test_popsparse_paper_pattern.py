"""The PopSparse paper harness's pattern (``benchmarks/popsparse_paper.py``;
``popsparse-paper-method.md`` 1): ``std::shuffle`` of the block positions with
``std::default_random_engine(seed)`` as libstdc++ does it. The references are the first
positions a g++ 13 / libstdc++ program printed for the same calls."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

_BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"


def _load(name: str):
    """``benchmarks/<name>.py`` as the module ``name`` (the benchmark modules import each
    other by name, and dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location(name, _BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return sys.modules[name]


breakdown = _load("popsparse_breakdown")
paper = _load("popsparse_paper")


def test_the_shuffle_is_libstdcxx_s():
    """``std::vector<long> v(65536); iota; std::shuffle(v.begin(), v.end(),
    std::default_random_engine(123))`` begins 46126 57443 48624 14682 5171 30308 30972
    28131 (a 256 x 256 block grid: the 16x16 blocks of a 4096 x 4096 matrix)."""
    first = paper.harness_positions(65536, 8, 123)
    assert first.tolist() == [46126, 57443, 48624, 14682, 5171, 30308, 30972, 28131]


def test_the_pattern_keeps_ceil_d_blocks_at_the_first_positions():
    m = paper.harness_pattern(4096, 4096, 16, 1 / 16, 123)
    assert m.nz_values.size == 4096 * 256
    pos = m.row_indices // 16 * 256 + m.column_indices // 16
    assert sorted(pos.tolist()) == sorted(paper.harness_positions(65536, 4096, 123).tolist())
    assert np.all(np.abs(m.nz_values) <= 1)


def test_a_program_fits_up_to_the_tile_s_bytes():
    """The harness's compile fails on a tile over its memory, so such a point is not
    counted (the benchmark builds with ``debug.allowOutOfMemory`` and reads the profile)."""
    tile = paper.tile_bytes()
    assert tile == 624 * 1024  # Bow
    assert "DOES NOT FIT" not in paper.fit_note(tile)
    assert "DOES NOT FIT" in paper.fit_note(tile + 1)


def test_the_16x16_half_plan_at_n_4096_needs_a_doubled_memory_bound():
    """``popsparse.md`` 3.5 / 3.7: the distribution phase holds the dense slice, the other
    ``Pz - 1`` buckets of the group and the float partials; with no partition within
    ``availableMemoryProportion`` 0.6 of the tile, the planner doubles the bound. The plan
    (4, 5, 64): Y tile 832 (52 blocks), X tile 1024, Z tile 64; buckets of 1280 halves and
    504 meta-info words."""
    from tremula import poplar
    from tremula.libs.popsparse import dynamic

    target = poplar.IPUModel("bow").create_target()
    sp = dynamic.SparsityParams(block_dimensions=(16, 16))
    params = dynamic.MatMulParams.create_with_nz_ratio(sp, 1 / 16, 1, 4096, 4096, 4096)
    plan = dynamic.get_plan(target, "half", params, {})
    assert plan.partition.xyz == (4, 5, 64)
    bucket = 1280 * 2 + 2 * 504
    assert plan.cost.temp_bytes == 832 * 64 * 2 + 63 * bucket + 1024 * 64 * 4
    assert plan.cost.temp_bytes > int(0.6 * target.memory_bytes_per_tile)
    assert plan.memory_bound == int(2 * 0.6 * target.memory_bytes_per_tile)
    assert f"bound doubled to {plan.memory_bound:,} B" in paper.plan_memory(plan)


def test_the_what_if_options_are_checked():
    """``--paper-cases`` names the paper's six cases; ``--paper-what-if`` takes integer
    parameters the Bow model knows, and refuses others naming them."""
    import pytest

    from tremula.errors import TremulaError

    assert paper.parse_cases("") is None
    assert paper.parse_cases("16half,1float") == {(16, "half"), (1, "float")}
    with pytest.raises(ValueError, match="unknown case '3half'"):
        paper.parse_cases("3half")
    assert paper.parse_what_if("fp16_in_fp32_out_conv_units_per_tile=8") == {
        "fp16_in_fp32_out_conv_units_per_tile": 8
    }
    with pytest.raises(ValueError, match="name=integer"):
        paper.parse_what_if("fp16_in_fp32_out_conv_units_per_tile")
    with pytest.raises(TremulaError, match="unknown parameter 'nonsense'"):
        paper.parse_what_if("nonsense=3")


def test_the_breakdown_adds_up_to_the_distribution_step(h, rng, sparse_layer):
    """``--paper``'s breakdown of a block point: the slowest group's walk, per-block
    supervisor (weight loads), workers and zeroing, plus the compute set's launch, add up
    to the simulated distribution step (the device charges those terms, spec 3.6; the
    slowest tile sets the step). 16x16 half, float partials, Z = 128 on 24 tiles (plan
    6 x 1 x 4: each vertex walks 4 buckets, Z tile 32), buckets large enough that the
    pattern stays in its Z groups."""
    params = h.layer(16, 0.1, 128, 512, 512)
    options = {"metaInfoBucketOversizeProportion": 1.0}
    run = sparse_layer(params, "half", options, passes=("fwd",))
    pattern = h.random_coo(rng, 512, 512, 16, 0.1)
    impl = run.run(pattern, rng)["impl"]
    assert run.propagation_computes() == 0
    steps = run.engine.get_execution_profile()["simulation"]["steps"]
    step = next(
        s["cycles"]
        for s in steps
        if s["type"] == "OnTileExecute" and s["name"].endswith("/distribution")
    )
    plan, target = run.plan, run.device.target
    terms = breakdown.distribution_terms(target, plan, impl.meta_info)
    assert sum(terms[k] for k in breakdown.TERMS) == terms["total"] == step
    assert terms["sub_groups"] == plan.partition.z == 4
    # the per-block terms by hand: 79 supervisor cycles per 16x16 half block (64 for its
    # weights, 3, 12 for one weight load) and 4 per block row of a sub-group; each worker
    # 25 + ceil(Zt / 6) x 4 per block, less 3 per block after the first of its row
    b, r, zt = terms["blocks"], terms["rows"], plan.z_tile
    assert terms["supervisor"] == 79 * b + 4 * r
    assert terms["workers"] == 6 * (b * (25 + -(-zt // 6) * 4) - 3 * (b - r))
    xt = int(plan.sizes("x")[terms["group"] // plan.partition.y])
    assert terms["zeroing"] == 6 * (20 + -(-(xt * zt * 4 // 8) // 6))
    assert "blocks in" in breakdown.describe(target, plan, impl.meta_info)
