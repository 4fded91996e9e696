"""asyncio's own records of a failure nobody handled ("Task exception was never retrieved", "Exception in callback")
reach a host's log by what asyncio says and the failure's type: never the task's or the callback's repr, nor the
failure's message or traceback, which may quote users' words."""

from __future__ import annotations

import asyncio
import functools
import gc
import logging

import pytest

from teamstore.logs import keep_content_out_of_logs

WORDS = "CANARY-my-landlord-Jane-Doe"


async def _fails(words: str) -> None:
    raise ValueError(f"could not file the complaint about {words}")


def _fails_now(words: str) -> None:
    raise ValueError(f"could not file the complaint about {words}")


async def _leave_a_failed_task_to_the_collector() -> None:
    task = asyncio.get_running_loop().create_task(_fails(WORDS))
    await asyncio.sleep(0)  # the task runs and fails; nobody awaits it
    await asyncio.sleep(0)
    assert task.done()
    del task
    gc.collect()  # asyncio reports the failure when the collector finds the task


async def _run_a_failing_callback() -> None:
    asyncio.get_running_loop().call_soon(functools.partial(_fails_now, WORDS))
    await asyncio.sleep(0)
    await asyncio.sleep(0)


def _shown(caplog: pytest.LogCaptureFixture) -> str:
    """Every record as a handler writes it: its message, and its traceback where it still has one."""
    formatter = logging.Formatter("%(message)s")
    return "\n".join(formatter.format(record) for record in caplog.records)


def test_a_task_nobody_awaited_is_reported_by_its_failures_type_when_the_collector_finds_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    keep_content_out_of_logs()
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        asyncio.run(_leave_a_failed_task_to_the_collector())
    (record,) = [r for r in caplog.records if r.name == "asyncio"]
    assert record.getMessage().startswith("Task exception was never retrieved (ValueError; ")
    assert record.exc_info is None
    assert WORDS not in _shown(caplog), _shown(caplog)


def test_a_failing_callback_is_reported_without_its_arguments_or_its_failures_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    keep_content_out_of_logs()
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        asyncio.run(_run_a_failing_callback())
    (record,) = [r for r in caplog.records if r.name == "asyncio"]
    assert record.getMessage().startswith("Exception in callback _fails_now (ValueError; ")
    assert WORDS not in _shown(caplog), _shown(caplog)


def test_an_asyncio_record_quoting_an_object_as_an_argument_names_it_by_its_type(
    caplog: pytest.LogCaptureFixture,
) -> None:
    keep_content_out_of_logs()
    handle = asyncio.get_event_loop_policy().new_event_loop()
    try:
        callback = handle.call_soon(_fails_now, WORDS)
        callback.cancel()
        with caplog.at_level(logging.WARNING, logger="asyncio"):
            logging.getLogger("asyncio").warning("Executing %s took %.3f seconds", callback, 0.25)
    finally:
        handle.close()
    assert caplog.records[-1].getMessage().startswith("Executing <Handle> took 0.250 seconds")
    assert WORDS not in _shown(caplog)
