"""A fine-tuning step of ``resnet_popxl.ResNetForImageClassification``, built as Graphcore's
PopXL fine-tuning builds its steps (``nlp/gpt_j/popxl/finetuning.py``): the forward graph
called with its variables, the mean cross entropy of the logits and its gradient, the
forward's gradient graph accumulating the gradient of every trainable weight into variables
(``autodiff_with_accumulation``; the batch norms' running statistics are frozen, as in
``model.eval()``), then popxl-addons' ``AdamOptimizerStep`` on each trainable weight, after
which the accumulators are zeroed."""

from __future__ import annotations

from dataclasses import dataclass

import popxl_addons as addons
from popxl_addons import GraphWithNamedArgs, NamedTensors
from popxl_addons.ops.cross_entropy_sharded_loss import cross_entropy_sharded_loss
from popxl_addons.optimizers.adam import AdamOptimizerStep
from popxl_addons.patterns import apply_pre_alias_patterns
from resnet_popxl import ResNetConfig, ResNetForImageClassification

import popxl
from popxl import ops

#: the batch norms' statistics: variables of the model, but not trained
FROZEN = ("running_mean", "running_var")


@dataclass
class Adam:
    """Adam's settings (bias correction, no weight decay: torch's ``optim.Adam``)."""

    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8


@dataclass
class ResNetTrainingStep:
    ir: popxl.Ir
    inputs: dict[str, popxl.HostToDeviceStream]
    outputs: dict[str, popxl.DeviceToHostStream]
    variables: NamedTensors
    #: the accumulated gradients of the trainable variables, named as them
    grads: NamedTensors


def trainable(variables: NamedTensors) -> dict[str, popxl.Tensor]:
    """The variables by name, the frozen batch-norm statistics left out."""
    return {n: t for n, t in variables.to_dict().items() if not n.endswith(FROZEN)}


def adam_steps(variables: dict, grads: NamedTensors, lr: popxl.Tensor, adam: Adam) -> None:
    """``AdamOptimizerStep`` on every trainable variable, each with its own state."""
    grads_by_name = grads.to_dict()
    for name, var in variables.items():
        facts, graph = AdamOptimizerStep().create_graph(
            var.spec,
            var.spec,
            lr=popxl.TensorSpec((), popxl.float32),
            beta1=adam.beta1,
            beta2=adam.beta2,
            eps=adam.eps,
            weight_decay=0.0,
            first_order_dtype=popxl.float32,
            bias_correction=True,
        )
        state = facts.init(f"optim.{name}")
        graph.bind(state).call(var, grads_by_name[name], lr)


def training_step(config: ResNetConfig, adam: Adam | None) -> ResNetTrainingStep:
    """One step per run: ``pixels``, ``labels`` (and ``lr`` with ``adam``) in; ``loss`` and
    ``logits`` out. Without ``adam`` the gradients stay in ``grads`` after the run."""
    assert config.trainable_batch_norm, "batch_norm_inference has no gradient"
    ir = popxl.Ir()
    shape = (config.batch_size, config.num_channels, config.image_size, config.image_size)
    with ir.main_graph, popxl.in_sequence():
        inputs = {
            "pixels": popxl.h2d_stream(shape, config.dtype, name="pixels"),
            "labels": popxl.h2d_stream((config.batch_size,), popxl.int32, name="labels"),
        }
        if adam is not None:
            inputs["lr"] = popxl.h2d_stream((), popxl.float32, name="lr")
        loaded = {n: ops.host_load(s, name=n) for n, s in inputs.items()}
        pixels, labels = loaded["pixels"], loaded["labels"]

        facts, fwd_graph = ResNetForImageClassification(config).create_graph(pixels)
        variables = facts.init()
        to_train = trainable(fwd_graph.args)
        loss_graph = GraphWithNamedArgs(
            ir.create_graph(
                cross_entropy_sharded_loss,
                fwd_graph.graph.outputs[0],
                labels,
                reduction="mean",
                replica_grouping=ir.replica_grouping(group_size=1),
            )
        )
        grad_facts, bwd_graph = addons.transforms.autodiff_with_accumulation(
            fwd_graph, tensors_to_accumulate_grads=list(to_train.values())
        )
        loss_bwd = addons.autodiff(loss_graph, grads_required=(loss_graph.graph.inputs[0],))

        fwd_info = fwd_graph.bind(variables).call_with_info(pixels)
        loss_info = loss_graph.call_with_info(fwd_info.parent_output(0), labels)
        (dlogits,) = loss_bwd.call(
            popxl.constant(1.0, config.dtype, name="loss_scaling"),
            args=loss_bwd.grad_graph_info.inputs_dict(loss_info),
        )
        accumulators = grad_facts.init()
        bwd_graph.bind(accumulators).call(
            dlogits, args=bwd_graph.grad_graph_info.inputs_dict(fwd_info)
        )
        if adam is not None:
            adam_steps(trainable(variables), accumulators.accum, loaded["lr"], adam)
            for accumulator in accumulators.tensors:
                ops.var_updates.accumulator_scale_(accumulator, 0.0)
        outputs = {
            "loss": addons.host_store(loss_info.parent_output(0)),
            "logits": addons.host_store(fwd_info.parent_output(0)),
        }
    apply_pre_alias_patterns(ir, level="default")
    return ResNetTrainingStep(ir, inputs, outputs, variables, accumulators.accum)
