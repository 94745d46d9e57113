"""A fine-tuning step of the tensor-parallel Dolly, built as GPT-J's ``finetuning.py`` builds
its phases, in one graph: the LM model's forward, the mean cross entropy of its sharded
logits (``cross_entropy_sharded_loss``), the gradients of every weight accumulated into
variables (``autodiff_with_accumulation``), the global norm of the gradients
(``grad_reduce_square_add``; the shards' squares summed over the tensor-parallel replicas,
the identical weights' counted once) and popxl-addons' ``AdamOptimizerStep`` on every
weight, its state sharded as the weight (``replica_grouping``), clipping to the norm. Weight
decay spares biases and layer norms (GPT-J's ``requires_weight_decay``)."""

from __future__ import annotations

from dataclasses import dataclass

import popxl_addons as addons
from dolly_layers import DollyConfig, tp_grouping
from dolly_popxl import DollyLMHeadModelTP
from popxl_addons import GraphWithNamedArgs, NamedTensors
from popxl_addons.ops.cross_entropy_sharded_loss import cross_entropy_sharded_loss
from popxl_addons.ops.grad_reduce_square_add import grad_reduce_square_add
from popxl_addons.optimizers.adam import AdamOptimizerStep
from popxl_addons.patterns import apply_pre_alias_patterns
from t5_training import Adam, forward_loss_backward

import popxl
from popxl import ops


@dataclass
class DollyTrainingStep:
    ir: popxl.Ir
    inputs: dict[str, popxl.HostToDeviceStream]
    outputs: dict[str, popxl.DeviceToHostStream]
    variables: NamedTensors


def requires_weight_decay(name: str) -> bool:
    """Biases and layer norms are not decayed (by their variables' names)."""
    return not (name.endswith("bias") or any(p.startswith("ln_") for p in name.split(".")))


def global_norm(config: DollyConfig, grads: NamedTensors, sharded: set[str]) -> popxl.Tensor:
    """The norm of all the gradients: each shard's squares summed over the shards, each
    identical weight's (the same on every replica) once."""
    sharded_sq = ops.init((), popxl.float32, name="sharded_sq", init_type="zero")
    identical_sq = ops.init((), popxl.float32, name="identical_sq", init_type="zero")
    for name, grad in grads.to_dict().items():
        ops.add_(sharded_sq if name in sharded else identical_sq, grad_reduce_square_add(grad, 1))
    sharded_sq = ops.collectives.replicated_all_reduce(
        sharded_sq, op="add", group=tp_grouping(config).transpose()
    )
    return ops.sqrt(sharded_sq + identical_sq)


def adam_steps(
    adam: Adam,
    variables: NamedTensors,
    grads: NamedTensors,
    groups: dict,
    lr: popxl.Tensor,
    norm: popxl.Tensor,
) -> None:
    """``AdamOptimizerStep`` on every variable, its state grouped as the variable (a
    sharded weight's state sharded with it), clipping to the gradients' global ``norm``."""
    grads_by_name = grads.to_dict()
    for name, var in variables.to_dict().items():
        optim_facts, optim_graph = AdamOptimizerStep().create_graph(
            var.spec,
            var.spec,
            lr=popxl.TensorSpec((), popxl.float32),
            replica_grouping=groups[name],
            weight_decay=adam.weight_decay if requires_weight_decay(name) else 0.0,
            beta1=adam.beta1,
            beta2=adam.beta2,
            eps=adam.eps,
            bias_correction=True,
            first_order_dtype=popxl.float32,
            global_norm=popxl.TensorSpec((), popxl.float32),
            global_norm_max=adam.max_norm,
        )
        state = optim_facts.init(f"optim.{name}")
        optim_graph.bind(state).call(var, grads_by_name[name], lr, norm)


def training_step(config: DollyConfig, adam: Adam) -> DollyTrainingStep:
    """One step per run: ``words`` (offset per replica), ``labels`` (offset as the logits'
    shards), ``lr`` in; ``loss`` and ``grad_norm`` out."""
    ir = popxl.Ir(replication=config.tensor_parallel)
    rows = config.micro_batch_size * config.sequence_length
    with ir.main_graph, popxl.in_sequence():
        inputs = {
            "words": popxl.h2d_stream((rows,), popxl.int32, name="words"),
            "labels": popxl.h2d_stream((rows,), popxl.int32, name="labels"),
            "lr": popxl.h2d_stream((), popxl.float32, name="lr"),
        }
        words, labels, lr = (ops.host_load(s, name=n) for n, s in inputs.items())

        facts, fwd_graph = DollyLMHeadModelTP(config).create_graph(words)
        variables = facts.init()
        loss_graph = GraphWithNamedArgs(
            ir.create_graph(
                cross_entropy_sharded_loss,
                fwd_graph.graph.outputs[0],
                labels,
                reduction="mean",
                replica_grouping=tp_grouping(config).transpose(),
            )
        )
        grad_facts, bwd_graph = addons.transforms.autodiff_with_accumulation(
            fwd_graph,
            tensors_to_accumulate_grads=fwd_graph.args.tensors,
            replica_groupings=facts.replica_groupings,
        )
        _, loss_info, accumulators = forward_loss_backward(
            fwd_graph, variables, [words], loss_graph, labels, grad_facts, bwd_graph,
            popxl.constant(1.0, config.dtype, name="loss_scaling"),
        )  # fmt: skip

        groups = facts.replica_groupings.to_dict()
        sharded = {n for n, g in groups.items() if g is not None and g.num_groups > 1}
        grads = accumulators.accum
        norm = global_norm(config, grads, sharded)
        adam_steps(adam, variables, grads, groups, lr, norm)
        for accumulator in accumulators.tensors:
            ops.var_updates.accumulator_scale_(accumulator, 0.0)

        outputs = {
            "loss": addons.host_store(loss_info.parent_output(0)),
            "grad_norm": addons.host_store(norm),
        }
    apply_pre_alias_patterns(ir, level="default")
    return DollyTrainingStep(ir, inputs, outputs, variables)
