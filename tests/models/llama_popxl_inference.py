"""The tiny LLaMA of ``llama_popxl.py`` as programs, as the examples' ``inference.py`` /
``api.py`` build them. :func:`inference`: one step (the tokens of a step at ``position``
in, the full logits and the greedy next tokens out, the KV caches kept on the device
between ``session.run`` s; the decoder's layers on chip, or in remote buffers run by an
``ops.repeat``), driven by :class:`LlamaGenerator`. :func:`generate`: the prompt and a
greedy decoding loop (``ops.repeat`` of the whole model) in one ``session.run``, driven by
:func:`greedy_on_device`. :func:`mapping`: the weights' data from Meta's state dict.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import numpy as np
import popxl_addons as addons
from llama_popxl import (
    LlamaConfig,
    LlamaDecoderBlockTP,
    LlamaEmbeddingsTP,
    LlamaLMHeadTP,
    LlamaModelTP,
    Weights,
    tp_grouping,
)
from popxl_addons import NamedTensors
from popxl_addons.named_replica_grouping import NamedReplicaGrouping, get_ild_replica_grouping
from popxl_addons.patterns import apply_pre_alias_patterns
from popxl_addons.remote import load_remote_graph, named_variable_buffers, store_remote_graph
from popxl_addons.rts import all_gather_replica_sharded_graph
from popxl_addons.task_session import TaskSession

import popdist
import popxl
from popxl import ops


def replicated_ir(config: LlamaConfig) -> popxl.Ir:
    """The program's IR over ``tensor_parallel x data_parallel`` replicas: in one process,
    or, launched by ``poprun``, the job's layout (as the examples' ``inference.py`` do)."""
    replicas = config.tensor_parallel * config.data_parallel
    ir = popxl.Ir(replication="popdist" if popdist.isPopdistEnvSet() else replicas)
    if ir.replication_factor != replicas:
        raise ValueError(
            f"the job runs {ir.replication_factor} replicas, the config needs {replicas} "
            f"(tensor_parallel {config.tensor_parallel} x data_parallel {config.data_parallel})"
        )
    return ir


def gather_logits(config: LlamaConfig, logits: popxl.Tensor) -> popxl.Tensor:
    """The full ``[batch * seq, vocab]`` logits from this replica's vocabulary shard."""
    tp = config.tensor_parallel
    logits = ops.collectives.replicated_all_gather(
        logits, group=popxl.gcg().ir.replica_grouping(group_size=tp), output_shape="new_axis"
    )
    rows = config.micro_batch_size * config.sequence_length
    return logits.transpose((1, 0, 2)).reshape_((rows, config.vocab_size))


def generate_greedy_tp(
    config: LlamaConfig, logits: popxl.Tensor, last_token_index: popxl.Tensor
) -> popxl.Tensor:
    """The next tokens from this replica's logits shard ``[batch * seq, vocab / tp]``: the
    argmax of each sequence's logits at its ``last_token_index`` (the last valid token of a
    padded sequence; the last row with a KV cache fed one token per step), ``(batch,)``."""
    tp = config.tensor_parallel
    # indices for next token logits in each batch
    mb = config.micro_batch_size
    offsetted_batch_indices = popxl.constant(
        np.arange(0, mb) * config.sequence_length, dtype=popxl.int32
    )
    offsetted_batch_indices = last_token_index + offsetted_batch_indices
    next_token_logits = logits[offsetted_batch_indices]  # (mb, vocab_shard_size)
    next_token_logits = ops.collectives.replicated_all_gather(
        next_token_logits,
        group=popxl.gcg().ir.replica_grouping(group_size=tp),
        output_shape="new_axis",
    )
    next_token_logits = next_token_logits.transpose((1, 0, 2)).reshape_((mb, config.vocab_size))
    return ops.argmax(next_token_logits, dim=1)


def rts_groups(facts: addons.NamedVariableFactories) -> NamedReplicaGrouping:
    """The replicas each variable's remote buffer is sharded over, as GPT-J's finetuning
    picks them: the variable's group (within an IPU-Link domain) when its size divides,
    else none (a group of one)."""
    ir = popxl.gcg().ir
    groups = {}
    for name, f in facts.to_dict().items():
        group = get_ild_replica_grouping(f.replica_grouping)
        if int(np.prod(f.shape)) % group.group_size:
            group = ir.replica_grouping(group_size=1)
        groups[name] = group
    return NamedReplicaGrouping.from_dict(groups)


