"""Tables in files: a ``.npy`` path as the initializer (a memmap the updates write through
to), a memmap used in place, and save / load of the table with the optimizer state."""

from __future__ import annotations

import numpy as np
import pytest
from tremula_tests_embedding_programs import build, dyadic, reference_step

import popxl
from tremula import embedding
from tremula.errors import EmbeddingError

RNG = np.random.default_rng(4)


def test_a_npy_path_is_opened_as_a_memmap_and_updates_reach_the_file(tmp_path, host_path):
    path = tmp_path / "table.npy"
    table = RNG.standard_normal((50, 8)).astype(np.float32)
    np.save(path, table)
    spec = embedding.HostEmbeddingOptimizerSpec(0.5)
    emb = embedding.create_host_embedding(
        "big", [50, 8], popxl.float32, optimizer_spec=spec, initializer=str(path)
    )
    assert isinstance(emb.get_embedding_tensor(), np.memmap)
    prog = build(emb, (6,))
    idx, grads = np.array([1, 49, 49, 7, 60, 0], np.int32), dyadic(RNG, (6, 8))
    with prog.session, emb.register(prog.session):
        rows = prog.run(idx, grads)
    want_rows, want = reference_step(table, idx, grads, 0.5)
    np.testing.assert_array_equal(rows, want_rows)
    emb.get_embedding_tensor().flush()
    np.testing.assert_array_equal(np.load(path), want)


def test_an_inference_only_memmap_is_opened_read_only(tmp_path):
    path = tmp_path / "table.npy"
    np.save(path, np.ones((4, 2), np.float16))
    emb = embedding.create_host_embedding("t", [4, 2], popxl.float16, initializer=path)
    assert not emb.get_embedding_tensor().flags.writeable
    with pytest.raises(EmbeddingError, match=r"holds float16 \(4, 2\); expected float32"):
        embedding.create_host_embedding("t", [4, 2], popxl.float32, initializer=path)


def test_a_memmap_initializer_is_used_in_place(tmp_path):
    mm = np.lib.format.open_memmap(tmp_path / "m.npy", "w+", np.float32, (6, 3))
    emb = embedding.create_host_embedding("t", [6, 3], popxl.float32, initializer=mm)
    assert emb.get_embedding_tensor() is mm
    plain = np.zeros((6, 3), np.float32)
    assert (
        embedding.create_host_embedding(
            "u", [6, 3], "float32", initializer=plain
        ).get_embedding_tensor()
        is not plain
    )


def _trained(spec):
    emb = embedding.create_host_embedding(
        "t", [20, 4], popxl.float32, optimizer_spec=spec, initializer=RNG.standard_normal((20, 4))
    )
    for _ in range(3):
        emb.table.update(
            RNG.integers(0, 20, 8).astype(np.int32), RNG.standard_normal((8, 4)).astype(np.float32)
        )
    return emb


def test_save_and_load_the_table_and_the_optimizer_state(tmp_path):
    spec = embedding.HostEmbeddingAdamOptimizerSpec(0.01)
    a = _trained(spec)
    files = a.save(tmp_path / "emb")
    assert sorted(f.name for f in files) == ["emb.m.npy", "emb.npy", "emb.steps.npy", "emb.v.npy"]
    b = embedding.create_host_embedding("t", [20, 4], popxl.float32, optimizer_spec=spec)
    b.load(tmp_path / "emb.npy")
    np.testing.assert_array_equal(b.get_embedding_tensor(), a.get_embedding_tensor())
    for k in ("m", "v"):
        np.testing.assert_array_equal(b.table.state[k], a.table.state[k])
    assert b.table.steps == 3
    idx, grads = np.array([1, 2, 2], np.int32), RNG.standard_normal((3, 4)).astype(np.float32)
    a.table.update(idx, grads)
    b.table.update(idx, grads)  # the restored state continues exactly
    np.testing.assert_array_equal(b.get_embedding_tensor(), a.get_embedding_tensor())
    c = embedding.create_host_embedding("t", [20, 4], popxl.float32, optimizer_spec=spec)
    c.load(tmp_path / "emb", mmap=True)
    assert isinstance(c.get_embedding_tensor(), np.memmap)


def test_loading_a_table_of_another_shape_changes_nothing(tmp_path):
    np.save(tmp_path / "small.npy", np.zeros((3, 4), np.float32))
    emb = _trained(embedding.HostEmbeddingAdagradOptimizerSpec(0.1))
    before = emb.get_embedding_tensor().copy(), emb.table.state["accumulator"].copy()
    with pytest.raises(EmbeddingError, match=r"holds float32 \(3, 4\); expected float32 \(20, 4\)"):
        emb.load(tmp_path / "small.npy")
    with pytest.raises(EmbeddingError, match="is not a file"):
        emb.load(tmp_path / "missing.npy")
    np.testing.assert_array_equal(emb.get_embedding_tensor(), before[0])
    np.testing.assert_array_equal(emb.table.state["accumulator"], before[1])


def test_a_callable_initializer_gets_the_shape_and_numpy_dtype():
    """``initializer(shape, dtype)`` is called with NumPy's dtype, so NumPy code
    (``np.full(shape, v, dtype)``, ``rng.uniform(...).astype(dtype)``) serves as is."""
    seen = []

    def init(shape, dtype):
        seen.append((shape, dtype))
        return np.full(shape, 0.5, dtype)

    emb = embedding.create_host_embedding("c", [3, 2], popxl.float16, initializer=init)
    assert seen == [((3, 2), np.dtype(np.float16))]
    table = emb.get_embedding_tensor()
    assert table.dtype == np.float16
    np.testing.assert_array_equal(table, np.full((3, 2), 0.5, np.float16))
