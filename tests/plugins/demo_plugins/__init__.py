"""A plug-in package as a third party would write one: a search strategy
(:mod:`.sampler`) and a scheduler (:mod:`.scheduler`), each one file against diel's base
class, registered by the entry points :func:`install` writes at test time."""

from __future__ import annotations

import os
from pathlib import Path

ENTRY_POINTS = """\
[diel.samplers]
demo = tests.plugins.demo_plugins.sampler:DemoSampler

[diel.schedulers]
demo = tests.plugins.demo_plugins.scheduler:DemoScheduler
"""


def install(folder: Path) -> dict[str, str]:
    """Write the package's dist-info (its entry points) into ``folder``, as installing it
    would; return the environment that puts ``folder`` and the repository (which holds
    the package) on the path of a diel command."""
    dist = folder / "diel_demo_plugins-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: diel-demo-plugins\n"
                                   "Version: 1.0\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    return {"PYTHONPATH": os.pathsep.join([str(folder), str(Path(__file__).parents[3])])}
