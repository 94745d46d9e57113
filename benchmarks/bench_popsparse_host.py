"""popsparse host side: planning and partitioning time of a dynamic sparse fully-connected
layer (X = Y = 4096, Z = 64, density 1/16 by default) on the Mk2 target, with the
partitioning time as a ratio to ``scipy.sparse.csr_matrix`` construction of the same pattern
(from COO triplets) in the same run.

Planning is timed without a cache (targets: under 0.5 s); partitioning takes a new random
pattern each repeat and reports the best (target: under 0.5 s); decoding (buckets back to
COO) is shown for reference.

    python benchmarks/bench_popsparse_host.py [--size 4096] [--batch 64] [--density 0.0625]
        [--blocks 1,4,8,16] [--type half] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

from tremula import target as targets
from tremula.libs.popsparse import COOMatrix, dynamic

PASSES = {"fwd": {}, "all": {"doGradAPass": True, "doGradWPass": True}}


def _best(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _pattern(rng: np.random.Generator, size: int, block: int, density: float) -> COOMatrix:
    grid = size // block
    idx = rng.choice(grid * grid, size=round(density * grid * grid), replace=False)
    values = rng.standard_normal(idx.size * block * block).astype(np.float32)
    return COOMatrix(values, idx // grid * block, idx % grid * block, (block, block), size, size)


def bench(
    size: int, batch: int, density: float, block: int, dtype: str, passes: str, repeat: int
) -> None:
    target = targets.ipu2()
    opts = PASSES[passes]
    sparsity = dynamic.SparsityParams(block_dimensions=(block, block))
    params = dynamic.FullyConnectedParams.create_with_nz_ratio(
        sparsity, density, batch, 1, size, size
    )
    plan_time = _best(lambda: dynamic.get_plan(target, dtype, params, opts), repeat)
    part = dynamic.Partitioner(params, dtype, target, opts)
    rng = np.random.default_rng(0)
    part_time, ref_time, impl, m = float("inf"), float("inf"), None, None
    for _ in range(repeat):
        m = _pattern(rng, size, block, density)
        t0 = time.perf_counter()
        impl = part.create_sparsity_data_impl(m)
        part_time = min(part_time, time.perf_counter() - t0)
        rows = (m.row_indices[:, None, None] + np.arange(block)[None, :, None]).repeat(block, 2)
        cols = (m.column_indices[:, None, None] + np.arange(block)[None, None, :]).repeat(block, 1)
        t0 = time.perf_counter()
        sp.csr_matrix((m.nz_values, (rows.reshape(-1), cols.reshape(-1))), shape=(size, size))
        ref_time = min(ref_time, time.perf_counter() - t0)
    decode_time = _best(lambda: part.sparsity_data_impl_to_coo_matrix(impl), 1)
    p = part.plan
    print(
        f"{size}x{size} Z={batch} d={density:g} {block}x{block} {dtype} {passes:3s}: plan "
        f"{plan_time * 1e3:6.1f} ms ({p.partition.x}x{p.partition.y}x{p.partition.z} PNs, "
        f"~{p.cost.cycles} cycles), partition {part_time * 1e3:6.1f} ms, scipy csr "
        f"{ref_time * 1e3:6.1f} ms, ratio {part_time / ref_time:5.2f}x; decode "
        f"{decode_time * 1e3:6.1f} ms; {m.nz_values.size} non-zeros"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--density", type=float, default=1 / 16)
    parser.add_argument("--blocks", default="1,4,8,16")
    parser.add_argument("--type", default="half", choices=["half", "float"])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for block in (int(b) for b in args.blocks.split(",")):
        for passes in PASSES:
            bench(args.size, args.batch, args.density, block, args.type, passes, args.repeat)


if __name__ == "__main__":
    main()
