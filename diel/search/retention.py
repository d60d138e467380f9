"""Which durable checkpoints of a study the search keeps, and deleting the rest
(docs/search.md, "Checkpoints").

A trial not finished (running, or paused) keeps its ``keep`` newest checkpoints: an
older one is deleted only once ``keep`` newer ones are durable and recorded, so the one a
resume needs is never gone. A finished trial keeps its final (newest) checkpoint while it
is one of the ``keep_best`` best ``ok`` trials, ranked by the (first) objective; every
other checkpoint of a finished trial is deleted, and so is a best trial's when a better
one displaces it. Nothing outside the study's folder is ever deleted: a checkpoint
report whose path is not ``<study folder>/trial-<n>/...`` of its own trial is refused
(:meth:`Retention.misplaced`).

Exploits (population-based training): a member dispatched to go on from a donor's
checkpoint holds it (:meth:`Retention.hold`) until it has read it (its first report, or
its end: :meth:`Retention.release`); a held checkpoint that the rules above would delete
is deleted only then. The member's own checkpoints are superseded by its new lineage
and deleted (:meth:`Retention.superseded`).

:class:`Retention` decides; :meth:`Retention.delete_files` deletes (a file that cannot
be deleted is one warning, never an error: the search goes on). The master marks the
checkpoints deleted in the results database (``Storage.delete_checkpoints``) before it
deletes their files, so a crash between the two leaves a file behind, never a record of
a file that is gone. At the start of a run, :meth:`Retention.remove_leftovers` deletes
the temporary files a crash left in the study's folder
(:func:`diel.checkpoints.layout.is_temporary`): no write of the study can be under way
then, as the run holds the study's lease.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Iterable, Sequence

from diel.checkpoints import layout
from diel.results import Checkpoint

__all__ = ["Retention"]


class Retention:
    """The kept checkpoints of one study in ``folder`` (its study folder,
    :func:`diel.checkpoints.layout.study_folder`): ``keep`` a trial not finished,
    the final one of the ``keep_best`` best ``ok`` trials (best: the highest score when
    ``maximize``, else the lowest)."""

    def __init__(self, folder: Path, keep: int, keep_best: int, maximize: bool,
                 log: logging.Logger) -> None:
        self.folder = Path(os.path.normpath(folder))
        self.keep, self.keep_best, self.maximize = keep, keep_best, maximize
        self.log = log
        self.kept: dict[int, list[Checkpoint]] = {}   # by trial, newest first
        self.best: list[tuple[float, int]] = []   # the keep_best best ok trials, best first
        self.done: set[int] = set()   # finished trials
        self.held: dict[int, tuple[int, int]] = {}   # member -> (donor, step) it reads
        self.deferred: list[Checkpoint] = []   # deletions put off while held
        self._warned = False

    def misplaced(self, checkpoint: Checkpoint) -> bool:
        """True when ``checkpoint``'s path is not a file of its own trial in the
        study's folder: it is not recorded, and so never deleted."""
        path = Path(os.path.normpath(checkpoint.path))
        return not path.is_absolute() or \
            path.parent != self.folder / f"trial-{checkpoint.number}"

    def load(self, kept: Iterable[Checkpoint]) -> None:
        """What earlier runs kept (``Storage.study_checkpoints``), before
        :meth:`finished` is told about the study's finished trials."""
        for checkpoint in kept:
            self.kept.setdefault(checkpoint.number, []).append(checkpoint)
        for checkpoints in self.kept.values():
            checkpoints.sort(key=lambda c: c.step, reverse=True)

    def added(self, checkpoint: Checkpoint) -> list[Checkpoint]:
        """A checkpoint just recorded (durable): those of its trial to delete now, the
        oldest beyond the ``keep`` newest. One that comes after its trial finished is
        its final one: kept (in place of the one kept) for a best trial, else deleted."""
        number = checkpoint.number
        kept = [c for c in self.kept.get(number, []) if c.step != checkpoint.step]
        kept = sorted([checkpoint, *kept], key=lambda c: c.step, reverse=True)
        if number in self.done:
            if not any(best == number for _, best in self.best):
                return [checkpoint]
            self.kept[number] = kept[:1]
            return kept[1:]
        self.kept[number] = kept[:self.keep]
        return self._unheld(kept[self.keep:])

    def finished(self, number: int, score: float | None) -> list[Checkpoint]:
        """Trial ``number`` finished (``score``: its objective value when it ended ``ok``,
        else None): the checkpoints to delete now, its own but the final one of a best
        trial, and the final one of a trial it displaces from the best ``keep_best``."""
        self.done.add(number)
        kept = self.kept.pop(number, [])
        if score is None or self.keep_best == 0:
            return self._unheld(kept)
        self.best.append((score, number))
        self.best.sort(key=lambda pair: -pair[0] if self.maximize else pair[0])
        if kept:
            self.kept[number] = kept[:1]
        doomed = kept[1:]
        for _, loser in self.best[self.keep_best:]:
            doomed += self.kept.pop(loser, [])
        self.best = self.best[:self.keep_best]
        return self._unheld(doomed)

    def hold(self, member: int, donor: int, step: int) -> None:
        """Trial ``member`` goes on from ``donor``'s checkpoint of ``step``: keep it until
        :meth:`release`."""
        self.held[member] = (donor, step)

    def release(self, member: int) -> list[Checkpoint]:
        """Trial ``member`` read what it held (it reported, or ended): the deletions put
        off for it, to do now (none when it held nothing)."""
        if self.held.pop(member, None) is None:
            return []
        due = self._unheld(self.deferred)
        self.deferred = [c for c in self.deferred if c not in due]
        return due

    def superseded(self, number: int, step: int | None) -> list[Checkpoint]:
        """Trial ``number`` goes on from another lineage (an exploit; ``step`` None) or
        from its own checkpoint of ``step`` with new parameters: its other checkpoints
        to delete now."""
        kept = self.kept.get(number, [])
        self.kept[number] = [c for c in kept if c.step == step]
        return self._unheld([c for c in kept if c.step != step])

    def _unheld(self, doomed: list[Checkpoint]) -> list[Checkpoint]:
        """``doomed`` less the checkpoints a member holds (put off until released)."""
        holding = set(self.held.values())
        if not holding:
            return doomed
        spared = [c for c in doomed if (c.number, c.step) in holding]
        self.deferred += [c for c in spared if c not in self.deferred]
        return [c for c in doomed if (c.number, c.step) not in holding]

    def holds(self, number: int) -> bool:
        """Whether trial ``number`` has a checkpoint kept."""
        return bool(self.kept.get(number))

    def delete_files(self, checkpoints: Sequence[Checkpoint]) -> None:
        """Delete the files of ``checkpoints`` (already marked deleted), and their trial's
        folder once empty. A file already gone is fine; one that cannot be deleted is one
        warning for the run, naming the first file and why; the search goes on."""
        for checkpoint in checkpoints:
            path = Path(checkpoint.path)
            try:
                path.unlink(missing_ok=True)
            except OSError as e:
                self._warn(f"could not delete checkpoint {checkpoint.path} of trial "
                           f"{checkpoint.number}: {e.strerror or e}")
                continue
            try:
                path.parent.rmdir()   # the trial's folder, once it holds nothing
            except OSError:
                pass

    def remove_leftovers(self) -> int:
        """Delete the temporary files a crashed run left in the study's folder; how many
        were deleted."""
        removed = 0
        try:
            trials = [entry for entry in os.scandir(self.folder) if entry.is_dir()]
        except OSError:   # no folder yet (nothing was checkpointed), or unreadable
            return 0
        for trial in trials:
            try:
                names = [entry.path for entry in os.scandir(trial.path)
                         if layout.is_temporary(entry.path)]
            except OSError:
                continue
            for name in names:
                try:
                    os.unlink(name)
                    removed += 1
                except FileNotFoundError:
                    pass
                except OSError as e:
                    self._warn(f"could not delete the leftover checkpoint file {name}: "
                               f"{e.strerror or e}")
            try:
                os.rmdir(trial.path)   # a trial's folder that held nothing else
            except OSError:
                pass
        return removed

    def _warn(self, line: str) -> None:
        if not self._warned:
            self.log.warning("%s; the search goes on (no further warning of this kind in "
                             "this run)", line)
            self._warned = True
