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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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
    """A layer's graph, its remote buffers (``entries`` of them) and its variables. With
    ``io_tiles`` the weights are loaded by the IO tiles and copied to the compute tiles."""

    def __init__(
        self,
        facts: NamedVariableFactories,
        graph: GraphWithNamedArgs,
        entries: int = 1,
        io_tiles: bool = False,
    ):
        self.graph = graph
        self.io_tiles = io_tiles
        self.buffers = named_variable_buffers(facts, entries=entries, shard_over_dict=False)
        self.variables = [facts.init_remote(self.buffers, n, empty=True) for n in range(entries)]

    def load(self, entry: int | popxl.Tensor) -> NamedTensors:
        load_graph, names = load_remote_graph(self.buffers, use_io_tiles=self.io_tiles)
        loaded = load_graph.call(entry)
        if self.io_tiles:
            loaded = tuple(ops.io_tile_copy(t) for t in loaded)
        return NamedTensors.pack(names, loaded)

    def call(self, *args: popxl.Tensor, entry: int | popxl.Tensor = 0) -> popxl.Tensor:
        (out,) = self.graph.bind(self.load(entry)).call(*args)
        return out


def layer_loop(body: Callable[..., Any], layers: int, *inputs: popxl.Tensor) -> popxl.Tensor:
    """``layers`` calls of a block, each loading its weights: ``body(x, n, ...)`` returns the
    block's output and ``n + 1``, in an ``ops.repeat`` over the layer index ``n``."""
    index = popxl.constant(0, popxl.int32, name="layer_index")
    x, *rest = inputs
    graph = popxl.gcg().ir.create_graph(body, x, index, *rest)
    x, _ = ops.repeat(graph, layers, x, index, *rest)
    return x


class RemoteT5:
    """The model's graphs with their weights in remote buffers (made in the main graph's
    context), and the program computing the logits."""

    def __init__(self, config: T5Config, io_tiles: bool = False):
        self.config = config
        batch, enc, dec = config.micro_batch_size, config.encoder_length, config.decoder_length
        spec, dtype, eps = popxl.TensorSpec, config.dtype, config.layer_norm_epsilon
        x_spec = spec((batch * enc, config.d_model), dtype)
        y_spec = spec((batch * dec, config.d_model), dtype)
        heads = config.num_heads // config.tensor_parallel  # each replica's
        shared_facts, self.encoder_embedding = T5Embedding(config).create_graph(
            spec((batch, enc), popxl.int32)
        )
        _, self.decoder_embedding = T5Embedding(config).create_graph(
            spec((batch, dec), popxl.int32)
        )
        self.shared = RemoteLayer(shared_facts, self.encoder_embedding, io_tiles=io_tiles)

        def remote(module: popxl.Module, *args: object, entries: int = 1) -> RemoteLayer:
            return RemoteLayer(*module.create_graph(*args), entries=entries, io_tiles=io_tiles)

        self.encoder_bias = remote(T5RelativePositionBias(config, bidirectional=True), enc, enc)
        self.decoder_bias = remote(T5RelativePositionBias(config, bidirectional=False), dec, dec)
        encoder_bias_spec = spec((batch, heads, enc, enc), dtype)
        self.encoder_block = remote(
            T5EncoderBlock(config), x_spec, encoder_bias_spec, entries=config.num_layers
        )
        decoder_specs = (y_spec, spec((1, heads, dec, dec), dtype), x_spec)
        mask_spec = spec((batch, 1, 1, enc), dtype)
        self.decoder_block = remote(
            T5DecoderBlock(config), *decoder_specs, mask_spec, entries=config.num_decoder_layers
        )
        self.encoder_norm = remote(T5LayerNorm(eps), x_spec)
        self.decoder_norm = remote(T5LayerNorm(eps), y_spec)
        word = shared_facts.word.weight
        self.head = remote(T5LMHead(config), y_spec, spec(word.shape, word.dtype))

    def logits(self, inputs: dict[str, popxl.Tensor]) -> popxl.Tensor:
        """``[batch * dec, vocab]`` (with tensor parallelism, of this replica's vocabulary)."""
        config, dtype, dec = self.config, self.config.dtype, self.config.decoder_length
        word = self.shared.load(0)
        mask = additive_mask(inputs["attention_mask"], dtype)

        (x,) = self.encoder_embedding.bind(word).call(inputs["input_ids"])
        bias = self.encoder_bias.call() + mask
        x = layer_loop(self.encoder_layer, config.num_layers, x, bias)
        encoder_output = self.encoder_norm.call(x)

        (y,) = self.decoder_embedding.bind(word).call(inputs["decoder_input_ids"])
        causal = popxl.constant(
            -1e4 * (1 - np.tril(np.ones((dec, dec)))), dtype, name="causal_mask"
        )
        self_bias = self.decoder_bias.call() + causal
        decoder_args = (self_bias, encoder_output, mask)
        y = layer_loop(self.decoder_layer, config.num_decoder_layers, y, *decoder_args)
        y = self.decoder_norm.call(y)
        return self.head.call(y, word.word.weight)

    def encoder_layer(self, x: popxl.Tensor, n: popxl.Tensor, bias: popxl.Tensor):
        return self.encoder_block.call(x, bias, entry=n), n + 1

    def decoder_layer(
        self,
        y: popxl.Tensor,
        n: popxl.Tensor,
        self_bias: popxl.Tensor,
        encoder_output: popxl.Tensor,
        mask: popxl.Tensor,
    ):
        return self.decoder_block.call(y, self_bias, encoder_output, mask, entry=n), n + 1

    def variables(self) -> NamedTensors:
        """The weights, named as ``T5ForConditionalGeneration``'s."""
        variables = NamedTensors()
        variables.insert("shared", self.shared.variables[0])
        for name, bias, block, norm in (
            ("encoder", self.encoder_bias, self.encoder_block, self.encoder_norm),
            ("decoder", self.decoder_bias, self.decoder_block, self.decoder_norm),
        ):
            tree = NamedTensors.from_dict({str(n): v for n, v in enumerate(block.variables)})
            tree.insert("relative_attention_bias", bias.variables[0])
            tree.insert("final_layer_norm", norm.variables[0])
            variables.insert(name, tree)
        variables.insert("lm_head", self.head.variables[0])
        return variables


