"""layout: a study's name is one safe folder name, a checkpoint's path says its study, trial
and step and parses back, and a writer's temporary files are told apart from checkpoints."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from diel.checkpoints.layout import (Location, checkpoint_path, is_temporary, parse, study_folder,
                                     temporary_path)

STUDIES = ["mnist", "my study", "a/b", "..", ".", ".hidden", "~user", "100%", "%41", "naïve ✓",
           "back\\slash", "new\nline", "-x_y.z~"]


@pytest.mark.parametrize("study", STUDIES)
def test_a_study_is_one_folder_that_is_neither_hidden_nor_a_way_out(tmp_path, study):
    folder = study_folder(tmp_path, study)
    assert folder.parent == tmp_path
    assert len(folder.parts) == len(tmp_path.parts) + 1
    assert not folder.name.startswith(".")
    assert "/" not in folder.name and "\\" not in folder.name and "\n" not in folder.name


def test_study_names_are_percent_encoded_readably():
    assert study_folder("/c", "mnist") == Path("/c/mnist")
    assert study_folder("/c", "my study") == Path("/c/my%20study")
    assert study_folder("/c", "a/b") == Path("/c/a%2Fb")
    assert study_folder("/c", "..") == Path("/c/%2E.")
    assert study_folder("/c", "-x_y.z~") == Path("/c/-x_y.z~")


def test_different_studies_get_different_folders():
    assert len({study_folder("/c", study) for study in STUDIES}) == len(STUDIES)


@pytest.mark.parametrize("study", ["", None, 3])
def test_a_study_folder_needs_a_non_empty_name(study):
    with pytest.raises(ValueError, match="non-empty study name"):
        study_folder("/c", study)


@pytest.mark.parametrize("study", STUDIES)
def test_a_checkpoint_path_parses_back_to_its_study_trial_and_step(tmp_path, study):
    path = checkpoint_path(study_folder(tmp_path, study), 12, 340)
    assert path.name == "step-340.ckpt" and path.parent.name == "trial-12"
    assert parse(path) == Location(study, 12, 340)
    assert parse(str(path)) == Location(study, 12, 340)


def test_trial_and_step_zero_are_valid():
    assert parse(checkpoint_path("/c/s", 0, 0)) == Location("s", 0, 0)


@pytest.mark.parametrize("trial, step, what", [(-1, 0, "trial"), (0, -1, "step"), (True, 0, "trial"),
                                               (0, 1.0, "step"), ("1", 0, "trial"), (0, None, "step")])
def test_a_checkpoint_path_refuses_what_is_not_a_count(trial, step, what):
    with pytest.raises(ValueError, match=f"checkpoint's {what} must be an int >= 0"):
        checkpoint_path("/c/s", trial, step)


@pytest.mark.parametrize("path", [
    "/c/s/trial-1/step-2.ckp", "/c/s/trial-1/step-2.ckpt.tmp", "/c/s/trial-01/step-2.ckpt",
    "/c/s/trial-1/step-02.ckpt", "/c/s/trial--1/step-2.ckpt", "/c/s/trial-1/step-x.ckpt",
    "/c/s/trials-1/step-2.ckpt", "trial-1/step-2.ckpt", "/trial-1/step-2.ckpt",
    "../trial-1/step-2.ckpt", "step-2.ckpt", "/c/s/trial-1/.step-2.ckpt.12-ab12.tmp", ""])
def test_parse_refuses_a_path_that_is_not_a_checkpoint_naming_it(path):
    with pytest.raises(ValueError) as error:
        parse(path)
    assert str(error.value).startswith(f"{path}: not a checkpoint's path")


def test_a_temporary_path_is_a_fresh_hidden_name_beside_the_file(tmp_path):
    path = checkpoint_path(tmp_path, 3, 7)
    names = {temporary_path(path) for _ in range(50)}
    assert len(names) == 50
    for name in names:
        assert name.parent == path.parent
        assert name.name.startswith(".step-7.ckpt.") and f".{os.getpid()}-" in name.name
        assert is_temporary(name)
    assert is_temporary(str(next(iter(names))))


@pytest.mark.parametrize("name", ["step-7.ckpt", ".step-7.ckpt", ".step-7.ckpt.tmp",
                                  ".step-7.ckpt.12.tmp", ".step-7.ckpt.12-XY.tmp",
                                  ".step-07.ckpt.12-ab.tmp", "step-7.ckpt.12-ab.tmp",
                                  ".step-7.ckpt.12-ab.tmp.old", "notes.txt"])
def test_only_a_writers_temporary_name_is_temporary(tmp_path, name):
    assert not is_temporary(tmp_path / name)
