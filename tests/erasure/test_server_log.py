"""A second erasure request for a user whose request is still open writes no raw id to the server log."""

from __future__ import annotations

import uuid

import pytest

from teamstore.db.engine import create_engine
from teamstore.db.migrate import upgrade
from teamstore.erasure import requests
from teamstore.errors import ErasureConflict
from tests.services import postgres_server_log, postgres_server_log_size

pytestmark = pytest.mark.postgres


async def test_a_second_request_while_one_is_open_is_refused_without_logging_the_user_id(
    postgres_server: str, postgres_url: str
) -> None:
    engine = create_engine(postgres_url)
    await upgrade(engine)
    user = f"twice-{uuid.uuid4().hex}@example.com"
    start = postgres_server_log_size(postgres_server)
    try:
        await requests.open_request(engine, "req-first", user, None, 30)
        with pytest.raises(ErasureConflict, match="req-first"):
            await requests.open_request(engine, "req-second", user, None, 30)
        with pytest.raises(ErasureConflict, match="another user"):  # the same id for another user
            await requests.open_request(engine, "req-first", f"other-{user}", None, 30)
        assert (await requests.get_request(engine, "req-second")) is None  # nothing of the refused one stays
    finally:
        await engine.dispose()
    assert not [line for line in postgres_server_log(postgres_server, start).splitlines() if user in line]
