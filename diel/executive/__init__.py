"""The executive: reads and checks a workflow, lays out the ranks, splits COMM_WORLD into
per-module and per-copy communicators, and runs the modules as a DAG of groups.

``config`` (the workflow file and its checks, ``yaml12`` its YAML reading), ``layout``
(which world rank runs which module copy), ``run`` (every rank's part of a job),
``context`` (the ``ctx`` a module gets), ``coordinator`` and ``waiting`` (groups that
wait for others without spinning), ``messaging`` (``ctx.send``/``ctx.recv``),
``modules`` (finding what a module runs), ``command``, ``process_groups``, ``warden``
and ``stderr_tail`` (running programs, and trial processes, without leaving any behind),
``placeholders``, ``interrupts``, ``logs``, ``node`` and ``paths``.

Nothing here imports mpi4py's MPI until a job runs (``run``, ``context``), so that
``diel validate`` and the unit tests need no MPI.
"""
