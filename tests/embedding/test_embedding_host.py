"""Host embeddings in host mode, run through PopXL sessions: lookups and SGD / SGD+GA
updates (repeats and replicas summed) against NumPy, on both host paths (``host_path``:
compiled and NumPy), clamping and refused indices, deduplication, inference-only embeddings,
updates that autodiff must not prune, float16, several lookups, atomic updates and the host
exchanges in the profile."""

from __future__ import annotations

import numpy as np
import pytest
from tremula_tests_embedding_programs import build, dyadic, gradient_sum, reference_step

import popxl
from tremula import embedding
from tremula.errors import ApplicationRuntimeError

RNG = np.random.default_rng(12)


def _embedding(t=13, e=6, lr=0.25, dtype=popxl.float32, spec=None, **kw):
    init = RNG.standard_normal((t, e)).astype(dtype.as_numpy())
    if spec is None and lr is not None:
        spec = embedding.HostEmbeddingOptimizerSpec(lr)
    emb = embedding.create_host_embedding(
        "table", [t, e], dtype, optimizer_spec=spec, initializer=init, **kw
    )
    return emb, init


def _indices(R, shape, t, spread=2):
    full = (R, *shape) if R > 1 else shape
    return RNG.integers(-spread, t + spread, full).astype(np.int32)


@pytest.mark.parametrize("R", [1, 2, 4])
def test_lookups_and_sgd_updates_match_numpy_exactly(R, host_path):
    """Random (not dyadic) gradients: the sums follow np.add.at's order bit for bit."""
    emb, table = _embedding()
    prog = build(emb, (3, 4), replicas=R)
    with prog.session, emb.register(prog.session):
        for _ in range(3):  # each run: lookup (sees the previous updates), then update
            idx = _indices(R, (3, 4), 13)
            idx.reshape(-1)[:3] = idx.reshape(-1)[3]  # repeats within and across replicas
            grads = RNG.standard_normal((*idx.shape, 6)).astype(np.float32)
            rows = prog.run(idx, grads)
            want_rows, table = reference_step(table, idx, grads, 0.25)
            np.testing.assert_array_equal(rows, want_rows)
            np.testing.assert_array_equal(emb.get_embedding_tensor(), table)
    prog.check_profiles()


@pytest.mark.parametrize("shape", [(), (5,), (2, 3, 2)], ids=["scalar", "vector", "rank3"])
def test_indices_of_any_rank(shape):
    emb, table = _embedding(lr=None)
    prog = build(emb, shape, train=False)
    idx = _indices(1, shape, 13)
    with prog.session, emb.register(prog.session):
        rows = prog.run(idx)
    assert rows.shape == (*shape, 6)
    np.testing.assert_array_equal(rows, table[np.clip(idx, 0, 12)])


def test_inference_only_embedding_gets_no_update_from_autodiff():
    emb, table = _embedding(lr=None)
    prog = build(emb, (4,))
    assert not any(op.type == "HostEmbeddingUpdate" for g in prog.session.ir.graphs for op in g.ops)
    with prog.session, emb.register(prog.session):
        prog.run(_indices(1, (4,), 13), RNG.standard_normal((4, 6)).astype(np.float32))
    np.testing.assert_array_equal(emb.get_embedding_tensor(), table)
    zero, _ = _embedding(lr=0.0)  # a learning rate of 0 is inference only too
    assert not zero.trainable


def test_the_update_is_not_pruned_when_grads_required_names_nothing(host_path):
    emb, table = _embedding()
    prog = build(emb, (4,), grads_required="none")
    idx = np.array([1, 1, 20, -3], np.int32)
    grads = dyadic(RNG, (4, 6))
    with prog.session, emb.register(prog.session):
        prog.run(idx, grads)
    np.testing.assert_array_equal(
        emb.get_embedding_tensor(), reference_step(table, idx, grads, 0.25)[1]
    )


def test_two_lookups_of_one_table_both_update_it(host_path):
    emb, table = _embedding()
    prog = build(emb, (4,), lookups=2)
    idx, grads = np.array([0, 3, 3, 7], np.int32), dyadic(RNG, (4, 6))
    with prog.session, emb.register(prog.session):
        rows = prog.run(idx, grads)
    np.testing.assert_array_equal(rows, 2 * table[idx])
    want = table - np.float32(0.25) * gradient_sum(table, idx, grads)  # once per lookup
    want = want - np.float32(0.25) * gradient_sum(table, idx, grads)
    np.testing.assert_array_equal(emb.get_embedding_tensor(), want)


@pytest.mark.parametrize("R", [1, 2])
def test_gradient_accumulation_applies_once_per_window(R, host_path):
    spec = embedding.HostEmbeddingSGDGAOptimizerSpec(0.5, accumulation_factor=3)
    emb, table = _embedding(spec=spec)
    assert spec.name == "SGD+GA"
    prog = build(emb, (5,), replicas=R)
    start, acc = table.copy(), np.zeros_like(table)
    with prog.session, emb.register(prog.session):
        for step in range(6):
            idx = _indices(R, (5,), 13)
            grads = RNG.standard_normal((*idx.shape, 6)).astype(np.float32)
            rows = prog.run(idx, grads)
            np.testing.assert_array_equal(rows, start[np.clip(idx, 0, 12)])  # no update yet
            acc = acc + gradient_sum(table, idx, grads)  # the steps' sums, in step order
            if step % 3 == 2:
                start = start + np.float32(-0.5) * acc
                acc[...] = 0
            np.testing.assert_array_equal(emb.get_embedding_tensor(), start)


