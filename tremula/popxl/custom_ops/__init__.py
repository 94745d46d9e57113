"""PopART custom ops of real PopXL programs (popxl-addons' C++ ops, models' own copies),
served in Python and keyed by PopART's operator identifier ``(domain, type, version)``.

A C++ custom op that a program ships as a cppimport module declares its identifier
(``popart::OperatorIdentifier{domain, type, version}``); the import hook
(``tremula.popxl._ir.native``) reads it from the module's C++ source and serves the module
named here, wherever the program keeps its copy. Each module defines its ops like any other
op (definition, gradient rule) and provides the binding classes (``createOpInGraph``) that
the program's Python wrapper calls (its ``__all__``), which connect the op through
``_op_binding.connect``; its lowering rule, with cycle estimates, is beside it in
``<op>_lowering.py`` (Poplar and PopLibs only, a ``LOWERING_RULES`` table that
``tremula/lowering/custom_ops.py`` registers).
"""

from __future__ import annotations

_ADDONS = "popxl.addons.ops"
_COLLECTIVES = "tremula.popxl._ir.custom_collectives"

#: operator identifier (domain, type, version) -> the module serving the binding that
#: declares it; each op module adds its own rows
SERVED: dict[tuple[str, str, int], str] = {
    # popxl-addons' replicated collectives
    (_ADDONS, "ReplicatedAllGatherStrided", 1): _COLLECTIVES,
    (_ADDONS, "ReplicatedReduceScatterStrided", 1): _COLLECTIVES,
    (_ADDONS, "ReplicatedAllReduceStrided", 1): _COLLECTIVES,
    (_ADDONS, "ReplicatedAllReduceTP", 1): _COLLECTIVES,
    # popxl-addons' tensor-parallel layer norm
    (_ADDONS, "LayerNormDistributed", 1): f"{__name__}.layer_norm_distributed",
    (_ADDONS, "LayerNormDistributedGrad", 1): f"{__name__}.layer_norm_distributed",
    (_ADDONS, "GradReduceSquareAdd", 1): f"{__name__}.grad_reduce_square_add",
    (_ADDONS, "CrossEntropySharded", 1): f"{__name__}.cross_entropy_sharded_loss",
    (_ADDONS, "CrossEntropyShardedGrad", 1): f"{__name__}.cross_entropy_sharded_loss",
    (_ADDONS, "CrossEntropyShardedWR", 1): f"{__name__}.cross_entropy_sharded_wr_loss",
    (_ADDONS, "CrossEntropyShardedGradWR", 1): f"{__name__}.cross_entropy_sharded_wr_loss",
    # popxl-addons' other custom ops
    (_ADDONS, "GroupQuantizeDecompress", 1): f"{__name__}.group_quantize_decompress",
    (_ADDONS, "RotaryPosEmbed", 1): f"{__name__}.rotary_pos_embed",
    (_ADDONS, "RotaryPosEmbedGrad", 1): f"{__name__}.rotary_pos_embed",
    (_ADDONS, "LinearLayout", 1): f"{__name__}.linear_layout",
    (_ADDONS, "SparseMatmul", 1): f"{__name__}.static_sparse_ops",
    (_ADDONS, "Fp8Scale", 1): f"{__name__}.fp8_mse_scale",
}
