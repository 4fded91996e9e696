"""Which sink may hold which kind of canary, and why; everything else found is a leak.

    leaks = judge(scan(sinks, book), erased={"bob"})
    assert not leaks, report(leaks)

Three rules, in this order:

1. A secret may be nowhere: not in a table, a file, the registry's history, a span or a log line.
2. Once a user is erased, none of their canaries may be anywhere (an operator's erasure reason is the
   operator's, not the user's: it stays with the receipt).
3. Otherwise a canary may sit only where :data:`POLICY` names its sink, location and kind, with the
   reason it is there. Spans, metrics, logs and the server log are named nowhere: they may never hold a
   raw id or a user's words (the CLI's stderr only for an export's error, which names the path its operator
   gave). No sink at all may hold a user's words: every store seals them under the
   user's data key, so a scan of any store sees ciphertext only (ids, which stores are keyed by, stay).
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from tests.canary.canaries import USER_DATA, Canary, CanaryBook, Kind
from tests.canary.sinks import CLI_STDERR, DATABASE, FILES, CapturedText, Sink

IDS = frozenset({Kind.USER_ID, Kind.SESSION_ID})
WORDS = frozenset({Kind.MESSAGE, Kind.TOOL_OUTPUT})


@dataclass(frozen=True)
class Allowance:
    """A sink (and a pattern on its locations) that may hold canaries of some kinds, and why."""

    sink: str
    where: str
    kinds: frozenset[Kind]
    reason: str

    def covers(self, sink: str, location: str, canary: Canary) -> bool:
        """Whether this allowance lets ``sink`` hold ``canary`` at ``location``."""
        return sink == self.sink and canary.kind in self.kinds and re.search(self.where, location) is not None


POLICY: tuple[Allowance, ...] = (
    Allowance(DATABASE, r"\bts_subjects\b", frozenset({Kind.USER_ID}),
              "the subject mapping (user id -> subject key): erasure needs it to find the user's transcripts, "
              "and deletes it last"),
    Allowance(DATABASE, r"\bts_subject_sessions\b", frozenset({Kind.SESSION_ID}),
              "the session id beside its session key, so cost reports name sessions as the application does; "
              "deleted with the subject, and swept once no ledger row names the session"),
    Allowance(DATABASE, r"\bts_sessions\b", IDS,
              "the resume state row is keyed by the raw ids; its saved agent states and a run's checkpoint (the "
              "run's messages so far) are sealed, so the state and checkpoint columns hold no words"),
    Allowance(DATABASE, r"\bts_quarantine\b", IDS,
              "a refused state or checkpoint set aside (sealed, as the row held it) with its keys, for an "
              "operator to look at"),
    Allowance(DATABASE, r"\bts_data_keys\b, column user_id", frozenset({Kind.USER_ID}),
              "the user's data key, stored wrapped, keyed by the raw id: erasure destroys it first"),
    Allowance(DATABASE, r"\bts_user_memory\b, column user_id\b", frozenset({Kind.USER_ID}),
              "the user's memory is keyed by the raw user id; its summary, written from their words, is sealed "
              "(no words in the column); erasure and retention remove it (docs/memory.md)"),
    Allowance(DATABASE, r"\bts_user_memory_facts\b, column user_id\b", frozenset({Kind.USER_ID}),
              "the user's facts are keyed by the raw user id; each value, taken from their words (a ticket id, a "
              "router model), is sealed (no words in the column)"),
    Allowance(DATABASE, r"\bts_user_memory_forgets\b, column user_id\b", frozenset({Kind.USER_ID}),
              "when the user forgot memory, keyed by the raw user id (a scope and a time beside it, no words), so a "
              "writer of messages said before writes nothing; erasure deletes it, the sweep drops it after 30 days or "
              "with a quiet user's ids"),
    Allowance(DATABASE, r"\bts_user_holds\b", frozenset({Kind.USER_ID}),
              "the erasure fence names the user while a request is open"),
    Allowance(DATABASE, r"\bts_erasure_requests\b, column user_id", frozenset({Kind.USER_ID}),
              "an open request keeps the raw id so a rerun can resume it; cleared when it completes"),
    Allowance(DATABASE, r"\bts_erasure_requests\b, column (reason|receipt|requested_by)\b",
              frozenset({Kind.ERASE_REASON}),
              "the operator's reason and who asked are stored as given, in the request and its receipt "
              "(docs/erasure.md)"),
    Allowance(DATABASE, r"\bts_export_requests\b, column (requested_by|manifest)\b", frozenset({Kind.ERASE_REASON}),
              "an export's record keeps who asked for it, as the operator gave it, beside its manifest"),
    Allowance(CLI_STDERR, r"^teamstore export ", frozenset({Kind.USER_ID}),
              "an export that fails says why on the operator's terminal, naming the --output path they gave, "
              "which may name the user; its record says only where it failed and the error's type"),
    Allowance(FILES, r"(^|/)teamstore\.db(-wal|-shm|-journal)?$", IDS | {Kind.ERASE_REASON},
              "the embedded database's files hold what its tables hold (deleted rows are overwritten: "
              "secure_delete, and the write-ahead log is emptied when an erasure finishes)"),
    Allowance(FILES, r"^reports/cost\.html$", frozenset({Kind.USER_ID, Kind.SESSION_ID}),
              "a readable cost report (`teamstore cost report`, readable by default) names users and sessions "
              "as the application does; it is an export erasure cannot reach, so one written after an erasure "
              "reads the erased user as 'erased' (--pseudonymous writes keys only: reports/cost-pseudonymous.html "
              "may hold no id)"),
)


@dataclass(frozen=True)
class Leak:
    """A canary found where the policy does not let it be."""

    sink: str
    location: str
    canary: Canary
    form: str
    why: str
    context: str = ""

    def __str__(self) -> str:
        owner = f" of {self.canary.owner}" if self.canary.owner else ""
        return (f"{self.canary.kind.value}{owner} ({self.canary.origin}) in {self.sink}: {self.location} "
                f"[{self.form}] - {self.why}\n      ...{self.context}...")


@dataclass(frozen=True)
class Hit:
    """A canary found in a sink, with the text around it (what wrote it there is usually plain)."""

    sink: str
    location: str
    canary: Canary
    form: str
    context: str = ""


def _context(data: bytes, needle: bytes, width: int = 100, most: int = 3) -> str:
    """Around the first few places ``needle`` is in ``data`` (a log line each, in a log), printable."""
    places, at = [], data.find(needle)
    while at >= 0 and len(places) < most:
        start = max(0, at - width, data.rfind(b"\n", 0, at) + 1)
        end = data.find(b"\n", at)
        end = min(at + len(needle) + width, end if end >= 0 else len(data))
        places.append(data[start:end].decode("utf-8", "replace").encode("unicode_escape").decode("ascii"))
        at = data.find(needle, end)
    return " | ".join(places)


def layers(data: bytes, depth: int = 0) -> Iterator[tuple[str, bytes]]:
    """``data`` and what it unpacks to: gzip members (transcripts, outbox bodies) and zlib streams (git's
    loose objects), one level inside another at most."""
    yield "", data
    if depth > 1 or len(data) < 2:
        return
    inner: bytes | None = None
    try:
        if data[:2] == b"\x1f\x8b":
            inner, how = gzip.decompress(data), "gunzipped"
        elif data[0] == 0x78:
            inner, how = zlib.decompress(data), "inflated"
    except (OSError, EOFError, zlib.error):
        inner = None  # a prefix that only looked like one (or a file cut short): the raw bytes were searched
    if inner is not None:
        for suffix, unpacked in layers(inner, depth + 1):
            yield f" ({how}{suffix})", unpacked


def scan(sinks: Iterable[Sink], book: CanaryBook) -> list[Hit]:
    """Every canary of ``book`` found in ``sinks``, each once per location. Captures of log records are
    paused meanwhile: the scan's own S3 and database reads log too, and are not the product's."""
    sinks = list(sinks)
    captures = [s for s in sinks if isinstance(s, CapturedText)]
    for capture in captures:
        capture.paused = True
    try:
        return [hit for sink in sinks for hit in _hits(sink, book)]
    finally:
        for capture in captures:
            capture.paused = False


def _hits(sink: Sink, book: CanaryBook) -> Iterator[Hit]:
    for location, data in sink.read():
        seen: set[str] = set()
        for suffix, unpacked in layers(data):
            for canary, form in book.find(unpacked):
                if canary.token not in seen:
                    seen.add(canary.token)
                    needle = dict(canary.forms())[form]
                    yield Hit(sink.name, location + suffix, canary, form, _context(unpacked, needle))


def judge(hits: Iterable[Hit], erased: Iterable[str] = ()) -> list[Leak]:
    """The hits the policy does not allow, each with the rule it breaks.

    Args:
        hits: From :func:`scan`.
        erased: Users whose erasure has completed.
    """
    gone = set(erased)
    leaks = []
    for hit in hits:
        canary = hit.canary
        if canary.kind is Kind.SECRET:
            why = "a secret may be nowhere"
        elif canary.owner in gone and canary.kind in USER_DATA:
            why = f"{canary.owner} was erased"
        elif any(a.covers(hit.sink, hit.location, canary) for a in POLICY):
            continue
        else:
            why = f"no sink rule lets {hit.sink} hold a {canary.kind.value}"
        leaks.append(Leak(hit.sink, hit.location, canary, hit.form, why, hit.context))
    return leaks


def report(leaks: list[Leak]) -> str:
    """One line per canary and sink (its first location, and how many more), for an assertion message."""
    grouped: dict[tuple[str, str], list[Leak]] = {}
    for leak in leaks:
        grouped.setdefault((leak.canary.token, leak.sink), []).append(leak)
    lines = [f"  - {found[0]}" + (f" (and {len(found) - 1} more locations)" if len(found) > 1 else "")
             for found in grouped.values()]
    return f"{len(leaks)} canary leak(s):\n" + "\n".join(lines)
