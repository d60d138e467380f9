"""Every results storage diel ships passes the storage conformance suite it ships
(diel.testing.storages): the in-memory one, and the SQL one on SQLite and on PostgreSQL;
and the suite fails a storage that breaks the contract."""

from __future__ import annotations

from dataclasses import replace

import pytest

from diel.results import MemoryStorage, ResultsStore
from diel.testing.storages import StorageSuite
from tests.helpers.plugins import failing_checks


class TestMemory(StorageSuite):
    storage_class = MemoryStorage


class TestSQL(StorageSuite):
    storage_class = ResultsStore

    @pytest.fixture(autouse=True, params=["sqlite", pytest.param("postgresql",
                                                                 marks=pytest.mark.postgres)])
    def database(self, request, tmp_path):
        """A fresh database for each check: a SQLite file, or a PostgreSQL database."""
        self.url = f"sqlite:///{tmp_path / 'suite.db'}" if request.param == "sqlite" \
            else request.getfixturevalue("postgres_url")


# -- the suite fails a storage that breaks the contract -----------------------------------

class Charges(MemoryStorage):
    """Charges an interrupted dispatch as a crash."""

    def forget(self, study_id, numbers, interrupted=False):
        super().forget(study_id, numbers)


class Crowded(MemoryStorage):
    """Lets a second run take a live lease."""

    def acquire_lease(self, study):
        self._leases.pop(study, None)
        return super().acquire_lease(study)


class HalfWrites(MemoryStorage):
    """Writes a record's starts in a transaction of their own."""

    def record(self, study_id, epochs=(), results=(), starts=(), started=(), checkpoints=(),
               suggested=()):
        super().record(study_id, starts=starts)
        super().record(study_id, epochs, results, started=started, checkpoints=checkpoints,
                       suggested=suggested)


class NeverGivesUp(MemoryStorage):
    """Runs a trial that killed the job again and again."""

    def open_study(self, name, strategy, objective, direction, config, max_attempts=2, **kw):
        return super().open_study(name, strategy, objective, direction, config, 10**6, **kw)


class ForgetsCheckpoints(MemoryStorage):
    """Drops the checkpoints it is given."""

    def record(self, study_id, epochs=(), results=(), starts=(), started=(), checkpoints=(),
               suggested=()):
        super().record(study_id, epochs, results, starts, started, suggested=suggested)


class KeepsLostEpochs(MemoryStorage):
    """Keeps every epoch of a trial dispatched again, the lost run's after its
    checkpoint too."""

    def record(self, study_id, epochs=(), results=(), starts=(), started=(), checkpoints=(),
               suggested=()):
        trials = self._study(study_id).trials
        before = {t.number: dict(trials[t.number].epochs) for t in starts if t.number in trials}
        super().record(study_id, epochs, results, starts, started, checkpoints, suggested)
        for number, kept in before.items():
            trials[number].epochs = {**kept, **trials[number].epochs}


class ChargesPauses(MemoryStorage):
    """Counts a pause as an attempt the job died in."""

    def record(self, study_id, epochs=(), results=(), starts=(), started=(), checkpoints=(),
               suggested=()):
        super().record(study_id, epochs, results, starts, started, checkpoints, suggested)
        for result in results:
            if result.status == "paused":
                self._study(study_id).trials[result.number].attempts += 1


class NoAttempts(MemoryStorage):
    """Keeps no attempts."""

    def attempts(self, study, number):
        return []


class SegmentsEveryDispatch(MemoryStorage):
    """Takes every dispatch again for an exploit (a crash-resume begins a segment too)."""

    def record(self, study_id, epochs=(), results=(), starts=(), started=(), checkpoints=(),
               suggested=()):
        starts = [replace(t, parent_trial=t.number) if t.resumed_from else t for t in starts]
        super().record(study_id, epochs, results, starts, started, checkpoints, suggested)


class IgnoresSuggestions(MemoryStorage):
    """Drops the parameters suggested as trials ran."""

    def record(self, study_id, epochs=(), results=(), starts=(), started=(), checkpoints=(),
               suggested=()):
        super().record(study_id, epochs, results, starts, started, checkpoints)


class Unordered(MemoryStorage):
    """Gives trial dicts with their keys in another order than a reader's."""

    def trials(self, study, status=None):
        return [dict(sorted(row.items())) for row in super().trials(study, status)]


@pytest.mark.parametrize("storage, failed", [
    (Charges, {"test_forget_takes_a_dispatch_back": "must stay running, uncharged"}),
    (Crowded, {"test_one_run_holds_a_study": "a second run took a live lease"}),
    (HalfWrites, {"test_a_failed_write_changes_nothing": "wrote part of it"}),
    (NeverGivesUp, {"test_a_spent_trial_is_given_up_unless_the_check_refuses":
                    "was not given up"}),
    (Unordered, {"test_what_is_recorded_reads_back_as_a_reader_gets_it": "a trial's keys are"}),
    (ForgetsCheckpoints, {"test_checkpoints_read_back_newest_first": "newest first"}),
    (KeepsLostEpochs, {"test_a_trial_resumed_keeps_its_epochs_up_to_its_checkpoint":
                       "lose the lost run's later ones"}),
    (ChargesPauses, {"test_a_paused_trial_is_not_finished_nor_charged": "not charged"}),
    (NoAttempts, {"test_every_dispatch_is_an_attempt": "a finished attempt read back"}),
    (SegmentsEveryDispatch, {"test_segments_follow_first_dispatches_and_exploits":
                             "resumed after its pause began a segment"}),
    (IgnoresSuggestions, {"test_suggested_parameters_merge_into_the_trial":
                          "suggested parameters merged into the trial as"}),
])
def test_the_storage_suite_fails_a_storage_that_breaks_the_contract(storage, failed):
    found = failing_checks(type("TestBroken", (StorageSuite,), {"storage_class": storage}))
    assert set(found) >= set(failed), found
    for check, words in failed.items():
        assert words in found[check], found[check]
