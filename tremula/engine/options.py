"""Engine options, with Poplar's names. ``POPLAR_ENGINE_OPTIONS`` (a JSON object) is read
as Poplar reads it, and overrides the options given in the program."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tremula.errors import EngineError

MODES = {
    "ipu_model": "IPU_MODEL",
    "compute_sets": "COMPUTE_SETS",
    "single_tile_compute_sets": "SINGLE_TILE_COMPUTE_SETS",
    "vertices": "VERTICES",
    "external_exchanges": "EXTERNAL_EXCHANGES",
    "host_exchanges": "HOST_EXCHANGES",
    "none": "NONE",
}

#: Poplar's engine options that change nothing in the model (compiler effort, host threads,
#: instrumentation, archives, stack sizes, exchange tuning that the cycle model does not
#: charge): accepted, as Poplar accepts them, so programs that set them run unchanged
IGNORED = {
    "debug.instrument",
    "debug.instrumentCompute",
    "debug.instrumentExternalExchange",
    "debug.instrumentControlFlow",
    "debug.computeInstrumentationLevel",
    "profiler.format",
    "profiler.useUnstableFormat",
    "profiler.includeCycleEstimates",
    "target.saveArchive",
    "autoReport.outputArchive",
    "autoReport.outputDebugInfo",
    "opt.enableSwSyncs",
    "debug.retainDebugInformation",
    "debug.verify",
    "debug.runtimeVerify",
    "debug.outputAllSymbols",
    "debug.floatPointOpException",
    "debug.nanOverflowException",
    "autoReport.outputLoweredVars",
    "autoReport.outputSerializedGraph",
    "autoReport.streamAtEachRun",
    "profiler.replicaToProfile",
    "profiler.perExecutionStreamCopyCycles",
    "opt.internalExchangeOptimisationTarget",
    "opt.maxCompilationThreads",
    "opt.maxLinkerThreads",
    "opt.useAutoloader",
    "opt.limitVertexStateToLower256K",
    "opt.enableMultiAccessCopies",
    "exchange.streamBufferOverlap",
    "exchange.enablePrefetch",
    "streamCallbacks.multiThreadMode",
    "streamCallbacks.numWorkerThreads",
    "target.syncReplicasIndependently",
    "target.deterministicWorkers",
    "target.hostSyncTimeout",
    "target.workerStackSizeInBytes",
    "target.supervisorStackSizeInBytes",
    "target.extendedMemory",  # set by BERT's benchmarks.yml through POPLAR_ENGINE_OPTIONS
    "target.gatewayWriteCombining",
    "target.maxStreamCallbackThreadsPerNumaNode",
    "streamCallbacks.maxLookahead",
    "streamCallbacks.numaAware",
    "debug.branchRecordTile",
    "debug.cpuMultiThreadExecution",
    "debug.profilingTile",
    "debug.loweredVarDumpFile",
    "profiler.includeFlopEstimates",
}
KNOWN = {
    "autoReport.all",
    "autoReport.directory",
    "autoReport.outputGraphProfile",
    "autoReport.outputExecutionProfile",
    "autoReport.outputHtml",  # a Tremula option: report.html next to the JSON
    "autoReport.outputHostTime",  # a Tremula option: host_time.json, CPU time per step
    "autoReport.executionProfileProgramRunCount",
    "debug.allowOutOfMemory",
    "debug.checkIntegerDivision",  # a Tremula option: integer division by zero raises
    "debug.executionProfile",
    "target.firstRuntimeReplica",
    "target.numberRuntimeReplica",
} | IGNORED


#: Poplar's default of ``autoReport.executionProfileProgramRunCount``: the runs of each
#: program the execution profile captures.
RUN_COUNT = 2


def _flag(value: Any, name: str) -> bool:
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off", ""):
        return False
    raise EngineError(f"engine option {name!r}: expected 'true' or 'false', got {value!r}")


@dataclass(frozen=True)
class EngineOptions:
    report_graph: bool = False
    report_execution: bool = False
    report_directory: str = "."
    allow_out_of_memory: bool = False
    profiler_mode: str = "IPU_MODEL"
    report_html: bool = False
    #: the replicas this process runs (Poplar's runtime replica subset): ``first`` and a
    #: ``count`` (None: all); the others run in the other instances of a PopRun job
    first_runtime_replica: int = 0
    number_runtime_replica: int | None = None
    run_count: int = RUN_COUNT
    #: ``debug.checkIntegerDivision``: an integer division or remainder by zero raises an
    #: ``ApplicationRuntimeError`` naming the op (without it the device gives 0, silently)
    check_integer_division: bool = False
    #: time each step's data effect on the host and write ``host_time.json``
    host_time: bool = False

    @property
    def checks(self) -> frozenset[str]:
        """The run-time checks the codelets are asked for (``Batch.checks``)."""
        return frozenset({"integerDivision"} if self.check_integer_division else ())

    @property
    def auto_report(self) -> bool:
        return self.report_graph or self.report_execution or self.report_html

    @property
    def writes_files(self) -> bool:
        """autoReport writes into its folder: profiles, the page or the host time."""
        return self.auto_report or self.host_time


def parse_options(
    options: dict[str, Any] | None, env: Mapping[str, str] | None = None
) -> EngineOptions:
    merged: dict[str, Any] = dict(options or {})
    text = (os.environ if env is None else env).get("POPLAR_ENGINE_OPTIONS")
    if text:
        try:
            from_env = json.loads(text)
        except json.JSONDecodeError as err:
            raise EngineError(f"POPLAR_ENGINE_OPTIONS is not valid JSON: {err}") from None
        if not isinstance(from_env, dict):
            raise EngineError("POPLAR_ENGINE_OPTIONS must hold a JSON object")
        merged.update(from_env)
    unknown = sorted(set(merged) - KNOWN)
    if unknown:
        raise EngineError(f"unknown engine option(s) {unknown}; known: {sorted(KNOWN)}")
    every = _flag(merged.get("autoReport.all", "false"), "autoReport.all")
    graph = _flag(
        merged.get("autoReport.outputGraphProfile", every), "autoReport.outputGraphProfile"
    )
    execution = _flag(
        merged.get("autoReport.outputExecutionProfile", every), "autoReport.outputExecutionProfile"
    )
    mode_name = str(merged.get("debug.executionProfile", "ipu_model")).lower()
    if mode_name not in MODES:
        raise EngineError(
            f"engine option 'debug.executionProfile': {mode_name!r} unknown; "
            f"expected one of {sorted(MODES)}"
        )
    return EngineOptions(
        graph,
        execution,
        str(merged.get("autoReport.directory", ".")),
        _flag(merged.get("debug.allowOutOfMemory", "false"), "debug.allowOutOfMemory"),
        MODES[mode_name],
        _flag(merged.get("autoReport.outputHtml", "false"), "autoReport.outputHtml"),
        _count(merged, "target.firstRuntimeReplica", 0),
        _optional_count(merged, "target.numberRuntimeReplica"),
        _count(merged, "autoReport.executionProfileProgramRunCount", RUN_COUNT),
        _flag(merged.get("debug.checkIntegerDivision", "false"), "debug.checkIntegerDivision"),
        _flag(merged.get("autoReport.outputHostTime", "false"), "autoReport.outputHostTime"),
    )


def _optional_count(merged: dict[str, Any], name: str) -> int | None:
    return _count(merged, name, 0) if name in merged else None


def _count(merged: dict[str, Any], name: str, default: int) -> int:
    if name not in merged:
        return default
    value = merged[name]
    try:
        n = int(str(value))
    except ValueError:
        n = -1
    if n < 0:
        raise EngineError(f"engine option {name!r}: expected a non-negative integer, got {value!r}")
    return n
