"""The training step of a PopART session (see :mod:`tremula.popart.program`): a forward
subgraph differentiated by ``popxl.transforms.autodiff``, gradients summed over each
weight's replica group, optimizer updates with ``popxl.ops.var_updates``, and gradient
accumulation over ``A`` micro-batches."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tremula import popxl
from tremula.errors import PopartException
from tremula.popart.convert import Converter
from tremula.popart.optimizers import _hyper_name
from tremula.popart.program import _RANDOM, GRAD
from tremula.popxl import ops

if TYPE_CHECKING:
    from tremula.popart.program import Program
    from tremula.popart.weights import Weight

_VU = ops.var_updates


class _Forward:
    """The forward graph, its outputs by name and its grad graph."""

    def __init__(self, p: Program) -> None:
        cfg = p.cfg
        self.random = any(n.op_type in _RANDOM for n in p.nodes)
        if self.random:
            seed = np.array([cfg.seed & 0xFFFFFFFF, cfg.seed >> 32], np.uint32)
            p.seed = popxl.variable(seed, popxl.uint32, "__seed")
        self.graph = p.ir.create_empty_graph("forward")
        with self.graph:
            self.inputs = {
                tid: popxl.graph_input(s.shape, popxl.dtypes.dtype.as_dtype(s.dtype), tid)
                for tid, s in p.inputs.items()
            }
            self.weights = {
                tid: popxl.graph_input(w.variable.shape, w.variable.dtype, tid)
                for tid, w in p.weights.items()
                if w.variable is not None
            }
            seed_in = popxl.graph_input((2,), popxl.uint32, "seed") if self.random else None
            cx = Converter(p.graph, True, p._env(self.weights, self.inputs))
            cx.set_seed(seed_in)
            cx.run(p.nodes)
            self.seed_in = seed_in
            self.outputs = self._outputs(p, cx)
        self.trainable = [w for w in p.weights.values() if w.trainable]
        if not self.trainable:
            raise PopartException(
                f"TrainingSession: no weight of the model affects the loss '{cfg.loss}' "
                f"(nothing to train)"
            )
        self.grad = popxl.transforms.autodiff(
            self.graph,
            grads_provided=[self.outputs[cfg.loss]],  # type: ignore[index]
            grads_required=[self.weights[w.id] for w in self.trainable],
        )

    def _outputs(self, p: Program, cx: Converter) -> dict[str, popxl.Tensor]:
        """The loss, the forward anchors and the new running statistics as outputs."""
        loss = cx.env[p.cfg.loss]  # type: ignore[index]
        if not isinstance(loss, popxl.Tensor) or not loss.dtype.is_floating_point:
            raise PopartException(f"The loss '{p.cfg.loss}' must be a float tensor of the model")
        named = {p.cfg.loss: loss}
        for a in p.cfg.dataflow.anchors():
            if a not in p.inputs and a not in p.weights and not a.startswith(GRAD):
                v = cx.env[a]
                named[a] = cx.constant(a, v) if isinstance(v, np.ndarray) else v
        named.update({f"__update/{tid}": t for tid, t in cx.updates.items()})
        outputs: dict[str, int] = {}
        seen: dict[int, int] = {}
        for name, t in named.items():
            if id(t) not in seen:
                seen[id(t)] = len(seen)
                popxl.graph_output(t)
            outputs[name] = seen[id(t)]  # type: ignore[index]
        self.index = outputs
        return named  # type: ignore[return-value]


def _state(w: Weight, values: dict[str, popxl.Tensor], hypers: dict[str, Any]) -> dict:
    out = {name: values[name] for name in w.state}
    out.update({name: values[name] for name in hypers})
    return out


def _loss_grad(p: Program, loss: popxl.Tensor, values: dict[str, popxl.Tensor]) -> popxl.Tensor:
    """The gradient the backward pass starts from: the loss scaling, in the loss's shape."""
    value, const = p.cfg.optimizer.lossScaling()  # type: ignore[union-attr]
    ones = popxl.constant(np.ones(loss.shape, loss.dtype.as_numpy()), loss.dtype)
    if const:
        return ones if value == 1.0 else ops.mul(ones, value)
    scale = values[_hyper_name("lossScaling", None)]
    return ops.mul(ones, ops.cast(scale, loss.dtype))


