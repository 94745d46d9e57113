"""The decoder layer of Dolly 2.0 (GPT-NeoX / Pythia), written as Graphcore writes its PopXL
LLMs (``examples/nlp/gpt_j/popxl/modelling``: ``attention.py``, ``feed_forward.py``,
``decoder.py``): popxl-addons ``Module`` s whose weights are ``add_variable_input`` s,
tensor parallel over the replicas (the attention heads and the MLP's columns sharded,
``replicated_all_reduce_identical_*`` around the sharded parts, the output biases added
after the reduction), each with a static ``hf_mapping`` from Hugging Face's
``GPTNeoXLayer``.

GPT-NeoX against GPT-J: the query / key / value projection is one fused ``Linear`` with a
bias, laid out in Hugging Face per head as ``[q, k, v]``; rotary embeddings turn only the
first ``rotary_pct`` of each head's dimensions, in the rotate-half layout (dimension ``i``
paired with ``i + rotary_ndims / 2``); the MLP's activation is the exact (erf) GELU; the
attention's and the MLP's outputs are added to the residual side by side
(``use_parallel_residual``: ``x + attn(ln_1(x)) + mlp(ln_2(x))``), each after its own layer
norm. popxl-addons' ``rotary_pos_embed`` pairs adjacent dimensions (GPT-J's interleaved
layout), so ``hf_mapping`` permutes the query and key columns of each head from the
rotate-half order to the interleaved one: the scores ``q . k`` are the same, and the values
are not permuted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import popxl_addons as addons
from llama_popxl import shard, tp_grouping
from popxl_addons import NamedTensors
from popxl_addons.layers import LayerNorm, Linear
from popxl_addons.ops.replicated_all_reduce_TP import (
    replicated_all_reduce_identical_grad_inputs,
    replicated_all_reduce_identical_inputs,
)
from popxl_addons.ops.rotary_pos_embed import rotary_pos_embed, trig_table_constants

import popxl
from popxl import ReplicaGrouping, ops
from popxl.utils import to_numpy


@dataclass
class DollyConfig:
    """Dolly-v2-3b is hidden 2560, 32 heads, 32 layers, vocab 50280, sequence 2048."""

    vocab_size: int = 120
    hidden_size: int = 64
    heads: int = 4
    layers: int = 2
    #: the MLP's hidden width (Hugging Face ``intermediate_size``, 4 * hidden in Dolly)
    intermediate_size: int = 256
    sequence_length: int = 16
    micro_batch_size: int = 1
    rotary_pct: float = 0.25
    rotary_emb_base: int = 10000
    layer_norm_eps: float = 1e-5
    tensor_parallel: int = 1
    #: model copies side by side, each over its own ``tensor_parallel`` replicas (replicas
    #: ``[d tp, (d + 1) tp)`` run copy ``d``), each fed its own sequences
    data_parallel: int = 1
    #: the attention computed in this many chunks of queries (GPT-J's
    #: ``attention_serialisation``: one outlined block called per chunk, then concatenated)
    attention_serialisation: int = 1
    dtype: popxl.dtype = popxl.float32

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.heads

    @property
    def rotary_ndims(self) -> int:
        return int(self.head_size * self.rotary_pct)


def rotate_half_to_interleaved(head_size: int, rotary_ndims: int) -> np.ndarray:
    """The permutation of a head's dimensions taking GPT-NeoX's rotary pairs ``(i, i + r/2)``
    to adjacent ones ``(2i, 2i + 1)``, as ``rotary_pos_embed`` pairs them; the dimensions
    past ``rotary_ndims`` stay in place."""
    half = rotary_ndims // 2
    pairs = np.stack([np.arange(half), np.arange(half) + half], axis=-1).reshape(-1)
    return np.concatenate([pairs, np.arange(rotary_ndims, head_size)])


def unshard(x: np.ndarray, n_shards: int, axis: int) -> np.ndarray:
    """The inverse of ``shard``: a sharded variable's data whole again."""
    return x if n_shards == 1 else np.concatenate(list(x), axis=axis)


def torch_tensor(x: np.ndarray):
    import torch  # the models extra: only the Hugging Face conversions need it

    return torch.tensor(np.ascontiguousarray(x), dtype=torch.float32)


