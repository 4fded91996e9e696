"""The one way a command reaches the database and the stores: the composition root, opened and closed.

    from teamstore.cli._runner import with_app
    from teamstore.ids import check_ids

    check_ids(user_id=user)                               # a bad id is said before anything is opened
    rows = with_app(lambda app: app.state_store.list_sessions(user, 10), must_exist=True, lease=True)

``with_app`` builds an :class:`teamstore.app.App` from the environment, brings or checks the schema, runs the
command's work on it and closes what was built; a typed error becomes the ``error:``/``fix:`` lines and
exit status 1. ``with_app_stoppable`` does the same for a command that holds a session's lease: SIGTERM and
SIGHUP stop it as Ctrl-C does, so the lease is given back on the way out.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from teamstore.cli._output import fail, interrupted, stopped_as_on_ctrl_c
from teamstore.errors import TeamstoreError

if TYPE_CHECKING:
    from teamstore.app import App

T = TypeVar("T")


def with_app(fn: Callable[[App], Awaitable[T]], *, must_exist: bool, migrate: bool = True, lease: bool = False) -> T:
    """Run ``fn`` on the composition root built from the environment, and close what it built.

    Args:
        fn: The command's work.
        must_exist: The command only reads or acts on what is stored: on a home whose SQLite database
            does not exist yet it says so (``SchemaNotReady``, naming ``teamstore db upgrade``) rather than
            creating an empty one and answering "nothing stored". Only commands that write from nothing
            (``run``, ``db upgrade``, ``prices sync``) pass ``False``.
        migrate: Before ``fn``, migrate the embedded database (``TEAMSTORE_AUTO_MIGRATE`` overrides either
            way), else check a production one is current. ``False`` for commands about the schema itself,
            that open a platform (it checks for itself), or that need no database.
        lease: Also check the database leases sessions the way this process is set to.

    Returns:
        What ``fn`` returned.
    """

    # The composition root and the event loop are imported when a command runs, never for --help.
    import asyncio

    from teamstore.app import App

    async def main() -> T:
        app = App(must_exist=must_exist)
        try:
            if migrate:
                await app.ensure_schema(lease=lease)
            return await fn(app)
        finally:
            await app.aclose()

    try:
        return asyncio.run(main())
    except TeamstoreError as exc:
        fail(exc)  # inside the command, so the exit is a status without a traceback


def with_app_stoppable(fn: Callable[[App], Awaitable[T]], *, said: str, fix: str, must_exist: bool,
                       migrate: bool = True, lease: bool = False) -> T:
    """:func:`with_app` for a command that holds a session's lease (a run, a restore, a delete). SIGTERM (a
    container stopping, ``timeout``, a job cancelled) and SIGHUP (the terminal closed) stop it as Ctrl-C does:
    its task is cancelled, the session's block gives the lease back, and the command says so and exits 128 + the
    signal's number. Ended where it stood instead, it left the lease held until its TTL: the session's next
    request was refused as busy.

    Args:
        fn, must_exist, migrate, lease: As for :func:`with_app`.
        said: What a stop leaves, said after "stopped (SIGTERM) before it finished".
        fix: What to run to go on.

    Returns:
        What ``fn`` returned.
    """
    with stopped_as_on_ctrl_c() as stop:
        try:
            return with_app(fn, must_exist=must_exist, migrate=migrate, lease=lease)
        except KeyboardInterrupt:
            interrupted(f"stopped ({stop.name}) before it finished: {said}", fix, stop.code)
