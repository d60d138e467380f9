"""Helpers shared by the test modules, in one place: test modules and conftests import
from here, never from one another (tests/test_static.py checks it).

- :mod:`tests.helpers.launch`: running ``diel`` and ``mpiexec`` with a timeout;
- :mod:`tests.helpers.markers`: the check that a test using mpiexec, the PostgreSQL
  server or a browser carries the marker saying so;
- :mod:`tests.helpers.postgres`: the throwaway PostgreSQL server and its fixtures;
- :mod:`tests.helpers.search`, :mod:`tests.helpers.worker`, :mod:`tests.helpers.dashboard`:
  workflows, jobs and databases those packages' tests share;
- :mod:`tests.helpers.fakespace`, :mod:`tests.helpers.tuplespace`: an in-memory tuple
  space with the client's semantics, and real servers and clients over threads;
- :mod:`tests.helpers.fake_gpu`: a NumPy stand-in for a GPU;
- :mod:`tests.helpers.browser`: a ``diel dashboard`` process and a headless browser.
- :mod:`tests.helpers.collection`: the heavy libraries collecting the tests imported
  (none may be: tests/test_collection.py).

Files a test runs as a program or loads as user code (``mpi_*.py``, ``probes.py``,
``behaviours.py``, ``fastmodel.py``, ...) stay beside the tests that run them.
"""
