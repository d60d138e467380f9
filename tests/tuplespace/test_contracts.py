"""The same contract checks over the in-process transport and over MPI."""

from __future__ import annotations

import threading

import pytest

from tests.helpers.tuplespace import InProcSpace
from .contracts import CONTRACTS


def run_inproc(name: str) -> None:
    space = InProcSpace()
    errors: list[BaseException] = []

    def role(r: str, client) -> None:
        try:
            CONTRACTS[name](r, client)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=role, args=(r, c), daemon=True)
               for r, c in zip("ab", space.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    hung = any(t.is_alive() for t in threads)
    space.stop()
    if errors:
        raise errors[0]
    assert not hung, f"contract {name} hung"


@pytest.mark.parametrize("transport", ["inproc", pytest.param("mpi", marks=pytest.mark.mpi)])
@pytest.mark.parametrize("name", sorted(CONTRACTS))
def test_contract(name: str, transport: str, request: pytest.FixtureRequest) -> None:
    if transport == "inproc":
        run_inproc(name)
    else:
        result = request.getfixturevalue("mpi_contract_results")[name]
        assert result == "ok", result
