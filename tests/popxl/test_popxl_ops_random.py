"""Random ops (popxl/ops/random.py) through a Session: distributions, determinism, seeds."""

from __future__ import annotations

import numpy as np
import pytest
import tremula_tests_evaluator as evaluator
from tremula_tests_evaluator import run

import popxl
import popxl.ops as ops
from tremula.popxl.random_seed import create_seeds

SEED = np.array([1234, 5678], np.uint32)


def _run(build, *arrays, device="cpu"):
    """Run the graph twice; returns the outputs of both runs."""
    ir, feeds, outs = evaluator.graph(build, *arrays)
    with popxl.Session(ir, device) as session:
        first = session.run(feeds)
        second = session.run(feeds)
    return [first[s] for s in outs], [second[s] for s in outs]


def test_random_uniform_and_normal():
    def build(seed):
        u = ops.random_uniform(seed, (64, 64), -2.0, 3.0)
        n = ops.random_normal(seed, (64, 64), 1.0, 2.0)
        h = ops.random_uniform(seed, (100,), dtype=popxl.float16)
        return u, n, h

    (u, n, h), again = _run(build, SEED, device="ipu_model")
    assert u.min() >= -2.0 and u.max() <= 3.0 and abs(u.mean() - 0.5) < 0.1
    assert abs(n.mean() - 1.0) < 0.1 and abs(n.std() - 2.0) < 0.1
    assert h.dtype == np.float16 and h.min() >= 0 and h.max() <= 1
    for a, b in zip((u, n, h), again):
        np.testing.assert_array_equal(a, b)  # the same seed gives the same numbers
    (u2, _, _), _ = _run(build, SEED + 1)
    assert not np.array_equal(u, u2)


def test_dropout():
    x = np.ones((50, 40), np.float32)
    (y, z, s), _ = _run(
        lambda t, seed: (
            ops.dropout(t, seed, 0.25),
            ops.dropout(t, seed, 0.0),
            ops.shaped_dropout(t, seed, (50, 1), 0.5),
        ),
        x,
        SEED,
    )
    assert set(np.unique(y)) <= {0.0, np.float32(1 / 0.75)}
    assert abs((y == 0).mean() - 0.25) < 0.05
    np.testing.assert_array_equal(z, x)
    assert set(np.unique(s)) <= {0.0, 2.0}
    assert np.all(s == s[:, :1])  # one mask value per row, broadcast along it
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        run(lambda t, seed: ops.dropout(t, seed, 1.0), x, SEED)
    with pytest.raises(ValueError, match="uint32 of shape"):
        run(lambda t, seed: ops.dropout(t, seed, 0.5), x, SEED.astype(np.int32))
    with pytest.raises(ValueError, match="does not broadcast"):
        run(lambda t, seed: ops.shaped_dropout(t, seed, (3,), 0.5), x, SEED)


def test_split_random_seed():
    def build(seed):
        s = ops.split_random_seed(seed, 3)
        return (*s, ops.random_uniform(s[0], (8,)), ops.random_uniform(s[1], (8,)))

    (a, b, c, u0, u1), again = _run(build, SEED)
    assert a.dtype == np.uint32 and a.shape == (2,)
    assert len({tuple(a), tuple(b), tuple(c), tuple(SEED)}) == 4
    assert not np.array_equal(u0, u1)
    np.testing.assert_array_equal(a, again[0])


def test_create_seeds():
    assert create_seeds(1).shape == (2,) and create_seeds(1).dtype == np.uint32
    np.testing.assert_array_equal(create_seeds(1), create_seeds(1))
    s = create_seeds(7, batches_per_step=3, replicas=2)
    assert s.shape == (3, 2, 2)
    np.testing.assert_array_equal(create_seeds(7, offset=1), create_seeds(8))  # seed + offset
    hi, lo = create_seeds(3).astype(np.uint64)  # the 64-bit draw of default_rng(3), split
    want = np.random.default_rng(3).integers(0, 2**64 - 1, size=[1, 1, 1], dtype=np.uint64,
                                             endpoint=True).item()  # fmt: skip
    assert (int(hi) << 32) | int(lo) == want
    with pytest.raises(ValueError, match="positive integers"):
        create_seeds(1, replicas=0)
