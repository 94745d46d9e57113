"""The layers of ``t5_popxl``'s T5 (T5 v1.1 / Flan-T5), popxl-addons modules as Graphcore's
PopXL models write theirs, each with its Hugging Face weight mapping, and tensor parallel as
theirs are (``tensor_parallel`` replicas each holding a shard of the heads, the feed-forward
and the vocabulary; Megatron's identical-input all-reduces around the sharded parts):

- ``T5LayerNorm``: RMS layer norm (scale only, no mean, no bias), computed in float32.
- ``T5RelativePositionBias``: the bucketed relative position bias, its buckets computed in the
  graph as Hugging Face's ``T5Attention._relative_position_bucket`` computes them
  (bidirectional in the encoder, causal in the decoder), shared by every layer of a stack.
- ``T5Attention``: self- or cross-attention without score scaling (T5 folds it into the
  initialisation), ``q``, ``k``, ``v``, ``o`` without bias.
- ``T5FeedForward``: gated GELU (``gelu_new``, PopXL's ``ops.gelu``): ``wo(gelu(wi_0 x) * wi_1 x)``.
- ``T5Embedding``: the shared word embedding; ``T5LMHead``: the logits, tied to it (scaled by
  ``d_model ** -0.5`` as T5 scales them) or with a weight of their own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import popxl_addons as addons
from popxl_addons import NamedTensors
from popxl_addons.layers import Embedding, Linear
from popxl_addons.ops.replicated_all_reduce_TP import (
    replicated_all_reduce_identical_grad_inputs,
    replicated_all_reduce_identical_inputs,
)
from scipy.stats import truncnorm

import popxl
from popxl import ops
from popxl.utils import to_numpy

#: the label Hugging Face's T5 loss ignores
#: the label Hugging Face's T5 loss ignores
IGNORE_INDEX = -100


@dataclass
class T5Config:
    """The model's sizes (a subset of Hugging Face's ``T5Config``) and its batch shapes."""

    vocab_size: int = 32
    d_model: int = 16
    d_kv: int = 4
    d_ff: int = 24
    num_layers: int = 2
    num_decoder_layers: int = 2
    num_heads: int = 4
    relative_attention_num_buckets: int = 8
    relative_attention_max_distance: int = 20
    layer_norm_epsilon: float = 1e-6
    tie_word_embeddings: bool = False
    micro_batch_size: int = 2
    encoder_length: int = 12
    decoder_length: int = 9
    dtype: popxl.dtype = popxl.float32
    #: replicas each holding a shard of the heads, feed-forward and vocabulary (Megatron-style)
    tensor_parallel: int = 1

    @classmethod
    def from_hf(cls, hf: Any, **shapes: int) -> T5Config:
        """The sizes of a ``transformers.T5Config`` (gated GELU feed-forward only)."""
        if hf.feed_forward_proj != "gated-gelu":
            raise ValueError(f"only T5 v1.1's gated-gelu feed-forward: got {hf.feed_forward_proj}")
        names = [
            "vocab_size",
            "d_model",
            "d_kv",
            "d_ff",
            "num_layers",
            "num_decoder_layers",
            "num_heads",
            "relative_attention_num_buckets",
            "relative_attention_max_distance",
            "layer_norm_epsilon",
            "tie_word_embeddings",
        ]
        return cls(**{n: getattr(hf, n) for n in names}, **shapes)

    @property
    def inner_dim(self) -> int:
        return self.num_heads * self.d_kv


def weights_init(*shape: int) -> partial:
    return partial(truncnorm.rvs, -2, 2, loc=0, scale=0.02, size=shape)


def tp_grouping(config: T5Config) -> popxl.ReplicaGrouping:
    """The grouping of sharded weights: each of the ``tensor_parallel`` replicas its own."""
    return popxl.gcg().ir.replica_grouping(stride=config.tensor_parallel, group_size=1)


def shard(x: np.ndarray, n_shards: int, axis: int) -> np.ndarray:
    """``x`` split along ``axis`` into ``n_shards`` stacked on a new first axis (kept whole for
    one shard: a variable of one group takes its data without the group axis)."""
    if n_shards == 1:
        return np.ascontiguousarray(x)
    return np.ascontiguousarray(np.stack(np.split(x, n_shards, axis=axis)))


class T5LayerNorm(addons.Module):
    """T5's layer norm: ``w * x / sqrt(mean(x^2) + eps)``, statistics in float32."""

    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input("weight", partial(np.ones, x.shape[-1]), x.dtype)
        x_fp32 = ops.cast(x, popxl.float32)
        variance = ops.mean(x_fp32 * x_fp32, axis=-1, keepdims=True)
        x_fp32 = x_fp32 / ops.sqrt(variance + self.eps)
        return w * ops.cast(x_fp32, x.dtype)

    @staticmethod
    def hf_mapping(config: T5Config, variables: NamedTensors, hf_layer: Any) -> dict:
        return {variables.weight: to_numpy(hf_layer.weight.data, config.dtype)}


