"""A resume outcome follows the session's interrupted run from what it keeps of the run, never by reading its
own detail back: the state's own notes and the runs named stay apart whatever the notes say."""

from __future__ import annotations

from datetime import UTC, datetime

from teamstore.runtime.checkpoints import InterruptedRun
from teamstore.runtime.resume import ResumeOutcome

STARTED = datetime(2025, 1, 1, tzinfo=UTC)
RUN_ID = "0123456789ab" + "cdef0123456789abcdef"


def _run(run_id: str = RUN_ID, last_turn: int = 2) -> InterruptedRun:
    return InterruptedRun(run_id, last_turn, 0, STARTED, "1.0.0")


def _resumed(notes: str | None) -> ResumeOutcome:
    return ResumeOutcome("resumed", "1.0.0", notes, ("researcher",), "1.0.0")


def test_the_detail_says_what_it_said_of_the_run_after_the_states_own_notes() -> None:
    waiting = _resumed("'writer' is newly persisted and starts fresh").run_waits(_run())
    assert str(waiting) == ("interrupted: 'writer' is newly persisted and starts fresh; "
                            "run 0123456789ab stopped after turn 2; continue or abandon it")
    assert waiting.applied and waiting.interrupted == _run()
    ended = waiting.run_ended("continued")
    assert str(ended) == ("resumed: 'writer' is newly persisted and starts fresh; "
                          "run 0123456789ab, interrupted after turn 2, was continued")
    assert ended.interrupted is None and not ended.quarantined
    assert str(ResumeOutcome("new", "1.0.0").run_waits(_run()).run_ended("abandoned")) == (
        "new: run 0123456789ab, interrupted after turn 2, was abandoned")
    assert set(ended.as_dict()) == {"outcome", "applied", "detail", "restored", "team_version",
                                    "previous_team_version", "quarantined", "interrupted", "checkpoint_refused"}


def test_a_continued_run_that_stops_again_waits_again_with_the_states_notes_intact() -> None:
    notes = "'writer' is newly persisted and starts fresh"
    waiting = _resumed(notes).run_waits(_run())
    again = waiting.run_ended("continued").run_stopped(_run(last_turn=3))
    assert again.outcome == "interrupted" and again.interrupted == _run(last_turn=3) and again.applied
    assert again.detail == f"{notes}; run 0123456789ab stopped after turn 3; continue or abandon it"
    assert again.run_ended("abandoned").detail == f"{notes}; run 0123456789ab, interrupted after turn 3, was abandoned"


def test_notes_that_read_like_a_run_note_are_kept_as_the_states_own() -> None:
    # The state's notes quote text shaped like the note the outcome writes of the run it ended: the run that
    # stops again must not be found there, cutting the notes off.
    notes = f"run {RUN_ID[:12]}, interrupted after turn 1, was abandoned"
    ended = _resumed(notes).run_waits(_run()).run_ended("continued")
    again = ended.run_stopped(_run(last_turn=3))
    assert again.detail == f"{notes}; run 0123456789ab stopped after turn 3; continue or abandon it"
    assert again.run_ended("continued").detail == f"{notes}; run 0123456789ab, interrupted after turn 3, was continued"
    waiting_notes = f"run {RUN_ID[:12]} stopped after turn 2; continue or abandon it"
    assert _resumed(waiting_notes).run_waits(_run()).run_ended("abandoned").detail == (
        f"{waiting_notes}; run 0123456789ab, interrupted after turn 2, was abandoned")


def test_another_run_stopping_leaves_the_outcome_as_it_is() -> None:
    ended = _resumed("'writer' is newly persisted and starts fresh").run_waits(_run()).run_ended("continued")
    for other in ("fedcba9876543210fedcba9876543210", RUN_ID[:12] + "ffffffffffffffffffff"):  # even one that
        # shares the twelve characters the detail shows
        assert ended.run_stopped(_run(other, last_turn=3)) is ended
    assert _resumed(None).run_stopped(_run()) == _resumed(None)
    waiting = _resumed(None).run_waits(_run())
    assert waiting.run_stopped(_run(last_turn=3)) is waiting  # it waits already: nothing said it was continued


def test_a_run_set_aside_keeps_its_refusal_and_stops_no_more() -> None:
    ended = _resumed(None).run_waits(_run()).run_ended("set aside", refused="corrupt")
    assert str(ended) == "resumed: run 0123456789ab, interrupted after turn 2, was set aside"
    assert ended.quarantined and ended.checkpoint_refused == "corrupt"
    assert ended.run_ended("abandoned") is ended
