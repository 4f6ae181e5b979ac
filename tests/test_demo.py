"""`make demo`: the crash story runs in real processes, quickly, and tells it right."""
import os
import re
import subprocess
import time

from helpers import ROOT

ANSWER = "Hello! Your parcel left the warehouse this morning."


def test_demo_tells_the_crash_story():
    t0 = time.time()
    proc = subprocess.run(["/usr/bin/python3", "examples/demo.py"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    elapsed = time.time() - t0
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert elapsed < 15, "the demo took %.1f s" % elapsed
    assert "killed worker 1 with SIGKILL" in out
    assert "claimed reply:41, attempt 2" in out
    assert re.search(r"worker 2 .*came back kept.*" + re.escape(repr(ANSWER)), out)
    assert out.count("asking the model") == 1                  # the model was asked once
    assert re.search(r"watcher .*done +reply:41 attempt 2", out)
    assert len(re.findall(r"reply row: .*reply_to=41", out)) == 1
    assert "reply rows: 1" in out
    assert os.path.exists(os.path.join(ROOT, "examples", "demo.db"))
