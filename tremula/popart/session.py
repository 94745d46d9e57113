"""PopART's ``InferenceSession`` and ``TrainingSession``: the ONNX
model becomes a PopXL program in the constructor (grouped shapes are checked there),
``prepareDevice`` compiles it for the device (a ``popxl.Session``), ``run`` streams a
``PyStepIO`` through it, and the weight calls move weights between the session's host data,
the device and the user's buffers as PopART does.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tremula import popdist, popxl
from tremula.errors import EngineError, PopartException
from tremula.popart import onnxutil
from tremula.popart.convert import OnnxGraph
from tremula.popart.dataflow import DataFlow, PyStepIO, anchor_lead, reduce_anchor
from tremula.popart.devices import DeviceInfo
from tremula.popart.optimizers import Optimizer
from tremula.popart.program import Config, Program
from tremula.popart.session_weights import SessionWeights
from tremula.popart.types import BY_NUMPY, TensorInfo
from tremula.popart.weights import broadcast_hosts
from tremula.popxl._ir.core.enums import Instrumentation, ReductionType
from tremula.popxl._ir.core.log import LOG
from tremula.popxl._ir.core.options import SessionOptions

__all__ = ["InferenceSession", "InputShapeInfo", "Patterns", "TrainingSession"]

_LOG = LOG.getChild("session")


class InputShapeInfo:
    """Shapes of inputs whose ONNX shapes have unknown dimensions."""

    def __init__(self) -> None:
        self._infos: dict[str, TensorInfo] = {}

    def add(self, id: str, info: TensorInfo) -> None:
        self._infos[id] = info

    def get(self, id: str) -> TensorInfo:
        return self._infos[id]

    def has(self, id: str) -> bool:
        return id in self._infos


class Patterns:
    """PopART's graph patterns (accepted: they change the schedule, not the numbers)."""

    def __init__(self, level: Any = None) -> None:
        self.level = level
        self._set: dict[str, bool] = {}

    def enablePattern(self, name: str, value: bool) -> Patterns:
        self._set[name] = bool(value)
        return self

    def isPatternEnabled(self, name: str) -> bool:
        return self._set.get(name, True)

    enableRuntimeAsserts = enablePattern
    InPlace = property(lambda self: self._set.get("InPlace", True))


