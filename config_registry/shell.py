"""How a shell command line is read: its simple commands, and the word in each that names the program run,
so that :mod:`config_registry.credentials` can ask what a program's arguments mean.

    from config_registry.shell import command_word, simple_commands, words

    words("tool --dsn 'host=db port=5432' serve")            # ["tool", "--dsn", "host=db port=5432", "serve"]
    simple_commands("cd /srv && PGPASSWORD=pw psql -h db")   # [["cd", "/srv"], ["PGPASSWORD=pw", "psql", "-h", "db"]]
    command_word(["sudo", "-u", "app", "env", "-i", "A=1", "mysql", "-uapp"])   # 6: "mysql"

A script is split into words as a POSIX shell splits it, a backslash at a line's end joining it to the
next, where a new line, ``;``, ``&&``, ``||``, ``|`` and ``&`` end a command whether or not spaces stand
around them (``crm|ssh``, ``x&& psql``), and a subshell's or group's ``(``, ``)``, ``{`` and ``}`` too. The
script a shell runs from a string (``bash -lc '...'``, PowerShell's ``-EncodedCommand`` decoded) or a
``$(...)`` is read as well, four deep; one deeper, or an encoded one that does not decode, is
:class:`~config_registry.errors.ScriptUnreadable`. Nothing here decides what a secret is.
"""

from __future__ import annotations

import base64
import functools
import re

from config_registry.errors import ScriptUnreadable

