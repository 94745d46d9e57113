"""The PopSparse paper's dense reference taken apart (``benchmarks/popsparse_paper_dense.py``,
issue 28): ``poplin.matmul(W [4096][4096], X [4096][16384])``, half inputs with float
partials, on Bow. The references are hand-computed from the paper's rate, the machine
table (``profile-and-machine.md`` 2.1: Bow 1.85 GHz, 64 half MACs per cycle per tile) and
the ``ConvPartial1x1Out`` weight load of 3.5."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from tremula import poplar
from tremula.libs import poplin

_DIR = Path(__file__).resolve().parents[3] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, _DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)  # dataclasses and the sibling import look it up
    spec.loader.exec_module(module)
    return sys.modules[name]


_load("popsparse_breakdown")  # popsparse_paper imports it as a sibling
_load("popsparse_paper")
dense = _load("popsparse_paper_dense")


def test_the_paper_rate_as_bow_cycles():
    """2 x 4096^2 x 16384 FLOPs at 230 TFLOP/s and 1.85 GHz: 4,421,949 cycles; FP32 at
    55: 18,491,786."""
    assert dense.implied_cycles("half", 16384) == 4_421_949
    assert dense.implied_cycles("float", 16384) == 18_491_786


def test_the_amp_terms_add_up_to_the_plan():
    """One serial step of the n = 16384 plan (357 output positions, K slices of 256, 64
    output channels per step): 16 input groups x 4 passes; a pass loads 16 conv units x 16
    weights x 2 B at 8 B per cycle (64) besides its 26; the ideal is 357 x 256 x 64 MACs at
    64 per cycle."""
    plan = dense._plan("half", 16384)
    assert (plan.block_m, plan.step_k, plan.step_n) == (357, 256, 64)
    amp = dense.amp_terms(plan)
    assert amp["passes"] == 16 * 4
    assert amp["pass + weight load"] == 26 + 64
    assert amp["ideal"] == 357 * 256 * 64 // 64
    per_pass = amp["pass + weight load"] + amp["workers fixed"] + amp["workers positions"]
    assert amp["passes"] * per_pass + amp["vertex fixed"] == amp["total"]
    launch = poplar.IPUModel("bow").create_target().compute_set_launch_cycles
    assert plan.serial * (amp["total"] + launch) == plan.compute_cycles


def test_a_64_tile_replica_has_the_full_plans_tiles():
    """The n = 16384 plan is 46 x 2 x 16 tiles of 357 positions, 2048 output channels and
    K = 256: on 64 tiles, 714 positions give the same blocks, steps and per-tile cycles
    (the replica the benchmark's RESULTS simulate: the estimate is what runs)."""
    full = dense._plan("half", 16384)
    target = poplar.IPUModel("bow", tiles_per_ipu=64).create_target()
    opts = {"partialsType": "float"}
    small = poplin.matmul_plan(target, poplar.HALF, (4096, 4096), (4096, 714), options=opts)
    keys = ("swap", "block_m", "block_n", "step_k", "step_n", "blocks_k", "serial", "loop")
    assert [getattr(small, k) for k in keys] == [getattr(full, k) for k in keys]
    assert (full.blocks_m, full.blocks_n, small.blocks_m, small.blocks_n) == (46, 2, 2, 2)
    assert small.compute_cycles == full.compute_cycles
    assert small.reduce_cycles == full.reduce_cycles


def test_stage_two_per_step_by_hand():
    """Per step of the n = 16384 plan each of the 16 K slices' tiles reduces a piece of
    357 x 64 / 16 = 1,428 float partials: it receives 15 x 1,428 x 4 B (at 4 B per cycle,
    with the sync and the exchange's fixed cycles) and sums 16 partials per output with
    ``popsparse.md`` 3.6's ReduceAdd: ``6 x (32 + (3 x 16 + 7) x ceil(1428 / 4 / 6))``."""
    plan = dense._plan("half", 16384)
    target = poplar.IPUModel("bow").create_target()
    exchange, reduce = dense.stage2_terms(plan)
    fixed = target.max_ipu_sync_delay + target.exchange_fixed_cycles
    assert exchange == fixed + 15 * 1428 * 4 // 4
    assert reduce == target.compute_set_launch_cycles + 6 * (32 + (3 * 16 + 7) * 60)
    assert plan.serial * (exchange + reduce) == plan.reduce_cycles
