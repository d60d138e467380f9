"""The statuses a trial and an attempt of it can have (kept apart so the CLI and the
search can name them without importing SQLAlchemy).

A trial is ``running`` from its dispatch to its end: ``ok``, ``failed`` or ``pruned``
(:data:`FINISHED`), or ``paused``: stopped on request with its progress kept in a
checkpoint, not finished (the next dispatch resumes it from its checkpoint). An attempt
(one dispatch of a trial) ends as its trial's result says, or ``interrupted`` (the run
was interrupted while it ran: not charged), or ``died`` (the job died while it ran: its
end time is unknown).
"""

STATUSES = ("running", "ok", "failed", "pruned", "paused")
FINISHED = ("ok", "failed", "pruned")   # the statuses a trial ends with
ATTEMPT_STATUSES = (*STATUSES, "interrupted", "died")
