"""``Engine.run_cycles``: the modelled cycles of a program's last run, against the execution
profile's ``simulation.cycles`` of the same runs (recorded steps, a separate path)."""

from __future__ import annotations

import pytest
from tremula_tests_engine_codelets import CODELETS, execute, increment, make_engine, new_graph, var

from tremula import poplar
from tremula.errors import EngineError, StreamError

RUNS = 6


def _program(options=None, branching=False):
    """Scale on every tile of 2 IPUs, a copy across them; with ``branching``, a loop on a
    counter kept between runs (3 iterations on the first run, 1 on later ones). Loaded."""
    g, dev = new_graph(tiles=4, num_ipus=2)
    n = g.num_tiles
    x = var(g, 2 * n, tile=None, write="x")
    y = var(g, 2 * n, tile=None)
    cs = g.add_compute_set("scale")
    fields = {"x": x.reshape((n, 2)), "y": y.reshape((n, 2)), "a": 2.0}
    g.add_vertices(cs, "Scale<float>", fields, tiles=range(n))
    body = [poplar.Execute(cs), poplar.Copy(y[::-1], x)]
    if branching:
        i = var(g, (), dtype=poplar.INT)
        pred = var(g, (), dtype=poplar.BOOL)
        check = execute(g, "LessThan", {"x": i, "out": pred, "limit": 3})
        body.append(poplar.RepeatWhileTrue(check, pred, increment(g, i, tile=0)))
    return make_engine(g, poplar.Sequence(body), options, dev)


def _profile_cycles(engine):
    return engine.get_execution_profile()["simulation"]["cycles"]


def test_the_first_run_costs_the_execution_profiles_cycles():
    e = _program(branching=True)
    e.run()
    assert e.run_cycles() == _profile_cycles(e) > 0
    e.reset_execution_profile()
    e.run()
    e.run()
    first_two = _profile_cycles(e)
    e.run()  # past the run count: nothing recorded
    assert _profile_cycles(e) == first_two


@pytest.mark.parametrize("count_cycles", [False, True])
def test_each_run_costs_what_a_profile_of_every_run_adds(count_cycles):
    """Runs past the run count are counted (with ``count_cycles``) as a profile capturing
    every run shows them: a program with data-dependent control flow (the interpreter
    moves the clocks) and a static one (replayed)."""
    for branching in (True, False):
        options = {"autoReport.executionProfileProgramRunCount": str(RUNS)}
        every = _program(options, branching)
        counted = _program(None, branching)
        counted.count_cycles = count_cycles
        for _ in range(RUNS):
            before = _profile_cycles(every)
            every.run()
            counted.run()
            if count_cycles:
                assert counted.run_cycles() == _profile_cycles(every) - before
        if not count_cycles:
            with pytest.raises(EngineError, match=r"past .*RunCount \(2\).*count_cycles"):
                counted.run_cycles()
        assert _profile_cycles(counted) < _profile_cycles(every)  # the profile stayed bounded


def test_counting_starts_again_from_the_profile_after_a_reset():
    e = _program()
    e.count_cycles = True
    for _ in range(4):
        e.run()
    e.reset_execution_profile()
    e.run()
    assert e.run_cycles() == _profile_cycles(e)


def test_run_cycles_refuses_what_it_cannot_know():
    g, dev = new_graph()
    var(g, 4, tile=None, read="x")
    e = make_engine(g, [poplar.Sequence(), poplar.Sequence()])
    with pytest.raises(EngineError, match="not loaded"):
        e.run_cycles()
    e.load(dev)
    with pytest.raises(EngineError, match="program 1: it has not run"):
        e.run_cycles(1)
    for bad in (2, -1, True, "0"):
        with pytest.raises(EngineError, match="is not one of the 2 program"):
            e.run_cycles(bad)
    cpu = poplar.Device.create_cpu_device()
    g = poplar.Graph(cpu.target)
    g.add_codelets(CODELETS)
    x = var(g, 3, write="x")
    e = make_engine(g, increment(g, x), device=cpu)
    e.run()
    with pytest.raises(EngineError, match="CPU target models no cycles"):
        e.run_cycles()


def test_an_uncounted_run_says_why_also_after_a_reset():
    """A run past the run count without ``count_cycles``, then a reset: the program ran, so
    the reason is the run count, not that it has not run."""
    e = _program()
    for _ in range(3):
        e.run()
    e.reset_execution_profile()
    with pytest.raises(EngineError, match=r"program 0: its last run was past .*RunCount \(2\)"):
        e.run_cycles()
    e.run()  # captured again after the reset
    assert e.run_cycles() == _profile_cycles(e)


def test_a_run_that_failed_has_no_cycles():
    g, dev = new_graph()
    x = var(g, 4, tile=None)
    e = make_engine(g, poplar.Copy(g.add_host_to_device_fifo("in", poplar.FLOAT, 4), x), None, dev)
    with pytest.raises(StreamError, match=r"'in' .* not connected"):
        e.run()
    with pytest.raises(EngineError, match="program 0: its last run failed"):
        e.run_cycles()
