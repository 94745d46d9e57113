"""The Engine: compile a graph and its programs, load them on a device, run them, and report.

Compilation (in the constructor) verifies the graph, compiles the programs into a step plan,
lays out memory and checks that it fits; everything the run needs is precomputed then. ``run``
replays it.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import numpy as np

from tremula import profile as profile_format
from tremula import progress as progress_bars
from tremula.engine import endsignals
from tremula.engine import nodes as N
from tremula.engine.compiler import StepPlan
from tremula.engine.fits import check_fits
from tremula.engine.fusion import Carried
from tremula.engine.hostclock import HostClock
from tremula.engine.hostdata import HostData, locked
from tremula.engine.liveness import Linearizer, intervals
from tremula.engine.memory import MemoryModel
from tremula.engine.options import parse_options
from tremula.engine.plan import Gather
from tremula.engine.profiles import Profiles
from tremula.engine.replay import TimelineReplay
from tremula.engine.report import instances
from tremula.engine.run import Runtime
from tremula.engine.timeline import NullTimeline, Timeline
from tremula.errors import EngineError
from tremula.numerics import quietly
from tremula.popdist.replicas import runtime_replicas
from tremula.poplar.device import Device
from tremula.poplar.graph import Graph
from tremula.poplar.program import Program

#: The stages of compilation a progress bar shows.
COMPILE_STAGES: tuple[str, ...] = ("verifying", "step plan", "liveness", "memory layout")


def _stages(progress: Any) -> Callable[[str | None], None]:
    """A function that ends the current stage on ``progress`` and names the next one."""
    started = [False]

    def stage(name: str | None) -> None:
        if progress is None:
            return
        if started[0]:
            progress.update(1)
        started[0] = True
        if name is not None:
            progress.set_description(f"compiling: {name}")

    return stage


def _has_loop(root: N.Node) -> bool:
    """Whether a program runs a ``Repeat`` of more than one iteration (a bar could show)."""
    return any(isinstance(n, N.RepeatNode) and n.count > 1 for n in N.reachable(root))


def _loop_bar(total: int, name: str) -> Any:
    """The bar of an on-device loop of ``total`` iterations (``Runtime.loop_progress``)."""
    desc = f"running: {name}" if name else "running"
    return progress_bars.bar(total, desc, "iteration", enabled=True)


def _ask_checks(sp: StepPlan, checks: frozenset[str]) -> None:
    """Give every codelet batch the run-time checks asked for (``debug.check*`` options)
    and the name of its compute set, which the checks' messages name."""
    for ccs in sp.compute_sets:
        for g in ccs.groups:
            g.batch.checks = checks
            g.batch.compute_set = ccs.name


