"""The soak of tests/support/soak.py, bounded to about 60 s (make soak runs it for 10 minutes).

Skipped when TINYQ_SOAK_SECONDS=0 (make test-python-current: the soak is about time and
processes, not the SQLite version, and has run once in make test-python already).
"""
import os
import shutil
import subprocess
import tempfile

import pytest

from support.soak import Soak

SECONDS = float(os.environ.get("TINYQ_SOAK_SECONDS", "60"))


@pytest.mark.skipif(SECONDS <= 0, reason="TINYQ_SOAK_SECONDS=0")
def test_soak_python_and_node_with_kills_nothing_lost_no_double_effect_limits_held_bounded():
    if shutil.which("node") is None or subprocess.run(
            ["node", "-e", "require('better-sqlite3')"], capture_output=True,
            cwd=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "node")).returncode:
        pytest.fail("the soak needs node and node/node_modules (make node/node_modules)")
    folder = tempfile.mkdtemp(prefix="tinyq-soak-")
    try:
        # At least 20 jobs a second of the run, however long a busy machine takes for them.
        report = Soak(SECONDS, folder, seed=11).run(
            enough=lambda soak: len({event[1] for event in soak.events}) >= 20 * SECONDS)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"\nsoak: {report}")
    assert report["kills"] >= SECONDS / 6, "too few SIGKILLs to prove anything"
    assert report["added"] >= 20 * SECONDS and report["by_lang"]["py"] and report["by_lang"]["js"]
    assert report["retried"] > 0 and report["cancelled"] > 0 and report["step_jobs"] > 0
