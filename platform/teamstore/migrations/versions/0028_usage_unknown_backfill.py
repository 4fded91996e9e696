"""Ledger rows written before calls answered without usage counted as unknown now count them so.

Until the release that added ``unknown_usage_calls`` to the cost report (the one before migration 0024), a call
answered without its usage (AutoGen's OpenAI clients end a stream that did not ask for usage with 0 tokens) was recorded
as a call that succeeded with no tokens: ``ts_usage.failed_calls`` did not count it, and ``teamstore cost`` and
the ``session_costs`` view priced it as 0, as if nothing had been spent. Since then such a call counts in
``failed_calls``, so a row whose calls are not all counted there always has tokens: a real call reads its prompt.
A row with no tokens at all and calls not counted in ``failed_calls`` is therefore one of those older rows, and
each of its calls is one of unknown usage: it is counted so, and the report reads its cost as unknown.

A row of an earlier release that holds some calls with usage and some answered without it cannot be told from
one whose calls all had usage; it keeps reading as the tokens it recorded. Coming down changes nothing back:
the rows say what is known either way. On Postgres the upgrade reads the whole ledger once.

Revision ID: 0028
Revises: 0027
"""

from __future__ import annotations

from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

# Frozen here: a migration must not change when the code does.
_BACKFILL = """
UPDATE ts_usage SET failed_calls = calls
WHERE input_tokens = 0 AND output_tokens = 0 AND failed_calls < calls
"""


def upgrade() -> None:
    op.execute(_BACKFILL)


def downgrade() -> None:
    pass  # which rows the upgrade changed is not recorded, and what they say now is true of them
