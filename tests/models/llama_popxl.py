"""A tiny LLaMA for inference, written as Graphcore's PopXL LLM examples write theirs
(``examples/nlp/{gpt_j,llama,dolly}/popxl``): popxl-addons ``Module`` layers whose weights
are ``add_variable_input`` s, tensor-parallel over the replicas (the embedding's and the LM
head's vocabulary, the attention heads and the SwiGLU MLP's columns sharded;
``replicated_all_reduce_identical_*`` around the sharded parts), RMS norm with popxl ops
(in float32), rotary position embeddings through popxl-addons' ``rotary_pos_embed`` custom
op and its sin / cos tables, optional int4 group-quantised weights (``LinearGQ``), and a KV
cache per layer: by-reference variable inputs updated with ``ops.dynamic_update_`` at the
positions of each step's tokens.

This is client code for Tremula's tests (Tremula itself never imports it). The program
(one step per ``session.run``, or prompt and decoding loop in one) is
``llama_popxl_inference.py``; the NumPy reference of LLaMA it is checked against is
``llama_reference.py``. Weights come as a dict in Meta's checkpoint layout
(``tok_embeddings.weight``, ``layers.{n}.attention.wq.weight`` ..., torch ``Linear``
weights ``[out, in]``); each module's ``mapping`` turns them into the data of its
variables, as the examples' ``hf_mapping`` s do.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial

import numpy as np
import popxl_addons as addons
from popxl_addons import NamedTensors
from popxl_addons.layers import Embedding, Linear
from popxl_addons.layers.linear_gq import LinearGQ, group_quantize_compress_numpy
from popxl_addons.ops.replicated_all_reduce_TP import (
    replicated_all_reduce_identical_grad_inputs,
    replicated_all_reduce_identical_inputs,
)
from popxl_addons.ops.rotary_pos_embed import rotary_pos_embed, trig_table_constants

import popxl
from popxl import ReplicaGrouping, ops

Weights = Mapping[str, np.ndarray]


@dataclass
class LlamaConfig:
    vocab_size: int = 100
    hidden_size: int = 64
    heads: int = 4
    layers: int = 2
    intermediate_size: int = 172
    #: length of the KV cache: the most positions a session can decode
    max_positions: int = 16
    #: tokens fed to each step (the prompt at once, or one generated token)
    sequence_length: int = 1
    #: sequences decoded side by side (at the same positions)
    micro_batch_size: int = 1
    eps: float = 1e-6
    rotary_base: int = 10000
    tensor_parallel: int = 1
    #: model copies side by side, each over its own ``tensor_parallel`` replicas (replicas
    #: ``[d tp, (d + 1) tp)`` run copy ``d``), each fed its own sequences
    data_parallel: int = 1
    #: the decoder layers' weights and caches in remote buffers, run by ``ops.repeat``
    remote_layers: bool = False
    #: with ``remote_layers``: each weight's remote buffer replica-sharded over the replicas
    #: holding it (its data-parallel group), all-gathered as each layer is loaded
    rts_layers: bool = False
    #: int4 group-quantised linear weights (popxl-addons' ``LinearGQ``): the group size,
    #: 0 for none, and the axis grouped
    group_quantise_weights: int = 0
    group_quantise_dim: int = -1
    #: the attention computed in this many chunks of queries along the sequence (GPT-J's
    #: ``attention_serialisation``: an outlined block called per chunk, the outputs
    #: concatenated); must divide ``sequence_length``
    attention_serialisation: int = 1
    dtype: popxl.dtype = popxl.float32

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.heads


def shard(x: np.ndarray, n_shards: int, axis: int) -> np.ndarray:
    """Split ``x`` along ``axis`` into ``n_shards`` stacked on a new leading axis (a
    variable of a single replica group has no such axis on the host: ``x`` itself)."""
    if n_shards == 1:
        return np.ascontiguousarray(x)
    if axis < 0:
        axis = len(x.shape) + axis
    return np.ascontiguousarray(
        np.concatenate(np.split(x[np.newaxis, ...], n_shards, axis=axis + 1))
    )


def tp_grouping(config: LlamaConfig) -> ReplicaGrouping:
    """The replicas holding the same shard, one of each data-parallel copy (GPT-J's
    ``replica_grouping(stride=tp, group_size=dp)``): a variable of this grouping has one
    shard per tensor-parallel index; its ``transpose()`` groups each copy's replicas."""
    return popxl.gcg().ir.replica_grouping(
        stride=config.tensor_parallel, group_size=config.data_parallel
    )