class T5RelativePositionBias(addons.Module):
    """The attention bias ``[1, heads, q, k]`` of the relative position of key to query."""

    def __init__(self, config: T5Config, bidirectional: bool):
        super().__init__()
        self.config = config
        self.bidirectional = bidirectional

    def relative_position_bucket(self, relative_position: popxl.Tensor) -> popxl.Tensor:
        """T5's bucket of each relative position (float32 in, int32 out)."""
        num_buckets = self.config.relative_attention_num_buckets
        max_distance = self.config.relative_attention_max_distance
        zero = popxl.constant(0, popxl.float32)
        if self.bidirectional:
            num_buckets //= 2
            buckets = ops.cast(ops.greater(relative_position, zero), popxl.float32) * num_buckets
            relative_position = ops.abs(relative_position)
        else:
            buckets = None
            relative_position = ops.relu(-relative_position)
        # half of the buckets are for exact increments in positions
        max_exact = num_buckets // 2
        is_small = ops.less(relative_position, popxl.constant(max_exact, popxl.float32))
        # the other half for logarithmically bigger bins in positions up to max_distance, in
        # T5's order of operations (float32), truncated (floor: non-negative where it is used)
        log_ratio = ops.log(relative_position / max_exact) / math.log(max_distance / max_exact)
        if_large = max_exact + ops.floor(log_ratio * (num_buckets - max_exact))
        if_large = ops.clip(if_large, max=num_buckets - 1)
        chosen = ops.where(is_small, relative_position, if_large)
        if buckets is not None:
            chosen = chosen + buckets
        return ops.cast(chosen, popxl.int32)

    def build(self, query_length: int, key_length: int) -> popxl.Tensor:
        heads = self.config.num_heads // self.config.tensor_parallel
        weight = self.add_variable_input(
            "weight",
            weights_init(self.config.relative_attention_num_buckets, heads),
            self.config.dtype,
            replica_grouping=tp_grouping(self.config),
        )
        context = np.arange(query_length)[:, None]
        memory = np.arange(key_length)[None, :]
        relative_position = popxl.constant(
            (memory - context).astype(np.float32), popxl.float32, name="relative_position"
        )
        buckets = self.relative_position_bucket(relative_position)
        values = ops.gather(weight, buckets)  # [q, k, heads]
        return values.transpose((2, 0, 1)).reshape((1, heads, query_length, key_length))

    @staticmethod
    def hf_mapping(config: T5Config, variables: NamedTensors, hf_attention: Any) -> dict:
        weight = to_numpy(hf_attention.relative_attention_bias.weight.data, config.dtype)
        return {variables.weight: shard(weight, config.tensor_parallel, axis=1)}


