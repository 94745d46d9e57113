"""The training step of ``t5_popxl.T5ForConditionalGeneration``, built as Graphcore's PopXL
fine-tuning builds its steps (``nlp/gpt_j/popxl/finetuning.py``): the forward graph called with
its variables, the cross-entropy loss graph and its gradient, the forward's gradient graph
accumulating every weight's gradient into variables (``autodiff_with_accumulation``) and,
optionally, popxl-addons' ``AdamOptimizerStep`` on every weight with the gradients clipped to a
global norm (``grad_reduce_square_add``), after which the accumulators are zeroed."""

from __future__ import annotations

from dataclasses import dataclass

import popxl_addons as addons
from popxl_addons import GraphWithNamedArgs, NamedTensors
from popxl_addons.ops.cross_entropy_sharded_loss import cross_entropy_sharded_loss
from popxl_addons.ops.grad_reduce_square_add import grad_reduce_square_add
from popxl_addons.optimizers.adam import AdamOptimizerStep
from popxl_addons.patterns import apply_pre_alias_patterns
from popxl_addons.transforms.repeat_graph import repeat_graph
from t5_popxl import IGNORE_INDEX, T5Config, T5ForConditionalGeneration

import popxl
from popxl import ops


@dataclass
class Adam:
    """AdamW's settings (decoupled weight decay, bias correction) and the global-norm clip."""

    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.01
    max_norm: float = 1.0

    def torch_reference(self, params, lr: float):
        """torch's ``optim.AdamW`` with these settings over ``params`` (parameters or
        parameter groups), the reference the training tests compare with."""
        import torch

        return torch.optim.AdamW(
            params,
            lr=lr,
            betas=(self.beta1, self.beta2),
            eps=self.eps,
            weight_decay=self.weight_decay,
        )


@dataclass
class TrainingStep:
    """What ``build_training_step`` made: the Ir, its input streams (by name: the batch, and
    ``lr`` with an optimizer), its output streams (``logits``, ``loss``, ``grad_norm`` with an
    optimizer), the model's variables and the accumulated gradients (named as the variables)."""

    ir: popxl.Ir
    inputs: dict[str, popxl.HostToDeviceStream]
    outputs: dict[str, popxl.DeviceToHostStream]
    variables: NamedTensors
    grads: NamedTensors


def optimizer_step(
    variables: NamedTensors,
    grads: NamedTensors,
    lr: popxl.Tensor,
    global_norm: popxl.Tensor,
    adam: Adam,
    loss_scaling: float,
) -> None:
    """``AdamOptimizerStep`` on every variable, each with its own state variables."""
    grads_by_name = grads.to_dict()
    for name, var in variables.to_dict().items():
        facts, graph = AdamOptimizerStep().create_graph(
            var.spec,
            var.spec,
            lr=popxl.TensorSpec((), popxl.float32),
            beta1=adam.beta1,
            beta2=adam.beta2,
            eps=adam.eps,
            weight_decay=adam.weight_decay,
            first_order_dtype=popxl.float32,
            bias_correction=True,
            global_norm=popxl.TensorSpec((), popxl.float32),
            global_norm_max=adam.max_norm,
            loss_scaling=loss_scaling,
        )
        state = facts.init(f"optim.{name}")
        graph.bind(state).call(var, grads_by_name[name], lr, global_norm)


def loss(logits: popxl.Tensor, labels: popxl.Tensor) -> popxl.Tensor:
    """Mean cross-entropy of the labels other than -100, the logits sharded over the vocabulary
    (the labels offset by each shard's first row: ``T5Embedding.offset_ids``)."""
    ignore_index = popxl.constant(IGNORE_INDEX, popxl.int32, name="ignore_index")
    group = popxl.gcg().ir.replica_grouping(group_size=popxl.gcg().ir.replication_factor)
    return cross_entropy_sharded_loss(logits, labels, ignore_index, replica_grouping=group)


def clipped_optimizer_step(
    variables: NamedTensors,
    accumulators: NamedTensors,
    lr: popxl.Tensor,
    adam: Adam,
    loss_scaling: float,
) -> popxl.Tensor:
    """The gradients' global norm (returned), the optimizer step clipping to it, and the
    accumulators (``accum.*`` and their counter) zeroed for the next step."""
    grad_norm = ops.init((), popxl.float32, name="grad_norm", init_type="zero")
    for grad in accumulators.accum.tensors:
        ops.add_(grad_norm, grad_reduce_square_add(grad, loss_scaling))
    global_norm = ops.sqrt(grad_norm)
    optimizer_step(variables, accumulators.accum, lr, global_norm, adam, loss_scaling)
    for accumulator in accumulators.tensors:
        ops.var_updates.accumulator_scale_(accumulator, 0.0)
    return global_norm


