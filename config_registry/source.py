"""What in a ``FunctionTool``'s Python source reads as a credential, read as Python rather than as a shell
line, so that :mod:`config_registry.secrets` can refuse it.

    from config_registry.source import source_credential

    source_credential('def f():\\n    API_KEY=os.getenv("API_KEY")\\n')               # None: read at run time
    source_credential('def f():\\n    API_KEY="q7Rz9LmX2vPk"\\n')                     # "the value of the variable 'API_KEY'"
    source_credential('def f():\\n    run("PGPASSWORD=pw psql", shell=True)\\n')      # "the value of the variable 'PGPASSWORD'"

A credential in source is a string literal: one given to a name that means a credential (an assignment,
spaced or not, ``os.environ["TOKEN"] = ...``, ``self.secret = ...``, a keyword argument, a dict key, a
parameter's default), in lower or mixed case only when the name is more than a bare generic word (``key``,
``auth``) and the value is one token rather than prose (:func:`_given_credential`), anything a
string literal or comment holds that a definition's other strings are refused for (a known shape, a
connection string, a variable set as the shell sets it: ``"PGPASSWORD=pw psql"``), or a password a
command line gives its program (:func:`~config_registry.credentials.program_passwords`: a MySQL client's
``-pVALUE``, sshpass's ``-p VALUE``) in a string or a list of strings (``["mysql", "-pVALUE"]``), and what
PowerShell's encoded script in either holds (``["pwsh", "-enc", "BASE64"]``). What the
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
    encoded_script_credential,
    inner_script_credential,
    program_password,
    program_passwords,
    shape_credential,
    value_credential,
    variable_credential,
)
from config_registry.names import holds_command_line

# A name in upper case is an environment's or a constant's, read as the shell rule reads it; one in lower or
# mixed case is code's, where a bare generic word names something else (a dict's key, an auth scheme, a
# session's name, a cookie's name), and where a value with spaces is prose (_given_credential).
_UPPER_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
_GENERIC_NAMES = frozenset({"key", "keys", "auth", "session", "signature", "cookie", "cookies"})


def source_credential(source: str) -> str | None:
    """What in Python ``source`` is a credential (module docstring), or ``None``.

    Args:
        source: A ``FunctionTool``'s ``source_code``.

    Returns:
        What was found, for the error message (never the value), or ``None``.

    Raises:
        ScriptUnreadable: A PowerShell encoded script that does not decode, or shells nested past four, in a
            string or a list (no field named: the caller knows it).
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):  # ValueError: a null byte
        return value_credential(source)
    found = shape_credential(source)  # comments too
    found = found or next(filter(None, (_given_credential(n, v) for n, v in _given_literals(tree))), None)
    found = found or next(filter(None, map(value_credential, _strings(tree, source))), None)
    found = found or next(filter(None, map(program_password, _strings(tree, source))), None)
    found = found or next(filter(None, map(inner_script_credential, _strings(tree, source))), None)
    listed = next((what for items in _lists(tree) for what in program_passwords(items).values()), None)
    encoded = next(filter(None, map(encoded_script_credential, _lists(tree))), None)
    return found or (f"{listed}, inside a command line" if listed else None) or encoded


def _given_credential(name: str, literal: str) -> str | None:
    """Whether ``literal`` given to ``name`` is a credential: under an upper-case name, as a variable set in a
    shell is read; under a lower- or mixed-case one, where code may mean a word (``auth = "basic"``, ``key =
    "id"``, ``password_hint = "Ask IT"``), only when the name is more than a bare generic word and the value
    is one token, as a key or password is, rather than prose."""
    if _UPPER_NAME.fullmatch(name):
        return variable_credential(name, literal)
    if holds_command_line(name):  # "password_command = 'pass show db'" is read as a command line
        return variable_credential(name, literal)
    if name.lower() in _GENERIC_NAMES or any(c.isspace() for c in literal.strip()):
        return None
    return variable_credential(name, literal)


def _given_literals(tree: ast.AST) -> Iterator[tuple[str, str]]:
    """``(name, literal)`` for each string literal given to a name."""
    for node in ast.walk(tree):
        for target, value in _given(node):
            name = _name(target)
            literal = value.value if isinstance(value, ast.Constant) else None
            if isinstance(literal, bytes):
                literal = literal.decode("latin-1")
            if name and isinstance(literal, str):
                yield name, literal


def _given(node: ast.AST) -> list[tuple[ast.expr | str | None, ast.expr | None]]:
    """What ``node`` gives a value to and the value: an assignment's targets (``api_key = ...``, ``self.secret
    = ...``), a keyword argument, a dict's keys, a function's parameters with their defaults."""
    if isinstance(node, ast.Assign):
        return [(target, node.value) for target in node.targets]
    if isinstance(node, ast.AnnAssign | ast.NamedExpr):
        return [(node.target, node.value)]
    if isinstance(node, ast.keyword):
        return [(node.arg, node.value)]
    if isinstance(node, ast.Dict):
        return list(zip(node.keys, node.values, strict=True))
    if isinstance(node, ast.arguments):
        positional = [*node.posonlyargs, *node.args]
        defaults = zip(positional[len(positional) - len(node.defaults):], node.defaults, strict=True)
        keywords = zip(node.kwonlyargs, node.kw_defaults, strict=True)
        return [(argument.arg, default) for argument, default in [*defaults, *keywords]]
    return []


def _name(target: ast.expr | str | None) -> str | None:
    """The name a value is given to: a variable's, an attribute's (``self.secret``), a keyword's, a dict key's
    or a subscript's (``os.environ["TOKEN"]``)."""
    if isinstance(target, ast.Subscript):
        target = target.slice
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Attribute):
        return target.attr
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
