"""The export's README.txt: what each file of the archive holds and how to read it, in plain words for the person
it is about.

    from teamstore.export.guide import GUIDE, guide

    archive.add(GUIDE, guide(archive.files))   # before the manifest, which lists its SHA-256 with the others

It names only the files this archive holds (one folder for every transcript), in the order of :data:`ABOUT`.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable

GUIDE = "README.txt"

OPENING = """\
A copy of the data we hold about you
====================================

This folder (or zip file) holds everything our service stores about you, as it was when the copy
was made.

How to read it: the files ending in .json and .jsonl are plain text in a common format called JSON.
Any text editor opens them; a web browser shows .json files laid out neatly. Every date and time is
in UTC (universal time), written like 2026-12-05T09:22:00Z or 2026-12-05T09:22:00+00:00.

What each file holds:
"""

ABOUT: dict[str, str] = {
    "resume_state.json": "Your conversations with our assistants as saved so that each can pick up where it "
                         "left off: one entry per conversation (a \"session\"), with what was said so far.",
    "quarantine.json": "Saved conversations our service set aside because it could not continue them (for "
                       "example after an assistant was changed), kept for a while in case they can be put back. "
                       "Each says why it was set aside.",
    "memory.json": "What the assistants remember about you from one conversation to the next: short summaries "
                   "and facts, with when each was last confirmed, and when you last asked them to forget "
                   "(\"forgets\"), which we keep for a while so that nothing said before is remembered again.",
    "transcripts/": "The full record of every exchange (a \"run\"). Each folder in it is one conversation; its name "
                    "is a code, not the conversation's name. transcripts/index.json says which conversation "
                    "(\"session_id\") each file belongs to. In each .jsonl file every line is one entry: the "
                    "first describes the exchange, each one after it is a message (who said it, and what). A "
                    "file ending .2.jsonl (.3.jsonl, ...) is another copy of the same exchange that we still "
                    "keep, such as an earlier version; one ending .partial.jsonl is what had been saved of an "
                    "exchange when its saving was cut short; one ending .unreadable.json is a copy we could not "
                    "read, with the reason.",
    "outbox.json": "Records of exchanges that were waiting to be filed with the others when this copy was made.",
    "keys.json": "Whether an encryption key exists for your data, and when it was made: we store everything of "
                 "yours locked with it. The key itself is not included.",
    "ledger.json": "Each time an assistant used an AI model for you: which model, how much text it handled "
                   "(\"tokens\"), when, in which conversation and what it cost; and the totals.",
    "subject.json": "The code name our records use for you instead of your user id, and where the records of "
                    "your conversations are kept.",
    "exports.json": "The earlier copies of your data we made: when, who asked for each and who made it, and for "
                    "one that did not finish, why (\"detail\").",
    "erasure_requests.json": "A request to delete your data that is still under way, if there is one.",
    "manifest.json": "The receipt of this copy: which of our stores it covers, how many records each gave, and a "
                     "checksum (SHA-256) of every other file, so anyone can check that no file was changed "
                     "since. It also lists what this copy cannot include, and why.",
}
"""What each file (or folder, ending ``/``) holds, in the order the guide lists them."""

OTHER = "Further data from our service; manifest.json lists it with the rest."


def guide(files: Iterable[str]) -> bytes:
    """The README.txt of an archive holding ``files`` (and the manifest, written after it), as UTF-8.

    Args:
        files: The names of the files written so far, relative to the archive's root.

    Returns:
        The guide: its opening, then each file or folder it holds with what it holds.
    """
    present = {name.split("/", 1)[0] + "/" if "/" in name else name for name in files} | {"manifest.json"}
    present.discard(GUIDE)
    named = [name for name in ABOUT if name in present] + sorted(present - set(ABOUT))
    lines = [OPENING] + [f"\n{name}\n{_wrapped(ABOUT.get(name, OTHER))}\n" for name in named]
    return "".join(lines).encode("utf-8")


def _wrapped(text: str) -> str:
    # A text editor that does not wrap lines shows each description whole on a common screen.
    return textwrap.fill(text, width=100, initial_indent="    ", subsequent_indent="    ")
