"""The host side alone: the repeat sums (exactly np.add.at's, in order), all-or-nothing
read-modify-write, SGD and SGD + GA updates on both host paths (compiled and NumPy) against
np.add.at bit for bit, the optimizer specs against their formulas in NumPy (both paths, and
the paths against each other bit for bit), the TOKEN and
ENCODING layouts (the spec's examples, and round trips), and the specs' bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tremula import embedding
from tremula.embedding import kernels
from tremula.embedding.partition import Layout
from tremula.embedding.table import HostTable
from tremula.errors import ApplicationRuntimeError, EmbeddingError
from tremula.libs import jit

RNG = np.random.default_rng(3)


@pytest.mark.parametrize(
    "make",
    [
        lambda n: RNG.integers(0, 10 * n, n),  # mostly distinct
        lambda n: (RNG.zipf(1.3, n) - 1) % 1000,  # a few rows repeated thousands of times
        lambda n: RNG.integers(0, 40, n),  # every row about n / 40 times
        lambda n: np.zeros(n, np.int64),  # one row
    ],
    ids=["distinct", "zipf", "uniform-small", "one-row"],
)
def test_segment_sums_equal_add_at_bit_for_bit(make):
    n, e = 5000, 7
    idx = make(n).astype(np.int32)
    grads = RNG.standard_normal((n, e)).astype(np.float32)
    result = kernels.segment_sum(idx, grads)
    rows, sums = result.rows, result.sums()
    acc = np.zeros((int(idx.max()) + 1, e), np.float32)
    np.add.at(acc, idx, grads)
    assert sorted(rows.tolist()) == sorted(set(idx.tolist()))
    np.testing.assert_array_equal(sums, acc[rows])


def test_segment_sums_of_nothing():
    result = kernels.segment_sum(np.zeros(0, np.int32), np.zeros((0, 3), np.float32))
    assert result.rows.shape == (0,) and result.sums().shape == (0, 3)


@pytest.mark.parametrize("rows", [3 * kernels.CHUNK, 40 * kernels.CHUNK])
def test_read_modify_write_restores_the_chunks_written_when_a_step_fails(rows):
    """A few chunks, or many shared between threads (the last one fails)."""
    table = RNG.standard_normal((rows + 10, 2)).astype(np.float32)
    before = table.copy()
    order = RNG.permutation(table.shape[0])[:rows]
    last = (rows - 1) // kernels.CHUNK * kernels.CHUNK

    def step(old, new, chunk):
        if chunk.start == last:
            raise ValueError("last chunk")
        new[...] = old + 1
        return new

    with pytest.raises(ValueError, match="last chunk"):
        kernels.read_modify_write(table, order, step)
    np.testing.assert_array_equal(table, before)

    def add_one(old, new, chunk):
        new[...] = old + 1
        return new

    kernels.read_modify_write(table, order, add_one)
    before[order] += 1
    np.testing.assert_array_equal(table, before)


MAKERS = {
    "distinct": lambda n: RNG.integers(0, 10 * n, n),
    "zipf": lambda n: (RNG.zipf(1.3, n) - 1) % 1000,
    "uniform-small": lambda n: RNG.integers(0, 40, n),
    "one-row": lambda n: np.zeros(n, np.int64),
}


def _sgd_reference(table, steps, lr, factor):
    """SGD (+ GA) in NumPy: each step's gradients summed per row by ``np.add.at`` into
    zeros (order of occurrence), a window's step sums summed in step order, then
    ``row + (-lr) * sum`` for the rows the window touched."""
    table, window, touched = table.copy(), np.zeros_like(table), np.zeros(len(table), bool)
    for k, (idx, grads) in enumerate(steps, start=1):
        step = np.zeros_like(table)
        np.add.at(step, idx, grads)
        window += step
        touched[idx] = True
        if k % factor == 0:
            table[touched] = table[touched] + np.float32(-lr) * window[touched]
            window[...], touched[...] = 0, False
    return table


@pytest.mark.parametrize("factor", [1, 3])
@pytest.mark.parametrize("make", MAKERS.values(), ids=MAKERS.keys())
def test_sgd_updates_equal_the_add_at_reference_bit_for_bit(make, factor, host_path):
    n, e, lr = 3000, 5, 0.375
    table = RNG.standard_normal((10 * n, e)).astype(np.float32)
    steps = [
        (make(n).astype(np.int32), RNG.standard_normal((n, e)).astype(np.float32))
        for _ in range(2 * factor)
    ]
    spec = embedding.HostEmbeddingSGDGAOptimizerSpec(lr, accumulation_factor=factor)
    host = _apply(spec, table, steps)
    assert (host._fused is not None) == (host_path == "compiled")
    assert host.steps == 2
    np.testing.assert_array_equal(host.array, _sgd_reference(table, steps, lr, factor))


def test_a_discarded_window_leaves_nothing_behind(host_path):
    t, e = 50, 3
    table = RNG.standard_normal((t, e)).astype(np.float32)
    steps = _steps(t, e, count=5, n=40)
    host = _apply(
        embedding.HostEmbeddingSGDGAOptimizerSpec(0.5, accumulation_factor=3), table, steps[:2]
    )
    host.discard_pending()
    for idx, grads in steps[2:]:
        host.update(idx, grads)
    np.testing.assert_array_equal(host.array, _sgd_reference(table, steps[2:], 0.5, 3))


def test_an_update_with_an_index_out_of_range_writes_nothing(host_path):
    t, e = 20, 4
    table = RNG.standard_normal((t, e)).astype(np.float32)
    host = HostTable("t", table.copy(), embedding.HostEmbeddingOptimizerSpec(0.5))
    grads = RNG.standard_normal((4, e)).astype(np.float32)
    with pytest.raises(ApplicationRuntimeError, match=r"'t': update index 20 .*position 2"):
        host.update(np.array([3, 3, 20, 1], np.int32), grads)
    np.testing.assert_array_equal(host.array, table)
    idx = np.array([3, 3, 19, 1], np.int32)  # the next update is whole
    host.update(idx, grads)
    np.testing.assert_array_equal(host.array, _sgd_reference(table, [(idx, grads)], 0.5, 1))


def test_only_the_specs_own_rules_take_the_compiled_path():
    class Own(embedding.HostEmbeddingAdamOptimizerSpec):
        def apply(self, old, sums, new, state, step):
            return super().apply(old, sums, new, state, step)

    assert embedding.HostEmbeddingOptimizerSpec(0.1).compiled_rule == "sgd"
    assert embedding.HostEmbeddingSGDGAOptimizerSpec(0.1, 2).compiled_rule == "sgd"
    assert embedding.HostEmbeddingAdagradOptimizerSpec(0.1).compiled_rule == "adagrad"
    assert embedding.HostEmbeddingAdamOptimizerSpec(0.1).compiled_rule == "adam"
    assert Own(0.1).compiled_rule is None


@pytest.mark.parametrize("e", [5, 64])
@pytest.mark.parametrize(
    "spec",
    [
        embedding.HostEmbeddingAdagradOptimizerSpec(0.1, initial_accumulator_value=0.5),
        embedding.HostEmbeddingAdamOptimizerSpec(0.01, beta1=0.8, beta2=0.9),
    ],
    ids=["adagrad", "adam"],
)
def test_stateful_specs_give_the_same_bits_on_both_paths(spec, e):
    """The compiled Adagrad and Adam (``fused.py``) against the NumPy rules (``apply``):
    the table and the state equal bit for bit (e = 64: NumPy's pairwise row means)."""
    if not jit.available():
        pytest.skip("numba (the fast extra) is not installed")
    t = 300
    table = RNG.standard_normal((t, e)).astype(np.float32)
    steps = [
        (make(400).astype(np.int32) % t, RNG.standard_normal((400, e)).astype(np.float32))
        for make in MAKERS.values()
    ]
    hosts = {}
    for compiled in (True, False):
        previous = jit.set_enabled(compiled)
        try:
            hosts[compiled] = _apply(spec, table, steps)
        finally:
            jit.set_enabled(previous)
    assert hosts[True]._fused is not None and hosts[False]._fused is None
    np.testing.assert_array_equal(hosts[True].array, hosts[False].array)
    for k, state in hosts[False].state.items():
        np.testing.assert_array_equal(hosts[True].state[k], state)
    assert hosts[True].steps == hosts[False].steps == len(steps)


def _apply(spec, table, steps):
    host = HostTable("t", table.copy(), spec)
    for idx, grads in steps:
        host.update(idx, grads)
    return host


def _steps(t, e, count=3, n=9):
    return [
        (RNG.integers(0, t, n).astype(np.int32), RNG.standard_normal((n, e)).astype(np.float32))
        for _ in range(count)
    ]


def test_row_wise_adagrad_matches_its_formula(host_path):
    t, e = 10, 4
    table = RNG.standard_normal((t, e)).astype(np.float32)
    spec = embedding.HostEmbeddingAdagradOptimizerSpec(0.1, initial_accumulator_value=0.5)
    steps = _steps(t, e)
    host = _apply(spec, table, steps)
    w, a = table.astype(np.float64), np.full(t, 0.5)
    for idx, grads in steps:
        g = np.zeros((t, e))
        np.add.at(g, idx, grads.astype(np.float64))
        rows = np.unique(idx)
        a[rows] += np.mean(g[rows] ** 2, axis=1)
        w[rows] -= 0.1 * g[rows] / (np.sqrt(a[rows])[:, None] + 1e-8)
    np.testing.assert_allclose(host.array, w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(host.state["accumulator"], a, rtol=1e-5)


def test_lazy_adam_matches_its_formula(host_path):
    t, e = 10, 4
    table = RNG.standard_normal((t, e)).astype(np.float32)
    spec = embedding.HostEmbeddingAdamOptimizerSpec(0.01, beta1=0.8, beta2=0.9)
    steps = _steps(t, e, count=4)
    host = _apply(spec, table, steps)
    w, m, v = table.astype(np.float64), np.zeros((t, e)), np.zeros((t, e))
    for k, (idx, grads) in enumerate(steps, start=1):
        g = np.zeros((t, e))
        np.add.at(g, idx, grads.astype(np.float64))
        r = np.unique(idx)
        m[r] = 0.8 * m[r] + 0.2 * g[r]
        v[r] = 0.9 * v[r] + 0.1 * g[r] ** 2
        w[r] -= 0.01 * (m[r] / (1 - 0.8**k)) / (np.sqrt(v[r] / (1 - 0.9**k)) + 1e-8)
    np.testing.assert_allclose(host.array, w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(host.state["m"], m, rtol=1e-5, atol=1e-7)
    assert host.steps == 4
    untouched = np.setdiff1d(np.arange(t), np.concatenate([i for i, _ in steps]))
    np.testing.assert_array_equal(host.array[untouched], table[untouched])  # lazy


def test_token_and_encoding_layouts_follow_the_seed():
    table = np.arange(13 * 6, dtype=np.float32).reshape(13, 6)
    tok = Layout("TOKEN", 13, 6, 4)
    assert (tok.rows, tok.width, tok.junk) == (4, 6, 4)
    np.testing.assert_array_equal(tok.shard(table, 0)[:4], table[[0, 4, 8, 12]])
    np.testing.assert_array_equal(tok.shard(table, 1)[:3], table[[1, 5, 9]])
    assert not tok.shard(table, 1)[3:].any()  # the padding slot and the junk slot
    enc = Layout("ENCODING", 13, 6, 4)
    assert (enc.rows, enc.width) == (13, 2)
    np.testing.assert_array_equal(enc.shard(table, 2)[:13], table[:, 4:6])
    assert not enc.shard(table, 3).any()  # columns 6-7: padding only


@settings(max_examples=60, deadline=None)
@given(
    t=st.integers(1, 30),
    e=st.integers(1, 9),
    R=st.sampled_from([1, 2, 3, 4]),
    strategy=st.sampled_from(["TOKEN", "ENCODING"]),
)
def test_shards_reassemble_the_table(t, e, R, strategy):
    layout = Layout(strategy, t, e, R)
    if strategy == "ENCODING" and e < R:
        with pytest.raises(EmbeddingError):
            layout.check("t")
        return
    table = np.arange(t * e, dtype=np.float32).reshape(t, e) + 1
    back = np.zeros_like(table)
    for r in range(R):
        shard = layout.shard(table, r)
        assert shard.shape == (layout.rows + 1, layout.width)
        layout.unshard(shard, r, back)
    np.testing.assert_array_equal(back, table)
    assert sum(int(np.count_nonzero(layout.shard(table, r))) for r in range(R)) == t * e


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: embedding.HostEmbeddingOptimizerSpec(-1), "learning_rate must be a finite"),
        (lambda: embedding.HostEmbeddingOptimizerSpec("x"), "learning_rate must be a number"),
        (
            lambda: embedding.HostEmbeddingOptimizerSpec(0.1, optimizer_name="Adam"),
            "optimizer_name must be",
        ),
        (lambda: embedding.HostEmbeddingSGDGAOptimizerSpec(0.1, 0), "accumulation_factor"),
        (lambda: embedding.HostEmbeddingAdamOptimizerSpec(0.1, beta1=1.0), "beta1 must be in"),
        (lambda: embedding.HostEmbeddingAdagradOptimizerSpec(0.1, eps=0), "eps must be"),
    ],
)
def test_bad_optimizer_specs(make, message):
    with pytest.raises(EmbeddingError, match=message):
        make()
