"""The xdist groups reach pytest-xdist's scheduler (tests/conftest.py): a group's tests
are sent to one worker by the ``@group`` suffix of their node ids."""

from __future__ import annotations

import pytest


@pytest.mark.xdist_group("groups-check")
def test_a_grouped_test_carries_its_group_in_its_node_id(request):
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("only a pytest-xdist worker under --dist loadgroup (the default) groups")
    assert request.node.nodeid.endswith("@groups-check")
