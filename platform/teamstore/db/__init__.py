"""Database plumbing shared by every SQL-backed store: engine, metadata, migrations."""
