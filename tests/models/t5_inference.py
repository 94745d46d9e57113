"""Greedy decoding with ``t5_popxl``'s layers, built as Graphcore's PopXL inference builds it
(``nlp/gpt_j/popxl/inference.py``): every weight lives in a remote buffer
(``named_variable_buffers``; the blocks of a stack share buffers with one entry per layer),
is loaded where it is used (``load_remote_graph``), and each stack runs its block graph in an
``ops.repeat`` over the layer index. One run reads the encoder's ids and mask and the decoder's
ids so far, and returns the logits of each sample's ``last_token_index`` and the next token
(their argmax); the host appends it and runs again. With tensor parallelism each replica
holds its shards of the weights (in its part of each buffer) and the logits of its shard of
the vocabulary are gathered from all (``replicated_all_gather``) before the argmax, as
GPT-J's ``generate_greedy_tp`` does."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from popxl_addons import GraphWithNamedArgs, NamedTensors
from popxl_addons.patterns import apply_pre_alias_patterns
from popxl_addons.remote import load_remote_graph, named_variable_buffers
from popxl_addons.variable_factory import NamedVariableFactories
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

import popxl
from popxl import ops


@dataclass
class Inference:
    """The Ir, its input streams by name, the next-token stream and the model's (remote)
    variables, named as ``T5ForConditionalGeneration``'s."""

    ir: popxl.Ir
    inputs: dict[str, popxl.HostToDeviceStream]
    next_token: popxl.DeviceToHostStream
    next_token_logits: popxl.DeviceToHostStream
    variables: NamedTensors


class RemoteLayer:
    """A layer's graph, its remote buffers (``entries`` of them) and its variables."""

    def __init__(self, facts: NamedVariableFactories, graph: GraphWithNamedArgs, entries: int = 1):
        self.graph = graph
        self.buffers = named_variable_buffers(facts, entries=entries, shard_over_dict=False)
        self.variables = [facts.init_remote(self.buffers, n, empty=True) for n in range(entries)]

    def load(self, entry: int | popxl.Tensor) -> NamedTensors:
        load_graph, names = load_remote_graph(self.buffers)
        return NamedTensors.pack(names, load_graph.call(entry))

    def call(self, *args: popxl.Tensor, entry: int | popxl.Tensor = 0) -> popxl.Tensor:
        (out,) = self.graph.bind(self.load(entry)).call(*args)
        return out


def stack(layer: RemoteLayer, layers: int, x: popxl.Tensor, *args: popxl.Tensor) -> popxl.Tensor:
    """``layers`` calls of a block, each loading its weights: ``ops.repeat`` over the index."""
    ir = popxl.gcg().ir

    def one_layer(x: popxl.Tensor, n: popxl.Tensor, *args: popxl.Tensor):
        return layer.call(x, *args, entry=n), n + 1

    index = popxl.constant(0, popxl.int32, name="layer_index")
    graph = ir.create_graph(one_layer, x, index, *args)
    x, _ = ops.repeat(graph, layers, x, index, *args)
    return x


