"""Dolly 2.0 (GPT-NeoX / Pythia) written as Graphcore writes its PopXL LLMs
(``examples/nlp/gpt_j/popxl/modelling``: ``embedding.py``, ``decoder.py``, ``gptj_model.py``,
``gptj_lm.py``, ``hf_mapping.py``), on popxl-addons, tensor parallel over the replicas: the
embedding's and the LM head's vocabulary sharded, the decoder layers of ``dolly_layers.py``.
Each module's static ``hf_mapping`` maps Hugging Face's ``GPTNeoXModel`` /
``GPTNeoXForCausalLM`` weights (``gpt_neox.embed_in``, ``gpt_neox.layers.{n}``,
``gpt_neox.final_layer_norm``, the untied ``embed_out``) to the data of its variables.

``DollyLMHeadLossAndGradTP`` is GPT-J's training head: the LM head's forward, the sharded
cross entropy, and the head's gradients accumulated by ``autodiff_with_accumulation``.
``dolly_inference.py`` is the inference program (GPT-J's ``inference.py``: weights in
remote buffers, the layers run by ``ops.repeat``, greedy next tokens; no KV cache).

Client code for Tremula's tests (Tremula never imports it).
"""

from __future__ import annotations

import numpy as np
import popxl_addons as addons
from dolly_layers import (
    DollyConfig,
    DollyDecoderBlockTP,
    layer_norm_mapping,
    layer_norm_to_hf,
    prefixed,
    torch_tensor,
    tp_grouping,
    unshard,
)
from llama_popxl import LlamaEmbeddingsTP, shard
from popxl_addons import GraphWithNamedArgs, NamedTensors
from popxl_addons.layers import Embedding, LayerNorm, Linear
from popxl_addons.ops.cross_entropy_sharded_loss import cross_entropy_sharded_loss
from popxl_addons.ops.replicated_all_reduce_TP import (
    replicated_all_reduce_identical_inputs,
)

import popxl
from popxl.utils import to_numpy


class DollyEmbeddingsTP(LlamaEmbeddingsTP):
    """``embed_in`` sharded along the vocabulary as LLaMA's token embedding (the same
    module: each replica looks its offset ids up in its shard, ids outside it giving
    zeros, and the shards' rows are summed), mapped from ``GPTNeoXModel``."""

    @staticmethod
    def offset_inputs(config: DollyConfig, words: np.ndarray) -> np.ndarray:
        """``words`` as each replica takes them, ``[tp, *words.shape]`` (``words`` itself
        with one replica): offset by the start of the replica's shard."""
        if config.tensor_parallel == 1:
            return words
        offsets = Embedding.get_offsets(config.vocab_size, config.tensor_parallel)
        return words[np.newaxis] - offsets.reshape((-1,) + (1,) * words.ndim)

    @staticmethod
    def hf_mapping(config: DollyConfig, variables: NamedTensors, hf_model) -> dict:
        """The vocabulary zero-padded to the shards popxl-addons' ``Embedding`` makes
        (multiples of its multi-slice size), then sharded."""
        n = config.tensor_parallel
        table = to_numpy(hf_model.embed_in.weight.data, config.dtype)
        pad = DollyEmbeddingsTP.get_vocab_shard_size(config) * n - config.vocab_size
        return {variables.word.weight: shard(np.pad(table, ((0, pad), (0, 0))), n, axis=0)}

    @staticmethod
    def to_hf(config: DollyConfig, variables_data: NamedTensors) -> dict:
        table = unshard(variables_data.word.weight, config.tensor_parallel, 0)
        return {"embed_in.weight": torch_tensor(table[: config.vocab_size])}


class DollyDecoderTP(addons.Module):
    """The decoder: one outlined block graph, called per layer with that layer's variables."""

    def __init__(self, config: DollyConfig):
        super().__init__()
        self.config = config

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        facts, graph = DollyDecoderBlockTP(self.config).create_graph(x)  # Outline the layer
        for i in range(self.config.layers):
            args_nt = self.add_variable_inputs(i, facts)
            (x,) = graph.bind(args_nt).call(x)
        return x


