"""Settings shared by the whole suite.

Property-based tests (hypothesis) are derandomized, so a run draws the same examples on
every machine (the project's rule: same program, inputs and seed give the same numbers),
and have no per-example deadline: a loaded CI machine must not turn a slow example into a
failure. Tests that set their own ``@settings`` keep them.
"""

from hypothesis import HealthCheck, settings

settings.register_profile(
    "tremula", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("tremula")