def reshape_for_scores(x: popxl.Tensor, sequence_length: int, heads: int) -> popxl.Tensor:
    micro_batch_size = x.shape[0] // sequence_length
    return x.reshape((micro_batch_size, sequence_length, heads, x.shape[1] // heads))


class DollyAttentionHeads(addons.Module):
    """This replica's heads: the fused q / k / v projection, rotary embeddings on the first
    ``rotary_ndims`` dimensions of q and k, causal softmax attention."""

    def __init__(self, config: DollyConfig, replica_grouping: ReplicaGrouping | None = None):
        super().__init__()
        self.config = config
        n_heads_groups = replica_grouping.num_groups if replica_grouping else 1
        assert config.heads % n_heads_groups == 0, f"{config.heads} % {n_heads_groups} != 0"
        self.n_heads = config.heads // n_heads_groups
        self.qkv = Linear(
            3 * config.hidden_size // n_heads_groups, replica_grouping=replica_grouping
        )

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        cfg = self.config
        query, key, value = ops.split(self.qkv(x), 3, axis=-1)
        # [batch, seq, heads, head_size]
        query = reshape_for_scores(query, cfg.sequence_length, self.n_heads)
        key = reshape_for_scores(key, cfg.sequence_length, self.n_heads)
        value = reshape_for_scores(value, cfg.sequence_length, self.n_heads)

        sin, cos = trig_table_constants(
            cfg.sequence_length, cfg.rotary_ndims, cfg.rotary_emb_base, cfg.dtype
        )
        query = rotary_pos_embed(query, sin, cos, cfg.rotary_ndims).transpose((0, 2, 1, 3))
        key = rotary_pos_embed(key, sin, cos, cfg.rotary_ndims).transpose((0, 2, 3, 1))
        value = value.transpose((0, 2, 1, 3))

        causal_mask = popxl.constant(
            # Hugging Face masks with the dtype's lowest value, beyond float16's range
            1e4 * (np.tril(np.ones((cfg.sequence_length, cfg.sequence_length))) - 1),
            query.dtype,
            name="causal_mask",
        )
        chunks = cfg.attention_serialisation
        if chunks > 1:
            queries = ops.split(query, chunks, axis=2)
            masks = ops.split(causal_mask, chunks, axis=0)
            blk_graph = popxl.gcg().ir.create_graph(
                self.attention_block, queries[0], key, value, masks[0]
            )
            attn_outputs = [
                ops.call(blk_graph, query_i, key, value, mask_i)[0]
                for query_i, mask_i in zip(queries, masks)
            ]
            attn_output = ops.concat(attn_outputs, axis=2)
        else:
            attn_output = self.attention_block(query, key, value, causal_mask)
        return attn_output.transpose((0, 2, 1, 3)).reshape(
            (cfg.micro_batch_size * cfg.sequence_length, -1)
        )

    def attention_block(
        self, query: popxl.Tensor, key: popxl.Tensor, value: popxl.Tensor, mask: popxl.Tensor
    ) -> popxl.Tensor:
        """``softmax(q k^T / sqrt(head_size) + mask) v`` for a chunk of queries."""
        attn_weights = (query @ key) * (1 / math.sqrt(value.shape[-1])) + mask
        return ops.softmax(attn_weights, axis=-1) @ value


class DollySelfAttentionTP(addons.Module):
    def __init__(self, config: DollyConfig):
        super().__init__()
        self.config = config
        self.replica_grouping = tp_grouping(config)
        # sharded across replicas
        self.heads = DollyAttentionHeads(config, replica_grouping=self.replica_grouping)
        # sharded across replicas, row wise (its bias added after the reduction)
        self.output = Linear(config.hidden_size, bias=False, replica_grouping=self.replica_grouping)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        """Identical inputs and identical outputs across shards."""
        z = replicated_all_reduce_identical_inputs(x, group=self.replica_grouping.transpose())
        z = self.output(self.heads(z))
        z = replicated_all_reduce_identical_grad_inputs(z, group=self.replica_grouping.transpose())
        self.bias = self.add_variable_input("bias", lambda: np.zeros(z.shape[-1]), z.dtype)
        return z + self.bias

    @staticmethod
    def hf_mapping(config: DollyConfig, variables: NamedTensors, hf_model) -> dict:
        """From ``GPTNeoXAttention``: the fused weight ``[3 hidden, hidden]`` holds each head's
        ``[q, k, v]`` rows; each shard's ``qkv`` holds its heads' ``[q..., k..., v...]``."""
        dtype = config.dtype
        n_shards = config.tensor_parallel
        hidden, heads, hs = config.hidden_size, config.heads, config.head_size
        perm = rotate_half_to_interleaved(hs, config.rotary_ndims)

        def per_shard(t: np.ndarray) -> np.ndarray:
            """``t [..., heads * 3 * hs]`` -> ``[(n_shards,) ..., 3 * hidden / n_shards]``."""
            lead = t.shape[:-1]
            q, k, v = np.split(t.reshape(*lead, heads, 3 * hs), 3, axis=-1)
            q, k = q[..., perm], k[..., perm]
            qkv = np.stack([shard(p, n_shards, -2) for p in (q, k, v)], axis=-3)
            # [(n_shards,) ..., 3, heads / n_shards, hs] -> [(n_shards,) ..., 3 hidden / n]
            return np.ascontiguousarray(qkv.reshape(*qkv.shape[:-3], 3 * hidden // n_shards))

        attention = hf_model.query_key_value
        return {
            variables.heads.qkv.weight: per_shard(to_numpy(attention.weight.data.T, dtype)),
            variables.heads.qkv.bias: per_shard(to_numpy(attention.bias.data, dtype)),
            variables.output.weight: shard(
                to_numpy(hf_model.dense.weight.data.T, dtype), n_shards, 0
            ),
            variables.bias: to_numpy(hf_model.dense.bias.data, dtype),
        }

    @staticmethod
    def to_hf(config: DollyConfig, variables_data: NamedTensors) -> dict:
        """``GPTNeoXAttention``'s state dict from this module's variables' data (as
        ``TaskSession.get_named_tensors_data`` reads it): the inverse of ``hf_mapping``."""
        n_shards = config.tensor_parallel
        heads, hs = config.heads, config.head_size
        inverse = np.argsort(rotate_half_to_interleaved(hs, config.rotary_ndims))

        def whole(t: np.ndarray) -> np.ndarray:
            """``[(n_shards,) ..., 3 hidden / n_shards]`` -> ``[..., heads * 3 * hs]``."""
            t = t if n_shards > 1 else t[np.newaxis]
            qkv = t.reshape(*t.shape[:-1], 3, heads // n_shards, hs)
            # [..., 3, n_shards, heads / n_shards, hs] -> [..., heads, 3, hs]
            qkv = np.moveaxis(qkv, 0, -3).reshape(*t.shape[1:-1], 3, heads, hs).copy()
            qkv[..., :2, :, :] = qkv[..., :2, :, :][..., inverse]
            return np.swapaxes(qkv, -3, -2).reshape(*t.shape[1:-1], 3 * heads * hs)

        qkv = variables_data.heads.qkv
        return {
            "query_key_value.weight": torch_tensor(whole(qkv.weight).T),
            "query_key_value.bias": torch_tensor(whole(qkv.bias)),
            "dense.weight": torch_tensor(unshard(variables_data.output.weight, n_shards, 0).T),
            "dense.bias": torch_tensor(variables_data.bias),
        }


class DollyFeedForwardTP(addons.Module):
    def __init__(self, config: DollyConfig):
        super().__init__()
        self.config = config
        self.replica_grouping = tp_grouping(config)
        n_shards = config.tensor_parallel
        assert config.intermediate_size % n_shards == 0
        # sharded column wise (GELU is not linear), then row wise
        self.intermediate = Linear(
            config.intermediate_size // n_shards, replica_grouping=self.replica_grouping
        )
        self.output = Linear(config.hidden_size, bias=False, replica_grouping=self.replica_grouping)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        """Identical inputs and identical outputs across shards."""
        z = replicated_all_reduce_identical_inputs(x, group=self.replica_grouping.transpose())
        z = self.output(ops.geluerf(self.intermediate(z)))
        z = replicated_all_reduce_identical_grad_inputs(z, group=self.replica_grouping.transpose())
        self.bias = self.add_variable_input("bias", lambda: np.zeros(z.shape[-1]), z.dtype)
        return z + self.bias

    @staticmethod
    def hf_mapping(config: DollyConfig, variables: NamedTensors, hf_model) -> dict:
        """From ``GPTNeoXMLP`` (``dense_h_to_4h``, ``dense_4h_to_h``)."""
        dtype = config.dtype
        n_shards = config.tensor_parallel
        h_to_4h, to_h = hf_model.dense_h_to_4h, hf_model.dense_4h_to_h
        return {
            variables.intermediate.weight: shard(
                to_numpy(h_to_4h.weight.data.T, dtype), n_shards, -1
            ),
            variables.intermediate.bias: shard(to_numpy(h_to_4h.bias.data, dtype), n_shards, -1),
            variables.output.weight: shard(to_numpy(to_h.weight.data.T, dtype), n_shards, 0),
            variables.bias: to_numpy(to_h.bias.data, dtype),
        }

    @staticmethod
    def to_hf(config: DollyConfig, variables_data: NamedTensors) -> dict:
        """``GPTNeoXMLP``'s state dict: the inverse of ``hf_mapping``."""
        n = config.tensor_parallel
        intermediate = variables_data.intermediate
        return {
            "dense_h_to_4h.weight": torch_tensor(unshard(intermediate.weight, n, -1).T),
            "dense_h_to_4h.bias": torch_tensor(unshard(intermediate.bias, n, -1)),
            "dense_4h_to_h.weight": torch_tensor(unshard(variables_data.output.weight, n, 0).T),
            "dense_4h_to_h.bias": torch_tensor(variables_data.bias),
        }


def layer_norm_mapping(config: DollyConfig, variables: NamedTensors, hf_layer_norm) -> dict:
    return {
        variables.weight: to_numpy(hf_layer_norm.weight.data, config.dtype),
        variables.bias: to_numpy(hf_layer_norm.bias.data, config.dtype),
    }


def layer_norm_to_hf(prefix: str, variables_data: NamedTensors) -> dict:
    return {
        f"{prefix}.weight": torch_tensor(variables_data.weight),
        f"{prefix}.bias": torch_tensor(variables_data.bias),
    }


def prefixed(prefix: str, state_dict: dict) -> dict:
    return {f"{prefix}.{k}": v for k, v in state_dict.items()}


class DollyDecoderBlockTP(addons.Module):
    def __init__(self, config: DollyConfig):
        super().__init__()
        self.config = config
        # identical computations: the layer norms, the residual sum
        self.ln_1 = LayerNorm()
        self.ln_2 = LayerNorm()
        # sharded, identical outputs
        self.attention = DollySelfAttentionTP(config)
        self.feed_forward = DollyFeedForwardTP(config)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        eps = self.config.layer_norm_eps
        attn_out = self.attention(self.ln_1(x, eps=eps))
        ff_out = self.feed_forward(self.ln_2(x, eps=eps))
        return x + attn_out + ff_out

    @staticmethod
    def hf_mapping(config: DollyConfig, variables: NamedTensors, hf_model) -> dict:
        """From ``GPTNeoXLayer`` (``use_parallel_residual``)."""
        return {
            **layer_norm_mapping(config, variables.ln_1, hf_model.input_layernorm),
            **layer_norm_mapping(config, variables.ln_2, hf_model.post_attention_layernorm),
            **DollySelfAttentionTP.hf_mapping(config, variables.attention, hf_model.attention),
            **DollyFeedForwardTP.hf_mapping(config, variables.feed_forward, hf_model.mlp),
        }

    @staticmethod
    def to_hf(config: DollyConfig, variables_data: NamedTensors) -> dict:
        """``GPTNeoXLayer``'s state dict (its attention's mask buffers left out)."""
        return {
            **layer_norm_to_hf("input_layernorm", variables_data.ln_1),
            **layer_norm_to_hf("post_attention_layernorm", variables_data.ln_2),
            **prefixed("attention", DollySelfAttentionTP.to_hf(config, variables_data.attention)),
            **prefixed("mlp", DollyFeedForwardTP.to_hf(config, variables_data.feed_forward)),
        }
