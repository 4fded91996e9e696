"""asyncio's own records of a failure nobody handled ("Task exception was never retrieved", "Exception in callback")
reach a host's log by what asyncio says and the failure's type: never the task's or the callback's repr, nor the
failure's message or traceback, which may quote users' words."""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import re
import selectors
import time

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


def _block(words: str) -> None:
    time.sleep(0.05)  # longer than the loop's slow_callback_duration below: asyncio reports it


async def _run_a_slow_callback() -> None:
    loop = asyncio.get_running_loop()
    loop.slow_callback_duration = 0.001
    loop.call_soon(_block, WORDS)
    await asyncio.sleep(0.01)


def test_a_slow_callback_is_reported_by_how_long_it_took_without_its_arguments(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # asyncio formats the handle (its callback's arguments) into the text it passes: only the duration stays.
    keep_content_out_of_logs()
    with caplog.at_level(logging.DEBUG, logger="asyncio"):
        asyncio.run(_run_a_slow_callback(), debug=True)
    said = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    slow = [line for line in said if line.startswith("Executing a callback took ")]
    assert slow and all(re.fullmatch(r"Executing a callback took \d+\.\d{3} seconds", line) for line in slow), said
    assert f"Using selector: {selectors.DefaultSelector.__name__}" in said  # a class asyncio names: no user's words
    assert WORDS not in _shown(caplog), _shown(caplog)


async def _hand_the_handler(context: dict[str, object]) -> None:
    asyncio.get_running_loop().call_exception_handler(context)


@pytest.mark.parametrize(("context", "said"), [
    ({"message": f"Protocol failed for {WORDS}"}, "a message asyncio does not say itself (47 characters) ("),
    ({"message": "Unhandled error in exception handler", "exception": ValueError(WORDS)},
     "Unhandled error in exception handler (ValueError; "),
], ids=["a-librarys-message", "asyncios-own"])
def test_a_message_handed_to_the_exception_handler_is_kept_only_when_asyncio_says_it_itself(
    caplog: pytest.LogCaptureFixture, context: dict[str, object], said: str
) -> None:
    keep_content_out_of_logs()
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        asyncio.run(_hand_the_handler(context))
    (record,) = [r for r in caplog.records if r.name == "asyncio"]
    assert record.getMessage().startswith(said), record.getMessage()
    assert WORDS not in _shown(caplog), _shown(caplog)


def test_an_asyncio_record_given_a_mapping_names_its_values_by_their_types(caplog: pytest.LogCaptureFixture) -> None:
    keep_content_out_of_logs()
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        logging.getLogger("asyncio").error("for %(who)s, %(n)d tries", {"who": WORDS, "n": 3})
    assert caplog.records[-1].getMessage() == "for <str>, 3 tries"


def test_an_asyncio_record_rebuilt_by_make_log_record_is_left_out_of_as_any_other() -> None:
    # A socket log receiver rebuilds each record it is sent with logging.makeLogRecord, then handles it.
    keep_content_out_of_logs()
    record = logging.makeLogRecord({"name": "asyncio", "msg": f"Task exception was never retrieved\nfuture: <Task "
                                    f"{WORDS}>", "exc_text": f"Traceback ...\nValueError: {WORDS}"})
    shown = logging.Formatter("%(message)s").format(record)
    assert shown.startswith("Task exception was never retrieved (a traceback; ") and WORDS not in shown, shown
