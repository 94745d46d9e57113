"""poprand: numbers are a pure function of (seed, modifier, flat index, replica)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tremula import poplar
from tremula.libs import poprand

NAMES = [
    "uniform",
    "uniform_half",
    "uniform_int",
    "log_uniform",
    "normal",
    "normal_half",
    "truncated_normal",
    "bernoulli",
    "dropout",
]
SHAPE = (6, 11)


def _one(generators, name, mapping="linear", modifier=7, **kw):
    def build(g, s, p):
        return {"x": generators[name](g, s, modifier, _ref(g, mapping), p, **kw)}

    return build


def _ref(g, mapping):
    t = g.add_variable(poplar.FLOAT, SHAPE, "ref")
    if isinstance(mapping, str):
        poplar.map_tensor_linearly(g, t)
    else:
        g.set_tile_mapping(t, np.asarray(mapping).reshape(SHAPE) % g.num_tiles)
    return t


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_numbers_across_engines(run, generators, name):
    a = run(_one(generators, name))["x"]
    b = run(_one(generators, name))["x"]
    assert a.shape == SHAPE
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", ["uniform", "normal", "uniform_int", "truncated_normal"])
def test_modifier_and_seed_change_the_numbers(run, generators, name):
    base = run(_one(generators, name, modifier=7))["x"]
    other_mod = run(_one(generators, name, modifier=8))["x"]
    other_seed = run(_one(generators, name, modifier=7), seed=(1234, 5679))["x"]
    assert np.mean(base == other_mod) < 0.1
    assert np.mean(base == other_seed) < 0.1


@pytest.mark.parametrize("name", NAMES)
def test_independent_of_the_tile_mapping(run, generators, name):
    n = int(np.prod(SHAPE))
    linear = run(_one(generators, name), tiles=4)["x"]
    interleaved = run(_one(generators, name, np.arange(n) % 16), tiles=16)["x"]
    reversed_ = run(_one(generators, name, (n - 1 - np.arange(n)) // 9), tiles=16)["x"]
    np.testing.assert_array_equal(linear, interleaved)
    np.testing.assert_array_equal(linear, reversed_)


@settings(max_examples=12, deadline=None)
@given(
    tiles=st.lists(st.integers(0, 7), min_size=66, max_size=66),
    name=st.sampled_from(["uniform", "normal", "uniform_int", "dropout"]),
)
def test_any_mapping_gives_the_same_numbers(run, generators, tiles, name):
    expected = run(_one(generators, name), tiles=8)["x"]
    got = run(_one(generators, name, tiles), tiles=8)["x"]
    np.testing.assert_array_equal(expected, got)


def _philox_reference(seed, modifier, n, replica=0):
    """The documented layout: counter (i // 4, modifier, replica, 0), key seed, word i % 4."""
    i = np.arange(n)
    words = poprand.philox4x32((i // 4, modifier, replica, 0), seed)
    return words[i, i % 4]


def test_uniform_follows_the_documented_counter_layout(run):
    seed, n = (99, 4242), int(np.prod(SHAPE))

    def build(g, s, p):
        r = _ref(g, "linear")
        return {
            "u": poprand.uniform(g, s, 5, r, poplar.FLOAT, 0.0, 1.0, p),
            "b": poprand.bernoulli(g, s, 5, r, poplar.FLOAT, 0.25, p),
        }

    out = run(build, seed=seed)
    w = _philox_reference(seed, 5, n)
    expected_u = ((w + 0.5) * 2.0**-32).astype(np.float32)
    np.testing.assert_array_equal(out["u"].ravel(), np.minimum(expected_u, 1.0))
    np.testing.assert_array_equal(out["b"].ravel(), (w < 2**30).astype(np.float32))


@pytest.mark.parametrize("name", ["uniform", "normal_half", "bernoulli", "dropout"])
def test_replicas_draw_different_numbers_unless_asked(run, generators, name):
    per = run(_one(generators, name), replicas=2)["x"]
    same = run(_one(generators, name, per_replica=False), replicas=2)["x"]
    single = run(_one(generators, name))["x"]
    assert per.shape == (2, *SHAPE)
    np.testing.assert_array_equal(per[0], single)
    assert not np.array_equal(per[0], per[1])
    np.testing.assert_array_equal(same[0], same[1])
    np.testing.assert_array_equal(same[0], single)


def test_per_replica_seeds_give_per_replica_numbers(run, generators):
    both = run(_one(generators, "uniform", per_replica=False), replicas=2, seed=[[1, 2], [3, 4]])[
        "x"
    ]
    one = run(_one(generators, "uniform"), seed=(3, 4))["x"]
    np.testing.assert_array_equal(both[1], one)
    assert not np.array_equal(both[0], both[1])


def test_rerunning_a_program_repeats_the_numbers(run, generators):
    engines = []
    first = run(_one(generators, "normal"), engine_out=engines)["x"]
    engines[0].run(0)
    np.testing.assert_array_equal(engines[0].read_tensor("x"), first)


def test_default_seed_is_fixed(run):
    def build(g, s, p):
        return {"x": poprand.uniform(g, None, 0, _ref(g, "linear"), poplar.FLOAT, 0, 1, p)}

    a, b = run(build, seed=(1, 1))["x"], run(build, seed=(2, 2))["x"]
    np.testing.assert_array_equal(a, b)
    w = _philox_reference(poprand.DEFAULT_SEED, 0, a.size)
    np.testing.assert_array_equal(a.ravel(), ((w + 0.5) * 2.0**-32).astype(np.float32))
