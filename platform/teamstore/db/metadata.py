"""The one SQLAlchemy ``MetaData`` every teamstore table is declared on.

    from teamstore.db.metadata import metadata
    from teamstore.state.schema import sessions   # registers its tables on `metadata`

Constraint names follow a convention so migrations on Postgres and SQLite agree.
"""

from __future__ import annotations

from sqlalchemy import MetaData

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)