class _Session(SessionWeights):
    """What inference and training sessions share."""

    _training = False

    def __init__(
        self,
        fnModel: Any,
        dataFlow: DataFlow,
        deviceInfo: DeviceInfo,
        loss: str | None,
        optimizer: Optimizer | None,
        inputShapeInfo: InputShapeInfo | None,
        userOptions: SessionOptions | None,
        name: str,
    ) -> None:
        opts = userOptions if userOptions is not None else SessionOptions()
        if not isinstance(dataFlow, DataFlow):
            raise TypeError(f"{name}: dataFlow must be a popart.DataFlow")
        if not isinstance(deviceInfo, DeviceInfo):
            raise TypeError(f"{name}: deviceInfo must be a popart.DeviceInfo (DeviceManager)")
        model = onnxutil.load_model(fnModel, name)
        self.name, self._options, self._device = name, opts, deviceInfo
        self._model = model
        self.dataFlow = dataFlow
        self.replicationFactor = opts.getGlobalReplicationFactor()
        self.accumulationFactor = opts.getAccumulationFactor() if self._training else 1
        self._check_options(opts)
        #: the replicas this process runs and streams data for: all of them, or this
        #: instance's block of a PopRun job (weights stay global)
        self.localReplicationFactor, distributed = _instance_replicas(opts, name)
        shapes = {
            k: tuple(v.shape()) for k, v in (inputShapeInfo or InputShapeInfo())._infos.items()
        }
        cfg = Config(
            training=self._training,
            replicas=self.replicationFactor,
            distributed=distributed,
            accumulation=self.accumulationFactor,
            batches=dataFlow.batchesPerStep(),
            dataflow=dataFlow,
            loss=loss,
            optimizer=optimizer,
            constant_weights=bool(opts.constantWeights) and not self._training,
            mean_reduction=opts.accumulationAndReplicationReductionType == ReductionType.Mean,
            input_shapes=shapes,
        )
        self._program = Program(OnnxGraph.parse(model), cfg)
        self._optimizer = optimizer
        self._popxl: popxl.Session | None = None
        self._weights_written = False
        self._ran = False  # run was called (getCycleCount needs a run)
        ignored = opts.ignored_changes()
        if ignored:
            _LOG.debug("%s: options accepted without effect: %s", name, ignored)

    def _check_options(self, opts: SessionOptions) -> None:
        if not opts.enableReplicatedGraphs and int(opts.replicatedGraphCount) > 1:
            raise PopartException(
                "enableReplicatedGraphs is false, but replicatedGraphCount > 1. Either enable "
                "replication, or set the replicated graph count to 1"
            )
        kinds = set(opts.hardwareInstrumentations)
        if opts.instrumentWithHardwareCycleCounter and kinds != {Instrumentation.Outer}:
            raise PopartException(
                f"hardwareInstrumentations {sorted(kinds)}: Tremula counts the cycles of the "
                f"whole program only, {{popart.Instrumentation.Outer}} (the default)"
            )

    @property
    def _local(self) -> int:
        return self.localReplicationFactor

    # ---- device ----
    def prepareDevice(self, loadEngine: bool = True) -> None:
        """Compile the program for the device (and load it unless ``loadEngine=False``)."""
        if self._popxl is None:
            self._popxl = popxl.Session(
                self._program.ir,
                self._device,
                weights_to_host_on_exit=False,
                engine_options=dict(self._options.engineOptions),
            )
            # every run's cycles, also past the execution profile's run count
            counter = self._options.instrumentWithHardwareCycleCounter
            self._popxl.engine.count_cycles = bool(counter)
        if loadEngine:
            self.loadEngineAndConnectStreams()

    def loadEngineAndConnectStreams(self) -> None:
        session = self._prepared("loadEngineAndConnectStreams")
        if not session.is_attached:
            session.__enter__()

    def _prepared(self, what: str) -> popxl.Session:
        if self._popxl is None:
            raise PopartException(f"{what}: call prepareDevice first")
        return self._popxl

    @property
    def engine(self) -> Any:
        """The Poplar engine (profiles: ``get_graph_profile``, ``print_profile_summary``)."""
        return self._prepared("engine").engine

    def getSummaryReport(self, resetProfile: bool = True) -> str:
        """The profile summary of the runs so far (Tremula's text summary)."""
        engine = self.engine
        text = engine.profile_summary()
        if resetProfile:
            engine.reset_execution_profile()
        return text

    def getCycleCount(self, id: str = "") -> int:
        """The IPU cycles of the last ``run`` (the whole program: PopART's
        ``Instrumentation.Outer``, id ``""``). On the IPU Model these are the run's modelled
        cycles, as its execution profile counts them; deterministic.

        Raises:
            PopartException: ``instrumentWithHardwareCycleCounter`` is not set; another
                ``id``; before ``run``; a CPU device (it models no cycles).
        """
        if not self._options.instrumentWithHardwareCycleCounter:
            raise PopartException(
                "SessionOption 'instrumentWithHardwareCycleCounter' must be set to true in "
                "order to measure cycle count"
            )
        if id != "":
            raise PopartException(
                f"getCycleCount: no cycle count {id!r}: Tremula counts the whole program "
                f"(Instrumentation.Outer), id ''"
            )
        session = self._prepared("getCycleCount")
        if not self._ran:
            raise PopartException("Must call run before getCycleCount")
        try:
            return session.engine.run_cycles(0)
        except EngineError as err:
            raise PopartException(f"getCycleCount: {err}") from None

    # ---- running ----
    def initAnchorArrays(self) -> dict[str, np.ndarray]:
        """``{anchor id: empty array}`` of PopART's anchor shapes."""
        return {
            a: np.empty(self._anchor_shape(a), s.dtype) for a, s in self._program.anchors.items()
        }

    def _anchor_shape(self, tid: str) -> tuple[int, ...]:
        s = self._program.anchors[tid]
        bps, A, R = self.dataFlow.batchesPerStep(), self.accumulationFactor, self._local
        return anchor_lead(self.dataFlow.art(tid), bps, A, R) + s.shape

    def run(self, stepio: PyStepIO, debugName: str = "") -> None:
        """Run ``batchesPerStep`` batches: read the inputs of ``stepio``, fill its anchors.

        Raises:
            PopartException: training before ``weightsFromHost``; a missing input, one of
                the wrong element count or type; a missing or wrongly sized anchor array.
        """
        session = self._prepared("run")
        if self._training and not self._weights_written and self._program.weights:
            raise PopartException(
                "Must call weightsFromHost before run as the model has initializers and the "
                "session has been created in training mode"
            )
        self.loadEngineAndConnectStreams()
        feeds = {s.stream: self._input(stepio, s) for s in self._program.inputs.values()}
        outputs = self._check_outputs(stepio)
        results = session.run(feeds)
        self._ran = True
        bps, A, R = self.dataFlow.batchesPerStep(), self.accumulationFactor, self._local
        for tid, out in outputs.items():
            s = self._program.anchors[tid]
            values = results[s.stream].reshape(bps, A, R, *s.shape)
            reduced = reduce_anchor(self.dataFlow.art(tid), values)
            out[...] = reduced.reshape(out.shape)

    def _input(self, stepio: PyStepIO, s: Any) -> np.ndarray:
        if s.id not in stepio.inputs:
            raise PopartException(f"No tensor {s.id} provided in PyStepIO's inputs")
        arr = np.asarray(stepio.inputs[s.id])
        bps, A, R = self.dataFlow.batchesPerStep(), self.accumulationFactor, self._local
        broadcast = s.id in self._program.broadcast  # one value for every replica
        expected = math.prod(s.shape) * A * bps * (1 if broadcast else R)
        if arr.size != expected:
            replicas = "" if broadcast else f" x local replicas {R}"
            raise PopartException(
                f"Unexpected number of input elements for Tensor {s.id}. Expected {expected}, "
                f"but received {arr.size}.\n(shape {list(s.shape)} x accumulation factor {A} x "
                f"batches per step {bps}{replicas}; the array has shape {list(arr.shape)})"
            )
        onnx_type = self._program.graph.inputs[s.id][0]
        if arr.dtype != onnx_type and arr.dtype != s.dtype:
            if not (arr.dtype == np.int64 and s.dtype == np.int32):
                raise PopartException(
                    f"Type discrepancy for tensor {s.id}. User provided : {_name(arr.dtype)} "
                    f"and expected : {_name(onnx_type)}. Consider a custom copy here (as memcpy "
                    f"cannot be used)"
                )
            _LOG.warning("input %s: INT64 data is sent as INT32", s.id)
        arr = arr.astype(s.dtype, copy=False).reshape(bps * A, 1 if broadcast else R, *s.shape)
        if broadcast and R > 1:
            arr = np.broadcast_to(arr, (bps * A, R, *s.shape))
        lead = tuple(d for d in (bps * A, R) if d > 1)
        return arr.reshape(lead + s.shape)

    def _check_outputs(self, stepio: PyStepIO) -> dict[str, np.ndarray]:
        out = {}
        for tid in self._program.anchors:
            arr = stepio.outputs.get(tid)
            if arr is None:
                raise PopartException(f"No tensor {tid} provided in PyStepIO's outputs")
            want = self._anchor_shape(tid)
            if not isinstance(arr, np.ndarray) or arr.size != math.prod(want):
                got = list(np.shape(arr))
                raise PopartException(
                    f"Unexpected number of output elements for Tensor {tid}. Expected "
                    f"{math.prod(want)} (shape {list(want)}), but the array has shape {got}"
                )
            out[tid] = arr
        return out

    # ---- queries ----
    def getInfo(self, id: str) -> TensorInfo:
        """The type and per-replica shape of a tensor of the program."""
        p = self._program
        if id in p.weights:
            w = p.weights[id]
            return TensorInfo(w.dtype, w.replica_shape)
        if id in p.inputs:
            return TensorInfo(p.graph.inputs[id][0], p.inputs[id].shape)
        if id in p.anchors:
            return TensorInfo(p.anchors[id].dtype, p.anchors[id].shape)
        raise PopartException(
            f"getInfo: no tensor {id!r} in the session (its weights, inputs and anchors)"
        )

    def getAllTensorIds(self) -> list[str]:
        p = self._program
        return sorted(
            set(p.weights)
            | set(p.inputs)
            | set(p.anchors)
            | {o for n in p.nodes for o in n.output if o}
        )

    def getModel(self) -> bytes:
        return self._model.SerializeToString()


