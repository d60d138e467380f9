"""The search master's ``prepare`` (diel.search.master) imports its results store's
modules as soon as its rank knows it runs the master (before MPI starts, where it can):
SQLAlchemy, diel's SQL store and the URL's dialect for a SQL database, nothing of theirs for ``memory://``;
and NumPy's random module for a strategy that draws (not ``grid``); it opens, creates
and changes nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.helpers.launch import REPO

#: Loads the workflow in argv[1], runs the search module's prepare through the executive
#: and prints which of the store's modules are imported.
PREPARE = textwrap.dedent("""
    import json, sys
    from types import SimpleNamespace
    from diel.executive.config import load_workflow
    from diel.executive.modules import prepare_module

    workflow = load_workflow(sys.argv[1])
    prepare_module(workflow, "search", SimpleNamespace(local_rank=0, local_size=1, threads=1))
    print(json.dumps([name for name in ("sqlalchemy", "diel.results._store",
                                        "sqlalchemy.dialects.sqlite.pysqlite",
                                        "diel.results._memory", "numpy.random")
                      if name in sys.modules]))
""")
WORKFLOW = """
modules:
  space: {function: tuplespace}
  search: {function: search, settings: {max_trials: 1, %s}}
  worker: {function: worker, settings: {run: "trial.py:objective"}}
services: [space]
"""


RANDOM = "strategy: random, space: {x: {uniform: [0, 1]}}"
GRID = "strategy: grid, space: {x: {values: [0, 1]}}"


@pytest.mark.parametrize("search, imported", [
    (RANDOM, ["sqlalchemy", "diel.results._store", "sqlalchemy.dialects.sqlite.pysqlite",
              "numpy.random"]),
    (f"{RANDOM}, database: 'sqlite:///results/study.db'",
     ["sqlalchemy", "diel.results._store", "sqlalchemy.dialects.sqlite.pysqlite",
      "numpy.random"]),
    (f"{RANDOM}, database: 'memory://'", ["diel.results._memory", "numpy.random"]),
    (f"{GRID}, database: 'memory://'", ["diel.results._memory"]),   # a grid draws nothing
])
def test_prepare_imports_the_store_s_modules(tmp_path, search, imported):
    (tmp_path / "wf.yaml").write_text(WORKFLOW % search)
    done = subprocess.run([sys.executable, "-c", PREPARE, str(tmp_path / "wf.yaml")],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == imported
    assert done.stderr == ""   # no warning: it did not fail
    assert sorted(path.name for path in tmp_path.iterdir()) == ["wf.yaml"]   # nothing opened