def _micro(p: Program, f: _Forward, values: dict[str, popxl.Tensor]) -> list[popxl.Tensor]:
    """One micro-batch: load, forward, backward, anchors, running statistics; returns the
    gradients of the trainable weights (this replica's)."""
    loads = p._loads()
    feed = {f.inputs[t]: loads[t] for t in f.inputs}
    feed.update({f.weights[t]: values[t] for t in f.weights})
    if f.random:
        use, nxt = ops.split_random_seed(values["__seed"])
        _VU.copy_var_update_(values["__seed"], nxt)
        feed[f.seed_in] = use  # type: ignore[index]
    info = ops.call_with_info(f.graph, inputs_dict=feed)
    outs = {name: info.parent_output(i) for name, i in f.index.items()}
    dloss = _loss_grad(p, outs[p.cfg.loss], values)  # type: ignore[index]
    grads = list(ops.call(f.grad.graph, dloss, inputs_dict=f.grad.inputs_dict(info)))
    by_weight = {w.id: g for w, g in zip(f.trainable, grads)}
    for tid in p.cfg.dataflow.anchors():
        if tid.startswith(GRAD):
            t = by_weight[tid.removeprefix(GRAD)]
        else:
            t = loads[tid] if tid in loads else values[tid] if tid in values else outs[tid]
        if tid not in p.anchors:
            p._anchor_stream(tid, t)
        ops.host_store(p.anchors[tid].stream, t)
    for name, t in outs.items():
        if name.startswith("__update/"):
            _VU.copy_var_update_(values[name.removeprefix("__update/")], t)
    return grads


def _reduced(p: Program, w: Weight, g: popxl.Tensor) -> popxl.Tensor:
    """``g`` summed over the replicas of ``w``'s group (scaled for Mean reduction)."""
    if w.settings.getRealGroupSize(p.cfg.replicas) > 1 and p.cfg.replicas > 1:
        g = ops.collectives.replicated_all_reduce(g, "add", w.grouping(p.ir))
    scale = p.mean_scale(w)
    return g if scale == 1.0 else ops.mul(g, scale)


def _update(p: Program, f: _Forward, values: dict[str, popxl.Tensor], grads: list) -> None:
    """Reduce each gradient over its group, clip by norm if asked, update the weights."""
    opt = p.cfg.optimizer
    reduced = {w.id: _reduced(p, w, g) for w, g in zip(f.trainable, grads)}
    for setting in opt.clip_norm_settings:  # type: ignore[union-attr]
        setting.clip(reduced, opt.hyper("lossScaling", None, values))  # type: ignore[union-attr]
    for w in f.trainable:
        opt.apply(values[w.id], reduced[w.id], _state(w, values, p.hypers), w.id)  # type: ignore[union-attr]


def build_training(p: Program) -> None:
    """Add the training step to the Ir of ``p`` (in the main graph context)."""
    f = _Forward(p)
    A = p.cfg.accumulation
    if A > 1:
        for w in f.trainable:
            zeros = np.zeros(w.host.shape, w.variable.dtype.as_numpy())  # type: ignore[union-attr]  # [G, ...] on the host
            p.accums[w.id] = popxl.variable(
                zeros,
                w.variable.dtype,  # type: ignore[union-attr]
                f"Accum___{w.id}",
                replica_grouping=w.grouping(p.ir),
            )

    def micro_accumulate(values: dict[str, popxl.Tensor]) -> None:
        for w, g in zip(f.trainable, _micro(p, f, values)):
            _VU.accumulate_(values[f"Accum___{w.id}"], g)

    def step(values: dict[str, popxl.Tensor]) -> None:
        if A == 1:
            _update(p, f, values, _micro(p, f, values))
            return
        p.loop(A, micro_accumulate, values, "accumulate")
        accs = [values[f"Accum___{w.id}"] for w in f.trainable]
        _update(p, f, values, accs)
        for acc in accs:
            _VU.accumulator_zero_(acc)

    p.loop(p.cfg.batches, step, p._all_variables(), "step")
