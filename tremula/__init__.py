"""Tremula: an open implementation of the IPU programming stack in Python.

Layers (bottom to top): :mod:`tremula.target` (machine parameters), :mod:`tremula.poplar`
(graphs, tensors, codelets, programs), :mod:`tremula.profile` (the Poplar profile format),
:mod:`tremula.engine` (compile, run, cost model). See ``README.md``.
"""

__version__ = "0.1.0"
