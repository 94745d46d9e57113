"""Host embeddings: embedding tables in host memory (or in remote buffers split between
replicas) that PopXL programs look up and train (TensorFlow-IPU's ``embedding_ops``, for
PopXL).

::

    from tremula import embedding
    import popxl

    emb = embedding.create_host_embedding(
        "words", [100_000, 64], popxl.float32,
        optimizer_spec=embedding.HostEmbeddingOptimizerSpec(0.01))
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        ...
        rows = emb.lookup(indices)            # in any graph; autodiff gives the update
    session = popxl.Session(ir, "ipu_model")
    with session, emb.register(session):
        session.run(inputs)
    table = emb.get_embedding_tensor()

See ``OVERVIEW.md`` beside this file.
"""

from tremula.embedding import lowering as _lowering  # noqa: F401  (registers the rules)
from tremula.embedding.host_embedding import (
    HostEmbedding,
    Registration,
    create_host_embedding,
    enable_remote_buffer_embedding,
    remote_buffer_embedding_enabled,
)
from tremula.embedding.optimizers import (
    HostEmbeddingAdagradOptimizerSpec,
    HostEmbeddingAdamOptimizerSpec,
    HostEmbeddingOptimizerSpec,
    HostEmbeddingSGDGAOptimizerSpec,
)
from tremula.embedding.partition import STRATEGIES, Layout
from tremula.errors import EmbeddingError

__all__ = [
    "STRATEGIES",
    "EmbeddingError",
    "HostEmbedding",
    "HostEmbeddingAdagradOptimizerSpec",
    "HostEmbeddingAdamOptimizerSpec",
    "HostEmbeddingOptimizerSpec",
    "HostEmbeddingSGDGAOptimizerSpec",
    "Layout",
    "Registration",
    "create_host_embedding",
    "enable_remote_buffer_embedding",
    "remote_buffer_embedding_enabled",
]