class Engine(HostData):
    """Poplar's ``Engine(graph, programs, options)``.

    Args:
        graph: the graph (its top-level view).
        programs: one program, or a list of programs run by index with ``run(i)``.
        options: Poplar engine options (``autoReport.all``, ``autoReport.directory``,
            ``debug.allowOutOfMemory``, ``debug.executionProfile`` ...), overridden by the
            ``POPLAR_ENGINE_OPTIONS`` environment variable as in Poplar.
            ``target.firstRuntimeReplica`` / ``target.numberRuntimeReplica`` run only a
            block of the replicas here, one instance's part of a PopRun job (the other
            blocks run in the other instances, over MPI); host data and streams then
            cover this instance's replicas only (rows ``0..count-1``).
        progress: A progress bar (``tremula.progress.bar``) to advance by one per stage of
            compilation (:data:`COMPILE_STAGES`), or None.
        run_progress: Show a bar advancing per iteration of a program's outermost on-device
            loops (``Repeat``) while ``run`` runs it: None (the default, see
            ``tremula.progress``) on a terminal when ``tqdm`` is installed, True or False.
            The attribute of that name may be changed later.

    Threads: every method that loads, runs, connects or moves data holds :attr:`lock` (a
    re-entrant lock, one per engine), so calls from several threads never interleave. A
    sequence of calls that must not be split (``connect_stream`` then ``run``) holds it
    too: ``with engine.lock: ...``. Host callbacks run with the lock held.

    Raises:
        VerifyError: the graph is ill-formed.
        OutOfMemoryError: a tile does not fit (unless ``debug.allowOutOfMemory``).
    """

    def __init__(
        self,
        graph: Graph,
        programs: Program | Sequence[Program],
        options: dict[str, Any] | None = None,
        *,
        progress: Any = None,
        run_progress: bool | None = None,
    ) -> None:
        self.lock = threading.RLock()
        self.run_progress = run_progress
        if not isinstance(graph, Graph):
            raise EngineError(f"Engine: expected a poplar.Graph, got {type(graph).__name__}")
        progs = [programs] if isinstance(programs, Program) else list(programs)
        for i, p in enumerate(progs):
            if not isinstance(p, Program):
                raise EngineError(f"Engine: program {i} is a {type(p).__name__}, not a Program")
        self.options = parse_options(options)
        self.graph = graph
        self.state = graph.state
        self.target = self.state.target
        self.replication_factor = self.state.replication_factor
        o = self.options
        #: the replicas this process runs (all of them, or an instance's block)
        self.runtime_replicas = runtime_replicas(
            self.replication_factor, o.first_runtime_replica, o.number_runtime_replica
        )
        self.replicas = self.runtime_replicas.count
        stage = _stages(progress)
        stage(COMPILE_STAGES[0])
        graph.verify()
        stage(COMPILE_STAGES[1])
        sp = StepPlan(self.state)
        if o.checks:
            _ask_checks(sp, o.checks)
        self.roots = [sp.compile_control(p) for p in progs]
        sp.layout = sp.layout.without_tables()  # (compiled: the exchanges are planned)
        stage(COMPILE_STAGES[2])
        lin = Linearizer(self.state, sp.function_roots, sp.function_index)
        walk = lin.run(self.roots)
        stage(COMPILE_STAGES[3])
        live = intervals(self.state, walk)
        self.memory = MemoryModel(sp, walk, live).build()
        sp.carried = Carried(lin, live)  # for fused replays (fusion.py)
        stage(None)
        self.step_plan = sp
        self._tree = walk.tree
        self._loops = [_has_loop(root) for root in self.roots]
        if not self.options.allow_out_of_memory:
            check_fits(self.memory, self.target)
        self.mode = "CPU" if self.target.is_cpu else self.options.profiler_mode
        self._runtime: Runtime | None = None
        rr = self.runtime_replicas
        sections = (lambda: {"instances": instances(sp, rr)}) if rr.distributed else None
        self._profiles = Profiles(
            sp, self.memory, self._tree, self.mode, self.options, len(progs), sections
        )
        if self.options.writes_files:
            self._profiles.write_compiled()
            weakref.finalize(self, endsignals.flush_reporting, self._profiles)
            if self.options.report_execution or self.options.report_html:
                endsignals.watch(self._profiles)  # SIGTERM / SIGHUP write it too

    # ---- loading ----
    @locked
    def load(self, device: Device) -> None:
        """Load the compiled programs on ``device`` and initialise constants and initial
        values; variables start at zero."""
        if not isinstance(device, Device):
            raise EngineError(f"load: expected a poplar Device, got {type(device).__name__}")
        dt, gt = device.target, self.target
        for name in ("tiles_per_ipu", "memory_bytes_per_tile", "ipu_version", "target_type"):
            if getattr(dt, name) != getattr(gt, name):
                raise EngineError(
                    f"load: device {name} is {getattr(dt, name)!r} but the graph "
                    f"was compiled for {getattr(gt, name)!r}"
                )
        if dt.num_ipus < gt.num_ipus and not gt.is_cpu:
            raise EngineError(
                f"load: the device has {dt.num_ipus} IPU(s); the graph needs "
                f"{gt.num_ipus} per replica"
            )
        tl: Timeline = (
            NullTimeline(gt) if self.mode == "CPU" else Timeline(gt, record=self.mode != "NONE")
        )
        rt = Runtime(
            self.step_plan,
            self.runtime_replicas,
            tl,
            record_cs=self.mode in ("COMPUTE_SETS", "SINGLE_TILE_COMPUTE_SETS"),
        )
        if self.options.host_time:
            rt.host_clock = HostClock()
        for var in self.state.variables:
            if var.is_constant:
                rt.storage[var.dtype][:, var.start : var.start + var.size] = var.constant
        for t, data in self.state.initial_values:
            Gather.of(t.dtype, t.addresses).write(rt.storage, slice(None), data.reshape(1, -1))
        self._runtime = rt
        self._replay = TimelineReplay(self.roots)
        self._profiles.loaded(rt)

    @property
    def runtime(self) -> Runtime:
        if self._runtime is None:
            raise EngineError(
                "the engine is not loaded: call engine.load(device) before "
                "running programs or moving data"
            )
        return self._runtime

    # ---- running ----
    @locked
    def run(self, index: int = 0, name: str = "") -> None:
        """Run program ``index``."""
        rt = self.runtime
        if isinstance(index, bool) or not isinstance(index, int | np.integer):
            raise EngineError(
                f"run: the program index must be an int, got {type(index).__name__} {index!r}"
            )
        if not 0 <= index < len(self.roots):
            raise EngineError(
                f"run: program index {index} out of range; the engine has "
                f"{len(self.roots)} program(s)"
            )
        show = self._loops[index] and progress_bars.progress_bars_enabled(self.run_progress)
        rt.loop_progress = _loop_bar if show else None
        with self._profiles.run(rt, index), quietly():  # the device's IEEE rules, set once
            self._replay.run(rt, index, self.roots[index])

    @property
    def count_cycles(self) -> bool:
        """Whether every run's cycles are modelled (:meth:`run_cycles`), also the runs past
        ``autoReport.executionProfileProgramRunCount``: those then move a timeline that
        records no steps, which costs some time per run (off by default: they model no
        cycles). The captured runs' cycles are always known."""
        return self._profiles.count_cycles

    @count_cycles.setter
    def count_cycles(self, on: bool) -> None:
        with self.lock:
            self._profiles.count_cycles = bool(on)

    @locked
    def run_cycles(self, index: int = 0) -> int:
        """The modelled cycles of the last run of program ``index`` (replica 0's timeline:
        its latest tile clock after the run minus the latest before it), as a cycle
        counter read at the program's start and end would give. The runs since load or
        ``reset_execution_profile`` add up to the execution profile's
        ``simulation.cycles``; the same program, inputs and clocks give the same count.

        Raises:
            EngineError: the engine is not loaded; ``index`` is not a program; the program
                has not run since load; its last run was past the execution profile's run
                count without :attr:`count_cycles`; the CPU target (no cycle model).
        """
        _ = self.runtime  # raises when not loaded
        return self._profiles.cycles_of(index, self.target.is_cpu)

    @locked
    def flush_report(self) -> None:
        """Write autoReport's ``execution.json`` now if programs ran since it was last
        written (a PopXL ``Session`` does this when it detaches)."""
        self._profiles.flush()

    @locked
    def close(self) -> None:
        """Write autoReport's pending ``execution.json`` and unload the engine (``load``
        makes it usable again). Also done when the engine is collected, when the
        interpreter exits, and on leaving ``with engine:``."""
        self._profiles.flush()
        self._runtime = self._profiles.runtime = None
        self._replay = TimelineReplay(self.roots)  # drops the plans bound to the old state

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- profiles ----
    @property
    def report_directory(self) -> str | None:
        """The folder autoReport writes this engine's files into, or None when it is off:
        ``autoReport.directory``, or a subfolder of it so that no other engine of this
        process and no other instance of a PopRun job overwrites them
        (``profiles.claim_directory``)."""
        return self._profiles.directory if self.options.writes_files else None

    @locked
    def get_graph_profile(self) -> dict[str, Any]:
        """The graph profile; an instance of a PopRun job adds its ``instances`` section
        (its replicas, the copies to and from other instances with bytes and cycles)."""
        return self._profiles.graph()

    @locked
    def get_execution_profile(self) -> dict[str, Any]:
        """The execution profile: the first ``autoReport.executionProfileProgramRunCount``
        runs (default 2) of each program since load or reset."""
        return self._profiles.execution(self.runtime)

    def get_profile(self) -> dict[str, Any]:
        return {
            "graphProfile": self.get_graph_profile(),
            "executionProfile": self.get_execution_profile(),
        }

    @locked
    def reset_execution_profile(self) -> None:
        rt = self.runtime
        rt.tl.reset()
        rt.cs_cycles[...] = 0
        self._profiles.reset()

    @locked
    def write_report(self, directory: str) -> None:
        """Write ``graph.json`` and ``execution.json`` into ``directory`` now (those autoReport
        writes, when it is set), and ``report.html`` when ``autoReport.outputHtml`` is set.
        Each file is replaced atomically."""
        o = self.options
        self._profiles.write(
            directory,
            graph=o.report_graph or not o.auto_report,
            execution=o.report_execution or not o.auto_report,
        )

    def profile_summary(self, show_execution_steps: bool = False) -> str:
        execution = self.get_execution_profile() if self._runtime is not None else None
        return profile_format.summarise(
            self.get_graph_profile(), execution, show_execution_steps=show_execution_steps
        )

    def print_profile_summary(
        self, out: TextIO | None = None, options: dict[str, str] | None = None
    ) -> None:
        steps = str((options or {}).get("showExecutionSteps", "false")).lower() == "true"
        print(self.profile_summary(steps), file=out or sys.stdout)