def split_heads(x: popxl.Tensor, batch: int, heads: int) -> popxl.Tensor:
    """``[batch * seq, heads * d]`` to ``[batch, heads, seq, d]``."""
    return x.reshape((batch, -1, heads, x.shape[-1] // heads)).transpose((0, 2, 1, 3))


class T5Attention(addons.Module):
    """Multi-head attention of ``x`` to ``kv`` (``x`` itself for self-attention), with an additive
    bias (relative positions and masks, of this replica's heads) and T5's unscaled scores.
    The heads are sharded over the tensor-parallel replicas: identical inputs and output."""

    def __init__(self, config: T5Config):
        super().__init__()
        self.config = config
        self.replica_grouping = tp_grouping(config)
        inner = config.inner_dim // config.tensor_parallel
        self.q = Linear(inner, bias=False, replica_grouping=self.replica_grouping)
        self.k = Linear(inner, bias=False, replica_grouping=self.replica_grouping)
        self.v = Linear(inner, bias=False, replica_grouping=self.replica_grouping)
        self.o = Linear(config.d_model, bias=False, replica_grouping=self.replica_grouping)

    def build(
        self, x: popxl.Tensor, bias: popxl.Tensor, kv: popxl.Tensor | None = None
    ) -> popxl.Tensor:
        group = self.replica_grouping.transpose()
        x = replicated_all_reduce_identical_inputs(x, group=group)
        kv = x if kv is None else replicated_all_reduce_identical_inputs(kv, group=group)
        batch = self.config.micro_batch_size
        heads = self.config.num_heads // self.config.tensor_parallel
        query = split_heads(self.q(x), batch, heads)
        key = split_heads(self.k(kv), batch, heads)
        value = split_heads(self.v(kv), batch, heads)

        scores = query @ key.transpose((0, 1, 3, 2)) + bias
        probs = ops.softmax(scores, axis=-1)
        z = (probs @ value).transpose((0, 2, 1, 3)).reshape((x.shape[0], heads * self.config.d_kv))
        return replicated_all_reduce_identical_grad_inputs(self.o(z), group=group)

    @staticmethod
    def hf_mapping(config: T5Config, variables: NamedTensors, hf_attention: Any) -> dict:
        def weight(name: str) -> np.ndarray:
            return to_numpy(getattr(hf_attention, name).weight.data, config.dtype).T

        tp = config.tensor_parallel
        weights = {variables[n].weight: shard(weight(n), tp, axis=1) for n in ("q", "k", "v")}
        weights[variables.o.weight] = shard(weight("o"), tp, axis=0)
        return weights


class T5FeedForward(addons.Module):
    """T5 v1.1's gated GELU feed-forward, ``wi_*`` sharded column-wise (the GELU is not linear)
    and ``wo`` row-wise over the tensor-parallel replicas: identical input and output."""

    def __init__(self, config: T5Config):
        super().__init__()
        self.config = config
        self.replica_grouping = tp_grouping(config)
        ff_size = config.d_ff // config.tensor_parallel
        self.wi_0 = Linear(ff_size, bias=False, replica_grouping=self.replica_grouping)
        self.wi_1 = Linear(ff_size, bias=False, replica_grouping=self.replica_grouping)
        self.wo = Linear(config.d_model, bias=False, replica_grouping=self.replica_grouping)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        group = self.replica_grouping.transpose()
        x = replicated_all_reduce_identical_inputs(x, group=group)
        z = self.wo(ops.gelu(self.wi_0(x)) * self.wi_1(x))
        return replicated_all_reduce_identical_grad_inputs(z, group=group)

    @staticmethod
    def hf_mapping(config: T5Config, variables: NamedTensors, hf_ff: Any) -> dict:
        def weight(name: str) -> np.ndarray:
            return to_numpy(getattr(hf_ff, name).weight.data, config.dtype).T

        tp = config.tensor_parallel
        weights = {variables[n].weight: shard(weight(n), tp, axis=1) for n in ("wi_0", "wi_1")}
        weights[variables.wo.weight] = shard(weight("wo"), tp, axis=0)
        return weights


def additive_mask(mask: popxl.Tensor, dtype: popxl.dtype) -> popxl.Tensor:
    """``[batch, k]`` of ones (attend) and zeros (padding) to ``[batch, 1, 1, k]`` of 0 / -1e4."""
    mask = ops.cast(mask, dtype).reshape((mask.shape[0], 1, 1, mask.shape[1]))
    return (1 - mask) * -1e4


class T5Embedding(addons.Module):
    """Token ids to vectors, the vocabulary sharded over the tensor-parallel replicas (ids offset
    by each shard's first row on the host: ``offset_ids``): identical output."""

    def __init__(self, config: T5Config):
        super().__init__()
        self.config = config
        self.replica_grouping = tp_grouping(config)
        self.word = Embedding(
            config.dtype, config.vocab_size, config.d_model, replica_grouping=self.replica_grouping
        )

    def build(self, ids: popxl.Tensor) -> popxl.Tensor:
        x = self.word(ids.flatten())
        return replicated_all_reduce_identical_grad_inputs(
            x, group=self.replica_grouping.transpose()
        )

    @staticmethod
    def offset_ids(config: T5Config, ids: np.ndarray) -> np.ndarray:
        """``ids`` for each replica ``[tp, *ids.shape]`` (the ids themselves for one): offset by
        its shard's first row. Negative ids (ignored labels) stay as they are."""
        tp = config.tensor_parallel
        if tp == 1:
            return ids
        offsets = Embedding.get_offsets(config.vocab_size, tp).reshape((tp,) + (1,) * ids.ndim)
        return np.where(ids < 0, ids, ids[np.newaxis] - offsets)

    @staticmethod
    def hf_mapping(config: T5Config, variables: NamedTensors, hf_embedding: Any) -> dict:
        rows = variables.word.weight.shape[0] * config.tensor_parallel
        weight = to_numpy(hf_embedding.weight.data, config.dtype)
        weight = np.pad(weight, ((0, rows - config.vocab_size), (0, 0)))
        return {variables.word.weight: shard(weight, config.tensor_parallel, axis=0)}


class T5LMHead(addons.Module):
    """The logits of the decoder's output ``[n, d_model]``: tied to the word embedding
    ``[vocab, d_model]`` (T5 then scales ``x`` by ``d_model ** -0.5``) or a weight of its own.
    With tensor parallelism, each replica makes the logits of its shard of the vocabulary."""

    def __init__(self, config: T5Config):
        super().__init__()
        self.config = config
        self.replica_grouping = tp_grouping(config)

    def build(self, x: popxl.Tensor, word_embedding: popxl.Tensor) -> popxl.Tensor:
        config = self.config
        x = replicated_all_reduce_identical_inputs(x, group=self.replica_grouping.transpose())
        if config.tie_word_embeddings:
            logits = (x * (config.d_model**-0.5)) @ word_embedding.transpose()
        else:
            weight = self.add_variable_input(
                "weight",
                weights_init(config.d_model, word_embedding.shape[0]),
                config.dtype,
                replica_grouping=self.replica_grouping,
            )
            logits = x @ weight
        if config.tensor_parallel > 1:
            if logits.shape[-1] * config.tensor_parallel != config.vocab_size:
                raise ValueError("with tensor parallelism, a vocabulary of shards of 16 rows only")
        elif logits.shape[-1] != config.vocab_size:  # the embedding's padded vocabulary
            logits = logits[:, : config.vocab_size]
        return logits

    @staticmethod
    def hf_mapping(config: T5Config, variables: NamedTensors, hf_model: Any) -> dict:
        rows = variables.weight.shape[1] * config.tensor_parallel
        weight = to_numpy(hf_model.lm_head.weight.data, config.dtype)
        weight = np.pad(weight, ((0, rows - config.vocab_size), (0, 0))).T
        return {variables.weight: shard(weight, config.tensor_parallel, axis=1)}
