"""``CopyPlan``: large copies made of evenly stepping runs move as strided blocks (through a
buffer when source and destination overlap); others gather and scatter. Every case is
checked against the plain gather-then-scatter on random storage."""

from __future__ import annotations

import numpy as np
import pytest

from tremula import poplar
from tremula.engine.plan import CopyPlan, Gather

F = poplar.FLOAT


def _check(a: np.ndarray, b: np.ndarray, blocks: bool | None, replicas: int = 2) -> None:
    rng = np.random.default_rng(0)
    storage = {F: rng.standard_normal((replicas, int(max(a.max(), b.max())) + 8))}
    storage[F] = storage[F].astype(np.float32)
    want = storage[F].copy()
    want[:, b] = storage[F][:, a]  # read everything, then write
    plan = CopyPlan(Gather.of(F, a), Gather.of(F, b))
    for _ in range(2):  # views made on the first run are reused
        before = storage[F].copy()
        plan.run(storage, slice(None))
        np.testing.assert_array_equal(storage[F], want)
        storage[F][...] = before
    if blocks is not None:
        assert bool(plan._blocks) is blocks


def test_buckets_shifted_by_one_partition_move_as_blocks():
    # 64 buckets of 200 elements in one array; the copy rolls them by one (overlapping
    # source and destination: the buffer keeps the read-before-write order)
    buckets = np.arange(64 * 200).reshape(64, 200)
    _check(buckets.reshape(-1), np.roll(buckets, 1, axis=0).reshape(-1), True)


def test_disjoint_tensors_with_strided_runs():
    src = (np.arange(40)[:, None] * 300 + np.arange(150)).reshape(-1)  # rows of a wider matrix
    dst = 20000 + np.arange(src.size)
    _check(src, dst, True)
    _check(src[::-1].copy(), dst, False)  # reversed: runs of one element, gather and scatter


def test_small_copies_and_replica_subsets_gather():
    _check(np.arange(100), 500 + np.arange(100), False)
    a, b = np.arange(8192), 10000 + np.arange(8192)
    storage = {F: np.arange(3 * 20000, dtype=np.float32).reshape(3, 20000)}
    want = storage[F].copy()
    want[1, b] = want[1, a]
    CopyPlan(Gather.of(F, a), Gather.of(F, b)).run(storage, np.array([1]))
    np.testing.assert_array_equal(storage[F], want)


@pytest.mark.parametrize("seed", range(6))
def test_random_run_structures(seed):
    """Runs of random starts and lengths (overlapping or not), as blocks when they are long
    enough; a permuted destination always gathers and scatters."""
    rng = np.random.default_rng(seed)
    count, longest = (8, 4000) if seed < 3 else (30, 600)
    pieces = [rng.integers(0, 60000) + np.arange(rng.integers(50, longest)) for _ in range(count)]
    a = np.concatenate(pieces)
    b = rng.permutation(a.size).astype(np.int64) if seed % 2 else 70000 + np.arange(a.size)
    _check(a, b, None)
    _check(a, 30000 + np.arange(a.size), seed < 3 and a.size >= 8 * 1024)


def test_interleaved_progressions_move_as_few_blocks():
    """PopSparse's propagation shifts: buckets swapped in pairs (a Z shift over two
    partitions) and rolled within groups (a Y shift): one block per progression of runs
    instead of one per pair or group."""
    buckets = np.arange(96 * 128).reshape(48, 2, 128)  # 48 groups of 2 buckets
    swapped = buckets[:, ::-1].reshape(-1)
    _check(buckets.reshape(-1), swapped, True)
    _check(swapped, 20000 + np.arange(swapped.size), True)  # into another tensor
    plan = CopyPlan(Gather.of(F, swapped), Gather.of(F, 20000 + np.arange(swapped.size)))
    assert len(plan._plan()) == 2
    rows = np.arange(30 * 8 * 64).reshape(30, 8, 64)  # 30 groups of 8 buckets, rolled by one
    rolled = np.roll(rows, 1, axis=1).reshape(-1)
    _check(rows.reshape(-1), rolled, True)
    assert (
        len(CopyPlan(Gather.of(F, rolled), Gather.of(F, 40000 + np.arange(rolled.size)))._plan())
        == 2
    )


def test_repeated_destinations_keep_the_copy_order():
    """An element written twice keeps the last write, as the copy's order says."""
    a = np.arange(16384)
    b = np.concatenate([np.arange(8192), np.arange(8192)]) + 20000
    _check(a, b, None)


@pytest.mark.parametrize("direction", ["into", "out of"])
def test_a_tensor_into_and_out_of_chunk_major_order_is_one_strided_copy(direction):
    """gcl's work buffers: a flat tensor of G chunks copied into ``[blocks, G, L]`` (and
    back) is G blocks of ``blocks`` runs of L, one block repeated at even steps: one 4-D
    view pair, checked against the gather and scatter."""
    G, blocks, L = 4, 300, 16
    flat = np.arange(G * blocks * L)
    work = 100_000 + np.arange(G * blocks * L).reshape(blocks, G, L).transpose(1, 0, 2)
    a, b = (flat, work.reshape(-1)) if direction == "into" else (work.reshape(-1), flat)
    _check(a, b, True, replicas=3)
    plan = CopyPlan(Gather.of(F, a), Gather.of(F, b))
    storage = {F: np.zeros((3, 200_000), np.float32)}
    plan.run(storage, slice(None))
    assert len(plan._views[1]) == 1 and plan._views[1][0][0].shape == (3, G, blocks, L)
