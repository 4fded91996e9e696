"""How a shell command line is read: its simple commands, and the word in each that names the program run,
so that :mod:`config_registry.credentials` can ask what a program's arguments mean.

    from config_registry.shell import command_word, simple_commands, words

    words("tool --dsn 'host=db port=5432' serve")            # ["tool", "--dsn", "host=db port=5432", "serve"]
    simple_commands("cd /srv && PGPASSWORD=pw psql -h db")   # [["cd", "/srv"], ["PGPASSWORD=pw", "psql", "-h", "db"]]
    command_word(["sudo", "-u", "app", "env", "-i", "A=1", "mysql", "-uapp"])   # 6: "mysql"

A script is split into lines, and each line into words as a POSIX shell splits it, where ``;``, ``&&``,
``||``, ``|`` and ``&`` end a command whether or not spaces stand around them (``crm|ssh``, ``x&& psql``).
Nothing here decides what a secret is.
"""

from __future__ import annotations

import re
import shlex

# Where one command ends and the next begins ("a; b", "a && b", "a | b", "a & b").
_SEPARATORS = frozenset({";", "&&", "||", "|", "&", ";;"})
# Characters the splitter reads as operators: the separators' and redirections' ("2>&1" stays out of them).
_OPERATOR_CHARACTERS = ";&|<>"
# A backslash before an ordinary character means nothing to a POSIX shell, so one there ("C:\mysql\bin")
# is a Windows path's, kept as written.
_WINDOWS_BACKSLASH = re.compile(r"\\[^\s\"'$`\\]")
# A shell assignment before the command ("PGHOST=db psql"), or PowerShell's ("$env:PGHOST='db'").
_ASSIGNMENT = re.compile(r"(?:\$env:)?[A-Za-z_][A-Za-z0-9_]*=.*", re.DOTALL | re.IGNORECASE)
# Programs that run the command after their own options and assignments, and the options among theirs that
# take a value ("env -u NAME", "sudo -u USER").
_WRAPPERS = frozenset({"env", "sudo", "exec", "command", "nice", "nohup", "time", "doas"})
_WRAPPER_VALUE_OPTIONS = frozenset({"-u", "--unset", "-C", "--chdir", "-g", "--group", "--user", "-n", "-S"})
# ``docker exec [options] CONTAINER COMMAND ...`` (podman's too): the options that take a value.
_CONTAINER_VALUE_OPTIONS = frozenset({
    "-e", "--env", "--env-file", "-u", "--user", "-w", "--workdir", "--detach-keys", "-c", "--container",
    "-n", "--namespace",
})


def simple_commands(text: str) -> list[list[str]]:
    """The words of each simple command in ``text``, line by line, without the separators between them."""
    commands: list[list[str]] = []
    for line in text.splitlines():
        current: list[str] = []
        for word in split_words(line):
            if word in _SEPARATORS:
                commands.append(current)
                current = []
            else:
                current.append(word)
        commands.append(current)
    return [command for command in commands if command]


def words(text: str) -> list[str]:
    """``text`` split at its spaces as a POSIX shell splits it, operators left inside words (a URL's
    ``?a=1&b=2`` is one word, whatever a shell would make of it); at spaces when a quote is left unclosed."""
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def split_words(line: str) -> list[str]:
    """One line split as a POSIX shell splits it, separators and redirections as words of their own; at
    spaces and separators when a quote is left unclosed."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=_OPERATOR_CHARACTERS)
    lexer.whitespace_split = True
    if _WINDOWS_BACKSLASH.search(line):
        lexer.escape = ""
    try:
        return list(lexer)
    except ValueError:
        return re.findall(r"[;&|]+|[^\s;&|]+", line)


def command_word(words: list[str]) -> int | None:
    """The index of the word that names the program ``words`` runs: the first after its assignments, or the
    command that ``env``, ``sudo`` or ``exec`` runs after their options, or that ``docker exec`` and
    ``kubectl exec`` run in a container; ``None`` when the words only set variables."""
    index = _after_assignments(words, 0)
    while index < len(words):
        program = re.split(r"[/\\]", words[index])[-1].lower().removesuffix(".exe")
        if program in _WRAPPERS:
            index = _after_assignments(words, _after_options(words, index + 1, _WRAPPER_VALUE_OPTIONS))
        elif program in {"docker", "podman"} and words[index + 1:index + 2] == ["exec"]:
            index = _after_options(words, index + 2, _CONTAINER_VALUE_OPTIONS) + 1  # past the container
        elif program in {"kubectl", "oc"} and "exec" in words[index + 1:] and "--" in words[index + 1:]:
            index = words.index("--", index + 1) + 1
        else:
            return index
    return None


def _after_assignments(words: list[str], index: int) -> int:
    while index < len(words) and _ASSIGNMENT.fullmatch(words[index]):
        index += 1
    return index


def _after_options(words: list[str], index: int, takes_value: frozenset[str]) -> int:
    while index < len(words) and words[index].startswith("-") and words[index] != "-":
        index += 2 if words[index] in takes_value else 1
    return index