def next_token_logits(
    config: T5Config, logits: popxl.Tensor, last_token_index: popxl.Tensor
) -> popxl.Tensor:
    """The logits ``[batch, vocab]`` of each sample's last token; with tensor parallelism each
    replica's shard of the vocabulary is gathered from all, as GPT-J's ``generate_greedy_tp``
    gathers them."""
    batch, dec, tp = config.micro_batch_size, config.decoder_length, config.tensor_parallel
    rows = popxl.constant(np.arange(batch) * dec, popxl.int32, name="sample_rows")
    chosen = logits[last_token_index + rows]
    if tp > 1:
        chosen = ops.collectives.replicated_all_gather(
            chosen, group=popxl.gcg().ir.replica_grouping(group_size=tp), output_shape="new_axis"
        )
        chosen = chosen.transpose((1, 0, 2)).reshape_((batch, config.vocab_size))
    return chosen


def build_inference(config: T5Config, io_tiles: int = 0) -> Inference:
    """The program of one decoding step; with ``io_tiles`` that many tiles of each IPU load
    the weights (``numIOTiles``), as Graphcore's models overlap loading with computing."""
    ir = popxl.Ir(replication=config.tensor_parallel)
    ir._pb_ir.getSessionOptions().numIOTiles = io_tiles
    batch, enc, dec = config.micro_batch_size, config.encoder_length, config.decoder_length
    shapes = {
        "input_ids": ((batch, enc), popxl.int32),
        "attention_mask": ((batch, enc), popxl.float32),
        "decoder_input_ids": ((batch, dec), popxl.int32),
        "last_token_index": ((batch,), popxl.int32),
    }
    with ir.main_graph:
        streams = {n: popxl.h2d_stream(s, t, name=n) for n, (s, t) in shapes.items()}
        next_token_stream = popxl.d2h_stream((batch,), popxl.int32, name="next_token")
        logits_stream = popxl.d2h_stream((batch, config.vocab_size), config.dtype, name="logits")
        model = RemoteT5(config, io_tiles=io_tiles > 0)
        with popxl.in_sequence():
            inputs = {name: ops.host_load(stream, name=name) for name, stream in streams.items()}
            logits = next_token_logits(config, model.logits(inputs), inputs["last_token_index"])
            ops.host_store(logits_stream, logits)
            ops.host_store(next_token_stream, ops.argmax(logits, dim=1))
    apply_pre_alias_patterns(ir, level="default")
    return Inference(ir, streams, next_token_stream, logits_stream, model.variables())