def linear_t(weights: Weights, name: str, dtype: popxl.dtype) -> np.ndarray:
    """A torch ``Linear`` weight ``[out, in]`` as popxl-addons' ``Linear`` holds it."""
    return np.ascontiguousarray(weights[name].T).astype(dtype.as_numpy())


def linear(
    config: LlamaConfig,
    out_features: int,
    replica_grouping: ReplicaGrouping,
    dim: int | None = None,
) -> addons.Module:
    """A bias-free linear layer: ``Linear``, or ``LinearGQ`` when weights are quantised."""
    if config.group_quantise_weights > 0:
        return LinearGQ(
            out_features,
            bias=False,
            replica_grouping=replica_grouping,
            group_size=config.group_quantise_weights,
            dim=config.group_quantise_dim if dim is None else dim,
        )
    return Linear(out_features, bias=False, replica_grouping=replica_grouping)


def linear_state(
    config: LlamaConfig, variables: NamedTensors, w: np.ndarray, dim: int | None = None
) -> dict[popxl.Tensor, np.ndarray]:
    """The data of a layer made by :func:`linear` from its (sharded) weight ``w``."""
    if config.group_quantise_weights == 0:
        return {variables.weight: w}
    gqdim = config.group_quantise_dim if dim is None else dim
    if config.tensor_parallel > 1 and gqdim != -1:
        gqdim += 1  # the shards' axis comes first
    compressed = group_quantize_compress_numpy(w, config.group_quantise_weights, gqdim)
    names = ("weight_compressed", "weight_decompression_scale", "weight_decompression_bias")
    return {variables[n]: t for n, t in zip(names, compressed)}


