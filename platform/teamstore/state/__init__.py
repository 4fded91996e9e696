"""Resume state: one bounded, versioned row per (user, session), failing closed on any skew.

Where things are: ``base`` (the :class:`~teamstore.state.base.StateStore` protocol every caller types
against, and the records it exchanges); ``factory.store_for`` (the backend for an engine); ``statements``
(every statement once, SQLAlchemy Core) and ``rows`` (row -> ``StoredSession``, statement parameters), both
pure; ``admin`` (quarantine, restore, delete, listing, sweeps: one ``SessionAdmin`` each backend holds);
the backends ``sqlite`` and ``postgres_row`` (row leases, ``row_lease``) and ``postgres_lock`` (advisory
locks), with ``direct`` (their psycopg pool and compiled statements); ``lease_mode`` (which kind of lease a
database serves); ``erasure`` (what the deletion coordinator asks of resume state).
"""
