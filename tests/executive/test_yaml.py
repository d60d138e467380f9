"""Workflow files are read as YAML 1.2: numbers as people write them, booleans only
true/false, duplicate keys refused with their lines, and every shipped config still
means what it meant."""

from __future__ import annotations

import math

import pytest
import yaml

from diel.cli import load_checked
from diel.executive.config import DuplicateKeyError
from diel.executive.yaml12 import LOADERS, MAX_YAML_DEPTH, load_yaml, resolve_number
from tests.helpers.launch import REPO

# (plain scalar as written, the value it stands for)
SPELLINGS = [
    ("1e-3", 0.001), ("1E-3", 0.001), ("5e+2", 500.0), ("-1E5", -100000.0), (".5", 0.5),
    ("-.5", -0.5), ("1.", 1.0), ("1.5", 1.5), ("+2.5e-1", 0.25), ("1_000", 1000),
    ("1_000.5", 1000.5), ("12", 12), ("-3", -3), ("+4", 4), ("010", 10), ("0x1F", 31),
    ("0o17", 15), ("0", 0), (".inf", math.inf), ("+.Inf", math.inf), ("-.INF", -math.inf),
    ("true", True), ("True", True), ("TRUE", True), ("false", False), ("False", False),
    ("FALSE", False), ("null", None), ("Null", None), ("NULL", None), ("~", None),
    # strings in YAML 1.2, whatever YAML 1.1 made of them
    ("yes", "yes"), ("No", "No"), ("on", "on"), ("OFF", "OFF"), ("y", "y"),
    ("1:30", "1:30"), ("2024-01-31", "2024-01-31"), ("0b101", "0b101"), ("1e", "1e"),
    ("e3", "e3"), ("1__0", "1__0"), ("0x", "0x"), ("-0x1F", "-0x1F"), ("1.2.3", "1.2.3"),
    ("nan", "nan"), ("inf", "inf"), ("tRUE", "tRUE"), ("=", "="),
]
LOADER_IDS = [loader.__name__.strip("_") for loader in LOADERS]


@pytest.mark.parametrize("loader", LOADERS, ids=LOADER_IDS)
@pytest.mark.parametrize("text, value", SPELLINGS, ids=[text for text, _ in SPELLINGS])
def test_plain_scalars_mean_what_people_write(loader, text, value):
    loaded = load_yaml(f"a: {text}\nb: [{text}]\n", loader)
    for found in (loaded["a"], loaded["b"][0]):
        assert found == value and type(found) is type(value)


@pytest.mark.parametrize("loader", LOADERS, ids=LOADER_IDS)
def test_nan_empty_quoted_and_tagged_values(loader):
    data = load_yaml("a: .nan\nb: .NaN\nc:\nd: '1e-3'\ne: \"5e+2\"\nf: !!str 1e-3\n"
                     "g: !!float 1\nh: !!int '0x10'\ni: !!bool 'False'\n", loader)
    assert math.isnan(data.pop("a")) and math.isnan(data.pop("b"))
    assert data == {"c": None, "d": "1e-3", "e": "5e+2", "f": "1e-3", "g": 1.0, "h": 16,
                    "i": False}


def test_resolve_number_agrees_with_the_loader():
    for text, value in SPELLINGS:
        number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        assert resolve_number(text) == number, text


@pytest.mark.parametrize("loader", LOADERS, ids=LOADER_IDS)
@pytest.mark.parametrize("text, problem", [
    ("a: !!int abc\n", "expected an integer, got 'abc'"),
    ("a: !!float x\n", "expected a number, got 'x'"),
    ("a: !!bool yes\n", "expected true or false, got 'yes'"),
    ("a: !!timestamp 2024-01-31\n", "could not determine a constructor"),
    ("a: !!python/object:os.system {}\n", "could not determine a constructor"),
])
def test_explicit_tags_outside_the_core_schema_or_malformed_are_yaml_errors(loader, text, problem):
    with pytest.raises(yaml.YAMLError, match=problem) as error:
        load_yaml(text, loader)
    assert error.value.problem_mark.line == 0


@pytest.mark.parametrize("loader", LOADERS, ids=LOADER_IDS)
def test_duplicate_keys_and_merges_behave_the_same_with_every_loader(loader):
    with pytest.raises(DuplicateKeyError) as error:
        load_yaml("a:\n  b: [{c: 1e-3, d: 2, c: 3}]\n", loader)
    assert (error.value.path, error.value.line, error.value.first_line) == ("a.b[0].c", 2, 2)
    data = load_yaml("base: &b {epochs: 1, lr: 1e-3}\nrun:\n  <<: *b\n  epochs: 5\n", loader)
    assert data["run"] == {"epochs": 5, "lr": 0.001}


@pytest.mark.parametrize("loader", LOADERS, ids=LOADER_IDS)
def test_nesting_up_to_the_bound_is_read(loader):
    depth = MAX_YAML_DEPTH - 1   # lists inside the top mapping
    data = load_yaml("a: " + "[" * depth + "1" + "]" * depth + "\n", loader)["a"]
    for _ in range(depth):
        (data,) = data
    assert data == 1


def test_aliases_that_expand_within_the_bound_are_read():
    text = "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n" + "".join(
        f"b{i}: &b{i} [" + ", ".join(["*a" if i == 0 else f"*b{i - 1}"] * 10) + "]\n"
        for i in range(4))   # 100,000 scalars in the last one
    data = load_yaml(text)
    assert len(data["b3"]) == 10 and data["b3"][9][9][9][9][9] == 10


SHIPPED = sorted([*REPO.glob("configs/*.yaml"), *REPO.glob("examples/**/*.yaml")])


def test_the_shipped_configs_are_all_found():
    assert len(SHIPPED) >= 9 and REPO / "configs" / "mnist_grid.yaml" in SHIPPED


@pytest.mark.parametrize("path", SHIPPED, ids=[str(p.relative_to(REPO)) for p in SHIPPED])
def test_every_shipped_config_means_what_it_meant_and_validates(path):
    text = path.read_text()
    assert load_yaml(text) == yaml.safe_load(text)   # YAML 1.1 read the same values
    _, found = load_checked(str(path))
    assert found == []   # and no ConfigWarning
