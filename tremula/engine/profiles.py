"""An engine's profiles: what it records, how much, and when autoReport writes them.

As Poplar does: the execution profile captures the first
``autoReport.executionProfileProgramRunCount`` runs of each program (default 2); later runs
compute their results without touching the timeline, so a long training loop keeps a
bounded profile in memory and runs faster. autoReport writes ``graph.json`` once, when the
engine is compiled, and ``execution.json`` once, at the end: on ``Engine.close()``, when the
engine is collected, or when the interpreter exits, whichever comes first after the last run
(not after every run, which made a loop's cost grow with its profile). Both files carry the
graph profile's ``graphId``, so a reader can tell a mismatched pair.

This object holds everything those writes need and no reference to the engine, so that the
engine's finalizer (``weakref.finalize``) can write after the engine itself is gone.

No engine overwrites another's files (:func:`claim_directory`): in a PopRun job of several
instances each instance writes into ``<autoReport.directory>/instance_<index>``, and when
several engines of one process write into the same folder, the first writes there and the
n-th into its subfolder ``engine_<n>``.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from tremula import profile as profile_format
from tremula.engine import endsignals
from tremula.engine.compiler import StepPlan
from tremula.engine.memory import MemoryReport
from tremula.engine.options import EngineOptions
from tremula.engine.report import execution_profile, graph_profile
from tremula.engine.run import Runtime
from tremula.engine.timeline import NullTimeline, Timeline
from tremula.errors import EngineError
from tremula.popdist import env as popdist_env
from tremula.profile.hosttime import HOST_TIME_FILE
from tremula.profile.io import identify, write_atomic
from tremula.profile.schema import GRAPH_ID

#: the autoReport folders (real paths) an engine of this process writes into
_CLAIMED: set[str] = set()
_CLAIMS_LOCK = threading.Lock()


def claim_directory(directory: str, environ: Mapping[str, str] | None = None) -> str:
    """The folder an engine's autoReport writes into, claimed for it for the life of the
    process, so that no engine or PopRun instance overwrites another's profiles.

    In a PopRun job of several instances (the ``POPDIST_*`` variables of ``environ``,
    default ``os.environ``) the folder is ``directory/instance_<i>``, ``i`` the instance's
    index, else ``directory``; the first engine of the process to claim that folder gets it,
    a later one the first of its subfolders ``engine_2``, ``engine_3``, ... not yet claimed
    (the n-th engine gets ``engine_<n>`` unless engines named such folders themselves).
    Real Poplar writes every engine into ``directory`` and the last one wins.

    Returns:
        The folder as an absolute path: the engine writes there even if the process changes
        its working directory before the engine's last write.

    Raises:
        DistributedConfigError: The ``POPDIST_*`` variables contradict each other.
    """
    lay = popdist_env.layout(environ)
    base = os.path.abspath(directory)
    if lay.num_instances > 1:
        base = os.path.join(base, f"instance_{lay.instance_index}")
    folders = (base if n == 1 else os.path.join(base, f"engine_{n}") for n in itertools.count(1))
    with _CLAIMS_LOCK:
        path = next(p for p in folders if os.path.realpath(p) not in _CLAIMED)
        _CLAIMED.add(os.path.realpath(path))
    return path


class Profiles:
    """The profiles of one engine and its autoReport.

    Args:
        step_plan: The compiled programs.
        memory: The memory report.
        tree: The linearised program tree (liveness by program).
        mode: The profiler mode (``IPU_MODEL``, ``CPU``, ``NONE`` ...).
        options: The engine options (autoReport's files, folder and run count).
        programs: How many control programs the engine has.
        sections: Extra top-level sections of the graph profile (an instance of a PopRun
            job adds ``instances``), made when it is first built, or None.
    """

    def __init__(
        self,
        step_plan: StepPlan,
        memory: MemoryReport,
        tree: list[dict],
        mode: str,
        options: EngineOptions,
        programs: int,
        sections: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self.step_plan = step_plan
        self.memory = memory
        self.tree = tree
        self.mode = mode
        self.options = options
        self.sections = sections
        #: where autoReport writes (claimed when it is on, see :func:`claim_directory`)
        self.directory = (
            claim_directory(options.report_directory)
            if options.writes_files
            else options.report_directory
        )
        self.runtime: Runtime | None = None
        self.runs = [0] * programs  # runs of each program since load or reset
        #: model the cycles of every run, also past the run count (``Engine.count_cycles``)
        self.count_cycles = False
        #: the modelled cycles of each program's last run (None: not modelled)
        self.last_cycles: list[int | None] = [None] * programs
        #: whether each program's last run was past the run count (its cycles not modelled
        #: unless :attr:`count_cycles`), kept across ``reset`` to say why it has no cycles
        self.last_past: list[bool] = [False] * programs
        self._counting: Timeline | None = None  # the clocks of the runs past the run count
        self.pending = False  # runs not yet in an autoReport execution.json
        self._graph: dict[str, Any] | None = None
        self._graph_text: str | None = None  # graph.json's text, until autoReport writes it
        self._quiet: NullTimeline | None = None

    # ---- building ----
    def graph(self) -> dict[str, Any]:
        """The graph profile (built once), with its ``graphId``."""
        if self._graph is None:
            g = graph_profile(self.step_plan, self.memory, self.tree)
            if self.sections is not None:
                g.update(self.sections())
            g[GRAPH_ID], text = identify(g)
            self._graph = g
            # kept for autoReport's graph.json, which is written next, then dropped
            self._graph_text = text if self.options.report_graph else None
        return self._graph

    def execution(self, runtime: Runtime) -> dict[str, Any]:
        """The execution profile of the runs recorded on ``runtime``'s timeline."""
        out = execution_profile(self.step_plan, runtime.tl, self.mode, runtime.cs_cycles)
        out[GRAPH_ID] = self.graph()[GRAPH_ID]
        return out

    # ---- recording ----
    def loaded(self, runtime: Runtime) -> None:
        """A new runtime (``Engine.load``): nothing recorded yet."""
        self.runtime = runtime
        self.reset()
        self.last_cycles = [None] * len(self.runs)
        self.last_past = [False] * len(self.runs)
        self._quiet = NullTimeline(runtime.tl.target)

    def reset(self) -> None:
        """Forget the recorded runs; the next runs of each program are captured again."""
        self.runs = [0] * len(self.runs)
        self._counting = None

    def run(self, runtime: Runtime, index: int) -> _Run:
        """Around a run of program ``index`` (``with profiles.run(runtime, index):``):
        captured on the timeline while the program has run fewer than the run count's times
        since load or reset, else run on a timeline that records nothing (the results are
        the same): one that models no cycles, or with :attr:`count_cycles` one that moves
        the clocks (from where the captured runs left them) without recording steps. The
        run's cycles (the latest clock after it minus the latest before it) go to
        :attr:`last_cycles`."""
        return _Run(self, runtime, index)

    def _quiet_timeline(self, captured: Timeline, quiet: NullTimeline) -> Timeline:
        """The timeline of a run past the run count."""
        if not self.count_cycles or isinstance(captured, NullTimeline):
            return quiet
        if self._counting is None:
            self._counting = Timeline(captured.target, record=False)
            self._counting.t[:] = captured.t
            self._counting.prev_to = captured.prev_to
        return self._counting

    def cycles_of(self, index: Any, cpu: bool) -> int:
        """``Engine.run_cycles``: the modelled cycles of program ``index``'s last run.

        Raises:
            EngineError: no such program; no cycles of its last run (why is said).
        """
        n = len(self.runs)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n:
            raise EngineError(f"run_cycles: program {index!r} is not one of the {n} program(s)")
        cycles = self.last_cycles[index]
        if cycles is not None:
            return cycles
        if cpu:
            why = "the CPU target models no cycles"
        elif self.last_past[index]:
            why = (
                "its last run was past autoReport.executionProfileProgramRunCount "
                f"({self.options.run_count}); set engine.count_cycles = True before running"
            )
        elif self.runs[index] == 0:
            why = "it has not run since the engine was loaded"
        else:
            why = "its last run failed before it ended"
        raise EngineError(f"run_cycles: no cycles of program {index}: {why}")

    # ---- writing ----
    def write(self, directory: str, graph: bool, execution: bool) -> None:
        """Write the chosen profiles into ``directory`` (and ``report.html`` when
        ``autoReport.outputHtml`` is set). The execution profile needs a loaded runtime."""
        rt = self.runtime
        g = self.graph() if graph else None
        e = self.execution(rt) if execution and rt is not None else None
        text = None
        if graph:
            text, self._graph_text = self._graph_text, None
        profile_format.write_profile(directory, g, e, graph_text=text)
        if self.options.report_html:
            from tremula.profile.report import write_profiles_html

            write_profiles_html(directory, self.graph(), e)

    def write_compiled(self) -> None:
        """autoReport after compiling: ``graph.json`` (Poplar writes it then)."""
        o = self.options
        if o.report_graph:
            self.write(self.directory, graph=True, execution=False)

    def flush(self) -> None:
        """autoReport at the end: ``execution.json`` (and the page) if runs happened since
        the last write. Safe to call more than once; the engine's finalizer calls it."""
        o = self.options
        if not self.pending or self.runtime is None:
            return
        self.pending = False
        if o.report_execution or o.report_html:
            self.write(self.directory, graph=False, execution=o.report_execution)
        clock = self.runtime.host_clock
        if o.host_time and clock is not None:
            os.makedirs(self.directory, exist_ok=True)
            document = json.dumps(clock.document(), indent=1) + "\n"
            write_atomic(os.path.join(self.directory, HOST_TIME_FILE), document)


class _Run:
    """:meth:`Profiles.run`'s scope (a class rather than a generator: it is entered on
    every run, and a replayed run of a small program is a few hundred microseconds)."""

    __slots__ = ("clock", "index", "on_main", "profiles", "record_cs", "runtime", "start", "tl")

    def __init__(self, profiles: Profiles, runtime: Runtime, index: int) -> None:
        self.profiles, self.runtime, self.index = profiles, runtime, index

    def __enter__(self) -> None:
        self.on_main = on_main = threading.current_thread() is threading.main_thread()
        if on_main:
            endsignals.run_started()  # first: a SIGTERM / SIGHUP now waits for the end
        try:
            p, runtime, index = self.profiles, self.runtime, self.index
            captured = p.runs[index] < p.options.run_count
            p.runs[index] += 1
            p.pending = True
            p.last_cycles[index] = None
            p.last_past[index] = not captured
            tl = self.tl = runtime.tl
            self.record_cs = runtime.record_cs
            if not captured and p._quiet is not None:
                runtime.tl, runtime.record_cs = p._quiet_timeline(tl, p._quiet), False
            self.clock = clock = runtime.tl
            # (a timeline that models no cycles has none to count)
            self.start = None if isinstance(clock, NullTimeline) else clock.cycles
        except BaseException:
            if on_main:
                endsignals.run_ended()
            raise

    def __exit__(self, exc_type: Any, *rest: Any) -> None:
        # the timeline is put back whatever ends the run (KeyboardInterrupt included: the
        # execution profile written at exit is the captured runs', not a stand-in's)
        try:
            runtime = self.runtime
            runtime.tl, runtime.record_cs = self.tl, self.record_cs
            if exc_type is None and self.start is not None:
                self.profiles.last_cycles[self.index] = self.clock.cycles - self.start
        finally:
            if self.on_main:
                endsignals.run_ended()  # a SIGTERM / SIGHUP that came during the run
