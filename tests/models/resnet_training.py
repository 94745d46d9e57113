"""A fine-tuning step of ``resnet_popxl.ResNetForImageClassification``, built as Graphcore's
PopXL fine-tuning builds its steps (``nlp/gpt_j/popxl/finetuning.py``; the phases as
``t5_training`` builds them): the forward graph called with its variables, the mean cross
entropy of the logits and its gradient, the forward's gradient graph accumulating the
gradient of every trainable weight into variables (``autodiff_with_accumulation``; the
batch norms' running statistics are frozen, as in ``model.eval()``), then popxl-addons'
``AdamOptimizerStep`` on each trainable weight, clipped to the gradients' global norm,
after which the accumulators are zeroed."""

from __future__ import annotations

from dataclasses import dataclass

import popxl_addons as addons
from popxl_addons import GraphWithNamedArgs, NamedTensors
from popxl_addons.ops.cross_entropy_sharded_loss import cross_entropy_sharded_loss
from popxl_addons.patterns import apply_pre_alias_patterns
from resnet_popxl import ResNetConfig, ResNetForImageClassification
from t5_training import Adam, clipped_optimizer_step, forward_loss_backward

import popxl
from popxl import ops

#: the batch norms' statistics: variables of the model, but not trained
FROZEN = ("running_mean", "running_var")


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


def training_step(config: ResNetConfig, adam: Adam | None) -> ResNetTrainingStep:
    """One step per run: ``pixels``, ``labels`` (and ``lr`` with ``adam``) in; ``loss``,
    ``logits`` (and ``grad_norm``) out. Without ``adam`` the gradients stay in ``grads``
    after the run."""
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
        fwd_info, loss_info, accumulators = forward_loss_backward(
            fwd_graph, variables, [pixels], loss_graph, labels, grad_facts, bwd_graph,
            popxl.constant(1.0, config.dtype, name="loss_scaling"),
        )  # fmt: skip
        outputs = {
            "loss": addons.host_store(loss_info.parent_output(0)),
            "logits": addons.host_store(fwd_info.parent_output(0)),
        }
        if adam is not None:
            trained = NamedTensors.from_dict(trainable(variables))
            norm = clipped_optimizer_step(trained, accumulators, loaded["lr"], adam, 1.0)
            outputs["grad_norm"] = addons.host_store(norm)
    apply_pre_alias_patterns(ir, level="default")
    return ResNetTrainingStep(ir, inputs, outputs, variables, accumulators.accum)
