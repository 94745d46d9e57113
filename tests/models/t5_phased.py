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


class PhasedT5:
    """The phases of the model (made in the main graph's context) and what runs them."""

    def __init__(self, config: T5Config):
        if config.tensor_parallel != 1 or config.tie_word_embeddings:
            raise NotImplementedError("phased: one replica and an untied head only")
        self.config = config
        batch, enc, dec = config.micro_batch_size, config.encoder_length, config.decoder_length
        heads, dtype, eps = config.num_heads, config.dtype, config.layer_norm_epsilon
        spec = popxl.TensorSpec
        self.x_spec = spec((batch * enc, config.d_model), dtype)
        y_spec = spec((batch * dec, config.d_model), dtype)
        self.encoder_bias_spec = spec((batch, heads, enc, enc), dtype)
        self.decoder_bias_spec = spec((1, heads, dec, dec), dtype)

        self.shared = Phase(T5Embedding(config), spec((batch, enc), popxl.int32))
        # the decoder's embedding: the same weights (buffers), another id shape
        _, self.decoder_embedding = T5Embedding(config).create_graph(
            spec((batch, dec), popxl.int32)
        )
        self.decoder_embedding_bwd = recompute_graph(
            addons.autodiff(
                self.decoder_embedding, grads_required=self.decoder_embedding.args.tensors
            )
        )
        self.encoder_bias = Phase(T5RelativePositionBias(config, bidirectional=True), enc, enc)
        self.decoder_bias = Phase(T5RelativePositionBias(config, bidirectional=False), dec, dec)
        self.encoder_block = Phase(
            T5EncoderBlock(config),
            self.x_spec,
            self.encoder_bias_spec,
            entries=config.num_layers,
            required=(0, 1),
        )
        mask_spec = spec((batch, 1, 1, enc), dtype)
        self.decoder_block = Phase(
            T5DecoderBlock(config),
            *(y_spec, self.decoder_bias_spec, self.x_spec, mask_spec),
            entries=config.num_decoder_layers,
            required=(0, 1, 2),
        )
        self.encoder_norm = Phase(T5LayerNorm(eps), self.x_spec, required=(0,))
        self.decoder_norm = Phase(T5LayerNorm(eps), y_spec, required=(0,))
        word = spec(self.shared.buffers.word.weight.tensor_shape, dtype)
        self.head = Phase(T5LMHead(config), y_spec, word, required=(0,))
        labels = spec((batch * dec,), popxl.int32)
        ir = popxl.gcg().ir
        self.loss = GraphWithNamedArgs(
            ir.create_graph(loss, self.head.fwd.graph.outputs[0], labels)
        )
        self.loss_bwd = addons.autodiff(self.loss, grads_required=(self.loss.graph.inputs[0],))
        # each layer's input, stored by the forward for the backward
        self.encoder_inputs = popxl.remote_buffer(self.x_spec.shape, dtype, config.num_layers)
        self.decoder_inputs = popxl.remote_buffer(y_spec.shape, dtype, config.num_decoder_layers)

    def forward(self, inputs: dict[str, popxl.Tensor]) -> dict[str, popxl.Tensor]:
        """The forward phases: the loss and what the backward needs, by name."""
        config, dtype = self.config, self.config.dtype
        dec = config.decoder_length
        acts = {"mask": additive_mask(inputs["attention_mask"], dtype)}
        causal = popxl.constant(-1e4 * (1 - np.tril(np.ones((dec, dec)))), dtype, name="causal")

        def encoder_layer(x: popxl.Tensor, n: popxl.Tensor, bias: popxl.Tensor):
            ops.remote_store(self.encoder_inputs, n, x)
            return self.encoder_block.forward(n, x, bias), n + 1

        def decoder_layer(y, n, self_bias, encoder_output, mask):
            ops.remote_store(self.decoder_inputs, n, y)
            return self.decoder_block.forward(n, y, self_bias, encoder_output, mask), n + 1

        first = popxl.constant(0, popxl.int32, name="first_layer")
        x = self.shared.forward(0, inputs["input_ids"])
        acts["encoder_bias"] = self.encoder_bias.forward(0) + acts["mask"]
        x, _ = loop(encoder_layer, config.num_layers, x, first, acts["encoder_bias"])
        acts["encoder_last"] = x
        acts["encoder_output"] = self.encoder_norm.forward(0, x)

        acts["word"] = word = load_remote(self.shared.buffers, 0).word.weight
        y = self.decoder_embedding.bind(NamedTensors(word=NamedTensors(weight=word)))
        y = y.call(inputs["decoder_input_ids"])[0]
        acts["decoder_bias"] = self.decoder_bias.forward(0) + causal
        decoder_args = (acts["decoder_bias"], acts["encoder_output"], acts["mask"])
        y, _ = loop(decoder_layer, config.num_decoder_layers, y, first, *decoder_args)
        acts["decoder_last"] = y
        acts["decoder_output"] = self.decoder_norm.forward(0, y)
        logits = self.head.forward(0, acts["decoder_output"], word)
        acts["loss_info"] = self.loss.call_with_info(logits, inputs["labels"])
        acts["loss"] = acts["loss_info"].parent_output(0)
        return acts

    def backward(self, inputs: dict[str, popxl.Tensor], acts: dict) -> None:
        """The backward phases, the weights' gradients added to their accumulators."""
        config, dtype = self.config, self.config.dtype
        (dlogits,) = self.loss_bwd.call(
            popxl.constant(1.0, dtype),
            args=self.loss_bwd.grad_graph_info.inputs_dict(acts["loss_info"]),
        )
        (dy,) = self.head.backward(0, dlogits, acts["decoder_output"], acts["word"])
        (dy,) = self.decoder_norm.backward(0, dy, acts["decoder_last"])

        def decoder_layer_grad(dy, n, dself_bias, dencoder_output, self_bias, encoder_output, mask):
            y = ops.remote_load(self.decoder_inputs, n)
            fwd_inputs = (y, self_bias, encoder_output, mask)
            dy, dbias, doutput = self.decoder_block.backward(n, dy, *fwd_inputs)
            return dy, n - 1, dself_bias + dbias, dencoder_output + doutput

        def encoder_layer_grad(dx, n, dbias_total, bias):
            x = ops.remote_load(self.encoder_inputs, n)
            dx, dbias = self.encoder_block.backward(n, dx, x, bias)
            return dx, n - 1, dbias_total + dbias

        def zeros(shape: tuple[int, ...], name: str) -> popxl.Tensor:
            return ops.init(shape, dtype, name, "zero")

        last = popxl.constant(config.num_decoder_layers - 1, popxl.int32, name="last_layer")
        dy, _, dself_bias, dencoder_output = loop(
            decoder_layer_grad,
            config.num_decoder_layers,
            *(dy, last, zeros(self.decoder_bias_spec.shape, "dself_bias")),
            zeros(self.x_spec.shape, "dencoder_output"),
            *(acts["decoder_bias"], acts["encoder_output"], acts["mask"]),
        )
        self.decoder_bias.backward(0, dself_bias)
        decoder_embedding_grads = self.embedding_backward(dy, inputs, acts["word"])
        (dx,) = self.encoder_norm.backward(0, dencoder_output, acts["encoder_last"])

        last = popxl.constant(config.num_layers - 1, popxl.int32, name="last_encoder_layer")
        dx, _, dencoder_bias = loop(
            encoder_layer_grad,
            config.num_layers,
            *(dx, last, zeros(self.encoder_bias_spec.shape, "dencoder_bias")),
            acts["encoder_bias"],
        )
        # the bias [1, heads, q, k] was broadcast over the batch
        self.encoder_bias.backward(0, ops.sum(dencoder_bias, axis=0, keepdims=True))
        self.shared.backward(0, dx, inputs["input_ids"])
        accumulators = load_remote(self.shared.grad_buffers, 0)
        ops.var_updates.accumulate_(accumulators.word.weight, decoder_embedding_grads[0])
        store_remote(self.shared.grad_buffers, accumulators, 0)

    def embedding_backward(
        self, dy: popxl.Tensor, inputs: dict[str, popxl.Tensor], word: popxl.Tensor
    ) -> tuple[popxl.Tensor, ...]:
        """The decoder embedding's gradient (its weights are the encoder embedding's)."""
        graph = self.decoder_embedding
        (ids_input,) = [t for t in graph.graph.inputs if t.dtype == popxl.int32]
        by_input = {ids_input: inputs["decoder_input_ids"], graph.args.word.weight: word}
        bwd = self.decoder_embedding_bwd
        return ops.call(bwd.graph, inputs_dict=connect(bwd, dy, by_input))

    def named(self, which: str) -> NamedTensors:
        """The phases' ``variables`` or ``grads``, named as ``T5ForConditionalGeneration``'s."""
        tree = NamedTensors()
        tree.insert("shared", getattr(self.shared, which)[0])
        for name, bias, block, norm in (
            ("encoder", self.encoder_bias, self.encoder_block, self.encoder_norm),
            ("decoder", self.decoder_bias, self.decoder_block, self.decoder_norm),
        ):
            stack = NamedTensors.from_dict({str(n): v for n, v in enumerate(getattr(block, which))})
            stack.insert("relative_attention_bias", getattr(bias, which)[0])
            stack.insert("final_layer_norm", getattr(norm, which)[0])
            tree.insert(name, stack)
        tree.insert("lm_head", getattr(self.head, which)[0])
        return tree


def build_phased_step(config: T5Config) -> PhasedStep:
    ir = popxl.Ir()
    batch, enc, dec = config.micro_batch_size, config.encoder_length, config.decoder_length
    shapes = {
        "input_ids": ((batch, enc), popxl.int32),
        "attention_mask": ((batch, enc), popxl.float32),
        "decoder_input_ids": ((batch, dec), popxl.int32),
        "labels": ((batch * dec,), popxl.int32),
    }
    with ir.main_graph:
        streams = {n: popxl.h2d_stream(s, t, name=n) for n, (s, t) in shapes.items()}
        loss_stream = popxl.d2h_stream((), config.dtype, name="loss")
        model = PhasedT5(config)
        with popxl.in_sequence():
            inputs = {n: ops.host_load(s, name=n) for n, s in streams.items()}
            acts = model.forward(inputs)
            ops.host_store(loss_stream, acts["loss"])
            model.backward(inputs, acts)
    apply_pre_alias_patterns(ir, level="default")
    return PhasedStep(ir, streams, loss_stream, model.named("variables"), model.named("grads"))
