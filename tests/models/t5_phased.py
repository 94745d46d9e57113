"""The gradients of ``t5_popxl``'s T5 by phased execution, as Graphcore's PopXL fine-tuning
runs large models (``nlp/gpt_j/popxl/finetuning.py``, ``nlp/bert/popxl/pretraining.py``): each
piece of the model (embedding, relative position biases, a block of each stack, the final
norms, the head) is one graph whose weights live in remote buffers (a stack's blocks share
buffers, one entry per layer) and are loaded where it runs; a stack runs its block in an
``ops.repeat`` over the layer index, storing each layer's input in a remote buffer; the
backward runs the stacks in reverse, each block's gradient graph recomputing its forward
(``recompute_graph``) from the stored input, the weight gradients accumulated into remote
buffers shaped as the weights, and the gradients of what every layer shares (the encoder's
output, the attention biases) summed over the layers in the loop."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import popxl_addons as addons
from popxl_addons import GraphWithNamedArgs, NamedTensors
from popxl_addons.patterns import apply_pre_alias_patterns
from popxl_addons.remote import load_remote, named_variable_buffers, store_remote
from popxl_addons.transforms.recomputation import recompute_graph
from t5_popxl import (
    T5Config,
    T5DecoderBlock,
    T5Embedding,
    T5EncoderBlock,
    T5LayerNorm,
    T5LMHead,
    T5RelativePositionBias,
    additive_mask,
)
from t5_training import loss

import popxl
from popxl import ops
from popxl.transforms.autodiff import ExpectedConnectionType


def connect(bwd: GraphWithNamedArgs, grad: popxl.Tensor, by_input: dict) -> dict:
    """The inputs of a gradient graph that recomputes its forward: the output's gradient and
    the forward's inputs (``by_input``: forward graph input -> tensor), by its expected
    connections (the forward ran elsewhere: no call site to take them from)."""
    connected = {}
    for graph_input, expected in zip(bwd.graph.inputs, bwd.grad_graph_info.expected_inputs):
        if expected.connection_type == ExpectedConnectionType.FwdGrad:
            connected[graph_input] = grad
        else:
            connected[graph_input] = by_input[expected.fwd_tensor]
    return connected


class Phase:
    """One piece of the model: its forward graph, its gradient graph (recomputing the forward),
    its weights in remote buffers (``entries`` of each) and as many gradient accumulators.
    ``required`` are the positions of the forward's (non-weight) inputs whose gradients the
    backward returns, in that order."""

    def __init__(
        self,
        module: addons.Module,
        *specs: object,
        entries: int = 1,
        required: tuple[int, ...] = (),
    ):
        facts, self.fwd = module.create_graph(*specs)
        self.weights = self.fwd.args.to_dict()
        weight_inputs = set(self.weights.values())
        self.inputs = [t for t in self.fwd.graph.inputs if t not in weight_inputs]
        wanted = [self.inputs[i] for i in required] + list(self.weights.values())
        self.bwd = recompute_graph(addons.autodiff(self.fwd, grads_required=wanted))
        self.buffers = named_variable_buffers(facts, entries=entries, shard_over_dict=False)
        self.grad_buffers = named_variable_buffers(facts, entries=entries, shard_over_dict=False)
        self.variables = [facts.init_remote(self.buffers, n, empty=True) for n in range(entries)]
        self.grads = [
            NamedTensors.from_dict(
                {
                    name: popxl.remote_variable(
                        np.zeros(buffer.tensor_shape, buffer.tensor_dtype.as_numpy()),
                        buffer,
                        n,
                        name=f"grad.{name}",
                    )
                    for name, buffer in self.grad_buffers.to_dict().items()
                }
            )
            for n in range(entries)
        ]

    def forward(self, entry: int | popxl.Tensor, *inputs: popxl.Tensor) -> popxl.Tensor:
        # autodiff made the forward's activations outputs too; the backward recomputes them
        return self.fwd.bind(load_remote(self.buffers, entry)).call(*inputs)[0]

    def backward(
        self, entry: int | popxl.Tensor, grad: popxl.Tensor, *inputs: popxl.Tensor
    ) -> tuple[popxl.Tensor, ...]:
        """The gradients of the ``required`` inputs, given the output's gradient and the
        forward's inputs; the weights' gradients are added to their accumulators."""
        weights = load_remote(self.buffers, entry).to_dict()
        by_input = dict(zip(self.inputs, inputs))
        by_input.update({self.weights[name]: t for name, t in weights.items()})
        outputs = ops.call(self.bwd.graph, inputs_dict=connect(self.bwd, grad, by_input))
        names = list(self.weights)
        n_required = len(outputs) - len(names)
        accumulators = load_remote(self.grad_buffers, entry)
        for name, accumulator in accumulators.to_dict().items():
            ops.var_updates.accumulate_(accumulator, outputs[n_required + names.index(name)])
        store_remote(self.grad_buffers, accumulators, entry)
        return tuple(outputs[:n_required])


@dataclass
class PhasedStep:
    """The Ir, its input streams by name, the loss stream, the weights and their gradients
    (both named as ``T5ForConditionalGeneration``'s variables)."""

    ir: popxl.Ir
    inputs: dict[str, popxl.HostToDeviceStream]
    loss: popxl.DeviceToHostStream
    variables: NamedTensors
    grads: NamedTensors


def loop(body, count: int, *inputs: popxl.Tensor) -> tuple[popxl.Tensor, ...]:
    """``ops.repeat`` of ``body``: its outputs carried into its first inputs."""
    return ops.repeat(popxl.gcg().ir.create_graph(body, *inputs), count, *inputs)


def build_phased_step(config: T5Config) -> PhasedStep:
    if config.tensor_parallel != 1 or config.tie_word_embeddings:
        raise NotImplementedError("phased: one replica and an untied head only")
    ir = popxl.Ir()
    batch, enc, dec = config.micro_batch_size, config.encoder_length, config.decoder_length
    heads, dtype, eps = config.num_heads, config.dtype, config.layer_norm_epsilon
    spec = popxl.TensorSpec
    shapes = {
        "input_ids": ((batch, enc), popxl.int32),
        "attention_mask": ((batch, enc), popxl.float32),
        "decoder_input_ids": ((batch, dec), popxl.int32),
        "labels": ((batch * dec,), popxl.int32),
    }
    with ir.main_graph:
        streams = {n: popxl.h2d_stream(s, t, name=n) for n, (s, t) in shapes.items()}
        loss_stream = popxl.d2h_stream((), dtype, name="loss")
        x_spec, y_spec = (
            spec((batch * enc, config.d_model), dtype),
            spec((batch * dec, config.d_model), dtype),
        )
        enc_bias_spec = spec((batch, heads, enc, enc), dtype)
        dec_bias_spec = spec((1, heads, dec, dec), dtype)
        mask_spec = spec((batch, 1, 1, enc), dtype)

        shared = Phase(T5Embedding(config), spec((batch, enc), popxl.int32))
        # the decoder's embedding: the same weights (buffers), another id shape
        _, decoder_embedding = T5Embedding(config).create_graph(spec((batch, dec), popxl.int32))
        decoder_embedding_bwd = recompute_graph(
            addons.autodiff(decoder_embedding, grads_required=decoder_embedding.args.tensors)
        )
        encoder_bias = Phase(T5RelativePositionBias(config, bidirectional=True), enc, enc)
        decoder_bias = Phase(T5RelativePositionBias(config, bidirectional=False), dec, dec)
        encoder_block = Phase(
            T5EncoderBlock(config),
            x_spec,
            enc_bias_spec,
            entries=config.num_layers,
            required=(0, 1),
        )
        decoder_block = Phase(
            T5DecoderBlock(config),
            y_spec,
            dec_bias_spec,
            x_spec,
            mask_spec,
            entries=config.num_decoder_layers,
            required=(0, 1, 2),
        )
        encoder_norm = Phase(T5LayerNorm(eps), x_spec, required=(0,))
        decoder_norm = Phase(T5LayerNorm(eps), y_spec, required=(0,))
        word_spec = shared.buffers.word.weight
        head = Phase(T5LMHead(config), y_spec, spec(word_spec.tensor_shape, dtype), required=(0,))
        loss_graph = GraphWithNamedArgs(
            ir.create_graph(loss, head.fwd.graph.outputs[0], spec((batch * dec,), popxl.int32))
        )
        loss_bwd = addons.autodiff(loss_graph, grads_required=(loss_graph.graph.inputs[0],))

        encoder_inputs = popxl.remote_buffer(x_spec.shape, dtype, config.num_layers)
        decoder_inputs = popxl.remote_buffer(y_spec.shape, dtype, config.num_decoder_layers)

        with popxl.in_sequence():
            inputs = {n: ops.host_load(s, name=n) for n, s in streams.items()}
            mask = additive_mask(inputs["attention_mask"], dtype)
            causal = popxl.constant(-1e4 * (1 - np.tril(np.ones((dec, dec)))), dtype, name="causal")

            # ---- forward ----
            x = shared.forward(0, inputs["input_ids"])
            encoder_self_bias = encoder_bias.forward(0) + mask

            def encoder_layer(x: popxl.Tensor, n: popxl.Tensor, bias: popxl.Tensor):
                ops.remote_store(encoder_inputs, n, x)
                return encoder_block.forward(n, x, bias), n + 1

            first = popxl.constant(0, popxl.int32, name="first_layer")
            x, _ = loop(encoder_layer, config.num_layers, x, first, encoder_self_bias)
            encoder_last = x
            encoder_output = encoder_norm.forward(0, x)

            word = load_remote(shared.buffers, 0)
            y = decoder_embedding.bind(word).call(inputs["decoder_input_ids"])[0]
            decoder_self_bias = decoder_bias.forward(0) + causal

            def decoder_layer(y, n, self_bias, encoder_output, mask):
                ops.remote_store(decoder_inputs, n, y)
                return decoder_block.forward(n, y, self_bias, encoder_output, mask), n + 1

            y, _ = loop(
                decoder_layer,
                config.num_decoder_layers,
                y,
                first,
                decoder_self_bias,
                encoder_output,
                mask,
            )
            decoder_last = y
            y = decoder_norm.forward(0, y)
            logits = head.forward(0, y, word.word.weight)
            loss_info = loss_graph.call_with_info(logits, inputs["labels"])
            ops.host_store(loss_stream, loss_info.parent_output(0))

            # ---- backward ----
            (dlogits,) = loss_bwd.call(
                popxl.constant(1.0, dtype), args=loss_bwd.grad_graph_info.inputs_dict(loss_info)
            )
            (dy,) = head.backward(0, dlogits, y, word.word.weight)
            (dy,) = decoder_norm.backward(0, dy, decoder_last)

            def decoder_layer_grad(
                dy, n, dself_bias, dencoder_output, self_bias, encoder_output, mask
            ):
                y = ops.remote_load(decoder_inputs, n)
                dy, dbias, doutput = decoder_block.backward(
                    n, dy, y, self_bias, encoder_output, mask
                )
                return dy, n - 1, dself_bias + dbias, dencoder_output + doutput

            last = popxl.constant(config.num_decoder_layers - 1, popxl.int32, name="last_layer")
            dy, _, dself_bias, dencoder_output = loop(
                decoder_layer_grad,
                config.num_decoder_layers,
                dy,
                last,
                ops.init(dec_bias_spec.shape, dtype, "dself_bias", "zero"),
                ops.init(x_spec.shape, dtype, "dencoder_output", "zero"),
                decoder_self_bias,
                encoder_output,
                mask,
            )
            decoder_bias.backward(0, dself_bias)
            (ids_input,) = [t for t in decoder_embedding.graph.inputs if t.dtype == popxl.int32]
            embedding_weight = decoder_embedding.args.word.weight
            decoder_embedding_grads = ops.call(
                decoder_embedding_bwd.graph,
                inputs_dict=connect(
                    decoder_embedding_bwd,
                    dy,
                    {ids_input: inputs["decoder_input_ids"], embedding_weight: word.word.weight},
                ),
            )
            (dx,) = encoder_norm.backward(0, dencoder_output, encoder_last)

            def encoder_layer_grad(dx, n, dbias_total, bias):
                x = ops.remote_load(encoder_inputs, n)
                dx, dbias = encoder_block.backward(n, dx, x, bias)
                return dx, n - 1, dbias_total + dbias

            last = popxl.constant(config.num_layers - 1, popxl.int32, name="last_encoder_layer")
            dx, _, dencoder_bias = loop(
                encoder_layer_grad,
                config.num_layers,
                dx,
                last,
                ops.init(enc_bias_spec.shape, dtype, "dencoder_bias", "zero"),
                encoder_self_bias,
            )
            # the bias [1, heads, q, k] was broadcast over the batch
            encoder_bias.backward(0, ops.sum(dencoder_bias, axis=0, keepdims=True))
            shared.backward(0, dx, inputs["input_ids"])
            accumulators = load_remote(shared.grad_buffers, 0)
            ops.var_updates.accumulate_(accumulators.word.weight, decoder_embedding_grads[0])
            store_remote(shared.grad_buffers, accumulators, 0)

        variables, grads = NamedTensors(), NamedTensors()
        for tree, which in ((variables, "variables"), (grads, "grads")):
            tree.insert("shared", getattr(shared, which)[0])
            for name, bias, block, norm in (
                ("encoder", encoder_bias, encoder_block, encoder_norm),
                ("decoder", decoder_bias, decoder_block, decoder_norm),
            ):
                stack = NamedTensors.from_dict(
                    {str(n): v for n, v in enumerate(getattr(block, which))}
                )
                stack.insert("relative_attention_bias", getattr(bias, which)[0])
                stack.insert("final_layer_norm", getattr(norm, which)[0])
                tree.insert(name, stack)
            tree.insert("lm_head", getattr(head, which)[0])
    apply_pre_alias_patterns(ir, level="default")
    return PhasedStep(ir, streams, loss_stream, variables, grads)
