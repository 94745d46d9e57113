"""A small T5 encoder-decoder (T5 v1.1 / Flan-T5) written as Graphcore writes its PopXL models.

Graphcore's examples (``nlp/t5/popxl``, like ``nlp/gpt_j/popxl`` and ``nlp/bert/popxl``) build
each layer as a popxl-addons ``addons.Module`` whose weights are ``add_variable_input``s, reuse
one block graph per stack (``Module.create_graph``, then ``graph.bind(args).call``), take
gradients with ``addons.autodiff`` / ``addons.transforms.autodiff_with_accumulation`` and map
Hugging Face weights in a static ``hf_mapping``. This file is such a model (its layers in
``t5_layers.py``), run unmodified on Tremula's ``popxl`` by ``tests/models/test_t5_popxl.py``:
``T5EncoderBlock`` / ``T5DecoderBlock`` (pre-norm residual blocks, the decoder's with causal
self-attention and cross-attention to the encoder), the stacks ``T5Encoder`` / ``T5Decoder``
(one block graph called per layer) and ``T5ForConditionalGeneration``. ``t5_training.py``
builds its training step (loss, gradients, Adam), ``t5_inference.py`` greedy decoding from
remote weights and ``t5_phased.py`` its gradients by phased execution.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import popxl_addons as addons
from popxl_addons import NamedTensors
from t5_layers import (
    IGNORE_INDEX,
    T5Attention,
    T5Config,
    T5Embedding,
    T5FeedForward,
    T5LayerNorm,
    T5LMHead,
    T5RelativePositionBias,
    additive_mask,
    shard,
    tp_grouping,
)

import popxl

__all__ = [
    "IGNORE_INDEX",
    "T5Attention",
    "T5Config",
    "T5Decoder",
    "T5DecoderBlock",
    "T5Embedding",
    "T5Encoder",
    "T5EncoderBlock",
    "T5FeedForward",
    "T5ForConditionalGeneration",
    "T5LMHead",
    "T5LayerNorm",
    "T5RelativePositionBias",
    "additive_mask",
    "shard",
    "tp_grouping",
]


class T5EncoderBlock(addons.Module):
    """Pre-norm self-attention and feed-forward, each added to the residual."""

    def __init__(self, config: T5Config):
        super().__init__()
        self.config = config
        self.self_attention_norm = T5LayerNorm(config.layer_norm_epsilon)
        self.self_attention = T5Attention(config)
        self.ff_norm = T5LayerNorm(config.layer_norm_epsilon)
        self.ff = T5FeedForward(config)

    def build(self, x: popxl.Tensor, bias: popxl.Tensor) -> popxl.Tensor:
        x = x + self.self_attention(self.self_attention_norm(x), bias)
        return x + self.ff(self.ff_norm(x))

    @staticmethod
    def hf_mapping(config: T5Config, variables: NamedTensors, hf_block: Any) -> dict:
        attention, ff = hf_block.layer
        return {
            **T5LayerNorm.hf_mapping(config, variables.self_attention_norm, attention.layer_norm),
            **T5Attention.hf_mapping(config, variables.self_attention, attention.SelfAttention),
            **T5LayerNorm.hf_mapping(config, variables.ff_norm, ff.layer_norm),
            **T5FeedForward.hf_mapping(config, variables.ff, ff.DenseReluDense),
        }


class T5DecoderBlock(addons.Module):
    """Causal self-attention, cross-attention to the encoder's output, feed-forward."""

    def __init__(self, config: T5Config):
        super().__init__()
        self.config = config
        self.self_attention_norm = T5LayerNorm(config.layer_norm_epsilon)
        self.self_attention = T5Attention(config)
        self.cross_attention_norm = T5LayerNorm(config.layer_norm_epsilon)
        self.cross_attention = T5Attention(config)
        self.ff_norm = T5LayerNorm(config.layer_norm_epsilon)
        self.ff = T5FeedForward(config)

    def build(
        self,
        x: popxl.Tensor,
        self_bias: popxl.Tensor,
        encoder_output: popxl.Tensor,
        cross_bias: popxl.Tensor,
    ) -> popxl.Tensor:
        x = x + self.self_attention(self.self_attention_norm(x), self_bias)
        x = x + self.cross_attention(self.cross_attention_norm(x), cross_bias, encoder_output)
        return x + self.ff(self.ff_norm(x))

    @staticmethod
    def hf_mapping(config: T5Config, variables: NamedTensors, hf_block: Any) -> dict:
        self_attention, cross_attention, ff = hf_block.layer
        return {
            **T5LayerNorm.hf_mapping(
                config, variables.self_attention_norm, self_attention.layer_norm
            ),
            **T5Attention.hf_mapping(
                config, variables.self_attention, self_attention.SelfAttention
            ),
            **T5LayerNorm.hf_mapping(
                config, variables.cross_attention_norm, cross_attention.layer_norm
            ),
            **T5Attention.hf_mapping(
                config, variables.cross_attention, cross_attention.EncDecAttention
            ),
            **T5LayerNorm.hf_mapping(config, variables.ff_norm, ff.layer_norm),
            **T5FeedForward.hf_mapping(config, variables.ff, ff.DenseReluDense),
        }


