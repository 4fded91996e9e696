"""Backups taken the way an operator takes them (a copy of the SQLite files, ``pg_dump``), restored somewhere new:
the ``live`` fixture (``tests/keys/conftest.py``) gives one with its database."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

from tests.services import require_or_skip


def _binary(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))), None)
    if found is None:
        require_or_skip(f"{name} is not installed (apt-get install postgresql-client)")
    return str(found)


class Backups:
    """Take a backup of a database the way an operator does, and restore it somewhere new."""

    def __init__(self, url: str, tmp: Path, server: str | None) -> None:
        self.url, self.tmp, self.server = url, tmp, server

    def take(self) -> Path:
        """A copy of the SQLite files, or a ``pg_dump``."""
        if self.server is None:
            folder = self.tmp / f"backup-{uuid.uuid4().hex[:6]}"
            folder.mkdir()
            source = Path(self.url.removeprefix("sqlite:///"))
            for suffix in ("", "-wal", "-shm"):
                if Path(f"{source}{suffix}").exists():
                    shutil.copy2(f"{source}{suffix}", folder / f"{source.name}{suffix}")
            return folder / source.name
        dump = self.tmp / f"dump-{uuid.uuid4().hex[:6]}.sql"
        subprocess.run([_binary("pg_dump"), "--no-owner", "--no-privileges", "-f", str(dump), self.url],
                       check=True, capture_output=True, timeout=120)
        return dump

    def restore(self, backup: Path) -> str:
        """A new database holding ``backup``; its URL."""
        if self.server is None:
            return f"sqlite:///{backup.as_posix()}"
        import psycopg

        name = f"restored_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.server, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        url = f"{self.server.rpartition('/')[0]}/{name}"
        subprocess.run([_binary("psql"), "-q", "-v", "ON_ERROR_STOP=1", "-d", url, "-f", str(backup)],
                       check=True, capture_output=True, timeout=120)
        return url
