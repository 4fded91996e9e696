"""The one way a command reaches the database and the stores: the composition root, opened and closed.

    from teamstore.cli._runner import with_app
    from teamstore.ids import check_ids

    check_ids(user_id=user)                               # a bad id is said before anything is opened
    rows = with_app(lambda app: app.state_store.list_sessions(user, 10), must_exist=True, lease=True)

``with_app`` builds an :class:`teamstore.app.App` from the environment, brings or checks the schema, runs the
command's work on it and closes what was built; a typed error becomes the ``error:``/``fix:`` lines and
exit status 1.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from teamstore.cli._output import fail
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