class T5Encoder(addons.Module):
    """The encoder stack: one block graph called once per layer with that layer's weights."""

    def __init__(self, config: T5Config):
        super().__init__()
        self.config = config
        self.relative_attention_bias = T5RelativePositionBias(config, bidirectional=True)
        self.final_layer_norm = T5LayerNorm(config.layer_norm_epsilon)

    def build(self, x: popxl.Tensor, mask: popxl.Tensor) -> popxl.Tensor:
        length = self.config.encoder_length
        bias = self.relative_attention_bias(length, length) + mask
        facts, block = T5EncoderBlock(self.config).create_graph(x, bias)
        for i in range(self.config.num_layers):
            args = self.add_variable_inputs(i, facts)
            (x,) = block.bind(args).call(x, bias)
        return self.final_layer_norm(x)

    @staticmethod
    def hf_mapping(config: T5Config, variables: NamedTensors, hf_stack: Any) -> dict:
        first = hf_stack.block[0].layer[0].SelfAttention
        weights = T5RelativePositionBias.hf_mapping(
            config, variables.relative_attention_bias, first
        )
        weights.update(
            T5LayerNorm.hf_mapping(config, variables.final_layer_norm, hf_stack.final_layer_norm)
        )
        for i in range(config.num_layers):
            weights.update(T5EncoderBlock.hf_mapping(config, variables[str(i)], hf_stack.block[i]))
        return weights


class T5Decoder(addons.Module):
    """The decoder stack: causal self-attention bias, cross-attention to the encoder."""

    def __init__(self, config: T5Config):
        super().__init__()
        self.config = config
        self.relative_attention_bias = T5RelativePositionBias(config, bidirectional=False)
        self.final_layer_norm = T5LayerNorm(config.layer_norm_epsilon)

    def build(
        self, x: popxl.Tensor, encoder_output: popxl.Tensor, encoder_mask: popxl.Tensor
    ) -> popxl.Tensor:
        length = self.config.decoder_length
        causal_mask = popxl.constant(
            -1e4 * (1 - np.tril(np.ones((length, length)))), x.dtype, name="causal_mask"
        )
        self_bias = self.relative_attention_bias(length, length) + causal_mask
        facts, block = T5DecoderBlock(self.config).create_graph(
            x, self_bias, encoder_output, encoder_mask
        )
        for i in range(self.config.num_decoder_layers):
            args = self.add_variable_inputs(i, facts)
            (x,) = block.bind(args).call(x, self_bias, encoder_output, encoder_mask)
        return self.final_layer_norm(x)

    @staticmethod
    def hf_mapping(config: T5Config, variables: NamedTensors, hf_stack: Any) -> dict:
        first = hf_stack.block[0].layer[0].SelfAttention
        weights = T5RelativePositionBias.hf_mapping(
            config, variables.relative_attention_bias, first
        )
        weights.update(
            T5LayerNorm.hf_mapping(config, variables.final_layer_norm, hf_stack.final_layer_norm)
        )
        for i in range(config.num_decoder_layers):
            weights.update(T5DecoderBlock.hf_mapping(config, variables[str(i)], hf_stack.block[i]))
        return weights


class T5ForConditionalGeneration(addons.Module):
    """Token ids (encoder ``[batch, enc]``, decoder ``[batch, dec]``) and the encoder's padding
    mask to logits ``[batch * dec, vocab]``."""

    def __init__(self, config: T5Config):
        super().__init__()
        self.config = config
        self.encoder = T5Encoder(config)
        self.decoder = T5Decoder(config)
        self.lm_head = T5LMHead(config)

    def build(
        self,
        input_ids: popxl.Tensor,
        attention_mask: popxl.Tensor,
        decoder_input_ids: popxl.Tensor,
    ) -> popxl.Tensor:
        config = self.config
        # one embedding table, two graphs gathering from it (the two id shapes)
        facts, encoder_embedding = T5Embedding(config).create_graph(input_ids)
        shared = self.add_variable_inputs("shared", facts)
        _, decoder_embedding = T5Embedding(config).create_graph(decoder_input_ids)

        mask = additive_mask(attention_mask, config.dtype)
        (x,) = encoder_embedding.bind(shared).call(input_ids)
        encoder_output = self.encoder(x, mask)
        (y,) = decoder_embedding.bind(shared).call(decoder_input_ids)
        y = self.decoder(y, encoder_output, mask)

        return self.lm_head(y, shared.word.weight)

    @staticmethod
    def hf_mapping(config: T5Config, variables: NamedTensors, hf_model: Any) -> dict:
        weights = T5Embedding.hf_mapping(config, variables.shared, hf_model.shared)
        if not config.tie_word_embeddings:
            weights.update(T5LMHead.hf_mapping(config, variables.lm_head, hf_model))
        weights.update(T5Encoder.hf_mapping(config, variables.encoder, hf_model.encoder))
        weights.update(T5Decoder.hf_mapping(config, variables.decoder, hf_model.decoder))
        return weights
