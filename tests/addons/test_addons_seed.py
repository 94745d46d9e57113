"""popxl-addons' seed_variable (a remote seed loaded by the weights-from-host fragment and
stored back by the weights-to-host fragment): each run's random numbers and the seed read
back match the same program over a plain per-replica seed variable."""

from __future__ import annotations

import numpy as np
import popxl_addons as addons

import popxl
from popxl import ops

R = 2


def _program(seed_of):
    ir = popxl.Ir(replication=R)
    with ir.main_graph:
        var, seed = seed_of(ir)
        now, later = ops.split_random_seed(seed)
        r = ops.random_uniform(now, (4,))
        ops.var_updates.copy_var_update_(seed, later)
        d2h = popxl.d2h_stream(r.shape, r.dtype)
        ops.host_store(d2h, r)
    with popxl.Session(ir, "ipu_model") as s:
        first = s.get_tensor_data(var)
        runs = [s.run()[d2h] for _ in range(3)]
        last = s.get_tensor_data(var)
    return first, runs, last


def _plain(ir: popxl.Ir):
    seeds = popxl.create_seeds(5, replicas=R)
    var = popxl.variable(seeds, popxl.uint32, replica_grouping=ir.replica_grouping(group_size=1))
    return var, var


def test_seed_variable_runs_as_a_plain_seed_variable() -> None:
    first, runs, last = _program(lambda ir: addons.seed_variable(5))
    ref_first, ref_runs, ref_last = _program(_plain)
    np.testing.assert_array_equal(first, popxl.create_seeds(5, replicas=R))
    np.testing.assert_array_equal(first, ref_first)
    for got, ref in zip(runs, ref_runs):
        np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(last, ref_last)
    assert not np.array_equal(runs[0], runs[1]) and not np.array_equal(first, last)