class LlamaRMSNorm(addons.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        self.weight = self.add_variable_input("weight", partial(np.ones, x.shape[-1]), x.dtype)
        # in float32 whatever the model's dtype
        ih = ops.cast(x, popxl.float32)
        variance = ops.mean(ih * ih, axis=-1, keepdims=True)
        ih = ih / ops.sqrt(variance + self.config.eps)
        return ops.cast(ih, x.dtype) * self.weight

    @staticmethod
    def mapping(config: LlamaConfig, variables: NamedTensors, weights: Weights, name: str):
        return {variables.weight: weights[name].astype(config.dtype.as_numpy())}


class LlamaAttentionHeads(addons.Module):
    """This replica's heads: q / k / v projections, rotary embeddings, the KV cache, causal
    attention over the cached positions."""

    def __init__(self, config: LlamaConfig, replica_grouping: ReplicaGrouping | None = None):
        super().__init__()
        self.config = config
        self.replica_grouping = replica_grouping
        n_heads_groups = replica_grouping.num_groups if replica_grouping else 1
        assert config.heads % n_heads_groups == 0, f"{config.heads} % {n_heads_groups} != 0"
        self.n_heads = config.heads // n_heads_groups
        self.qkv = linear(config, 3 * config.hidden_size // n_heads_groups, replica_grouping)

    def build(self, x: popxl.Tensor, position: popxl.Tensor) -> popxl.Tensor:
        """``x``: ``[batch * seq, hidden]``, the tokens at positions ``position + [0, seq)``."""
        cfg = self.config
        mb, seq, hs = cfg.micro_batch_size, cfg.sequence_length, cfg.head_size
        cache_shape = (mb, self.n_heads, cfg.max_positions, hs)
        # the caches hold each replica's own sequences (a data-parallel copy's differ from
        # another's): a group per replica, so the host reads and writes every replica's
        caches = (
            popxl.gcg().ir.replica_grouping(group_size=1)
            if self.replica_grouping is not None
            else None
        )
        self.k_cache = self.add_variable_input(
            "k_cache",
            partial(np.zeros, cache_shape),
            x.dtype,
            by_ref=True,
            replica_grouping=caches,
        )
        self.v_cache = self.add_variable_input(
            "v_cache",
            partial(np.zeros, cache_shape),
            x.dtype,
            by_ref=True,
            replica_grouping=caches,
        )

        query, key, value = ops.split(self.qkv(x), 3, axis=-1)
        # [batch, seq, heads, head_size]
        query = query.reshape((mb, seq, self.n_heads, hs))
        key = key.reshape((mb, seq, self.n_heads, hs))
        value = value.reshape((mb, seq, self.n_heads, hs))

        sin, cos = trig_table_constants(cfg.max_positions, hs, cfg.rotary_base, cfg.dtype)
        sin = ops.dynamic_slice(sin, position, axes=[0], sizes=[seq], no_overlap=True)
        cos = ops.dynamic_slice(cos, position, axes=[0], sizes=[seq], no_overlap=True)
        query = rotary_pos_embed(query, sin, cos, hs).transpose((0, 2, 1, 3))
        key = rotary_pos_embed(key, sin, cos, hs).transpose((0, 2, 1, 3))
        value = value.transpose((0, 2, 1, 3))

        # ----- KV cache: write this step's keys and values at their positions -----
        k_cache = ops.dynamic_update_(
            self.k_cache, position, key, axes=[2], sizes=[seq], no_overlap=True
        )
        v_cache = ops.dynamic_update_(
            self.v_cache, position, value, axes=[2], sizes=[seq], no_overlap=True
        )

        causal_mask = popxl.constant(
            1e4 * (np.tril(np.ones((cfg.max_positions, cfg.max_positions))) - 1),
            x.dtype,
            name="causal_mask",
        )
        mask = ops.dynamic_slice(causal_mask, position, axes=[0], sizes=[seq], no_overlap=True)

        key_t = k_cache.transpose((0, 1, 3, 2))
        chunks = cfg.attention_serialisation
        if chunks > 1:
            if seq % chunks:
                raise ValueError(
                    f"attention_serialisation {chunks} does not divide sequence_length {seq}"
                )
            queries = ops.split(query, chunks, axis=2)
            masks = ops.split(mask, chunks, axis=0)
            block = popxl.gcg().ir.create_graph(
                self.attention_block, queries[0], key_t, v_cache, masks[0]
            )
            outputs = [ops.call(block, q, key_t, v_cache, m)[0] for q, m in zip(queries, masks)]
            attn_output = ops.concat(outputs, axis=2)
        else:
            attn_output = self.attention_block(query, key_t, v_cache, mask)
        return attn_output.transpose((0, 2, 1, 3)).reshape((mb * seq, self.n_heads * hs))

    @staticmethod
    def attention_block(
        query: popxl.Tensor, key_t: popxl.Tensor, value: popxl.Tensor, mask: popxl.Tensor
    ) -> popxl.Tensor:
        """Queries ``[batch, heads, chunk, head_size]`` over the cached keys (transposed)
        and values: ``softmax(q k^T / sqrt(head_size) + mask) v``."""
        attn_weights = query @ key_t
        attn_weights = attn_weights * (1 / math.sqrt(value.shape[-1]))
        attn_weights = attn_weights + mask
        attn_scores = ops.softmax(attn_weights, axis=-1)
        return attn_scores @ value

    @staticmethod
    def qkv_data(config: LlamaConfig, weights: Weights, prefix: str) -> np.ndarray:
        n = config.tensor_parallel
        q, k, v = (linear_t(weights, f"{prefix}.w{p}.weight", config.dtype) for p in "qkv")
        q, k, v = (shard(w, n, -1) for w in (q, k, v))
        if n == 1:
            return np.ascontiguousarray(np.concatenate([q, k, v], -1))
        return np.ascontiguousarray(
            np.concatenate([np.concatenate([q[i], k[i], v[i]], -1)[None] for i in range(n)])
        )


class LlamaSelfAttentionTP(addons.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.replica_grouping = tp_grouping(config)
        self.heads = LlamaAttentionHeads(config, replica_grouping=self.replica_grouping)
        self.output = linear(config, config.hidden_size, self.replica_grouping)

    def build(self, x: popxl.Tensor, position: popxl.Tensor) -> popxl.Tensor:
        """Identical inputs and identical outputs across shards."""
        z = replicated_all_reduce_identical_inputs(x, group=self.replica_grouping.transpose())
        z = self.heads(z, position)
        z = self.output(z)
        return replicated_all_reduce_identical_grad_inputs(
            z, group=self.replica_grouping.transpose()
        )

    @staticmethod
    def mapping(config: LlamaConfig, variables: NamedTensors, weights: Weights, prefix: str):
        wo = linear_t(weights, f"{prefix}.wo.weight", config.dtype)
        return {
            **linear_state(
                config, variables.heads.qkv, LlamaAttentionHeads.qkv_data(config, weights, prefix)
            ),
            **linear_state(config, variables.output, shard(wo, config.tensor_parallel, axis=0)),
        }


class LlamaFeedForwardTP(addons.Module):
    """SwiGLU: ``w2(silu(w1 x) * w3 x)``; ``w1`` and ``w3`` sharded by columns, ``w2`` by rows."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        n = config.tensor_parallel
        self.replica_grouping = tp_grouping(config)
        assert config.intermediate_size % n == 0
        self.gate_proj = linear(config, config.intermediate_size // n, self.replica_grouping)
        self.up_proj = linear(config, config.intermediate_size // n, self.replica_grouping)
        self.down_proj = linear(config, config.hidden_size, self.replica_grouping)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        z = replicated_all_reduce_identical_inputs(x, group=self.replica_grouping.transpose())
        z = ops.swish(self.gate_proj(z)) * self.up_proj(z)
        z = self.down_proj(z)
        return replicated_all_reduce_identical_grad_inputs(
            z, group=self.replica_grouping.transpose()
        )

    @staticmethod
    def mapping(config: LlamaConfig, variables: NamedTensors, weights: Weights, prefix: str):
        n = config.tensor_parallel
        w1, w2, w3 = (linear_t(weights, f"{prefix}.w{i}.weight", config.dtype) for i in (1, 2, 3))
        return {
            **linear_state(config, variables.gate_proj, shard(w1, n, -1)),
            **linear_state(config, variables.up_proj, shard(w3, n, -1)),
            **linear_state(config, variables.down_proj, shard(w2, n, 0)),
        }


class LlamaDecoderBlockTP(addons.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.attention_norm = LlamaRMSNorm(config)
        self.attention = LlamaSelfAttentionTP(config)
        self.ffn_norm = LlamaRMSNorm(config)
        self.feed_forward = LlamaFeedForwardTP(config)

    def build(self, x: popxl.Tensor, position: popxl.Tensor) -> popxl.Tensor:
        x = x + self.attention(self.attention_norm(x), position)
        return x + self.feed_forward(self.ffn_norm(x))

    @staticmethod
    def mapping(config: LlamaConfig, variables: NamedTensors, weights: Weights, n: int):
        prefix = f"layers.{n}"
        return {
            **LlamaRMSNorm.mapping(
                config, variables.attention_norm, weights, f"{prefix}.attention_norm.weight"
            ),
            **LlamaSelfAttentionTP.mapping(
                config, variables.attention, weights, f"{prefix}.attention"
            ),
            **LlamaRMSNorm.mapping(
                config, variables.ffn_norm, weights, f"{prefix}.ffn_norm.weight"
            ),
            **LlamaFeedForwardTP.mapping(
                config, variables.feed_forward, weights, f"{prefix}.feed_forward"
            ),
        }


class LlamaEmbeddingsTP(addons.Module):
    """The token embedding sharded along the vocabulary: each replica looks its offset ids
    up in its shard (ids outside it give zeros) and the shards' rows are summed."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.replica_grouping = tp_grouping(config)
        self.word = Embedding(
            config.dtype,
            config.vocab_size,
            config.hidden_size,
            replica_grouping=self.replica_grouping,
        )

    def build(self, input_ids: popxl.Tensor) -> popxl.Tensor:
        """`input_ids` are offsetted. Identical outputs across shards"""
        x = self.word(input_ids.flatten())
        return replicated_all_reduce_identical_grad_inputs(
            x, group=self.replica_grouping.transpose()
        )

    @staticmethod
    def get_vocab_shard_size(config: LlamaConfig) -> int:
        return Embedding.get_vocab_shard_size(config.vocab_size, config.tensor_parallel)

    @staticmethod
    def offset_input(data: np.ndarray, i: int, config: LlamaConfig) -> np.ndarray:
        """Replica ``i``'s ids: offset by the start of its shard."""
        return data - i * LlamaEmbeddingsTP.get_vocab_shard_size(config)

    @staticmethod
    def mapping(config: LlamaConfig, variables: NamedTensors, weights: Weights):
        # the vocabulary zero-padded to the shards popxl-addons' Embedding makes (multiples
        # of its multi-slice size), then sharded
        n = config.tensor_parallel
        table = weights["tok_embeddings.weight"].astype(config.dtype.as_numpy())
        pad = LlamaEmbeddingsTP.get_vocab_shard_size(config) * n - config.vocab_size
        return {variables.word.weight: shard(np.pad(table, ((0, pad), (0, 0))), n, axis=0)}


class LlamaLMHeadTP(addons.Module):
    """The final norm and the output projection, sharded along the vocabulary."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        assert config.vocab_size % config.tensor_parallel == 0
        self.replica_grouping = tp_grouping(config)
        self.norm = LlamaRMSNorm(config)
        self.head = linear(
            config, config.vocab_size // config.tensor_parallel, self.replica_grouping, dim=0
        )

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        x = self.norm(x)
        x = replicated_all_reduce_identical_inputs(x, group=self.replica_grouping.transpose())
        return self.head(x)

    @staticmethod
    def mapping(config: LlamaConfig, variables: NamedTensors, weights: Weights):
        w = linear_t(weights, "output.weight", config.dtype)
        return {
            **LlamaRMSNorm.mapping(config, variables.norm, weights, "norm.weight"),
            **linear_state(config, variables.head, shard(w, config.tensor_parallel, -1), dim=0),
        }


class LlamaDecoderTP(addons.Module):
    """The decoder: one outlined block graph, called per layer with that layer's variables."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config

    def build(self, x: popxl.Tensor, position: popxl.Tensor) -> popxl.Tensor:
        facts, graph = LlamaDecoderBlockTP(self.config).create_graph(x, position)  # Outline layer
        for i in range(self.config.layers):
            args_nt = self.add_variable_inputs(i, facts)
            (x,) = graph.bind(args_nt).call(x, position)
        return x


class LlamaModelTP(addons.Module):
    """Offset ids at ``position`` to this replica's logits shard ``[batch * seq, vocab / tp]``;
    its variables are named as the program's (``embeddings``, ``decoder.{n}``, ``lm_head``)."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.embeddings = LlamaEmbeddingsTP(config)
        self.decoder = LlamaDecoderTP(config)
        self.lm_head = LlamaLMHeadTP(config)

    def build(self, input_ids: popxl.Tensor, position: popxl.Tensor) -> popxl.Tensor:
        x = self.embeddings(input_ids)
        x = self.decoder(x, position)
        return self.lm_head(x)
