"""Greedy decoding one token per run with a key/value cache, with ``t5_popxl``'s weights: the
decoder's self-attention computes the new token's key and value only, writes them into the
cache at its position (``ops.dynamic_update_`` of a variable passed to the block's graph by
reference) and attends to the cache, the positions after it masked; the relative position
bias of the new query is the row of the full bias at its position (``ops.dynamic_slice``).
The encoder runs in every step (a small model: nothing to save there)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import popxl_addons as addons
from popxl_addons import NamedTensors
from t5_layers import split_heads
from t5_popxl import T5Attention as T5FullAttention
from t5_popxl import (
    T5Config,
    T5Embedding,
    T5Encoder,
    T5FeedForward,
    T5LayerNorm,
    T5LMHead,
    T5RelativePositionBias,
    additive_mask,
)

import popxl
from popxl import ops


class T5CachedSelfAttention(T5FullAttention):
    """Self-attention of one new position ``x [batch, d_model]`` to the cached ones: the
    weights are ``T5Attention``'s (the same names), the caches ``[batch, heads, dec, d_kv]``
    variables of its own, passed by reference and written in place."""

    def build(self, x: popxl.Tensor, bias: popxl.Tensor, position: popxl.Tensor) -> popxl.Tensor:
        config = self.config
        batch, heads = config.micro_batch_size, config.num_heads
        shape = (batch, heads, config.decoder_length, config.d_kv)
        query = split_heads(self.q(x), batch, heads)  # [batch, heads, 1, d_kv]
        caches = []
        for name, layer in (("key_cache", self.k), ("value_cache", self.v)):
            cache = self.add_variable_input(
                name, partial(np.zeros, shape), config.dtype, by_ref=True
            )
            new = split_heads(layer(x), batch, heads)
            caches.append(
                ops.dynamic_update_(cache, position, new, axes=[2], sizes=[1], no_overlap=True)
            )
        key_cache, value_cache = caches
        scores = query @ key_cache.transpose((0, 1, 3, 2)) + bias  # [batch, heads, 1, dec]
        z = ops.softmax(scores, axis=-1) @ value_cache
        return self.o(z.reshape((batch, heads * config.d_kv)))


class T5CachedDecoderBlock(addons.Module):
    """``T5DecoderBlock`` for one new position (the same weight names, and the caches)."""

    def __init__(self, config: T5Config):
        super().__init__()
        self.config = config
        self.self_attention_norm = T5LayerNorm(config.layer_norm_epsilon)
        self.self_attention = T5CachedSelfAttention(config)
        self.cross_attention_norm = T5LayerNorm(config.layer_norm_epsilon)
        self.cross_attention = T5FullAttention(config)
        self.ff_norm = T5LayerNorm(config.layer_norm_epsilon)
        self.ff = T5FeedForward(config)

    def build(
        self,
        x: popxl.Tensor,
        self_bias: popxl.Tensor,
        position: popxl.Tensor,
        encoder_output: popxl.Tensor,
        cross_bias: popxl.Tensor,
    ) -> popxl.Tensor:
        x = x + self.self_attention(self.self_attention_norm(x), self_bias, position)
        x = x + self.cross_attention(self.cross_attention_norm(x), cross_bias, encoder_output)
        return x + self.ff(self.ff_norm(x))


class T5CachedDecoder(addons.Module):
    """``T5Decoder`` for one new position at ``position`` (the same weight names)."""

    def __init__(self, config: T5Config):
        super().__init__()
        self.config = config
        self.relative_attention_bias = T5RelativePositionBias(config, bidirectional=False)
        self.final_layer_norm = T5LayerNorm(config.layer_norm_epsilon)

    def build(
        self,
        y: popxl.Tensor,
        position: popxl.Tensor,
        encoder_output: popxl.Tensor,
        encoder_mask: popxl.Tensor,
    ) -> popxl.Tensor:
        dec = self.config.decoder_length
        causal = popxl.constant(-1e4 * (1 - np.tril(np.ones((dec, dec)))), y.dtype)
        full_bias = self.relative_attention_bias(dec, dec) + causal  # [1, heads, dec, dec]
        bias = ops.dynamic_slice(full_bias, position, axes=[2], sizes=[1], no_overlap=True)
        facts, block = T5CachedDecoderBlock(self.config).create_graph(
            y, bias, position, encoder_output, encoder_mask
        )
        for i in range(self.config.num_decoder_layers):
            args = self.add_variable_inputs(i, facts)
            (y,) = block.bind(args).call(y, bias, position, encoder_output, encoder_mask)
        return self.final_layer_norm(y)


class T5CachedStep(addons.Module):
    """One decoding step: the encoder, then the new token ``[batch, 1]`` at ``position`` (a
    uint32 ``[1]``) through the decoder, to the logits ``[batch, vocab]``."""

    def __init__(self, config: T5Config):
        super().__init__()
        if config.tensor_parallel != 1:
            raise NotImplementedError("the cached decoder on one replica only")
        self.config = config
        self.encoder = T5Encoder(config)
        self.decoder = T5CachedDecoder(config)
        self.lm_head = T5LMHead(config)

    def build(
        self,
        input_ids: popxl.Tensor,
        attention_mask: popxl.Tensor,
        token: popxl.Tensor,
        position: popxl.Tensor,
    ) -> popxl.Tensor:
        config = self.config
        facts, embedding = T5Embedding(config).create_graph(input_ids)
        shared = self.add_variable_inputs("shared", facts)
        _, token_embedding = T5Embedding(config).create_graph(token)
        mask = additive_mask(attention_mask, config.dtype)
        (x,) = embedding.bind(shared).call(input_ids)
        encoder_output = self.encoder(x, mask)
        (y,) = token_embedding.bind(shared).call(token)
        y = self.decoder(y, position, encoder_output, mask)
        return self.lm_head(y, shared.word.weight)


@dataclass
class CachedDecoding:
    """The Ir, its input streams by name, the logits stream and the variables: the weights
    named as ``T5ForConditionalGeneration``'s, and the caches (``...key_cache``,
    ``...value_cache``)."""

    ir: popxl.Ir
    inputs: dict[str, popxl.HostToDeviceStream]
    logits: popxl.DeviceToHostStream
    variables: NamedTensors


def build_cached_decoding(config: T5Config) -> CachedDecoding:
    ir = popxl.Ir()
    batch, enc = config.micro_batch_size, config.encoder_length
    shapes = {
        "input_ids": ((batch, enc), popxl.int32),
        "attention_mask": ((batch, enc), popxl.float32),
        "token": ((batch, 1), popxl.int32),
        "position": ((1,), popxl.uint32),
    }
    with ir.main_graph, popxl.in_sequence():
        streams = {n: popxl.h2d_stream(s, t, name=n) for n, (s, t) in shapes.items()}
        logits_stream = popxl.d2h_stream((batch, config.vocab_size), config.dtype, name="logits")
        inputs = {n: ops.host_load(s, name=n) for n, s in streams.items()}
        facts, graph = T5CachedStep(config).create_graph(**inputs)
        variables = facts.init()
        (logits,) = graph.bind(variables).call(*inputs.values())
        ops.host_store(logits_stream, logits)
    return CachedDecoding(ir, streams, logits_stream, variables)