def build_inference(config: T5Config) -> Inference:
    tp = config.tensor_parallel
    ir = popxl.Ir(replication=tp)
    batch, enc, dec = config.micro_batch_size, config.encoder_length, config.decoder_length
    spec = popxl.TensorSpec
    shapes = {
        "input_ids": ((batch, enc), popxl.int32),
        "attention_mask": ((batch, enc), popxl.float32),
        "decoder_input_ids": ((batch, dec), popxl.int32),
        "last_token_index": ((batch,), popxl.int32),
    }
    with ir.main_graph:
        streams = {
            name: popxl.h2d_stream(s, dtype, name=name) for name, (s, dtype) in shapes.items()
        }
        next_token_stream = popxl.d2h_stream((batch,), popxl.int32, name="next_token")
        logits_stream = popxl.d2h_stream((batch, config.vocab_size), config.dtype, name="logits")

        # ---- graphs ----
        x_spec = spec((batch * enc, config.d_model), config.dtype)
        y_spec = spec((batch * dec, config.d_model), config.dtype)
        heads = config.num_heads // tp  # each replica's
        shared_facts, encoder_embedding = T5Embedding(config).create_graph(
            spec((batch, enc), popxl.int32)
        )
        _, decoder_embedding = T5Embedding(config).create_graph(spec((batch, dec), popxl.int32))
        shared = RemoteLayer(shared_facts, encoder_embedding)

        def remote(module: popxl.Module, *args: object, entries: int = 1) -> RemoteLayer:
            return RemoteLayer(*module.create_graph(*args), entries=entries)

        encoder_bias = remote(T5RelativePositionBias(config, bidirectional=True), enc, enc)
        decoder_bias = remote(T5RelativePositionBias(config, bidirectional=False), dec, dec)
        mask_spec = spec((batch, 1, 1, enc), config.dtype)
        encoder_block = remote(
            T5EncoderBlock(config),
            x_spec,
            spec((batch, heads, enc, enc), config.dtype),
            entries=config.num_layers,
        )
        decoder_block = remote(
            T5DecoderBlock(config),
            y_spec,
            spec((1, heads, dec, dec), config.dtype),
            x_spec,
            mask_spec,
            entries=config.num_decoder_layers,
        )
        encoder_norm = remote(T5LayerNorm(config.layer_norm_epsilon), x_spec)
        decoder_norm = remote(T5LayerNorm(config.layer_norm_epsilon), y_spec)
        word_spec = shared_facts.word.weight
        head = remote(T5LMHead(config), y_spec, spec(word_spec.shape, word_spec.dtype))

        variables = NamedTensors()
        variables.insert("shared", shared.variables[0])
        for name, bias, block, norm in (
            ("encoder", encoder_bias, encoder_block, encoder_norm),
            ("decoder", decoder_bias, decoder_block, decoder_norm),
        ):
            tree = NamedTensors.from_dict({str(n): v for n, v in enumerate(block.variables)})
            tree.insert("relative_attention_bias", bias.variables[0])
            tree.insert("final_layer_norm", norm.variables[0])
            variables.insert(name, tree)
        variables.insert("lm_head", head.variables[0])

        # ---- program ----
        with popxl.in_sequence():
            inputs = {name: ops.host_load(stream, name=name) for name, stream in streams.items()}
            word = shared.load(0)
            mask = additive_mask(inputs["attention_mask"], config.dtype)

            (x,) = encoder_embedding.bind(word).call(inputs["input_ids"])
            bias = encoder_bias.call() + mask
            x = stack(encoder_block, config.num_layers, x, bias)
            encoder_output = encoder_norm.call(x)

            (y,) = decoder_embedding.bind(word).call(inputs["decoder_input_ids"])
            causal = popxl.constant(
                -1e4 * (1 - np.tril(np.ones((dec, dec)))), config.dtype, name="causal_mask"
            )
            self_bias = decoder_bias.call() + causal
            y = stack(decoder_block, config.num_decoder_layers, y, self_bias, encoder_output, mask)
            y = decoder_norm.call(y)
            logits = head.call(y, word.word.weight)

            # the logits of each sample's last token
            rows = popxl.constant(np.arange(batch) * dec, popxl.int32, name="sample_rows")
            next_token_logits = logits[inputs["last_token_index"] + rows]
            if tp > 1:  # each replica has its shard of the vocabulary: gather them all
                next_token_logits = ops.collectives.replicated_all_gather(
                    next_token_logits,
                    group=ir.replica_grouping(group_size=tp),
                    output_shape="new_axis",
                )
                next_token_logits = next_token_logits.transpose((1, 0, 2)).reshape_(
                    (batch, config.vocab_size)
                )
            ops.host_store(logits_stream, next_token_logits)
            ops.host_store(next_token_stream, ops.argmax(next_token_logits, dim=1))
    apply_pre_alias_patterns(ir, level="default")
    return Inference(ir, streams, next_token_stream, logits_stream, variables)
