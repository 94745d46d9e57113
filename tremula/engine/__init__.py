"""Tremula's engine: how a graph runs. ``Engine`` compiles, loads, runs and reports."""

from tremula.engine.engine import Engine
from tremula.engine.options import EngineOptions, parse_options

__all__ = ["Engine", "EngineOptions", "parse_options"]
