"""Remote-buffer embeddings: the table split between replicas by TOKEN or ENCODING, looked
up and trained on the device with remote-buffer copies and gcl collectives. Against NumPy
(exactly: the repeats and replicas are summed in np.add.at's order), with tables whose
sizes the replica counts do not divide, gradient accumulation, the copy back to the host,
refused indices, and what the profile shows."""

from __future__ import annotations

import numpy as np
import pytest
from tremula_tests_embedding_programs import build, gradient_sum, reference_step

import popxl
from tremula import embedding
from tremula.errors import ApplicationRuntimeError, EmbeddingError
from tremula.profile import cli as profile_cli

RNG = np.random.default_rng(7)


def _embedding(strategy, t=13, e=6, spec=None, name="table"):
    init = RNG.standard_normal((t, e)).astype(np.float32)
    spec = spec or embedding.HostEmbeddingOptimizerSpec(0.25)
    emb = embedding.create_host_embedding(
        name, [t, e], popxl.float32, partition_strategy=strategy, optimizer_spec=spec,
        initializer=init, remote_buffer=True,
    )  # fmt: skip
    return emb, init


def _step_data(R, n, t, e):
    shape = (R, n) if R > 1 else (n,)
    idx = RNG.integers(-2, t + 2, shape).astype(np.int32)
    idx.reshape(-1)[1] = idx.reshape(-1)[-1]  # a repeat across replicas
    return idx, RNG.standard_normal((*shape, e)).astype(np.float32)


@pytest.mark.parametrize("R", [1, 2, 4])
@pytest.mark.parametrize("strategy", ["TOKEN", "ENCODING"])
def test_lookups_and_sgd_match_numpy_exactly(strategy, R):
    emb, table = _embedding(strategy)  # 13 tokens, encoding 6: neither divides by 4
    prog = build(emb, (5,), replicas=R)
    with prog.session, emb.register(prog.session):
        for _ in range(3):
            idx, grads = _step_data(R, 5, 13, 6)
            rows = prog.run(idx, grads)
            want_rows, table = reference_step(table, idx, grads, 0.25)
            np.testing.assert_array_equal(rows, want_rows)
            np.testing.assert_array_equal(emb.get_embedding_tensor(), table)
    np.testing.assert_array_equal(emb.get_embedding_tensor(), table)
    prog.check_profiles()


@pytest.mark.parametrize("strategy", ["TOKEN", "ENCODING"])
def test_gradient_accumulation_on_the_device(strategy):
    spec = embedding.HostEmbeddingSGDGAOptimizerSpec(0.5, accumulation_factor=2)
    emb, table = _embedding(strategy, spec=spec)
    prog = build(emb, (4,), replicas=2)
    acc = np.zeros_like(table)
    with prog.session, emb.register(prog.session):
        for step in range(4):
            idx, grads = _step_data(2, 4, 13, 6)
            rows = prog.run(idx, grads)
            np.testing.assert_array_equal(rows, table[np.clip(idx, 0, 12)])
            acc = acc + gradient_sum(table, idx, grads)
            if step % 2 == 1:
                table = table + np.float32(-0.5) * acc
                acc[...] = 0
            np.testing.assert_array_equal(emb.get_embedding_tensor(), table)


def test_the_host_table_is_loaded_at_registration_and_gathered_back_after_runs():
    emb, table = _embedding("TOKEN")
    prog = build(emb, (3,), replicas=2)
    idx, grads = _step_data(2, 3, 13, 6)
    with prog.session:
        with emb.register(prog.session):
            prog.run(idx, grads)
        _, table = reference_step(table, idx, grads, 0.25)
        np.testing.assert_array_equal(emb.get_embedding_tensor(), table)  # synced on exit
        emb.get_embedding_tensor()[...] = 1.0  # the host table changes between registrations
        with emb.register(prog.session):
            rows = prog.run(idx, grads)
    np.testing.assert_array_equal(rows, np.ones((2, 3, 6), np.float32))


def test_unclipped_indices_out_of_range_fail_the_run_on_the_device():
    emb, table = _embedding("ENCODING")
    prog = build(emb, (3,), replicas=2, clip_indices=False)
    with prog.session, emb.register(prog.session):
        bad = np.array([[0, 1, 2], [3, -1, 4]], np.int32)
        with pytest.raises(
            ApplicationRuntimeError, match=r"'table': index -1 \(replica 1, position 1"
        ):
            prog.run(bad, np.zeros((2, 3, 6), np.float32))
    np.testing.assert_array_equal(emb.get_embedding_tensor(), table)


def test_an_encoding_the_strategy_cannot_split_is_refused():
    emb, _ = _embedding("ENCODING", e=3)
    with pytest.raises(EmbeddingError, match="cannot split an encoding of 3 between 4 replicas"):
        build(emb, (2,), replicas=4)


def test_the_profile_shows_remote_reads_writes_and_collectives(tmp_path, capsys):
    emb, _ = _embedding("TOKEN")
    prog = build(emb, (4,), replicas=2)
    with prog.session, emb.register(prog.session):
        prog.run(*_step_data(2, 4, 13, 6))
    prog.session.engine.write_report(str(tmp_path))
    assert profile_cli.main(["validate", str(tmp_path)]) == 0  # `tremula profile validate`
    steps = prog.session.engine.get_execution_profile()["simulation"]["steps"]
    names = " ".join(f"{s['type']}:{s.get('name', '')}" for s in steps)
    for part in ("StreamCopy:table/lookup/RemoteLoad", "table/lookup/allGatherIndices",
                 "table/lookup/reduceScatter", "StreamCopy:table/update/RemoteStore",
                 "GlobalExchange"):  # fmt: skip
        assert part in names, part
    assert emb.statistics()["lookups"] == 0  # the host is not involved


def test_optimizers_the_device_cannot_apply_are_refused():
    spec = embedding.HostEmbeddingAdamOptimizerSpec(0.1)
    with pytest.raises(EmbeddingError, match="Adam optimizer is applied on the host"):
        embedding.create_host_embedding(
            "t", [4, 4], popxl.float32, optimizer_spec=spec, remote_buffer=True
        )


def test_the_global_option_selects_remote_buffers():
    try:
        embedding.enable_remote_buffer_embedding(True)
        emb = embedding.create_host_embedding("t", [4, 4], popxl.float32)
        assert emb.remote_buffer
        assert not embedding.create_host_embedding(
            "u", [4, 4], popxl.float32, remote_buffer=False
        ).remote_buffer
    finally:
        embedding.enable_remote_buffer_embedding(False)
    assert not embedding.create_host_embedding("t", [4, 4], popxl.float32).remote_buffer


def test_float16_remote_tables():
    init = RNG.standard_normal((9, 4)).astype(np.float16)
    emb = embedding.create_host_embedding(
        "half", [9, 4], popxl.float16, optimizer_spec=embedding.HostEmbeddingOptimizerSpec(0.5),
        initializer=init, remote_buffer=True,
    )  # fmt: skip
    prog = build(emb, (3,), replicas=2)
    idx = np.array([[0, 8, 8], [3, 8, 1]], np.int32)
    grads = (RNG.integers(-4, 5, (2, 3, 4)) / 4).astype(np.float16)  # sums exact in half
    with emb.register(prog.session), prog.session:  # registered before the session attaches
        rows = prog.run(idx, grads)
    np.testing.assert_array_equal(rows, init[idx])
    want = (init.astype(np.float32) - 0.5 * gradient_sum(init, idx, grads)).astype(np.float16)
    np.testing.assert_array_equal(emb.get_embedding_tensor(), want)
