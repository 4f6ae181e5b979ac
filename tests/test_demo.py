"""`make demo`: the crash story runs in real processes and tells it right (how long it takes
is the machine's business: `make bench` is where speed is measured)."""
import os
import re
import subprocess

from helpers import ROOT

ANSWER = "Hello! Your parcel left the warehouse this morning."


def test_demo_tells_the_crash_story():
    proc = subprocess.run(["/usr/bin/python3", "examples/demo.py"], cwd=ROOT,
                          capture_output=True, text=True, timeout=180)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "killed worker 1 with SIGKILL" in out
    assert "claimed reply:41, attempt 2" in out
    assert re.search(r"worker 2 .*came back kept.*" + re.escape(repr(ANSWER)), out)
    assert out.count("asking the model") == 1                  # the model was asked once
    assert re.search(r"watcher .*done +reply:41 attempt 2", out)
    assert len(re.findall(r"reply row: .*reply_to=41", out)) == 1
    assert "reply rows: 1" in out
    assert os.path.exists(os.path.join(ROOT, "examples", "demo.db"))
