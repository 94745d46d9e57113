"""PopART custom ops of real PopXL programs (popxl-addons' C++ ops, models' own copies),
served in Python and keyed by PopART's operator identifier ``(domain, type, version)``.

A C++ custom op that a program ships as a cppimport module declares its identifier
(``popart::OperatorIdentifier{domain, type, version}``); the import hook
(``tremula.popxl._ir.native``) reads it from the module's C++ source and serves the module
named here, wherever the program keeps its copy. Each module defines its ops like any other
op (definition, gradient rule, lowering rule with cycle estimates) and provides the binding
classes (``createOpInGraph``) that the program's Python wrapper calls.
"""

from __future__ import annotations

#: operator identifier (domain, type, version) -> the module serving the binding that
#: declares it; each op module adds its own rows
SERVED: dict[tuple[str, str, int], str] = {
    ("popxl.addons.ops", "GroupQuantizeDecompress", 1): f"{__name__}.group_quantize_decompress",
    ("popxl.addons.ops", "RotaryPosEmbed", 1): f"{__name__}.rotary_pos_embed",
    ("popxl.addons.ops", "RotaryPosEmbedGrad", 1): f"{__name__}.rotary_pos_embed",
    ("popxl.addons.ops", "LinearLayout", 1): f"{__name__}.linear_layout",
    ("popxl.addons.ops", "SparseMatmul", 1): f"{__name__}.static_sparse_ops",
    ("popxl.addons.ops", "Fp8Scale", 1): f"{__name__}.fp8_mse_scale",
}
