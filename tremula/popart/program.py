"""The PopXL program of a PopART session: an ONNX graph turned into a ``popxl.Ir``.

* Weights become grouped variables (``replica_grouping`` from their VariableSettings); in
  an inference session with ``constantWeights``, weights that return one value become
  constants. Data inputs become host-to-device streams, anchors device-to-host streams.
* Inference: a step loads the inputs, computes the anchors and stores them.
* Training: the forward graph is a subgraph (weights and inputs as graph inputs) that
  ``popxl.transforms.autodiff`` differentiates from the loss; a step loads the inputs,
  calls forward and backward, sums each weight's gradient over its replica group
  (``replicated_all_reduce``), and lets the optimizer update the weight. With gradient
  accumulation, ``A`` micro-batches accumulate their gradients first (a ``repeat``).
* ``batchesPerStep > 1`` repeats the step; the host arrays of a run are ``[bps * A, R,
  ...]`` slices, which the session rearranges into PopART's anchor layouts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tremula import popxl
from tremula.errors import PopartException
from tremula.popart import onnxutil
from tremula.popart.convert import Converter, OnnxGraph, _device_dtype
from tremula.popart.dataflow import DataFlow
from tremula.popart.optimizers import Optimizer
from tremula.popart.types import popxl_dtype
from tremula.popart.weights import Weight, settings_of
from tremula.popxl import ops
from tremula.popxl._ir.core.enums import ReductionType, ReplicatedStreamMode

GRAD = "Gradient___"
BROADCAST = ReplicatedStreamMode.Broadcast
_RANDOM = {"Dropout", "ShapedDropout"}
_FLOAT = {np.dtype(np.float32), np.dtype(np.float16)}


@dataclass
class Config:
    """What shapes the program (from the session's arguments and options)."""

    training: bool
    replicas: int
    accumulation: int
    batches: int
    dataflow: DataFlow
    loss: str | None
    optimizer: Optimizer | None
    constant_weights: bool
    mean_reduction: bool
    input_shapes: dict[str, tuple[int, ...]]
    seed: int = 0
    #: the replicas span the instances of a PopRun job (``Ir(replication="popdist")``)
    distributed: bool = False


@dataclass
class Stream:
    id: str
    stream: Any
    shape: tuple[int, ...]
    dtype: np.dtype


class Program:
    """Builds the ``popxl.Ir`` of a model; holds its weights and streams."""

    def __init__(self, graph: OnnxGraph, cfg: Config) -> None:
        self.graph, self.cfg = graph, cfg
        R = cfg.replicas
        self.ir = popxl.Ir(replication="popdist" if cfg.distributed else R)
        self.ir.num_host_transfers = cfg.batches * cfg.accumulation
        targets = list(cfg.dataflow.anchors()) + ([cfg.loss] if cfg.loss else [])
        needed = graph.ancestors(t.removeprefix(GRAD) for t in targets)
        self.nodes = [n for n in graph.nodes if any(o in needed for o in n.output)]
        used = {i for n in self.nodes for i in onnxutil.node_reads(n)} | needed
        self.weights = {
            tid: Weight.make(tid, data, settings_of(tid, graph.meta), R)
            for tid, data in graph.initializers.items()
            if tid in used
        }
        self.inputs: dict[str, Stream] = {}
        self.broadcast = {  # inputs streamed as one value for every replica (InputSettings)
            tid
            for tid in graph.inputs
            if graph.meta.get(f"__replicated_stream_mode/{tid}") == str(int(BROADCAST))
        }
        self.anchors: dict[str, Stream] = {}
        self.seed: popxl.Variable | None = None
        self.hypers: dict[str, popxl.Variable] = {}
        self.accums: dict[str, popxl.Variable] = {}
        self.states: dict[str, Weight] = {}  # optimizer state, held like weights
        self._check_anchors(needed)
        # the program runs in the order it is built (the optimizer's updates after the
        # reads of what they write): in_sequence records that order in the Ir
        with self.ir.main_graph, popxl.in_sequence():
            self._variables()
            self._streams()
            if cfg.training:
                self._build_training()
            else:
                self._build_inference()

    # ---- checks ----
    def _check_anchors(self, known: set[str]) -> None:
        ids = set(self.graph.inputs) | set(self.graph.initializers)
        ids |= {o for n in self.graph.nodes for o in n.output}
        for a in self.cfg.dataflow.anchors():
            base = a.removeprefix(GRAD)
            ok = base in ids and (a == base or (self.cfg.training and base in self.weights))
            if not ok:
                grads = ", or Gradient___<weight>" if self.cfg.training else ""
                raise PopartException(
                    f"Anchor tensor '{a}' is not in the model (anchors must be inputs, "
                    f"initializers or node outputs{grads})"
                )
        if self.cfg.loss is not None and self.cfg.loss not in ids:
            raise PopartException(f"The loss tensor '{self.cfg.loss}' is not in the model")

    # ---- variables and streams ----
    def _trainable(self) -> set[str]:
        if not self.cfg.training:
            return set()
        reach = self.graph.ancestors([self.cfg.loss])  # type: ignore[list-item]
        return {t for t, w in self.weights.items() if t in reach and w.dtype in _FLOAT}

    def _variables(self) -> None:
        R, cfg = self.cfg.replicas, self.cfg
        trainable = self._trainable()
        for tid, w in self.weights.items():
            constant = (not cfg.training and cfg.constant_weights and w.n_returned(R) == 1) or (
                cfg.training and w.dtype not in _FLOAT
            )
            if constant:
                continue
            w.trainable = tid in trainable
            w.variable = popxl.variable(
                w.host,
                popxl_dtype(_device_dtype(w.dtype)),
                tid,
                replica_grouping=w.grouping(self.ir),
            )
            if w.trainable:
                for name, init in cfg.optimizer.state(tid, w.host, w.groups).items():  # type: ignore[union-attr]
                    state = Weight(name, w.settings, init, init.shape[w.groups > 1 :], w.groups)
                    state.variable = w.state[name] = popxl.variable(
                        init,
                        popxl_dtype(init.dtype),
                        name,
                        replica_grouping=w.grouping(self.ir),
                    )
                    self.states[name] = state
                for name, value in cfg.optimizer.hyper_variables(tid).items():  # type: ignore[union-attr]
                    if name not in self.hypers:
                        self.hypers[name] = popxl.variable(np.float32(value), popxl.float32, name)

    def _streams(self) -> None:
        read = {i for n in self.nodes for i in onnxutil.node_reads(n)}
        for tid, (dtype, shape) in self.graph.inputs.items():
            if tid not in read and tid not in self.cfg.dataflow.anchors():
                continue
            shape = self.cfg.input_shapes.get(tid, shape)
            if not all(isinstance(d, int) and d >= 0 for d in shape):
                raise PopartException(
                    f"Input '{tid}' has shape {list(shape)} with unknown dimensions: give its "
                    f"shape with popart.InputShapeInfo (inputShapeInfo.add('{tid}', "
                    f"popart.TensorInfo(...)))"
                )
            dev = _device_dtype(dtype)
            s = popxl.h2d_stream(tuple(shape), popxl_dtype(dev), name=tid)
            self.inputs[tid] = Stream(tid, s, tuple(shape), dev)

    def _anchor_stream(self, tid: str, t: popxl.Tensor) -> None:
        s = popxl.d2h_stream(t.shape, t.dtype, name=f"anchor/{tid}")
        self.anchors[tid] = Stream(tid, s, tuple(t.shape), t.dtype.as_numpy())

    # ---- values of the current graph ----
    def _env(self, weights: dict[str, popxl.Tensor], loads: dict[str, popxl.Tensor]) -> dict:
        env: dict[str, Any] = {t: w.host for t, w in self.weights.items() if w.variable is None}
        env.update(weights)
        env.update(loads)
        return env

    def _loads(self) -> dict[str, popxl.Tensor]:
        return {tid: ops.host_load(s.stream, tid) for tid, s in self.inputs.items()}

    def loop(self, count: int, body: Any, values: dict[str, popxl.Tensor], name: str) -> None:
        """``body(values)`` ``count`` times: inline when once, else as a repeat whose graph
        takes every variable (``values``, tensors of the current graph) by reference."""
        if count == 1:
            body(values)
            return
        graph = self.ir.create_empty_graph(name)
        with graph:
            inner = {
                n: popxl.graph_input(v.shape, v.dtype, n, by_ref=True) for n, v in values.items()
            }
            body(inner)
        ops.repeat(graph, count, inputs_dict={inner[n]: values[n] for n in values})

    def _all_variables(self) -> dict[str, popxl.Tensor]:
        out: dict[str, popxl.Tensor] = {}
        for tid, w in self.weights.items():
            if w.variable is not None:
                out[tid] = w.variable
                out.update(w.state)
        out.update(self.hypers)
        out.update({f"Accum___{tid}": v for tid, v in self.accums.items()})
        if self.seed is not None:
            out["__seed"] = self.seed
        return out

    # ---- inference ----
    def _build_inference(self) -> None:
        def step(values: dict[str, popxl.Tensor]) -> None:
            cx = Converter(self.graph, False, self._env(values, self._loads()))
            cx.run(self.nodes)
            for tid in self.cfg.dataflow.anchors():
                t = (
                    cx.constant(tid, cx.env[tid])
                    if isinstance(cx.env[tid], np.ndarray)
                    else (cx.env[tid])
                )
                if tid not in self.anchors:
                    self._anchor_stream(tid, t)
                ops.host_store(self.anchors[tid].stream, t)

        self.loop(self.cfg.batches, step, self._all_variables(), "step")

    # ---- training ----
    def _build_training(self) -> None:
        from tremula.popart.training import build_training

        build_training(self)

    def mean_scale(self, w: Weight) -> float:
        """The factor of a weight's summed gradient under Mean reduction."""
        if not self.cfg.mean_reduction:
            return 1.0
        rg = w.settings.getRealGroupSize(self.cfg.replicas)
        return 1.0 / (rg * self.cfg.accumulation)

    @property
    def reduction(self) -> Any:
        return ReductionType.Mean if self.cfg.mean_reduction else ReductionType.Sum
