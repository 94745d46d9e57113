"""PopLibs on the engine: each library owns its codelets (``codelets``), their cycle estimators
(``estimators``) and its planners, laid out alike (``OVERVIEW.md``).

``from tremula.libs import popops, poplin, popnn, poprand, gcl``.
"""