def forward_loss_backward(
    fwd_graph: GraphWithNamedArgs,
    variables: NamedTensors,
    inputs: list[popxl.Tensor],
    loss_graph: GraphWithNamedArgs,
    labels: popxl.Tensor,
    grad_facts,
    bwd_graph: GraphWithNamedArgs,
    loss_scaling: popxl.Tensor,
) -> tuple:
    """GPT-J's fine-tuning phases in one graph: the forward called with ``variables``, the
    loss of its first output, the loss's gradient (seeded with ``loss_scaling``) and the
    forward's gradient graph accumulating into fresh accumulators (``grad_facts``, from
    ``autodiff_with_accumulation``). Returns the forward's and the loss's call infos and
    the accumulators."""
    loss_bwd = addons.autodiff(loss_graph, grads_required=(loss_graph.graph.inputs[0],))
    fwd_info = fwd_graph.bind(variables).call_with_info(*inputs)
    loss_info = loss_graph.call_with_info(fwd_info.parent_output(0), labels)
    (dlogits,) = loss_bwd.call(loss_scaling, args=loss_bwd.grad_graph_info.inputs_dict(loss_info))
    accumulators = grad_facts.init()
    bwd_graph.bind(accumulators).call(dlogits, args=bwd_graph.grad_graph_info.inputs_dict(fwd_info))
    return fwd_info, loss_info, accumulators


def input_streams(config: T5Config, lr: bool) -> dict[str, popxl.HostToDeviceStream]:
    """The batch's streams (and the learning rate's)."""
    batch, enc, dec = config.micro_batch_size, config.encoder_length, config.decoder_length
    shapes = {
        "input_ids": ((batch, enc), popxl.int32),
        "attention_mask": ((batch, enc), popxl.float32),
        "decoder_input_ids": ((batch, dec), popxl.int32),
        "labels": ((batch * dec,), popxl.int32),
    }
    if lr:
        shapes["lr"] = ((), popxl.float32)
    return {name: popxl.h2d_stream(s, dtype, name=name) for name, (s, dtype) in shapes.items()}


def build_training_step(
    config: T5Config,
    adam: Adam | None = None,
    loss_scaling: float = 1.0,
    recompute: bool = False,
    device_iterations: int = 1,
) -> TrainingStep:
    """Forward, loss (mean cross-entropy over labels other than -100), the gradients of every
    weight (scaled by ``loss_scaling``, as float16 training keeps small gradients) and, with
    ``adam``, one optimizer step (on the unscaled gradients). With ``recompute`` the gradient
    graph recomputes the forward's activations from its inputs instead of receiving them. With
    ``device_iterations`` one run makes that many steps (popxl-addons' ``repeat_graph`` loops
    the main graph; each stream carries one batch per step)."""
    tp = config.tensor_parallel
    if adam is not None and tp > 1:
        raise NotImplementedError("the optimizer step of a tensor-parallel model")
    ir = popxl.Ir(replication=tp)
    with ir.main_graph, popxl.in_sequence():
        streams = input_streams(config, lr=adam is not None)
        tensors = {name: ops.host_load(stream, name=name) for name, stream in streams.items()}
        labels = tensors.pop("labels")
        lr = tensors.pop("lr", None)

        facts, fwd_graph = T5ForConditionalGeneration(config).create_graph(**tensors)
        variables = facts.init()
        logits_spec = fwd_graph.graph.outputs[0]
        loss_graph = GraphWithNamedArgs(ir.create_graph(loss, logits_spec, labels))
        grad_facts, bwd_graph = addons.transforms.autodiff_with_accumulation(
            fwd_graph,
            tensors_to_accumulate_grads=fwd_graph.args.tensors,
            replica_groupings=facts.replica_groupings,
        )
        # the gradient sums as chains of additions, as GPT-J's fine-tuning decomposes them
        popxl.transforms.decompose_sum(bwd_graph.graph)
        if recompute:
            bwd_graph = addons.transforms.recompute_graph(bwd_graph)
        fwd_info, loss_info, accumulators = forward_loss_backward(
            fwd_graph, variables, list(tensors.values()), loss_graph, labels, grad_facts,
            bwd_graph, popxl.constant(loss_scaling, config.dtype, name="loss_scaling"),
        )  # fmt: skip
        logits = fwd_info.parent_output(0)
        loss_value = loss_info.parent_output(0)

        outputs = {"logits": addons.host_store(logits), "loss": addons.host_store(loss_value)}
        if adam is not None:
            assert lr is not None
            global_norm = clipped_optimizer_step(variables, accumulators, lr, adam, loss_scaling)
            outputs["grad_norm"] = addons.host_store(global_norm)
    # the identical-inputs all-reduces become identities (PopART's OpToIdentityPattern)
    apply_pre_alias_patterns(ir, level="default")
    repeat_graph(ir.main_graph, device_iterations)
    ir.num_host_transfers = device_iterations
    return TrainingStep(ir, streams, outputs, variables, accumulators.accum)
