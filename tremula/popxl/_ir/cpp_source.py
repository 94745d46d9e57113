"""What a cppimport module's C++ source declares: the PopART operator identifiers of its
custom ops, read without a compiler.

A cppimport module is a ``<name>.cpp`` (or ``.c``) whose first line mentions ``cppimport``
(cppimport's opt-in rule). Its custom ops are declared where PopART's op registry will
find them: an ``OperatorIdentifier{domain, type, version, ...}`` (or with parentheses),
in the file itself, in the headers it includes from its own folder (``common.hpp``), in
the sources its cppimport configuration compiles with it (``cfg['sources'] = [...]``), as
a constant or in a ``defaultOperatorId()``. The domain is a string, a macro defined to
one (``#define CUSTOM_OP_DOMAIN "popxl.addons.ops"``) or one of PopART's domain constants
(``Domain::ai_graphcore``). A module that declares none but names PopART's own
identifiers (``Onnx::CustomOperators::X``, ``Onnx::CustomGradOperators::X``,
``Onnx::Operators::X_N``) is identified by those.
"""

from __future__ import annotations

import os
import re
from typing import Any, NamedTuple

#: the file extensions cppimport compiles, in its order
EXTENSIONS = (".cpp", ".c")

#: PopART's domain constants (``popart::Domain``)
DOMAINS = {
    "ai_onnx": "ai.onnx",
    "ai_onnx_ml": "ai.onnx.ml",
    "ai_graphcore": "ai.graphcore",
}


class OperatorId(NamedTuple):
    """PopART's ``OperatorIdentifier``: what identifies a custom op."""

    domain: str
    type: str
    version: int

    def __str__(self) -> str:
        return f"{self.domain}::{self.type}:{self.version}"


def is_cppimport_source(path: str) -> bool:
    """Whether ``path`` is a C++ file cppimport would build (first line names it)."""
    try:
        with open(path, "rb") as f:
            return b"cppimport" in f.readline()
    except OSError:
        return False


def find_module_source(leaf: str, folders: list[Any]) -> str | None:
    """The cppimport source of module ``leaf`` in the first folder of ``folders`` that has
    one (``None`` when there is none)."""
    for folder in folders:
        if not isinstance(folder, (str, os.PathLike)):  # sys.path may hold other entries
            continue
        for ext in EXTENSIONS:
            path = os.path.join(os.fspath(folder) or ".", leaf + ext)
            if os.path.isfile(path) and is_cppimport_source(path):
                return os.path.abspath(path)
    return None


_STRING = r'"(?:[^"\\\n]|\\.)*"'
_COMMENT = re.compile(rf"//[^\n]*|/\*.*?\*/|({_STRING})", re.S)
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]+)[>"]', re.M)
_SOURCES = re.compile(r"cfg\[\s*['\"]sources['\"]\s*\]\s*=\s*\[([^\]]*)\]")
_DEFINE = re.compile(rf"^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+({_STRING})", re.M)
_DOMAIN = rf"{_STRING}|(?:\w+::)*\w+"
_TYPE = rf"{_STRING}|\w+"
_DECLARED = re.compile(
    rf"OperatorIdentifier\s*[{{(]\s*({_DOMAIN})\s*,\s*({_TYPE})\s*,\s*(\d+)", re.S
)
_NAMED = re.compile(r"\bOnnx::(CustomOperators|CustomGradOperators|Operators)::(\w+)")


def _strip_comments(text: str) -> str:
    """``text`` without C/C++ comments (strings kept)."""
    return _COMMENT.sub(lambda m: m.group(1) or " ", text)


def module_files(source: str) -> list[str]:
    """``source``, the files of its folder it includes (transitively) and the sources its
    cppimport configuration compiles with it, each once, in the order found."""
    folder = os.path.dirname(source)
    found: list[str] = []
    pending = [source]
    while pending:
        path = pending.pop(0)
        if path in found or not os.path.isfile(path):
            continue
        found.append(path)
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        names = _INCLUDE.findall(_strip_comments(text))
        for listed in _SOURCES.findall(text):  # the configuration lives in a comment
            names += re.findall(r"['\"]([^'\"]+)['\"]", listed)
        pending += [os.path.join(folder, n) for n in names]
    return found


def _unquote(token: str) -> str:
    return token[1:-1] if token.startswith('"') else token


def operator_ids(source: str) -> list[OperatorId]:
    """The operator identifiers module ``source`` declares (see the module docstring), in
    the order found, each once."""
    texts = []
    for path in module_files(source):
        with open(path, encoding="utf-8", errors="replace") as f:
            texts.append(_strip_comments(f.read()))
    macros = {name: _unquote(value) for text in texts for name, value in _DEFINE.findall(text)}
    out: list[OperatorId] = []
    for text in texts:
        for domain, op_type, version in _DECLARED.findall(text):
            if domain.startswith('"'):
                domain = _unquote(domain)
            elif domain in macros:
                domain = macros[domain]
            else:
                domain = DOMAINS.get(domain.rpartition("::")[2], domain)
            op_type = _unquote(op_type) if op_type.startswith('"') else macros.get(op_type, op_type)
            out.append(OperatorId(domain, op_type, int(version)))
    if not out:
        for text in texts:
            for kind, name in _NAMED.findall(text):
                if kind == "Operators":
                    base, _, version = name.rpartition("_")
                    if base and version.isdigit():
                        out.append(OperatorId("ai.onnx", base, int(version)))
                else:
                    out.append(OperatorId("ai.graphcore", name, 1))
    return list(dict.fromkeys(out))
