"""PopART's C++ core types that the IR is built on and PopART's Python API shows: its enums
(``DataType``, ``VariableRetrievalMode``, ...), the replica groupings (``CommGroup``,
``ReplicaGrouping``), ``VariableSettings``, ``SessionOptions`` and the ``popart`` logger.

In Graphcore's SDK these are C++ (``popart_core``) below both the IR bindings and PopART's
Python; here they live with the IR bindings, the lower of the two layers: ``ir._pb_ir``
gives the Ir's ``SessionOptions``, PopXL builds ``VariableSettings`` from its groupings,
and ``tremula.popart`` re-exports every one of them (its ``enums``, ``grouping``,
``variable_settings``, ``options`` and ``log`` modules name these).
"""