# Where one command ends and the next begins ("a; b", "a && b", "a | b", "a & b", a new line), and where a
# subshell or a group of commands opens and closes ("(A=1 psql)", "{ A=1 psql; }").
_SEPARATORS = frozenset({";", "&&", "||", "|", "&", ";;", "\n", "(", ")", "{", "}"})
# Characters the splitter reads as operators: the separators' and redirections' ("2>&1" stays out of them).
_OPERATOR_CHARACTERS = ";&|<>"
# An example of what goes in a word ("--api-key <your-key>", "<your key>"), which documentation writes where a
# shell would read a redirection: one word, left out as an example is (what follows it is no redirection's).
_EXAMPLE = re.compile(r"<[A-Za-z](?:[A-Za-z0-9_ -]*[A-Za-z0-9_])?>(?=[\s;&|)\"']|\Z)")
# A backslash before an ordinary character means nothing to a POSIX shell, so one there ("C:\mysql\bin")
# is a Windows path's, kept as written.
_WINDOWS_BACKSLASH = re.compile(r"\\[^\s\"'$`\\]")
# PowerShell's variable, which it sets with spaces around '=' as often as not ("$env:PGPASSWORD = 'pw'").
_POWERSHELL_VARIABLE = re.compile(r"\$env:[A-Za-z_][A-Za-z0-9_]*=?", re.IGNORECASE)
# A shell assignment before the command ("PGHOST=db psql"), or PowerShell's ("$env:PGHOST='db'").
_ASSIGNMENT = re.compile(r"(?:\$env:)?[A-Za-z_][A-Za-z0-9_]*=.*", re.DOTALL | re.IGNORECASE)
# Programs that run the command after their own options (and assignments), each with the options among its
# own that take a value ("env -u NAME", "sudo -u USER", "timeout -s KILL") and how many words it reads
# before the command ("timeout 30 CMD").
_WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
    "env": (frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}), 0),
    "sudo": (frozenset({"-u", "--user", "-g", "--group", "-C", "--close-from", "-D", "--chdir", "-h", "--host",
                        "-p", "--prompt", "-r", "--role", "-t", "--type", "-U", "--other-user", "-T",
                        "--command-timeout"}), 0),
    "doas": (frozenset({"-u", "-C"}), 0),
    "exec": (frozenset({"-a"}), 0),
    "command": (frozenset(), 0),
    "time": (frozenset({"-f", "--format", "-o", "--output"}), 0),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "nohup": (frozenset(), 0),
    "setsid": (frozenset(), 0),
    "stdbuf": (frozenset({"-i", "--input", "-o", "--output", "-e", "--error"}), 0),
    "timeout": (frozenset({"-s", "--signal", "-k", "--kill-after"}), 1),
    # busybox runs the applet its first word names ("busybox sh -c '...'", "busybox ash -c", "busybox env").
    "busybox": (frozenset(), 0),
    "xargs": (frozenset({"-a", "--arg-file", "-d", "--delimiter", "-E", "-I", "-L", "--max-lines", "-n",
                         "--max-args", "-P", "--max-procs", "-s", "--max-chars", "--process-slot-var"}), 0),
}
# Container tools that run a command in a container: ``docker exec [options] CONTAINER COMMAND ...``,
# ``docker run [options] IMAGE COMMAND ...``, ``docker compose exec|run [options] SERVICE COMMAND ...``
# (podman's and nerdctl's too), and the options among theirs and their global ones that take a value.
_CONTAINER_TOOLS = frozenset({"docker", "podman", "nerdctl"})
_COMPOSE_TOOLS = frozenset({"docker-compose", "podman-compose"})
_CONTAINER_RUNS = frozenset({"exec", "run"})
_CONTAINER_VALUE_OPTIONS = frozenset({
    "-e", "--env", "--env-file", "-u", "--user", "-w", "--workdir", "--detach-keys", "-c", "--container",
    "-n", "--namespace", "-p", "--publish", "-v", "--volume", "--name", "--network", "--net", "--entrypoint",
    "-m", "--memory", "--cpus", "-h", "--hostname", "--mount", "--platform", "--restart", "-l", "--label",
    "--add-host", "--cap-add", "--cap-drop", "--device", "--dns", "--gpus", "--ulimit", "--log-driver",
    "--log-opt", "--pull", "--shm-size", "--tmpfs", "--link", "--expose", "--security-opt", "--pid", "--ipc",
    "--cidfile", "--stop-signal", "--stop-timeout", "-a", "--attach", "--index", "-H", "--host", "--context",
    "--config", "--log-level", "-f", "--file", "--project-name", "--profile", "--project-directory",
})
# Shells that run a script given as a string, and how it is given: POSIX shells after an option holding
# 'c' ("sh -c", "bash -lc"), cmd after "/c" or "/k", PowerShell after "-Command" or its abbreviations, or
# base64 of its UTF-16LE text after "-EncodedCommand", any prefix of it down to "-e", or its alias "-ec".
_POSIX_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "hush"})
_POSIX_SHELL_VALUE_OPTIONS = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})
_CMD_RUNS = re.compile(r"/[ck]", re.IGNORECASE)
_POWERSHELLS = frozenset({"pwsh", "powershell"})
_POWERSHELL_COMMAND = re.compile(r"[-/]c(?:o(?:m(?:m(?:a(?:n(?:d)?)?)?)?)?)?", re.IGNORECASE)
_POWERSHELL_ENCODED = re.compile(r"[-/](?:ec|e(?:n(?:c(?:o(?:d(?:e(?:d(?:c(?:o(?:m(?:m(?:a(?:n(?:d)?)?)?)?)?)?)?)?)?)?)?)?)?)",
                                 re.IGNORECASE)
# Where PowerShell's own options end: "-File" and any prefix of it down to "-f" (the words after are the
# script file's and its parameters'), and the options among its own that take a value.
_POWERSHELL_FILE = re.compile(r"[-/]f(?:i(?:l(?:e)?)?)?", re.IGNORECASE)
_POWERSHELL_VALUE_OPTIONS = re.compile(r"[-/](?:config\w*|cus\w*|w\w*|o\w*|inp\w*|if|ex\w*|ep|settings\w*)",
                                       re.IGNORECASE)
# How deep scripts run by shells in scripts are read ("bash -lc \"sh -c '...'\""); a script deeper still is
# refused rather than stored unread.
_MAX_NESTING = 4


def simple_commands(text: str) -> list[list[str]]:
    """The words of each simple command in ``text`` and in the scripts its shells run (:func:`scripts`),
    without the separators between them."""
    return [list(command) for _script, commands in _read(text) for command in commands]


