"""What in a ``FunctionTool``'s Python source reads as a credential, read as Python rather than as a shell
line, so that :mod:`config_registry.secrets` can refuse it.

    from config_registry.source import source_credential

    source_credential('def f():\\n    API_KEY=os.getenv("API_KEY")\\n')               # None: read at run time
    source_credential('def f():\\n    API_KEY="q7Rz9LmX2vPk"\\n')                     # "the value of the variable 'API_KEY'"
    source_credential('def f():\\n    run("PGPASSWORD=pw psql", shell=True)\\n')      # "the value of the variable 'PGPASSWORD'"

A credential in source is a string literal: one given to an upper-case name that means a credential (an
assignment, spaced or not, ``os.environ["TOKEN"] = ...``, a keyword argument, a dict key), anything a
string literal or comment holds that a definition's other strings are refused for (a known shape, a
connection string, a variable set as the shell sets it: ``"PGPASSWORD=pw psql"``), or a password a
command line gives its program (:func:`~config_registry.credentials.program_passwords`: a MySQL client's
``-pVALUE``, sshpass's ``-p VALUE``) in a string or a list of strings (``["mysql", "-pVALUE"]``). What the
code reads when it runs (``os.getenv("API_KEY")``, ``os.environ["TOKEN"]``, a call) holds none. Source
that does not parse is read as any other string is.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator

from config_registry.credentials import (
    program_password,
    program_passwords,
    shape_credential,
    value_credential,
    variable_credential,
)

# The names a literal is refused under: an environment's or a constant's, in upper case, as the shell rule
# reads them; "token = 'abc'" in lower case may be a placeholder or a word.
_UPPER_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")


def source_credential(source: str) -> str | None:
    """What in Python ``source`` is a credential (module docstring), or ``None``.

    Args:
        source: A ``FunctionTool``'s ``source_code``.

    Returns:
        What was found, for the error message (never the value), or ``None``.
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):  # ValueError: a null byte
        return value_credential(source)
    found = shape_credential(source)  # comments too
    found = found or next(filter(None, (variable_credential(n, v) for n, v in _given_literals(tree))), None)
    found = found or next(filter(None, map(value_credential, _strings(tree, source))), None)
    found = found or next(filter(None, map(program_password, _strings(tree, source))), None)
    listed = next((what for items in _lists(tree) for what in program_passwords(items).values()), None)
    return found or (f"{listed}, inside a command line" if listed else None)


def _given_literals(tree: ast.AST) -> Iterator[tuple[str, str]]:
    """``(name, literal)`` for each string literal given to an upper-case name."""
    for node in ast.walk(tree):
        pairs: list[tuple[ast.expr | str | None, ast.expr | None]] = []
        if isinstance(node, ast.Assign):
            pairs = [(target, node.value) for target in node.targets]
        elif isinstance(node, ast.AnnAssign | ast.NamedExpr):
            pairs = [(node.target, node.value)]
        elif isinstance(node, ast.keyword):
            pairs = [(node.arg, node.value)]
        elif isinstance(node, ast.Dict):
            pairs = list(zip(node.keys, node.values, strict=True))
        for target, value in pairs:
            name = _name(target)
            literal = value.value if isinstance(value, ast.Constant) else None
            if isinstance(literal, bytes):
                literal = literal.decode("latin-1")
            if name and _UPPER_NAME.fullmatch(name) and isinstance(literal, str):
                yield name, literal


def _name(target: ast.expr | str | None) -> str | None:
    """The name a value is given to: a variable's, a keyword's, a dict key's or a subscript's
    (``os.environ["TOKEN"]``)."""
    if isinstance(target, ast.Subscript):
        target = target.slice
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Constant) and isinstance(target.value, str):
        return target.value
    return target if isinstance(target, str) else None


def _strings(tree: ast.AST, source: str) -> Iterator[str]:
    """Every string literal (an f-string's literal parts, a docstring) and every comment's text."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.string.lstrip("#")


def _lists(tree: ast.AST) -> Iterator[list[str]]:
    """The items of each list or tuple of string literals alone (``subprocess.run(["mysql", ...])``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.List | ast.Tuple):
            items = [item.value for item in node.elts if isinstance(item, ast.Constant) and isinstance(item.value, str)]
            if items and len(items) == len(node.elts):
                yield items
