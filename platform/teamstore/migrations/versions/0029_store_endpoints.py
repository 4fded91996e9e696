"""Record the S3 endpoint each transcript store of a subject was reached at (``ts_subject_stores.endpoint``).

A store was recorded by its URL alone (``s3://bucket/prefix``), which names no endpoint: an erasure whose S3 client
talks to AWS took a store written through MinIO for a bucket of its own endpoint, and, finding no such bucket there,
for one gone for good. From this revision writers record the endpoint their client talks to (``aws`` for AWS's
own, never a user or password), and an erasure does not list a done store recorded at another endpoint than its
client talks to. A record written before has none (NULL): its endpoint is unknown, and an erasure reaches that
store through its own client, as every store was reached before; its pass there records the endpoint it
reached. A known endpoint is never overwritten, by an erasure nor by a writer (a renamed host keeps the first).

Revision ID: 0029
Revises: 0028
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("ts_subject_stores") as table:
        table.add_column(sa.Column("endpoint", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("ts_subject_stores") as table:
        table.drop_column("endpoint")