def scripts(text: str) -> list[str]:
    """``text`` and each script a shell in it runs from a string (``bash -lc '...'``, ``cmd /c ...``,
    ``pwsh -Command ...``, ``pwsh -EncodedCommand ...``) or a word's ``$(...)`` or backquotes run, and theirs
    in turn, up to four deep.

    Raises:
        ScriptUnreadable: A script nested deeper, or an encoded one that does not decode (no field named).
    """
    return [script for script, _commands in _read(text)]


@functools.lru_cache(maxsize=8)  # one value is read for its commands and its scripts, one after the other
def _read(text: str) -> tuple[tuple[str, tuple[tuple[str, ...], ...]], ...]:
    found: list[tuple[str, tuple[tuple[str, ...], ...]]] = []
    pending = [(text, 0)]
    while pending:
        script, depth = pending.pop(0)
        commands = tuple(tuple(command) for command in _commands(script))
        found.append((script, commands))
        for command in commands:
            inner = [each for each in (shell_script(list(command)), *(each for word in command
                                                                     for each in _substitutions(word)))
                     if each is not None]
            if inner and depth == _MAX_NESTING:
                raise _too_deep()
            pending.extend((each, depth + 1) for each in inner)
    return tuple(found)


def _too_deep() -> ScriptUnreadable:
    return ScriptUnreadable(
        f"runs a script nested more than {_MAX_NESTING} shells deep, which the registry does not read, so a "
        "secret in it could not be looked for",
        hint="run the innermost script directly, or from a script file the tool ships, instead of through one "
             "shell inside another",
    )


def _substitutions(word: str) -> list[str]:
    """The commands in a word's ``$(...)`` and backquotes (not those nested in them), which the shell runs."""
    found: list[str] = []
    at = 0
    while starts := [i for i in (word.find("$(", at), word.find("`", at)) if i >= 0]:
        start = min(starts)
        end = word.find("`", start + 1) + 1 if word[start] == "`" else _group_end(word, start + 1) or 0
        if end <= start:
            return found
        found.append(word[start + 1:end - 1] if word[start] == "`" else word[start + 2:end - 1])
        at = end
    return found


def _commands(text: str) -> list[list[str]]:
    """The simple commands of ``text`` read whole, as a shell reads it, and of each of its lines read alone:
    prose with an apostrophe on one line and another lines below (a system message) is no quoted string
    hiding the lines between."""
    lines = text.replace("\\\n", "").splitlines()
    commands: list[list[str]] = [[]]
    for reading in [text, *lines] if len(lines) > 1 else [text]:
        for word in [*split_words(reading), ";"]:
            if word in _SEPARATORS:
                commands.append([])
            else:
                commands[-1].append(word)
    return [command for command in commands if command]


def shell_script(words: list[str]) -> str | None:
    """The script a command gives a shell to run as a string (``bash -lc SCRIPT``, ``cmd /c SCRIPT``,
    ``pwsh -NoProfile -Command SCRIPT``, ``powershell -enc BASE64`` decoded), also after a wrapper (``kubectl
    exec POD -- sh -c SCRIPT``, ``busybox sh -c SCRIPT``), or the command ``env -S STRING`` runs; ``None``
    for any other command.

    Raises:
        ScriptUnreadable: An ``-EncodedCommand`` that does not decode (no field named: the caller knows it).
    """
    split = _env_split_string(words)
    if split is not None:
        return split
    index = command_word(words)
    program = _program(words[index]) if index is not None else ""
    rest = words[index + 1:] if index is not None else []
    if program in _POSIX_SHELLS:
        return _posix_shell_script(rest)
    if program in _POWERSHELLS:
        return _powershell_script(rest)
    start = next((i for i, word in enumerate(rest) if program == "cmd" and _CMD_RUNS.fullmatch(word)), None)
    return " ".join(rest[start + 1:]) if start is not None and rest[start + 1:] else None


def _powershell_script(arguments: list[str]) -> str | None:
    """The script PowerShell runs: the words after ``-Command``, or the one after ``-EncodedCommand`` decoded
    (base64 of UTF-16LE text, the form PowerShell reads there)."""
    found = _powershell_script_option(arguments)
    if found is None:
        return None
    encoded, index = found
    if encoded:
        return decoded_script(arguments[index + 1]) if index + 1 < len(arguments) else None
    return " ".join(arguments[index + 1:]) or None


