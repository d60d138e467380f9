"""The search master's SQL store runs on SQLAlchemy Core alone: everything the master
asks of it (lease, opening and resuming a study, its commits, the final report, the
checkpoint keeping) leaves ``sqlalchemy.orm`` and the readers' models unimported, some
0.07 s of CPU on the master's critical path; the readers map the same tables."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from diel.results._models import Base, TrialModel
from diel.results._tables import METADATA, TRIALS

MASTER = textwrap.dedent("""
    import json, sys
    from datetime import datetime, timezone
    from diel.results import Checkpoint, EpochRecord, ResultRecord, StartedRecord, \\
        TrialStart, get_storage

    store = get_storage(sys.argv[1])
    lease = store.acquire_lease("s")
    state = store.open_study("s", "random", "accuracy", "maximize", {"seed": 1})
    now = datetime.now(timezone.utc)
    starts = [TrialStart(n, {"x": n / 10}, json.dumps({"x": n / 10})) for n in range(4)]
    store.record(state.study_id, starts=starts)
    store.record(state.study_id, started=[StartedRecord(n, 0, now) for n in range(3)],
                 epochs=[EpochRecord(0, 1, {"accuracy": 0.5})],
                 checkpoints=[Checkpoint(0, 1, "trial-0/1.ckpt", 10, "crc32:00000000")])
    store.record(state.study_id, results=[ResultRecord(0, "ok", 0.9, accuracy=0.9, epoch=1),
                                          ResultRecord(1, "ok", 0.8, accuracy=0.8)])
    store.heartbeat(lease)
    store.update_config(state.study_id, {"seed": 1, "max_trials": 3})
    store.delete_checkpoints(state.study_id, [(0, 1)])
    store.forget(state.study_id, [3], interrupted=True)
    best = store.best("s", "maximize", 5)
    listed = [store.study_checkpoints("s"), store.segments("s", 0), store.attempts("s", 0)]
    store.release_lease(lease)
    store.close()

    again = get_storage(sys.argv[1])   # the job died while trial 2 ran: given up
    resumed = again.open_study("s", "random", "accuracy", "maximize", {"seed": 1},
                               max_attempts=1)
    again.close()
    print(json.dumps({
        "best": [t["number"] for t in best], "segments": len(listed[1]),
        "finished": sorted(t.number for t in resumed.finished),
        "epochs": resumed.finished[0].epochs if resumed.finished else None,
        "given_up": [t.number for t in resumed.given_up],
        "running": [t.number for t in resumed.running],
        "orm": sorted(m for m in sys.modules
                      if m.startswith("sqlalchemy.orm") or m == "diel.results._models")}))
""")


def test_the_master_s_store_never_imports_the_orm(tmp_path):
    done = subprocess.run([sys.executable, "-c", MASTER, str(tmp_path / "r.db")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["orm"] == []
    assert report["best"] == [0, 1] and report["segments"] == 1
    assert report["finished"] == [0, 1, 2] and report["given_up"] == [2]
    assert report["running"] == [3]   # its dispatch was taken back, uncharged
    assert report["epochs"] == {"1": {"accuracy": 0.5}}


def test_the_readers_models_map_the_schema_s_tables():
    assert Base.metadata is METADATA
    assert TrialModel.__table__ is TRIALS