def inference(config: LlamaConfig) -> tuple[TaskSession, NamedTensors]:
    """One step of the model: ``words`` ``[seq]`` at ``position`` ``[1]`` in, the full
    ``logits`` of the step and the greedy ``next_token`` out; the KV caches stay on the
    device from one ``run`` to the next."""
    ir = replicated_ir(config)
    opts = ir._pb_ir.getSessionOptions()
    opts.partialsTypeMatMuls = "half" if config.dtype == popxl.float16 else "float"
    opts.engineOptions["target.syncReplicasIndependently"] = "true"
    with ir.main_graph:
        input_streams = addons.InputStreams(
            words=((config.micro_batch_size * config.sequence_length,), popxl.int32),
            position=((1,), popxl.uint32),
            last_token_indices=((config.micro_batch_size,), popxl.int32),
        )
        output_streams = addons.OutputStreams(
            logits=(
                (config.micro_batch_size * config.sequence_length, config.vocab_size),
                config.dtype,
            ),
            next_token=((config.micro_batch_size,), popxl.int32),
        )

        embeddings_facts, embeddings_graph = LlamaEmbeddingsTP(config).create_graph(
            input_streams.words.spec
        )
        layer_facts, layer_graph = LlamaDecoderBlockTP(config).create_graph(
            *embeddings_graph.graph.outputs, input_streams.position.spec
        )
        lm_facts, lm_graph = LlamaLMHeadTP(config).create_graph(layer_graph.graph.outputs[0])

        variables = NamedTensors()
        if config.remote_layers:
            # The decoder's weights and KV caches in remote buffers, an entry per layer:
            # each repeat iteration loads its layer, runs it and stores its caches back.
            rts = rts_groups(layer_facts) if config.rts_layers else None
            shard_over = {k: g.group_size for k, g in rts.to_dict().items()} if rts else False
            layer_buffers = named_variable_buffers(
                layer_facts, entries=config.layers, shard_over_dict=shard_over
            )
            decoder = {
                n: layer_facts.init_remote(layer_buffers, n, f"decoder.{n}")
                for n in range(config.layers)
            }
        else:
            decoder = {n: layer_facts.init(f"decoder.{n}") for n in range(config.layers)}
        variables.insert("embeddings", embeddings_facts.init("embeddings"))
        variables.insert("decoder", NamedTensors.from_dict(decoder))
        variables.insert("lm_head", lm_facts.init("lm_head"))

        with popxl.in_sequence():
            words = ops.host_load(input_streams.words)
            position = ops.host_load(input_streams.position)
            last_token_indices = ops.host_load(input_streams.last_token_indices)
            (x,) = embeddings_graph.bind(variables.embeddings).call(words)
            if config.remote_layers:
                cache_buffers = layer_buffers.attention.heads.filter_keys(["k_cache", "v_cache"])

                def layer(x: popxl.Tensor, n: popxl.Tensor, position: popxl.Tensor):
                    load_graph, names = load_remote_graph(layer_buffers)
                    layer_vars = NamedTensors.pack(names, load_graph.call(n))
                    if rts is not None:  # each weight whole again from its group's shards
                        gather, names = all_gather_replica_sharded_graph(
                            layer_vars, replica_groups=rts
                        )
                        layer_vars = NamedTensors.pack(names, gather.bind(layer_vars).call())
                    (x,) = layer_graph.bind(layer_vars).call(x, position)
                    caches = layer_vars.attention.heads.filter_keys(["k_cache", "v_cache"])
                    store_remote_graph(cache_buffers).bind(caches).call(n)
                    return x, n + 1

                i = popxl.constant(0, name="layer_index")
                layers_graph = ir.create_graph(layer, x, i, position)
                x, _ = ops.repeat(layers_graph, config.layers, x, i, position)
            else:
                for n in range(config.layers):
                    (x,) = layer_graph.bind(variables.decoder[n]).call(x, position)
            (logits,) = lm_graph.bind(variables.lm_head).call(x)
            next_token = generate_greedy_tp(config, logits, last_token_indices)
            ops.host_store(output_streams.logits, gather_logits(config, logits))
            ops.host_store(output_streams.next_token, next_token)

        addons.set_available_memory_proportion_by_ipu(ir, [0.4])
    # Run `OpToIdentityPattern` among others part of `PreAliasPatterns`
    apply_pre_alias_patterns(ir, level="default")

    session = TaskSession(
        inputs=input_streams,
        outputs=output_streams,
        state=NamedTensors(fwd=variables),
        ir=ir,
        device_desc="ipu_hw",
    )
    return session, variables


