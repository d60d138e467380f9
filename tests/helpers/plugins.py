"""Entry points stood in for, for the plug-in tests (modules, samplers, schedulers,
storages): what ``importlib.metadata.entry_points(group=...)`` gives, without installing
a package."""

from __future__ import annotations

import importlib.metadata

import pytest


class FakeEntryPoint:
    """An installed entry point as importlib.metadata gives it: ``load()`` returns
    ``target``, or raises it when it is an exception (a plug-in that fails to import)."""

    def __init__(self, name: str, value: str, target: object, group: str = "") -> None:
        self.name, self.value, self.target, self.group = name, value, target, group

    def load(self) -> object:
        if isinstance(self.target, Exception):
            raise self.target
        return self.target


def beside_installed(monkeypatch: pytest.MonkeyPatch, group: str) -> list[FakeEntryPoint]:
    """Make the entry points of ``group`` the installed ones plus those the test appends
    to the list returned."""
    expected = group
    installed = list(importlib.metadata.entry_points(group=group))
    extra: list[FakeEntryPoint] = []

    def entry_points(group: str) -> list:   # called as entry_points(group=...)
        assert group == expected, group
        return installed + extra
    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    return extra


def only(monkeypatch: pytest.MonkeyPatch) -> list[FakeEntryPoint]:
    """Make every group hold only the entry points the test appends to the list returned
    (each in its ``group``)."""
    entries: list[FakeEntryPoint] = []
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group: [e for e in entries if e.group == group])
    return entries


def failing_checks(suite: type) -> dict[str, str]:
    """The checks of a conformance ``suite`` (a subclass naming the plug-in under test)
    that fail, with why: how the tests show each check failing a plug-in that breaks it."""
    failed = {}
    for name in dir(suite):
        if name.startswith("test_"):
            try:
                getattr(suite(), name)()
            except AssertionError as exc:
                failed[name] = str(exc)
    return failed
