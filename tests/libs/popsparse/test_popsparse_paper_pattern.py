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
