"""Bounds on the text a user's code produces, applied wherever diel stores or logs it.

A trial can print a 40 MB progress line or raise an exception whose message holds a whole
data set; neither may reach the results database, the log or the master whole. Each
limit is named here, once, and docs/workers.md lists them. :func:`clip` cuts a text to
its limit and says how much it dropped, keeping the start (the error's type and message)
and the end (the last thing the trial said), which are what a reader needs.
"""

from __future__ import annotations

__all__ = ["clip", "STDERR_LINES", "STDERR_LINE_CHARS", "ERROR_CHARS", "METRIC_TEXT_CHARS",
           "METRIC_NAME_CHARS", "METRICS_PER_REPORT", "REPORT_BYTES", "LOG_TEXT_CHARS",
           "CHECKSUM_CHARS", "PATH_CHARS", "PARAM_NAME_CHARS", "USER_ATTRS"]

STDERR_LINES = 20          # last lines of a trial's stderr quoted in its error
STDERR_LINE_CHARS = 1000   # characters kept of each of those lines
ERROR_CHARS = 8000         # a trial's error text, as stored and logged
METRIC_TEXT_CHARS = 1000   # the value of a metric that is a string
METRIC_NAME_CHARS = 200    # the name of a metric
METRICS_PER_REPORT = 200   # metrics in one report or result; more is an error naming the count
REPORT_BYTES = 1 << 20     # a program's report line or result file; longer is malformed
LOG_TEXT_CHARS = 2000      # any other user-supplied text quoted in a log line
CHECKSUM_CHARS = 200       # a checkpoint report's checksum; longer: the report is ignored
PARAM_NAME_CHARS = 200     # a parameter a trial suggests (define-by-run); longer: refused
USER_ATTRS = 100           # trial.set_user_attr keys a trial keeps; more is an error
PATH_CHARS = 4096          # a checkpoint report's path (Linux's PATH_MAX); longer: ignored

_MARK = " [... {} characters cut ...] "


def clip(text: str, limit: int, cut: int = 0) -> str:
    """``text`` if it has at most ``limit`` characters; else its start and its end with a
    note of how many characters were cut between them, ``limit`` characters in all
    (just the start when ``limit`` is too small for a note).

    ``cut``: characters a reader already dropped from the middle of ``text``, keeping only
    its two ends (a line too long to hold whole): the note counts them too. ``text`` is
    then those two ends joined, each of at least ``limit // 2`` characters, so that the
    note falls where the dropped characters were.
    """
    if len(text) <= limit and not cut:
        return text
    total = len(text) + cut
    mark = _MARK.format(total - limit)
    room = limit - len(mark)
    if room < 2:
        return text[:limit]
    mark = _MARK.format(total - room)   # the note counts what it stands for
    room = limit - len(mark)
    head = room - room // 2
    return text[:head] + mark + text[len(text) - (room - head):]
