"""The statuses a trial can have (kept apart so the CLI and the search can name them
without importing SQLAlchemy)."""

STATUSES = ("running", "ok", "failed", "pruned")
FINISHED = ("ok", "failed", "pruned")   # the statuses a trial ends with
