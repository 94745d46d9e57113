"""PopLibs on the engine: each library owns its codelets, cycle estimators and planners.

``from tremula.libs import popops, poplin, popnn, poprand, gcl``.
"""
