"""The settings kit every parser shares (diel.checks): what each check accepts, what it
refuses, and the words of its message."""

from __future__ import annotations

import math

import pytest

from diel import checks
from diel.errors import ConfigError


def refused(check, *args, **kwargs) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        check(*args, **kwargs)
    return info.value


def test_closest_and_did_you_mean_suggest_only_a_likely_typo():
    assert checks.closest("epocs", ["epochs", "eta"]) == "epochs"
    assert checks.closest(3, ["3a", "zzz"]) == "3a"   # any key, as its text
    assert checks.closest("xyz", ["epochs"]) is None
    assert checks.did_you_mean("maximise", ["maximize", "minimize"]) == " (did you mean 'maximize'?)"
    assert checks.did_you_mean("xyz", ["epochs"]) == ""


def test_unknown_keys_name_the_key_path_and_the_known_ones():
    error = refused(checks.no_unknown_keys, {"timeout": 1, "timout": 2}, ("timeout", "grace"), "s")
    assert (error.path, error.message) == (
        "s.timout", "unknown setting (did you mean 'timeout'?); known: timeout, grace")
    assert refused(checks.no_unknown_keys, {"x": 1}, (), "").path == "x"   # the top level
    error = refused(checks.no_unknown_keys, {"x": 1}, ("y",), "p", lambda key: f"no {key} here")
    assert (error.path, error.message) == ("p.x", "no x here")
    checks.no_unknown_keys({"y": 1}, ("y",), "p")


def test_a_boolean_is_never_a_number():
    assert checks.is_whole(3) and not checks.is_whole(True) and not checks.is_whole(3.0)
    assert checks.is_number(2.5) and checks.is_number(-1) and not checks.is_number(False)
    assert not checks.is_number("1")
    assert refused(checks.whole_number, True, "p", 0).message == "expected an integer >= 0; got True"
    assert refused(checks.positive_number, True, "p").message == "expected a number > 0; got True"


@pytest.mark.parametrize("value", [0, -1, 2.0, "3", None, [1]])
def test_whole_number_refuses_what_is_not_a_whole_number_at_the_minimum(value):
    error = refused(checks.whole_number, value, "modules.a.size", 1)
    assert error.path == "modules.a.size"
    assert error.message == f"expected an integer >= 1; got {value!r}"


def test_whole_number_takes_each_parsers_own_words():
    assert checks.whole_number(5, "p", 1) == 5
    error = refused(checks.whole_number, 0, "p", 1, "a whole number >= 1", got=", got")
    assert error.message == "expected a whole number >= 1, got 0"


@pytest.mark.parametrize("value", [0, -0.5, math.nan, "1", None])
def test_positive_number_refuses_zero_negatives_and_nan(value):
    assert refused(checks.positive_number, value, "t").message == f"expected a number > 0; got {value!r}"


def test_positive_number_keeps_the_value_and_takes_words():
    assert checks.positive_number(0.5, "t") == 0.5 and checks.positive_number(math.inf, "t") == math.inf
    error = refused(checks.positive_number, 0, "t", "a positive number of seconds", got=", got")
    assert error.message == "expected a positive number of seconds, got 0"


def test_mapping_one_of_text_and_boolean():
    assert checks.mapping({"a": 1}, "p", "a mapping") == {"a": 1}
    assert refused(checks.mapping, [1], "p", "a mapping of options").message == \
        "expected a mapping of options; got [1]"
    assert refused(checks.mapping, None, "p", "a mapping", got=", got",
                   describe=lambda v: "nothing").message == "expected a mapping, got nothing"
    assert checks.one_of("batch", "m", ("batch", "async")) == "batch"
    assert refused(checks.one_of, "bach", "m", ("batch", "async")).message == \
        "expected one of batch, async; got 'bach'"
    assert checks.non_empty_text("study", "s") == "study"
    for blank in ("", "   ", 3, None):
        assert refused(checks.non_empty_text, blank, "s").message == \
            f"expected a non-empty string; got {blank!r}"
    assert checks.boolean(False, "i") is False
    assert refused(checks.boolean, "yes", "i", got=", got").message == \
        "expected true or false, got 'yes'"


def test_the_kit_imports_nothing_of_diel_but_errors():
    source = checks.__spec__.origin
    with open(source) as stream:
        imports = [line for line in stream if line.startswith(("import ", "from "))]
    assert [line for line in imports if "diel" in line] == ["from diel.errors import ConfigError\n"]


def test_parsers_refuse_blank_names_and_nan_durations_through_the_kit(tmp_path):
    """What the kit's checks added to the parsers that had looser ones of their own: a
    workflow or study name of white space, a timeout of nan."""
    from diel.executive.config import parse_workflow
    from diel.worker.settings import parse_settings

    (tmp_path / "train.py").write_text("def objective(trial):\n    return 1.0\n")
    workflow = {"name": "  ", "modules": {"a": {"function": "m:main"}}}
    error = refused(parse_workflow, workflow, tmp_path / "wf.yaml")
    assert (error.path, error.message) == ("name", "expected a non-empty string, got '  '")
    error = refused(parse_settings, {"run": "train.py:objective", "study": " "}, "s", tmp_path)
    assert (error.path, error.message) == ("s.study", "expected the search's study name, got ' '")
    error = refused(parse_settings, {"run": "train.py:objective", "timeout": math.nan}, "s", tmp_path)
    assert (error.path, error.message) == ("s.timeout",
                                           "expected a positive number of seconds, got nan")
