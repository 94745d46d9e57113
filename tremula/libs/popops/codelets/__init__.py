"""popops' codelets, one module per family: ``elementwise`` (the op families and the fused
expression codelets), ``reduce``, ``slicing`` (multi slices and updates), ``dynamic_slice``,
``cast``, ``fill``, ``fp8``, ``histogram``, ``iota``, ``scaled_add`` and ``sort``. The
library's API modules (``popops/*.py``) build compute sets from them; their cycle
estimators are ``popops/estimators.py``'s.
"""
