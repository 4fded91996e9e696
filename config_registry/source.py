"""What in a ``FunctionTool``'s Python source reads as a credential, read as Python rather than as a shell
line, so that :mod:`config_registry.secrets` can refuse it.

    from config_registry.source import source_credential

    source_credential('def f():\\n    API_KEY=os.getenv("API_KEY")\\n')               # None: read at run time
    source_credential('def f():\\n    API_KEY="q7Rz9LmX2vPk"\\n')                     # "the value of the variable 'API_KEY'"
    source_credential('def f():\\n    run("PGPASSWORD=pw psql", shell=True)\\n')      # "the value of the variable 'PGPASSWORD'"

A credential in source is a string literal: one given to a name that means a credential (an assignment,
spaced or not, ``os.environ["TOKEN"] = ...``, ``self.secret = ...``, a keyword argument, a dict key, a
parameter's default; a dict key or subscript only when it is a name), in lower or mixed case only when the
name's last word says it holds a credential and the value looks like one (:func:`_given_credential`), anything a
string literal or comment holds that a definition's other strings are refused for (a known shape, a
connection string, a variable set as the shell sets it: ``"PGPASSWORD=pw psql"``), a secret flag's value in
a string in which a command sets a variable (``"OPENAI_API_KEY=EMPTY tool --api-key VALUE"``, ``"cd /srv &&
export A=1; tool ..."``), or a password a
command line gives its program (:func:`~config_registry.programs.program_passwords`: a MySQL client's
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
    assignment_command_credential,
    encoded_script_credential,
    inner_script_credential,
    program_password,
    shape_credential,
    value_credential,
    variable_credential,
)
from config_registry.names import holds_command_line, names_credential_in_code
from config_registry.programs import program_passwords

# A name in upper case is an environment's or a constant's, read as the shell rule reads it; one in lower or
# mixed case is code's, where a name like a credential's may name something else (memory_key, password_hash)
# and a value given to one may be a word, a type or a mask ("string", "[REDACTED]"): _given_credential.
_UPPER_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
# What a dict key or a subscript names a value by, when it is a name: an identifier, or a header's name
# ("X-Api-Key"). Any other string is data, perhaps a secret itself, and never a name to repeat.
_NAME_LIKE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[A-Za-z][A-Za-z0-9-]*")
# A value that hides or stands for a secret rather than holding it: a mask ("***", "********").
_MASK_CHARACTERS = frozenset("*\u2022xX")


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
    found = found or next(filter(None, map(assignment_command_credential, _strings(tree, source))), None)
    listed = next((what for items in _lists(tree) for what in program_passwords(items).values()), None)
    encoded = next(filter(None, map(encoded_script_credential, _lists(tree))), None)
    return found or (f"{listed}, inside a command line" if listed else None) or encoded


def _given_credential(name: str, literal: str) -> str | None:
    """Whether ``literal`` given to ``name`` is a credential: under an upper-case name, as a variable set in a
    shell is read; under a lower- or mixed-case one, where code may mean a word, a type or a mask
    (``auth = "basic"``, ``{"password": "string"}``, ``rec["api_key"] = "[REDACTED]"``), only when the name
    says it holds a credential (:func:`~config_registry.names.names_credential_in_code`) and the value looks
    like one (:func:`_looks_secret`). A name that holds a command line is read as one."""
    if _UPPER_NAME.fullmatch(name) or holds_command_line(name):
        return variable_credential(name, literal)
    if not names_credential_in_code(name) or not _looks_secret(literal):
        return None
    return variable_credential(name, literal)


def _looks_secret(literal: str) -> bool:
    """Whether a literal is one token that could be a key or a password: 8 or more characters with a digit or
    a symbol in them (``hunter2-real``), or 16 or more; not prose, a word or a type's name (``Passwort``,
    ``string``, ``INTEGER``), a mask (``***``) or a bracketed placeholder (``[REDACTED]``, ``[PAD]``)."""
    value = literal.strip()
    if not value or any(c.isspace() for c in value) or set(value) <= _MASK_CHARACTERS:
        return False
    if value[0] + value[-1] in ("[]", "<>"):
        return False
    return len(value) >= 16 or (len(value) >= 8 and any(not c.isalpha() for c in value))


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
    or a subscript's (``os.environ["TOKEN"]``) when it is a name (:data:`_NAME_LIKE`), else ``None``."""
    if isinstance(target, ast.Subscript):
        target = target.slice
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Attribute):
        return target.attr
    if isinstance(target, ast.Constant) and isinstance(target.value, str):
        return target.value if _NAME_LIKE.fullmatch(target.value) else None
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