def _instance_replicas(opts: SessionOptions, name: str) -> tuple[int, bool]:
    """(replicas this process runs, whether the session spans instances of a PopRun job).

    A distributed session (``enableDistributedReplicatedGraphs``) runs
    ``replicatedGraphCount`` of ``globalReplicationFactor`` replicas from
    ``globalReplicaOffset``: that must be this instance's block of the PopRun job
    (``popdist.popart.configureSessionOptions`` sets it so). Without poprun, a distributed
    session of one instance (all replicas local) runs as a plain replicated one.

    Raises:
        PopartException: the options and the PopRun layout disagree.
    """
    R = opts.getGlobalReplicationFactor()
    if not opts.enableDistributedReplicatedGraphs:
        return R, False
    L = int(opts.replicatedGraphCount) if opts.enableReplicatedGraphs else 1
    mine = (R, L, int(opts.globalReplicaOffset))
    launched = popdist.isPopdistEnvSet()
    total, local, first = (
        popdist.getNumTotalReplicas(),
        popdist.getNumLocalReplicas(),
        popdist.getReplicaIndexOffset(),
    )
    if launched and mine == (total, local, first):
        return L, total > local
    if not launched and mine == (R, R, 0):
        return R, False
    where = (
        f"this instance of the PopRun job runs replicas [{first}, {first + local}) of {total}"
        if launched
        else "the process was not launched by poprun (one instance); launch it with poprun"
    )
    raise PopartException(
        f"{name}: a distributed session of replicas [{mine[2]}, {mine[2] + L}) of {R} "
        f"(globalReplicaOffset, replicatedGraphCount, globalReplicationFactor), but {where}; "
        f"set the options with popdist.popart.configureSessionOptions(opts)"
    )


