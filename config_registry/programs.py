"""The passwords a command gives its program on its command line, where the program's own options say which
word is one: a MySQL or MariaDB client's glued to ``-p``, sshpass's after its ``-p``.

    from config_registry.programs import program_passwords

    program_passwords(["mysql", "-uapp", "-pVALUE", "crm"])   # {2: "a password glued to the MySQL client's '-p'"}
    program_passwords(["redis-cli", "-p6379"])                # {}: another program's -p is a port

:mod:`config_registry.credentials` reads these in command lines, :mod:`config_registry.source` in a tool's
lists of arguments, and :mod:`config_registry.secrets` in a server's ``command`` and ``args``.
"""

from __future__ import annotations

import re

from config_registry.placeholders import left_out
from config_registry.shell import command_word

# A password glued to the MySQL and MariaDB clients' -p ("mysql -uapp -ppw", "mysqldump -ppw"; a bare -p asks
# for it), where other programs' -p is a port ("redis-cli -p6379", "docker run -p3306:3306 mysql"): read only
# in a command these clients run, named as its program (a path and Windows' ".exe" allowed).
_MYSQL_CLIENT = re.compile(
    r"(?:.*[/\\])?(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlcheck|mysqlshow|mysqlpump|mysqlsh|mariadb|"
    r"mariadb-dump|mariadb-admin|mariadb-import|mariadb-check)(?:\.exe)?",
    re.IGNORECASE | re.DOTALL,
)
_MYSQL_PASSWORD = re.compile(r"-p(.+)", re.DOTALL)
GLUED_PASSWORD = "a password glued to the MySQL client's '-p'"
# sshpass runs a command (ssh, rsync, scp) with the password its "-p" gives ("sshpass -p PW ssh host", "-pPW");
# "-f FILE", "-d FD" and "-e" (the SSHPASS variable) leave it off the command line. Its options come first.
_SSHPASS = re.compile(r"(?:.*[/\\])?sshpass(?:\.exe)?", re.IGNORECASE | re.DOTALL)
_SSHPASS_VALUE_OPTIONS = frozenset({"-f", "-d", "-P"})
SSHPASS_PASSWORD = "a password given to sshpass's '-p'"


def program_passwords(words: list[str]) -> dict[int, str]:
    """The indexes of the passwords one command gives its program on its command line, each with what it is
    (for the error message): a MySQL or MariaDB client's glued to ``-p`` (``mysql -uapp -pVALUE``, ``sudo -u
    app mysqldump``, ``docker exec db mysql``), sshpass's after its ``-p`` (``sshpass -p VALUE ssh host``,
    ``-pVALUE``); none in other programs' commands, where ``-p`` is a port, nor for a ``-p${DB_PASSWORD}``."""
    program = command_word(words)
    if program is not None and _MYSQL_CLIENT.fullmatch(words[program]):
        return {
            index: GLUED_PASSWORD for index in range(program + 1, len(words))
            if (glued := _MYSQL_PASSWORD.fullmatch(words[index])) and not left_out(glued.group(1))
        }
    if program is not None and _SSHPASS.fullmatch(words[program]):
        index = _sshpass_password(words, program + 1)
        return {} if index is None else {index: SSHPASS_PASSWORD}
    return {}


def _sshpass_password(words: list[str], index: int) -> int | None:
    """The index of the password among sshpass's options (before the command it runs), if one is given."""
    while index < len(words) and words[index].startswith("-") and words[index] != "-p":
        if words[index].startswith("-p"):
            return None if left_out(words[index][2:]) else index
        index += 2 if words[index] in _SSHPASS_VALUE_OPTIONS else 1
    if index + 1 < len(words) and words[index] == "-p" and not left_out(words[index + 1]):
        return index + 1
    return None
