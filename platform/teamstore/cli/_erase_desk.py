"""``teamstore erase list`` and ``teamstore erase extend``: the compliance desk's commands, beside the erasure
(:mod:`teamstore.cli.erase` mounts them in its group).

    teamstore erase list --overdue
    teamstore erase list --status failed --limit 20 --json
    teamstore erase extend req-42 --by 2m --reason "40 sessions across two stores"

A listing never prints a user's id: ``--user`` finds the open or failed request of that exact id (finished
requests have forgotten it).
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

import typer

from teamstore.cli._erase_receipt import render, suggest_near_matches, with_coordinator
from teamstore.cli._output import JsonOption, emit, err_console
from teamstore.cli._runner import with_app
from teamstore.errors import ConfigurationError, refused_value
from teamstore.ids import check_erasable_id
from teamstore.people import current_operator
from teamstore.terminal import console, plain, print_table

# The desk and the request table (the database) are imported when a command runs, not with the command line.
if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from teamstore.erasure import DeletionCoordinator, Receipt, RequestStatus
    from teamstore.erasure.desk import RequestSummary

StatusOption = typer.Option([], "--status", metavar="STATUS", help="Only requests in this status (repeatable): open, failed, completed, "
                            "no_match, retained_under_hold.")
# Lists, so that one given twice is refused (_one) rather than the last winning unseen.
UserOption = typer.Option([], "--user", metavar="USER_ID", help="Only the requests of this exact user id: open or failed, or held by "
                          "its keyed hash (never printed; finished requests have forgotten it).")
AfterOption = typer.Option([], "--after", metavar="REQUEST_ID", help="The next page: the requests after this request id, the last one a "
                           "page listed (the footer and `next` in --json name it).")
DEFAULT_LIMIT = 100


def list_(
    status_: list[str] = StatusOption,
    overdue: bool = typer.Option(False, "--overdue", help="Only open or failed requests past their due date "
                                 "(the extended one, if extended), the longest overdue first."),
    user: list[str] = UserOption,
    after: list[str] = AfterOption,
    limit: int = typer.Option(DEFAULT_LIMIT, "--limit", min=1, max=10_000,
                              help="At most this many on a page: the newest (with --overdue, the longest overdue)."),
    as_json: bool = JsonOption,
) -> None:
    """List erasure requests: received, due (and extended due), status, who asked and who ran them."""
    from teamstore.erasure.desk import list_requests, near_user_match
    from teamstore.erasure.requests import user_hashes
    from teamstore.erasure.settings import ErasureSettings

    statuses = _statuses(status_, overdue=overdue, user=bool(user))
    one_user, cursor = _one("--user", user), _one("--after", after)
    if one_user is not None:
        check_erasable_id(one_user)

    async def listing(engine: AsyncEngine) -> tuple[list[RequestSummary], str | None]:
        # One more than shown, to know whether the limit cut the list (newest first, it cuts the oldest requests;
        # with --overdue, longest overdue first, the ones that fell due last).
        knobs = ErasureSettings()
        hashes = await user_hashes(engine, knobs, one_user) if one_user is not None else ()
        found = await list_requests(engine, statuses=statuses, overdue=overdue, user_id=one_user,
                                    user_hashes=hashes, after=cursor, limit=limit + 1)
        near = (await near_user_match(engine, one_user, knobs, statuses=statuses, overdue=overdue)
                if one_user is not None and not found else None)
        return found, near

    found, near = with_app(lambda app: listing(app.engine), must_exist=True)
    more, found = len(found) > limit, found[:limit]
    following = found[-1].request_id if more else None
    command = _next_page(statuses, overdue, limit, following) if following is not None else None
    emit({"requests": [r.model_dump(mode="json") for r in found], "more": more, "next": following,
          "near_match": near}, as_json=as_json, render=lambda _: _render_list(found, overdue, command, near))
    if one_user is not None and not found:
        from teamstore.erasure.desk import near_tables

        suggest_near_matches(one_user, lambda engine: near_tables(engine, statuses, overdue))


def _one(option: str, given: list[str]) -> str | None:
    """The one value of ``option`` given, if any: given twice, the last would win unseen."""
    if len(given) > 1:
        raise ConfigurationError(f"{option} is given {len(given)} times: erase list takes one",
                                 hint=f"give {option} once (run the list once per value)")
    return given[0] if given else None


def _statuses(given: list[str], *, overdue: bool, user: bool) -> list[RequestStatus]:
    """The ``--status`` values, refused when one could never be listed with ``--overdue`` or ``--user`` (only an
    open or failed request is overdue, or keeps its user's id): the empty list would read as "none exist"."""
    from teamstore.erasure import RequestStatus
    from teamstore.erasure.desk import UNFINISHED

    statuses = list(dict.fromkeys(_status(value) for value in given))
    for given_with, flag, listed, why in (
            (overdue, "--overdue", UNFINISHED, "only an open or failed request can be overdue"),
            (user, "--user", (*UNFINISHED, RequestStatus.RETAINED_UNDER_HOLD),
             "only an open, failed or held request keeps its user's id, or its hash")):
        never = [str(s) for s in statuses if s not in listed]
        if never and given_with:
            raise ConfigurationError(
                f"--status {', '.join(never)} with {flag} can list nothing: {why}",
                hint=f"drop --status {never[0]} (or {flag}): `teamstore erase list --status {never[0]}` lists "
                "those requests, by id and subject hash",
            )
    return statuses


def _status(value: str) -> RequestStatus:
    from teamstore.erasure import RequestStatus

    stored = [s for s in RequestStatus if s is not RequestStatus.DRY_RUN]  # a dry run stores no request
    if value not in stored:
        several = "; give --status once per status: --status open --status failed" if "," in value else ""
        raise ConfigurationError(refused_value("--status", takes=f"one of {', '.join(s.value for s in stored)}"),
                                 hint=f"e.g. --status open{several}")
    return RequestStatus(value)


def _next_page(statuses: list[RequestStatus], overdue: bool, limit: int, after: str) -> str:
    """The command that lists the next page: the same filters, after the page's last request."""
    return shlex.join(["teamstore", "erase", "list", *(f"--status={s}" for s in statuses),
                       *(["--overdue"] if overdue else []), *([f"--limit={limit}"] if limit != DEFAULT_LIMIT else []),
                       f"--after={after}"])


def _render_list(found: list[RequestSummary], overdue: bool, command: str | None, near: str | None) -> None:
    # "logged as": the name teamstore's log lines give a request whose id the operator chose ("-": they give the id)
    rows = [[r.request_id, "-" if r.logged_as == r.request_id else r.logged_as,
             str(r.status) + (" OVERDUE" if r.overdue else ""), f"{r.received_at:%Y-%m-%d}",
             f"{r.due_at:%Y-%m-%d}", f"{r.extended_due_at:%Y-%m-%d}" if r.extended_due_at else "-",
             r.subject or "-", plain(r.requested_by or "-"), plain(", ".join(dict.fromkeys(r.operators)) or "-")]
            for r in found]  # each operator once, in the order they first ran it (--json has every attempt's)
    if not found:
        console.print("no request matches")
        if near:  # in words, never the id (a job's log): a terminal is also told which id (suggest_near_matches)
            console.print(f"[yellow]note[/]: {plain(near)}")
        return
    # A request id and a status keep their width: a request id folded over lines could not be copied.
    print_table(("request", "logged as", "status", "received", "due", "extended to", "subject", "requested by",
                 "run by"), [[plain(r[0]), *r[1:]] for r in rows], fixed=range(7),
                title=f"{len(found)} erasure request(s)")
    if command is None:
        return
    left = "the ones that fall due later follow" if overdue else "older ones follow"
    console.print(f"[yellow]more requests match[/]: {len(found)} shown, {left}; the next page:")
    console.print(plain(command), soft_wrap=True)  # on a line of its own, never folded: it is copied whole


def extend(
    request_id: str = typer.Argument(..., help="The request to extend."),
    by: str = typer.Option(..., "--by", help="How much longer: 30d, 6w or 2m (two months at most, once)."),
    reason: str = typer.Option(..., "--reason", help="Why (recorded; what the data subject is told)."),
    operator: str | None = typer.Option(
        None, "--operator", help="Who extends it (recorded); default $TEAMSTORE_OPERATOR, else the OS user."),
    as_json: bool = JsonOption,
) -> None:
    """Extend a request's due date once, by at most two months, with a recorded reason (GDPR art. 12(3))."""
    from teamstore.erasure.desk import check_extension_reason, extend_request
    from teamstore.erasure.request_checks import check_request_id

    check_request_id(request_id)
    check_extension_reason(reason)
    ran_by = current_operator(operator)

    async def go(coordinator: DeletionCoordinator) -> Receipt:
        await extend_request(coordinator.engine, request_id, by, reason, operator=ran_by)
        return await coordinator.status(request_id)

    receipt = with_coordinator(go, None)
    emit(receipt.model_dump(mode="json"), as_json=as_json, render=lambda _: render(receipt))
    err_console.print(f"[yellow]note[/]: tell the data subject of the extension and its reason by the original due "
                      f"date, {receipt.due_at:%Y-%m-%d} (GDPR art. 12(3): within one month of receipt)")


def register(group: typer.Typer) -> None:
    """Mount ``list`` and ``extend`` in ``group`` (the ``teamstore erase`` group)."""
    group.command("list")(list_)
    group.command("extend")(extend)