def _powershell_script_option(arguments: list[str]) -> tuple[bool, int] | None:
    """Whether PowerShell's options give it a script encoded (``True``) or as text, and the index of the
    option that does; ``None`` when they give none. PowerShell reads its own options up to ``-File`` or the
    first word that is none of them: the words after are a script file's and its parameters (``-File
    deploy.ps1 -e prod``), not PowerShell's."""
    index = 0
    while index < len(arguments):
        word = arguments[index]
        if _POWERSHELL_COMMAND.fullmatch(word) or _POWERSHELL_ENCODED.fullmatch(word):
            return bool(_POWERSHELL_ENCODED.fullmatch(word)), index
        if _POWERSHELL_FILE.fullmatch(word) or word[:1] not in ("-", "/"):
            return None
        index += 2 if _POWERSHELL_VALUE_OPTIONS.fullmatch(word) else 1
    return None


def encoded_script_at(words: list[str]) -> int | None:
    """The index of the word holding the script the PowerShell that ``words`` runs is given encoded (``pwsh
    -NoProfile -enc BASE64``: decode it with :func:`decoded_script`), also when a ``cmd /c`` in the same words
    runs that PowerShell (``cmd /c powershell -enc BASE64``); ``None`` for any other command. An argument
    list keeps it in a word of its own, which read alone says nothing."""
    program = command_word(words)
    name = _program(words[program]) if program is not None else ""
    if program is not None and name == "cmd":
        start = next((i for i in range(program + 1, len(words)) if _CMD_RUNS.fullmatch(words[i])), None)
        inner = encoded_script_at(words[start + 1:]) if start is not None else None
        return None if inner is None or start is None else start + 1 + inner
    if program is None or name not in _POWERSHELLS:
        return None
    found = _powershell_script_option(words[program + 1:])
    if found is None or not found[0] or program + 2 + found[1] >= len(words):
        return None
    return program + 2 + found[1]


def decoded_script(encoded: str) -> str:
    """The text of a PowerShell ``-EncodedCommand``.

    Raises:
        ScriptUnreadable: It is not base64 of UTF-16LE text (PowerShell refuses it too), so what it holds
            cannot be read; no field named, the caller knows it.
    """
    try:
        return base64.b64decode(encoded.strip(), validate=True).decode("utf-16-le")
    except ValueError:  # binascii.Error, UnicodeDecodeError, and a word that is not ASCII ("-enc é")
        raise ScriptUnreadable(
            "runs PowerShell with an -EncodedCommand that is not base64 of UTF-16LE text, so the script it runs "
            "could not be read for a secret",
            hint="give PowerShell the script as text with -Command, or encode it as PowerShell does: "
                 "[Convert]::ToBase64String([Text.Encoding]::Unicode.GetBytes($script))",
        ) from None


def _env_split_string(words: list[str]) -> str | None:
    """The command ``env -S 'PROGRAM ARGS'`` splits from one string and runs, with the words after it."""
    start = next((i for i, word in enumerate(words) if _program(word) == "env"), len(words))
    for index in range(start + 1, len(words)):
        if words[index] in ("-S", "--split-string"):
            return " ".join(words[index + 1:]) or None
        if words[index].startswith("--split-string="):
            return " ".join([words[index].partition("=")[2], *words[index + 1:]])
        if not words[index].startswith("-"):
            return None
    return None


def _posix_shell_script(arguments: list[str]) -> str | None:
    index = _posix_script_index(arguments)
    return arguments[index] if index is not None else None


def posix_script_at(words: list[str]) -> int | None:
    """The index of the word a POSIX shell that ``words`` runs is given as its script (``sh -c SCRIPT``,
    ``bash -lc SCRIPT``, ``busybox sh -c SCRIPT``, also after a wrapper), the one word of an argument list a
    shell splits again; ``None`` when no POSIX shell is given one."""
    index = command_word(words)
    if index is None or _program(words[index]) not in _POSIX_SHELLS:
        return None
    found = _posix_script_index(words[index + 1:])
    return index + 1 + found if found is not None else None