class DollyModelTP(addons.Module):
    """``GPTNeoXModel``: offset ids to the final layer norm's output ``[batch * seq, hidden]``
    (identical on every replica); ``include_layer_norm=False`` leaves the final norm to the
    LM head, as GPT-J's LM model does."""

    def __init__(self, config: DollyConfig, include_layer_norm: bool = True):
        super().__init__()
        self.config = config
        self.embeddings = DollyEmbeddingsTP(config)
        self.decoder = DollyDecoderTP(config)
        self.include_layer_norm = include_layer_norm
        if include_layer_norm:
            self.ln_f = LayerNorm()

    def build(self, input_ids: popxl.Tensor) -> popxl.Tensor:
        x = self.decoder(self.embeddings(input_ids))
        if self.include_layer_norm:
            x = self.ln_f(x, eps=self.config.layer_norm_eps)
        return x

    @staticmethod
    def hf_mapping(
        config: DollyConfig, variables: NamedTensors, hf_model, layer_norm: bool = True
    ) -> dict:
        """From ``GPTNeoXModel``."""
        weights = DollyEmbeddingsTP.hf_mapping(config, variables.embeddings, hf_model)
        if layer_norm:
            weights.update(layer_norm_mapping(config, variables.ln_f, hf_model.final_layer_norm))
        for n in range(config.layers):
            weights.update(
                DollyDecoderBlockTP.hf_mapping(config, variables.decoder[n], hf_model.layers[n])
            )
        return weights

    @staticmethod
    def to_hf(config: DollyConfig, variables_data: NamedTensors, layer_norm: bool = True) -> dict:
        """``GPTNeoXModel``'s state dict."""
        state_dict = DollyEmbeddingsTP.to_hf(config, variables_data.embeddings)
        if layer_norm:
            state_dict.update(layer_norm_to_hf("final_layer_norm", variables_data.ln_f))
        for n in range(config.layers):
            layer = DollyDecoderBlockTP.to_hf(config, variables_data.decoder[n])
            state_dict.update(prefixed(f"layers.{n}", layer))
        return state_dict


class DollyLMHeadTP(addons.Module):
    """The final layer norm and ``embed_out`` (no bias), sharded along the vocabulary: this
    replica's logits shard ``[batch * seq, vocab / tp]``."""

    def __init__(self, config: DollyConfig):
        super().__init__()
        self.config = config
        assert config.vocab_size % config.tensor_parallel == 0
        self.replica_grouping = tp_grouping(config)
        self.ln_f = LayerNorm()
        self.head = Linear(
            config.vocab_size // config.tensor_parallel,
            bias=False,
            replica_grouping=self.replica_grouping,
        )

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        x = self.ln_f(x, eps=self.config.layer_norm_eps)
        x = replicated_all_reduce_identical_inputs(x, group=self.replica_grouping.transpose())
        return self.head(x)

    @staticmethod
    def hf_mapping(config: DollyConfig, variables: NamedTensors, hf_model) -> dict:
        """From ``GPTNeoXForCausalLM``."""
        head = to_numpy(hf_model.embed_out.weight.data.T, config.dtype)
        return {
            **layer_norm_mapping(config, variables.ln_f, hf_model.gpt_neox.final_layer_norm),
            variables.head.weight: shard(head, config.tensor_parallel, -1),
        }

    @staticmethod
    def to_hf(config: DollyConfig, variables_data: NamedTensors) -> dict:
        head = unshard(variables_data.head.weight, config.tensor_parallel, -1)
        return {
            **layer_norm_to_hf("gpt_neox.final_layer_norm", variables_data.ln_f),
            "embed_out.weight": torch_tensor(head.T),
        }


