"""The demo plug-ins (tests/plugins/demo_plugins) pass diel's conformance suites, as any
plug-in should, and their names are among the installed ones once their entry points are."""

from __future__ import annotations

import os
import subprocess
import sys

from diel.testing.samplers import SamplerSuite
from diel.testing.schedulers import SchedulerSuite
from tests.helpers.launch import search_workflow
from tests.plugins import demo_plugins
from tests.plugins.demo_plugins.sampler import DemoSampler
from tests.plugins.demo_plugins.scheduler import DemoScheduler


class TestDemoSampler(SamplerSuite):
    sampler_class = DemoSampler
    options = {"step": 7}


class TestDemoScheduler(SchedulerSuite):
    scheduler_class = DemoScheduler
    options = {"at": 3}


def test_diel_validate_names_the_installed_plugins(tmp_path):
    env = {**os.environ, **demo_plugins.install(tmp_path)}
    (tmp_path / "train.py").write_text("def objective(trial):\n    return 1.0\n")
    path = search_workflow(tmp_path, "      strategy: {demo: {step: 7}}\n"
                                     "      space: {x: {int: [0, 9]}}\n      max_trials: 2\n"
                                     "      pruner: dem", "    function: worker\n"
                                     "    settings: {run: train.py:objective}")
    checked = subprocess.run([sys.executable, "-m", "diel", "validate", str(path)],
                             capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert checked.returncode == 2, checked.stderr
    assert ("modules.search.settings.pruner: unknown pruner (did you mean 'demo'?); known: "
            "demo, halving, hyperband, median, none") in checked.stderr
