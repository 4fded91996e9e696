"""Record when an erasure step began the wait it ends with (``ts_erasure_steps.wait_started_at``).

The ``keys`` step destroys the user's data key, then waits ``TEAMSTORE_KEY_CACHE_SECONDS`` for the copies other
workers keep in memory to lapse. A rerun of a request stopped during that wait waited the whole time again. From
this revision the step records, on the database's clock, when its wait began (once the key's delete had
committed), and a rerun waits only what is left of it. A step stopped in its wait before this revision recorded
nothing: its rerun waits the whole time, as before.

Revision ID: 0021
Revises: 0020
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("ts_erasure_steps") as table:
        table.add_column(sa.Column("wait_started_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("ts_erasure_steps") as table:
        table.drop_column("wait_started_at")