def mapping(
    config: LlamaConfig, variables: NamedTensors, weights: Weights
) -> dict[popxl.Tensor, np.ndarray]:
    """The data of every weight variable from a Meta-layout state dict."""
    state = {
        **LlamaEmbeddingsTP.mapping(config, variables.embeddings, weights),
        **LlamaLMHeadTP.mapping(config, variables.lm_head, weights),
    }
    for n in range(config.layers):
        state.update(LlamaDecoderBlockTP.mapping(config, variables.decoder[n], weights, n))
    return state


class LlamaGenerator:
    """Runs a prompt and greedy decoding through one session."""

    def __init__(self, config: LlamaConfig, weights: Weights):
        self.config = config
        self.session, self.variables = inference(config)
        self.session.write_variables_data(mapping(config, self.variables, weights))

    def step(
        self, words: np.ndarray, position: int, last: int | None = None
    ) -> tuple[np.ndarray, int]:
        """Feed ``words`` ``[seq]`` at ``position`` (a micro batch of one): the step's logits
        ``[seq, vocab]`` and the token following ``words[last]`` (the last by default)."""
        last = self.config.sequence_length - 1 if last is None else last
        logits, tokens = self.step_batch(np.asarray(words)[None], position, np.array([last]))
        return logits[0], int(tokens[0])

    def step_batch(
        self, words: np.ndarray, position: int, last: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Feed ``words`` ``[batch, seq]`` at ``position``: the logits ``[batch, seq, vocab]``
        and the tokens following ``words[b, last[b]]`` (replica 0's; every replica holds
        the same)."""
        cfg = self.config
        tp = cfg.tensor_parallel
        data = {
            self.session.inputs.words: np.asarray(words, np.int32).reshape(-1),
            self.session.inputs.position: np.array([position], np.uint32),
            self.session.inputs.last_token_indices: np.asarray(last, np.int32),
        }
        if tp > 1:
            data = {k: np.repeat(v[None], tp, axis=0) for k, v in data.items()}
            words_in = self.session.inputs.words
            data[words_in] = np.stack(
                [LlamaEmbeddingsTP.offset_input(data[words_in][i], i, cfg) for i in range(tp)]
            )
        out = self.session.run(data)
        logits, tokens = out[self.session.outputs.logits], out[self.session.outputs.next_token]
        if tp > 1:
            for r in range(1, tp):
                np.testing.assert_array_equal(logits[r], logits[0])
                np.testing.assert_array_equal(tokens[r], tokens[0])
            logits, tokens = logits[0], tokens[0]
        shape = (cfg.micro_batch_size, cfg.sequence_length, cfg.vocab_size)
        return logits.reshape(shape), tokens.reshape(-1)


def vocab_offsets(config: LlamaConfig) -> np.ndarray:
    """Each tensor-parallel shard's vocabulary offset, the data of a variable of
    :func:`tp_grouping`."""
    shard_size = LlamaEmbeddingsTP.get_vocab_shard_size(config)
    offsets = np.arange(config.tensor_parallel, dtype=np.int32) * shard_size
    return offsets.reshape(-1, 1) if config.tensor_parallel > 1 else offsets


class LlamaGreedyStepTP(addons.Module):
    """One step of greedy decoding on the device, the body of the decoding loop: the
    previous tokens ``[batch]`` (whole-vocabulary ids) at ``position`` in, the next tokens
    written to row ``step`` of ``tokens`` ``[steps, batch]``."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.model = LlamaModelTP(config)

    def build(
        self, token: popxl.Tensor, position: popxl.Tensor, tokens: popxl.Tensor, step: popxl.Tensor
    ) -> tuple[popxl.Tensor, ...]:
        offset = self.add_variable_input(
            "vocab_offset",
            partial(np.zeros, (1,)),
            popxl.int32,
            replica_grouping=tp_grouping(self.config),
        )
        logits = self.model(token - offset, position)
        last = popxl.constant(np.zeros(self.config.micro_batch_size), popxl.int32)
        next_token = generate_greedy_tp(self.config, logits, last)
        row = next_token.reshape((1, self.config.micro_batch_size))
        tokens = ops.dynamic_update_(tokens, step, row, axes=[0], sizes=[1], no_overlap=True)
        return next_token, position + 1, tokens, step + 1


def generate(config: LlamaConfig, steps: int) -> tuple[TaskSession, NamedTensors]:
    """The prompt and ``steps`` greedy tokens in one ``session.run``: the prompt's
    ``sequence_length`` offset ids at position 0 fill the KV caches (its full ``logits`` out)
    and give the first token; an ``ops.repeat`` of :class:`LlamaGreedyStepTP`, one token at
    a time through the same variables, gives the others (``tokens`` ``[steps, batch]``)."""
    mb, seq = config.micro_batch_size, config.sequence_length
    ir = replicated_ir(config)
    with ir.main_graph:
        input_streams = addons.InputStreams(words=((mb * seq,), popxl.int32))
        output_streams = addons.OutputStreams(
            logits=((mb * seq, config.vocab_size), config.dtype),
            tokens=((steps, mb), popxl.int32),
        )
        position_spec = popxl.TensorSpec((1,), popxl.uint32)
        facts, prompt_graph = LlamaModelTP(config).create_graph(
            input_streams.words.spec, position_spec
        )
        step_facts, step_graph = LlamaGreedyStepTP(
            replace(config, sequence_length=1, attention_serialisation=1)
        ).create_graph(
            popxl.TensorSpec((mb,), popxl.int32),
            position_spec,
            popxl.TensorSpec((steps, mb), popxl.int32),
            popxl.TensorSpec((1,), popxl.uint32),
        )
        variables = facts.init()
        offset = step_facts.vocab_offset.create_tensor("vocab_offset")
        variables.insert("vocab_offset", offset)

        with popxl.in_sequence():
            words = ops.host_load(input_streams.words)
            position = popxl.constant(np.zeros(1), popxl.uint32, name="prompt_position")
            (logits,) = prompt_graph.bind(variables).call(words, position)
            ops.host_store(output_streams.logits, gather_logits(config, logits))
            last = popxl.constant(np.full(mb, seq - 1), popxl.int32, name="last_token_indices")
            token = generate_greedy_tp(config, logits, last)

            tokens = ops.init((steps, mb), popxl.int32, "tokens")
            step = popxl.constant(np.zeros(1), popxl.uint32, name="step")
            tokens = ops.dynamic_update_(
                tokens, step, token.reshape((1, mb)), axes=[0], sizes=[1], no_overlap=True
            )
            model = variables.filter_keys(["embeddings", "decoder", "lm_head"])
            bound = step_graph.bind(NamedTensors(model=model, vocab_offset=offset))
            position = popxl.constant(np.full(1, seq), popxl.uint32, name="decode_position")
            _, _, tokens, _ = ops.repeat(
                bound.graph, steps - 1, token, position, tokens, step + 1, inputs_dict=bound.args
            )
            ops.host_store(output_streams.tokens, tokens)

    session = TaskSession(
        inputs=input_streams,
        outputs=output_streams,
        state=NamedTensors(fwd=variables),
        ir=ir,
        device_desc="ipu_hw",
    )
    return session, variables


def greedy_on_device(
    config: LlamaConfig, weights: Weights, prompts: np.ndarray, steps: int
) -> tuple[np.ndarray, np.ndarray]:
    """Run :func:`generate` once: ``prompts`` ``[batch, sequence_length]`` in, their logits
    ``[batch, sequence_length, vocab]`` and greedy tokens ``[batch, steps]`` out (replica
    0's; every replica holds the same)."""
    tp = config.tensor_parallel
    session, variables = generate(config, steps)
    state = mapping(config, variables, weights)
    state[variables.vocab_offset] = vocab_offsets(config)
    words = np.asarray(prompts, np.int32).reshape(-1)
    if tp > 1:
        words = np.stack([LlamaEmbeddingsTP.offset_input(words, i, config) for i in range(tp)])
    with session:
        session.write_variables_data(state)
        out = session.run({session.inputs.words: words})
    logits, tokens = out[session.outputs.logits], out[session.outputs.tokens]
    if tp > 1:
        for r in range(1, tp):
            np.testing.assert_array_equal(logits[r], logits[0])
            np.testing.assert_array_equal(tokens[r], tokens[0])
        logits, tokens = logits[0], tokens[0]
    shape = (config.micro_batch_size, config.sequence_length, config.vocab_size)
    return logits.reshape(shape), tokens.T