def _posix_script_index(arguments: list[str]) -> int | None:
    index, given = 0, False
    while index < len(arguments) and arguments[index][:1] in "-+" and arguments[index] not in ("-", "--"):
        option = arguments[index]
        given = given or (not option.startswith("--") and "c" in option[1:])
        index += 2 if option in _POSIX_SHELL_VALUE_OPTIONS else 1
    index += arguments[index:index + 1] == ["--"]
    return index if given and index < len(arguments) else None


def words(text: str) -> list[str]:
    """``text`` split at its spaces as a POSIX shell splits it, operators left inside words (a URL's
    ``?a=1&b=2`` is one word, whatever a shell would make of it); at spaces when a quote is left unclosed."""
    try:
        return _Splitter(text, operators=False).split()
    except ValueError:
        return text.split()


def split_words(text: str) -> list[str]:
    """``text`` split as a POSIX shell splits it, separators (a new line among them) and redirections as
    words of their own, a line continued by a backslash joined to the next; at spaces and separators when a
    quote is left unclosed."""
    try:
        return _Splitter(text, operators=True).split()
    except ValueError:
        lines = text.replace("\\\n", "").splitlines()
        return [word for line in lines for word in [*re.findall(r"[;&|]+|[()]|[^\s;&|()]+", line), ";"]]


class _Splitter:
    """Reads words as a POSIX shell does: quotes, a backslash's escape and line continuation, and a
    ``$(...)``, ``${...}``, backquoted command or ``NAME=(...)`` kept whole inside its word; PowerShell's
    ``$env:NAME = value`` read as one word, and so is a documentation's ``<your-key>`` (:data:`_EXAMPLE`)."""

    def __init__(self, text: str, *, operators: bool) -> None:
        self.text, self.operators = text, operators
        self.escape = "" if _WINDOWS_BACKSLASH.search(text) else "\\"
        self.words: list[str] = []
        self.word: list[str] | None = None
        self.at = 0

    def split(self) -> list[str]:
        text = self.text
        while self.at < len(text):
            char = text[self.at]
            # Joined even where a backslash is a Windows path's: read as one, a command is checked as a whole.
            if text.startswith("\\\n", self.at):
                self.at += 2
            elif char.isspace():
                self._space(char)
            elif example := _EXAMPLE.match(text, self.at) if char == "<" and self.word is None else None:
                self._add(example.group())
                self.at = example.end()
            elif self.operators and char in _OPERATOR_CHARACTERS + "()" and not (char == "(" and self.word):
                self._operator(char)
            else:
                self._add(self._piece(char))
        self._end()
        return self.words

    def _space(self, char: str) -> None:
        word = "".join(self.word or ())
        if _POWERSHELL_VARIABLE.fullmatch(word):
            following = self.at
            while self.text[following:following + 1] in (" ", "\t"):
                following += 1
            if word.endswith("=") or self.text.startswith("=", following):  # "$env:A = 1" is "$env:A=1"
                self.at = following
                return
        self._end()
        if char == "\n" and self.operators:
            self.words.append("\n")
        self.at += 1

    def _operator(self, char: str) -> None:
        self._end()
        end = self.at + 1
        while char not in "()" and end < len(self.text) and self.text[end] in _OPERATOR_CHARACTERS:
            end += 1
        self.words.append(self.text[self.at:end])
        self.at = end

    def _piece(self, char: str) -> str:
        """The text the character at ``self.at`` starts, as it stands in the word; moves past it."""
        text, start = self.text, self.at
        if char == self.escape:
            self.at += 2
            return text[start + 1:start + 2]
        if char == "'":
            self.at = _closing(text, start, "'") + 1
            return text[start + 1:self.at - 1]
        if char == '"':
            return self._double_quoted()
        if char == "`":
            self.at = _closing(text, start, "`") + 1
        elif char == "(" or (char == "$" and text[start + 1:start + 2] in ("(", "{")):
            end = _group_end(text, start + (char == "$"))
            if end is None:  # read as a shell reads it, a script with this left open does not run
                raise ValueError("no closing bracket")
            self.at = end
        else:
            self.at += 1
        return text[start:self.at]

    def _double_quoted(self) -> str:
        text, pieces = self.text, []
        self.at += 1
        while self.at < len(text) and text[self.at] != '"':
            char, following = text[self.at], text[self.at + 1:self.at + 2]
            if self.escape and char == "\\" and following in ('"', "\\", "$", "`", "\n"):
                pieces.append(following.strip("\n"))
                self.at += 2
            elif char == "`" or (char == "$" and following in ("(", "{")):
                pieces.append(self._piece(char))
            else:
                pieces.append(char)
                self.at += 1
        if self.at >= len(text):
            raise ValueError("no closing quotation")
        self.at += 1
        return "".join(pieces)

    def _add(self, piece: str) -> None:
        if self.word is None:
            self.word = []
        self.word.append(piece)

    def _end(self) -> None:
        if self.word is not None:
            self.words.append("".join(self.word))
        self.word = None


