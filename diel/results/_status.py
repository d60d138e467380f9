"""The statuses a trial can have (kept apart so the CLI can name them without SQLAlchemy)."""

STATUSES = ("running", "ok", "failed", "pruned")