def test_float16_tables():
    emb, table = _embedding(dtype=popxl.float16)
    prog = build(emb, (6,))
    idx, grads = np.array([0, 2, 2, 5, 12, 13], np.int32), dyadic(RNG, (6, 6), np.float16)
    with prog.session, emb.register(prog.session):
        rows = prog.run(idx, grads)
    assert rows.dtype == np.float16
    np.testing.assert_array_equal(rows, table[np.clip(idx, 0, 12)])
    want = (table.astype(np.float32) - 0.25 * gradient_sum(table, idx, grads)).astype(np.float16)
    np.testing.assert_array_equal(emb.get_embedding_tensor(), want)


def test_unclipped_indices_out_of_range_fail_the_run_naming_the_index():
    emb, table = _embedding()
    prog = build(emb, (4,), clip_indices=False)
    grads = dyadic(RNG, (4, 6))
    with prog.session, emb.register(prog.session):
        ok = np.array([0, 12, 12, 3], np.int32)
        np.testing.assert_array_equal(prog.run(ok, grads), table[ok])
        after = emb.get_embedding_tensor().copy()
        with pytest.raises(ApplicationRuntimeError, match=r"'table': lookup index 13 .*position 2"):
            prog.run(np.array([0, 1, 13, 2], np.int32), grads)
    np.testing.assert_array_equal(emb.get_embedding_tensor(), after)


@pytest.mark.parametrize("R", [1, 2])
def test_deduplicated_lookups_give_the_same_rows_with_fewer_bytes(R, host_path):
    results = {}
    init = RNG.standard_normal((12, 8)).astype(np.float32)  # True: capacity min(16, 12)
    for dedup in (False, True, 6):
        spec = embedding.HostEmbeddingOptimizerSpec(0.25)
        emb = embedding.create_host_embedding(
            "table", [12, 8], "float32", optimizer_spec=spec, initializer=init
        )
        table = init
        prog = build(emb, (16,), replicas=R, deduplicate=dedup)
        rng = np.random.default_rng(5)
        with prog.session, emb.register(prog.session):
            for _ in range(2):  # dyadic gradients: the device's partial sums are exact
                idx = rng.integers(0, 6, (R, 16) if R > 1 else (16,)).astype(np.int32)
                grads = dyadic(rng, (*idx.shape, 8))
                rows = prog.run(idx, grads)
                want_rows, table = reference_step(table, idx, grads, 0.25)
                np.testing.assert_array_equal(rows, want_rows)
                np.testing.assert_array_equal(emb.get_embedding_tensor(), table)
        results[dedup] = (emb.get_embedding_tensor().copy(), _host_bytes(prog))
    np.testing.assert_array_equal(results[True][0], results[False][0])
    np.testing.assert_array_equal(results[6][0], results[False][0])
    assert results[6][1] < results[True][1] < results[False][1]


def _host_bytes(prog) -> int:
    """Bytes the embedding's host calls moved in the graph profile's host exchanges."""
    profile = prog.session.engine.get_graph_profile()
    steps = [s for s in profile["programs"] if "HostCall" in str(s.get("name", ""))]
    assert steps, "no host-call programs in the profile"
    x = profile["hostExchanges"]
    total = 0
    for s in steps:
        k = s["exchange"]
        total += sum(x["bytesSentByTile"][k]) + sum(x["bytesReceivedByTile"][k])
    return total


def test_a_deduplicate_capacity_too_small_fails_the_run_naming_the_count():
    emb, table = _embedding(t=40, e=8)
    prog = build(emb, (10,), deduplicate=3)
    idx = np.array([1, 2, 3, 4, 1, 1, 1, 1, 1, 1], np.int32)
    refused = pytest.raises(ApplicationRuntimeError, match=r"4 distinct indices .* capacity 3")
    with prog.session, emb.register(prog.session), refused:
        prog.run(idx, dyadic(RNG, (10, 8)))
    np.testing.assert_array_equal(emb.get_embedding_tensor(), table)


class _Failing(embedding.HostEmbeddingOptimizerSpec):
    """SGD that fails on its second chunk of rows."""

    def apply(self, old, sums, new, state, step):
        if self.calls():
            raise RuntimeError("callback failed")
        return super().apply(old, sums, new, state, step)

    def calls(self, _count=[0]):  # noqa: B006 (a counter shared by the calls)
        _count[0] += 1
        return _count[0] == 2


def test_an_update_that_fails_part_way_leaves_the_table_as_it_was():
    t = 5000  # more distinct rows than one read-modify-write chunk
    emb, table = _embedding(t=t, e=4, spec=_Failing(0.5))
    prog = build(emb, (3000,))
    idx = np.arange(3000, dtype=np.int32)
    failed = pytest.raises(RuntimeError, match="callback failed")
    with prog.session, emb.register(prog.session), failed:
        prog.run(idx, dyadic(RNG, (3000, 4)))
    np.testing.assert_array_equal(emb.get_embedding_tensor(), table)


def test_the_profile_shows_the_host_exchanges_and_the_host_time_is_reported_apart():
    emb, _ = _embedding(t=100, e=16)
    prog = build(emb, (32,))
    with prog.session, emb.register(prog.session):
        prog.run(_indices(1, (32,), 100), dyadic(RNG, (32, 16)))
    prog.check_profiles()
    profile = prog.session.engine.get_graph_profile()
    names = [str(p.get("name", "")) for p in profile["programs"]]
    assert any(n.startswith("table/lookup") and "HostCall" in n for n in names)
    assert any(n.startswith("table/update") and "HostCall" in n for n in names)
    assert _host_bytes(prog) == 32 * 4 + 32 * 16 * 4 + 32 * 4 + 32 * 16 * 4
    stats = emb.statistics()
    assert stats["lookups"] == 1 and stats["lookup_rows"] == 32 and stats["updates"] == 1
    assert stats["lookup_seconds"] > 0 and stats["update_seconds"] > 0
