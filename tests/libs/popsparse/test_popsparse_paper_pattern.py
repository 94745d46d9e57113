"""The PopSparse paper harness's pattern (``benchmarks/popsparse_paper.py``;
``popsparse-paper-method.md`` 1): ``std::shuffle`` of the block positions with
``std::default_random_engine(seed)`` as libstdc++ does it. The references are the first
positions a g++ 13 / libstdc++ program printed for the same calls."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

_PATH = Path(__file__).resolve().parents[3] / "benchmarks" / "popsparse_paper.py"
_spec = importlib.util.spec_from_file_location("popsparse_paper", _PATH)
paper = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("popsparse_paper", paper)  # its dataclasses look it up
_spec.loader.exec_module(paper)


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
