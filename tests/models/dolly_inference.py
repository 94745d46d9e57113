"""Dolly's inference program, as GPT-J's ``inference.py`` builds its own: the embedding, one
decoder layer and the LM head outlined once each; every weight in a remote buffer (the
layers' in one buffer of ``layers`` entries), loaded before use; the layers run by an
``ops.repeat`` over the layer index; the next token of each sequence is the argmax of the
logits at its last valid position (no KV cache: the whole padded sequence is fed each
step). Besides GPT-J's ``next_token`` the program streams out those logits."""

from __future__ import annotations

import numpy as np
import popxl_addons as addons
from dolly_layers import DollyConfig, DollyDecoderBlockTP
from dolly_popxl import DollyEmbeddingsTP, DollyLMHeadTP
from llama_popxl_inference import generate_greedy_tp
from popxl_addons import NamedTensors
from popxl_addons.patterns import apply_pre_alias_patterns
from popxl_addons.remote import load_remote_graph, named_variable_buffers
from popxl_addons.task_session import TaskSession

import popxl
from popxl import ops


def next_token_logits(config: DollyConfig, logits: popxl.Tensor, last_token_index: popxl.Tensor):
    """The full ``[batch, vocab]`` logits at each sequence's ``last_token_index`` from this
    replica's shard ``[batch * seq, vocab / tp]``."""
    tp, mb = config.tensor_parallel, config.micro_batch_size
    rows = popxl.constant(np.arange(mb) * config.sequence_length, dtype=popxl.int32)
    shard_logits = logits[last_token_index + rows]
    gathered = ops.collectives.replicated_all_gather(
        shard_logits, group=popxl.gcg().ir.replica_grouping(group_size=tp), output_shape="new_axis"
    )
    return gathered.transpose((1, 0, 2)).reshape_((mb, config.vocab_size))


def inference(config: DollyConfig) -> TaskSession:
    ir = popxl.Ir(replication=config.tensor_parallel)
    opts = ir._pb_ir.getSessionOptions()
    opts.partialsTypeMatMuls = "half" if config.dtype == popxl.float16 else "float"
    opts.engineOptions["target.syncReplicasIndependently"] = "true"
    mb, seq = config.micro_batch_size, config.sequence_length

    with ir.main_graph:
        input_streams = addons.InputStreams(
            words=((mb * seq,), popxl.int32), last_token_indices=((mb,), popxl.int32)
        )
        output_streams = addons.OutputStreams(
            next_token=((mb,), popxl.int32), logits=((mb, config.vocab_size), config.dtype)
        )

        # ----- Build compute graphs -----
        embeddings_facts, embeddings_graph = DollyEmbeddingsTP(config).create_graph(
            input_streams.words.spec
        )
        layer_facts, layer_graph = DollyDecoderBlockTP(config).create_graph(
            *embeddings_graph.graph.outputs
        )
        lm_facts, lm_graph = DollyLMHeadTP(config).create_graph(layer_graph.graph.outputs[0])
        addons.set_available_memory_proportion_by_ipu(ir, [0.28])

        # ----- Create Variables: a remote buffer for each -----
        embeddings_buffers = named_variable_buffers(embeddings_facts, shard_over_dict=False)
        layer_buffers = named_variable_buffers(
            layer_facts, entries=config.layers, shard_over_dict=False
        )
        lm_buffers = named_variable_buffers(lm_facts, shard_over_dict=False)

        variables = NamedTensors()
        transformer = NamedTensors()
        transformer.insert(
            "embeddings",
            embeddings_facts.init_remote(embeddings_buffers, 0, "embeddings", empty=True),
        )
        transformer.insert(
            "decoder",
            NamedTensors.from_dict(
                {
                    n: layer_facts.init_remote(layer_buffers, n, f"decoder.{n}", empty=True)
                    for n in range(config.layers)
                }
            ),
        )
        variables.insert("transformer", transformer)
        variables.insert("lm_head", lm_facts.init_remote(lm_buffers, 0, "lm_head", empty=True))

        # ----- Execute -----
        with popxl.in_sequence():
            word = ops.host_load(input_streams.words)
            last_token_indices = ops.host_load(input_streams.last_token_indices)
            load_graph, names = load_remote_graph(embeddings_buffers)
            embedding_vars = NamedTensors.pack(names, load_graph.call(0))
            (x,) = embeddings_graph.bind(embedding_vars).call(word)

            def layer(x: popxl.Tensor, n: popxl.Tensor):
                load_graph, names = load_remote_graph(layer_buffers)
                layer_vars = NamedTensors.pack(names, load_graph.call(n))
                (x,) = layer_graph.bind(layer_vars).call(x)
                return x, n + 1

            i = popxl.constant(0, name="layer_index")
            layers_graph = ir.create_graph(layer, x, i)
            x, _ = ops.repeat(layers_graph, config.layers, x, i)

            load_graph, names = load_remote_graph(lm_buffers)
            lm_vars = NamedTensors.pack(names, load_graph.call(0))
            (logits,) = lm_graph.bind(lm_vars).call(x)
            next_token = generate_greedy_tp(config, logits, last_token_indices)
            ops.host_store(output_streams.next_token, next_token.reshape_((mb,)))
            ops.host_store(
                output_streams.logits, next_token_logits(config, logits, last_token_indices)
            )

    # Run `OpToIdentityPattern` among others part of `PreAliasPatterns`
    apply_pre_alias_patterns(ir, level="default")

    return TaskSession(
        inputs=input_streams,
        outputs=output_streams,
        state=NamedTensors(fwd=variables),
        ir=ir,
        device_desc="ipu_model",
    )
