"""Database plumbing shared by every SQL-backed store: engine, metadata, migrations, the clock, and the
erasure fence (``fence``) that every write for a user checks."""