def _name(dtype: np.dtype) -> str:
    row = BY_NUMPY.get(np.dtype(dtype))
    return row.name if row else str(dtype)


class InferenceSession(_Session):
    """``InferenceSession(fnModel, dataFlow, deviceInfo, inputShapeInfo=InputShapeInfo(),
    patterns=None, userOptions=SessionOptions(), name="inference")``."""

    def __init__(
        self,
        fnModel: Any,
        dataFlow: DataFlow,
        deviceInfo: DeviceInfo,
        inputShapeInfo: InputShapeInfo | None = None,
        patterns: Patterns | None = None,
        userOptions: SessionOptions | None = None,
        name: str = "inference",
    ) -> None:
        super().__init__(
            fnModel, dataFlow, deviceInfo, None, None, inputShapeInfo, userOptions, name
        )


class TrainingSession(_Session):
    """``TrainingSession(fnModel, dataFlow, loss, optimizer, deviceInfo, ...)``: each batch
    runs forward, backward and the optimizer."""

    _training = True

    def __init__(
        self,
        fnModel: Any,
        dataFlow: DataFlow,
        loss: str,
        optimizer: Optimizer,
        deviceInfo: DeviceInfo,
        inputShapeInfo: InputShapeInfo | None = None,
        patterns: Patterns | None = None,
        userOptions: SessionOptions | None = None,
        name: str = "training",
    ) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{name}: optimizer must be a popart.SGD, ConstSGD or Adam")
        super().__init__(
            fnModel, dataFlow, deviceInfo, str(loss), optimizer, inputShapeInfo, userOptions, name
        )

    def updateOptimizerFromHost(self, optimizer: Optimizer) -> None:
        """Send new values of the optimizer's non-constant hyper-parameters."""
        self._optimizer._check_update(optimizer)  # type: ignore[union-attr]
        session = self._prepared("updateOptimizerFromHost")
        self._optimizer = optimizer
        self._program.cfg.optimizer = optimizer
        data = {}
        for w in self._program.weights.values():
            if w.trainable:
                for name, value in optimizer.hyper_variables(w.id).items():
                    data[self._program.hypers[name]] = np.float32(value)
        if data:
            session.write_variables_data(data)

    def broadcastWeights(self, rootRank: int = 0) -> None:
        """Make every instance of the PopRun job hold instance ``rootRank``'s host weights
        and optimizer state (what its ``weightsFromHost`` sends), and write them to each
        instance's device: instances that initialised their weights differently train as
        one from here. Collective: every instance calls it with the same ``rootRank``.

        Raises:
            PopartException: before ``prepareDevice``; ``rootRank`` not an instance of the
                job.
            DistributedError: the instances disagree on the call or on ``rootRank``.
        """
        self._prepared("broadcastWeights")
        n = popdist.getNumInstances()
        if isinstance(rootRank, bool) or not isinstance(rootRank, int) or not 0 <= rootRank < n:
            raise PopartException(
                f"broadcastWeights: rootRank {rootRank!r} is not an instance of the job "
                f"(instances 0 to {n - 1})"
            )
        broadcast_hosts(self._variable_weights(), rootRank)
        self.weightsFromHost()

    def setRandomSeed(self, seedValue: int) -> None:
        """Seed the random ops (dropout) of the program."""
        seed = self._program.seed
        if seed is None:
            return
        value = np.array([seedValue & 0xFFFFFFFF, (seedValue >> 32) & 0xFFFFFFFF], np.uint32)
        self._prepared("setRandomSeed").write_variable_data(seed, value)
