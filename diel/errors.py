"""The exceptions diel raises. One root, :class:`DielError`; each subclass also
inherits the builtin that fits, so callers can catch either."""

from __future__ import annotations

__all__ = ["DielError", "ConfigError", "ModuleFailed", "ResultsError", "DatabaseUnwritable",
           "StudyBusy"]


class DielError(Exception):
    """Root of every error diel raises on purpose."""


class ConfigError(DielError, ValueError):
    """A workflow or module setting is wrong.

    ``path`` is the key path in the YAML (``modules.trainer.size``); ``source`` is the
    file. ``str()`` gives one paragraph naming both and what was expected.
    """

    def __init__(self, path: str, message: str, source: str | None = None) -> None:
        self.path = path
        self.message = message
        self.source = source
        super().__init__(self.render())

    def render(self) -> str:
        where = f"{self.source}: " if self.source else ""
        key = f"{self.path}: " if self.path else ""
        return f"{where}{key}{self.message}"

    def in_file(self, source: str) -> "ConfigError":
        """The same error, attributed to the workflow file ``source``."""
        return ConfigError(self.path, self.message, source)


class ModuleFailed(DielError, RuntimeError):
    """A module (function or program) failed on some rank."""


class ResultsError(DielError, RuntimeError):
    """The results database could not be read or written."""


class DatabaseUnwritable(ResultsError):
    """The results database's storage refused a write: a full disk, an exceeded quota, a
    failing device. Nothing committed is lost (the write was one transaction, rolled
    back), so the same command resumes once it can write again. ``str()`` is the one line
    the job ends with (exit status 1)."""


class StudyBusy(ResultsError):
    """Another run holds the study's lease (or took it over from this run): this run must
    not write to the study. ``str()`` is one line naming the holder and since when."""