class DollyLMHeadModelTP(addons.Module):
    """``GPTNeoXForCausalLM``: offset ids to this replica's logits shard."""

    def __init__(self, config: DollyConfig):
        super().__init__()
        self.config = config
        self.transformer = DollyModelTP(config, include_layer_norm=False)  # norm in the head
        self.lm_head = DollyLMHeadTP(config)

    def build(self, input_ids: popxl.Tensor) -> popxl.Tensor:
        return self.lm_head(self.transformer(input_ids))

    @staticmethod
    def hf_mapping(config: DollyConfig, variables: NamedTensors, hf_model) -> dict:
        weights = DollyModelTP.hf_mapping(
            config, variables.transformer, hf_model.gpt_neox, layer_norm=False
        )
        weights.update(DollyLMHeadTP.hf_mapping(config, variables.lm_head, hf_model))
        return weights

    @staticmethod
    def to_hf(config: DollyConfig, variables_data: NamedTensors) -> dict:
        """``GPTNeoXForCausalLM``'s state dict (the attention's mask buffers left out)."""
        transformer = DollyModelTP.to_hf(config, variables_data.transformer, layer_norm=False)
        return {
            **prefixed("gpt_neox", transformer),
            **DollyLMHeadTP.to_hf(config, variables_data.lm_head),
        }


def load_lm_to_hf(config: DollyConfig, session, hf_model):
    """GPT-J's ``load_lm_to_hf``: the session's weights into ``hf_model``, every key but
    the attention's mask buffers (``bias``, ``masked_bias``) and rotary tables given."""
    weights = session.get_named_tensors_data()
    if "fwd" in weights:
        weights = weights.fwd
    state_dict = DollyLMHeadModelTP.to_hf(config, weights)
    buffers = ("attention.bias", "attention.masked_bias", "rotary_emb.inv_freq")
    for k in hf_model.state_dict():
        if not k.endswith(buffers) and k not in state_dict:
            raise KeyError(f"key {k} not found in session state")
    hf_model.load_state_dict(state_dict, strict=False)
    return hf_model


class DollyLMHeadLossAndGradTP(addons.Module):
    """GPT-J's ``GPTJLMHeadLossAndGradTP``: the head's forward, the mean cross entropy of
    the sharded logits against ``labels`` (offset per replica as the embedding's ids), and
    its backward: the loss and the gradient of the head's input; the gradients of the
    head's weights accumulate into the ``bwd`` variables (``autodiff_with_accumulation``)."""

    def __init__(self, config: DollyConfig):
        super().__init__()
        self.config = config
        self.replica_grouping = tp_grouping(config)

    def build(self, x: popxl.Tensor, labels: popxl.Tensor) -> tuple[popxl.Tensor, popxl.Tensor]:
        fwd_facts, fwd_graph = DollyLMHeadTP(self.config).create_graph(x)
        ts = self.add_variable_inputs("fwd", fwd_facts)

        loss_graph = GraphWithNamedArgs(
            fwd_graph.graph._ir.create_graph(
                cross_entropy_sharded_loss,
                fwd_graph.graph.outputs[0],
                labels,
                reduction="mean",
                replica_grouping=self.replica_grouping.transpose(),
            )
        )
        bwd_facts, bwd_graph = addons.transforms.autodiff_with_accumulation(
            fwd_graph,
            tensors_to_accumulate_grads=list(fwd_graph.args.tensors),
            grads_required=[fwd_graph.graph.inputs[0]],
            replica_groupings=fwd_facts.replica_groupings.copy(),
        )
        loss_bwd = addons.transforms.autodiff(
            loss_graph, grads_required=(loss_graph.graph.inputs[0],)
        )

        fwd_info = fwd_graph.bind(ts).call_with_info(x)
        loss_fwd_info = loss_graph.call_with_info(fwd_info.parent_output(0), labels)
        loss = loss_fwd_info.parent_output(0)

        loss_scaling = popxl.constant(1.0, self.config.dtype)
        (dx,) = loss_bwd.call(
            loss_scaling, args=loss_bwd.grad_graph_info.inputs_dict(loss_fwd_info)
        )
        bwd_weights = self.add_variable_inputs("bwd", bwd_facts.copy())
        (dx,) = bwd_graph.bind(bwd_weights).call(
            dx, args=bwd_graph.grad_graph_info.inputs_dict(fwd_info)
        )
        return loss, dx
