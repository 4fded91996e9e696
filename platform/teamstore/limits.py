"""The bounds settings the runtime and the command line share, and the bounded context's name and sizes,
importable with nothing else.

    from teamstore.limits import MAX_DAYS

    typer.Option(None, "--days", min=1, max=MAX_DAYS)

They sit apart from :mod:`teamstore.settings` (pydantic) so a command line option can name them without
the command line importing its settings before a command runs.
"""

from __future__ import annotations

MAX_DAYS = 3650
"""The longest TTL or retention a setting takes (ten years): dates past it stop being dates a database
or a timestamp can hold long before they stop being numbers."""
MAX_LEASE_WAIT = 3600
"""The longest a session waits for another worker's lease (seconds), as a setting or an argument."""
MAX_TEXT_BYTES = 1 << 30
"""The largest state or task a setting allows: PostgreSQL holds no text value over 1 GB."""
MAX_SESSIONS_BOUND = 100_000
"""The highest per-user session bound a setting takes: opening a new session counts its user's stored
sessions, so a higher bound would let one user make every new session of theirs slow."""
DEFAULT_RUNS = 10
"""How many of a session's newest runs a transcript page shows unless asked for another number."""
MAX_RUNS = 1000
"""The most runs one transcript page holds (each is read whole into memory)."""
BOUNDING_PROVIDER = "teamstore.context.BoundedChatCompletionContext"
"""The provider of teamstore's bounded model context, as a team's definition names it."""
BOUND_FIELDS = ("max_messages", "keep_first")
"""The fields of that context's config that bound what it keeps (the registry checks them at ``add``)."""