def _closing(text: str, start: int, quote: str) -> int:
    end = text.find(quote, start + 1)
    if end < 0:
        raise ValueError("no closing quotation")
    return end


def _group_end(text: str, start: int) -> int | None:
    """The index past the bracket that closes the one at ``start`` (``(`` or ``{``), quotes skipped; ``None``
    when none does."""
    opening = text[start]
    closing, depth, at = {"(": ")", "{": "}"}[opening], 0, start
    while at < len(text):
        char = text[at]
        if char in "'\"`":
            at = _closing(text, at, char)
        elif char == "\\":
            at += 1
        depth += (char == opening) - (char == closing)
        if depth == 0:
            return at + 1
        at += 1
    return None


def command_word(words: list[str]) -> int | None:
    """The index of the word that names the program ``words`` runs: the first after its assignments, or the
    command that a wrapper (``env``, ``sudo``, ``exec``, ``timeout 30``, ``nice``, ``xargs`` ...) runs after
    its options, or that ``docker exec``/``run``, ``docker compose exec``/``run`` and ``kubectl exec ... --``
    run in a container; ``None`` when the words only set variables."""
    index = _after_assignments(words, 0)
    while index < len(words):
        program = _program(words[index])
        if program in _WRAPPERS:
            takes_value, operands = _WRAPPERS[program]
            index = _after_assignments(words, _after_options(words, index + 1, takes_value) + operands)
        elif program in _CONTAINER_TOOLS | _COMPOSE_TOOLS:
            index = _container_command(words, index)
        elif program in {"kubectl", "oc"} and "exec" in words[index + 1:] and "--" in words[index + 1:]:
            index = words.index("--", index + 1) + 1
        else:
            return index
    return None


def _program(word: str) -> str:
    return re.split(r"[/\\]", word)[-1].lower().removesuffix(".exe")


def _container_command(words: list[str], index: int) -> int:
    """Where the command a container tool at ``index`` runs starts (past its image, container or service),
    or past the end when it runs none."""
    compose = _program(words[index]) in _COMPOSE_TOOLS
    index = _after_options(words, index + 1, _CONTAINER_VALUE_OPTIONS)
    if not compose and words[index:index + 1] == ["compose"]:
        compose, index = True, _after_options(words, index + 1, _CONTAINER_VALUE_OPTIONS)
    elif not compose and words[index:index + 1] == ["container"]:
        index += 1
    if words[index:index + 1] and words[index] in _CONTAINER_RUNS:
        return _after_options(words, index + 1, _CONTAINER_VALUE_OPTIONS) + 1
    return len(words)


def _after_assignments(words: list[str], index: int) -> int:
    while index < len(words) and _ASSIGNMENT.fullmatch(words[index]):
        index += 1
    return index


def _after_options(words: list[str], index: int, takes_value: frozenset[str]) -> int:
    while index < len(words) and words[index].startswith("-") and words[index] != "-":
        index += 2 if words[index] in takes_value else 1
    return index
