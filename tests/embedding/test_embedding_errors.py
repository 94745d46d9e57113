"""Bad input to host embeddings: each refused with an error naming the embedding and what is
wrong, and nothing changed (the IR, the table, the registration)."""

from __future__ import annotations

import numpy as np
import pytest
from tremula_tests_embedding_programs import build

import popxl
import popxl.ops as ops
from tremula import embedding
from tremula.errors import EmbeddingError

SGD = embedding.HostEmbeddingOptimizerSpec(0.1)


def _emb(name="words", spec=SGD, **kw):
    init = np.arange(20, dtype=np.float32).reshape(5, 4)
    return embedding.create_host_embedding(
        name, [5, 4], popxl.float32, optimizer_spec=spec, initializer=init, **kw
    )


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"shape": [5]}, EmbeddingError, r"shape must be 2-D \[tokens, encoding\]"),
        ({"shape": [5, 4, 2]}, EmbeddingError, "shape must be 2-D"),
        ({"shape": [0, 4]}, EmbeddingError, "positive integers"),
        ({"dtype": popxl.int32}, EmbeddingError, "dtype must be popxl.float32 or popxl.float16"),
        ({"partition_strategy": "ROWS"}, EmbeddingError, "unknown partition strategy 'ROWS'"),
        ({"optimizer_spec": "sgd"}, EmbeddingError, "optimizer_spec must be None or a"),
        ({"initializer": np.zeros((4, 5))}, EmbeddingError, r"shape \(4, 5\), expected \(5, 4\)"),
        ({"initializer": lambda s, d: np.zeros(3)}, EmbeddingError, "the initializer's result"),
        ({"initializer": "/no/such/table.npy"}, EmbeddingError, "is not a file"),
        ({"remote_buffer": "yes"}, EmbeddingError, "remote_buffer must be a bool"),
        ({"name": ""}, EmbeddingError, "name must be a non-empty string"),
    ],
)
def test_bad_arguments_to_create_host_embedding(kwargs, error, message):
    args = {"name": "words", "shape": [5, 4], "dtype": popxl.float32, **kwargs}
    with pytest.raises(error, match=message):
        embedding.create_host_embedding(**args)


def test_indices_that_are_not_integers_are_refused_and_the_graph_is_unchanged():
    emb = _emb()
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros(3, np.float32))
        before = len(ir.main_graph.ops)
        with pytest.raises(TypeError, match=r"'words': lookup indices .* must be integers"):
            emb.lookup(x)
        with pytest.raises(EmbeddingError, match="'words': deduplicate must be"):
            emb.lookup(ops.cast(x, popxl.int32), deduplicate=-1)
        assert len(ir.main_graph.ops) == before + 1  # the cast only: the lookup added nothing


def _program(emb):
    return build(emb, (3,), train=emb.trainable)


def test_running_without_registering_is_refused_before_the_run():
    emb = _emb()
    prog = _program(emb)
    with (
        prog.session,
        pytest.raises(EmbeddingError, match=r"'words' is used by .* not registered .*register"),
    ):
        prog.run(np.array([0, 1, 2], np.int32), np.ones((3, 4), np.float32))
    assert emb.statistics()["lookups"] == 0
    np.testing.assert_array_equal(emb.get_embedding_tensor(), np.arange(20).reshape(5, 4))


def test_registering_twice_or_with_a_session_that_does_not_use_it():
    emb, other = _emb(), _emb("other")
    prog, prog_other = _program(emb), _program(other)
    with emb.register(prog.session):
        twice = r"^Cannot register host embedding with id='words' it already exists!.* this session"
        with pytest.raises(EmbeddingError, match=twice):
            emb.register(prog.session).__enter__()
        with pytest.raises(EmbeddingError, match="already registered with another session"):
            emb.register(prog_other.session).__enter__()
    with pytest.raises(EmbeddingError, match=r"'words'.*does not use the embedding"):
        emb.register(prog_other.session).__enter__()
    with pytest.raises(EmbeddingError, match=r"expected a popxl.Session"):
        emb.register("session").__enter__()
    with emb.register(prog.session):  # the failed attempts left it unregistered
        pass


def test_a_trainable_embedding_in_an_inference_only_program():
    emb = _emb()
    prog = build(emb, (3,), train=False)
    with pytest.raises(EmbeddingError, match=r"'words'.*SGD\(learning_rate=0.1\) asks for updates"):
        emb.register(prog.session).__enter__()
    with prog.session, emb.register(prog.session, inference_only=True):
        rows = prog.run(np.array([4, 0, 9], np.int32))
    np.testing.assert_array_equal(rows, np.arange(20, dtype=np.float32).reshape(5, 4)[[4, 0, 4]])


def test_two_embeddings_with_one_name_in_one_program():
    a, b = _emb(spec=None), _emb(spec=None)
    ir = popxl.Ir()
    with ir.main_graph:
        i = popxl.variable(np.zeros(2, np.int32))
        a.lookup(i)
        b.lookup(i)
    with pytest.raises(EmbeddingError, match="two host embeddings named 'words'"):
        popxl.Session(ir, "cpu")


def test_the_old_call_api_is_gone():
    with pytest.raises(NotImplementedError, match=r"use `with embedding.register"):
        _emb()(1, 2)
