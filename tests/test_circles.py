"""`make check` refuses a module circle (scripts/circles.py): in the Rust crate, the Python
package and the Node helper, fed a circle of its own, and the repository's tree passes."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "circles.py"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


def test_the_repository_has_no_module_circle():
    r = run()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no module circle" in r.stdout


def test_a_rust_circle_is_refused_naming_its_arrows(tmp_path):
    src = tmp_path / "src"
    (src / "workflows").mkdir(parents=True)
    (src / "lib.rs").write_text("mod jobs;\nmod keys;\nmod workflows;\nmod leaf;\n")
    (src / "leaf.rs").write_text("pub fn f() {}\n")
    (src / "jobs.rs").write_text("use crate::keys::{self, OnConflict};\nuse crate::leaf;\n")
    (src / "keys.rs").write_text("//! keys\nuse crate::workflows::deps::ended;\n")
    (src / "workflows" / "mod.rs").write_text("pub mod deps;\npub use deps::ended;\n")
    # a circle of three, closed through a folder and an inline path
    (src / "workflows" / "deps.rs").write_text(
        "pub fn ended() { crate::jobs::insert(); }\n#[cfg(test)]\nmod tests { use crate::keys; }\n"
    )
    r = run("--rust", str(src))
    assert r.returncode == 1, r.stdout
    assert "a circle of 3 modules: jobs, keys, workflows::deps" in r.stdout
    assert "jobs -> keys   (OnConflict)" in r.stdout
    assert "keys -> workflows::deps   (ended)" in r.stdout
    assert "workflows::deps -> jobs   (insert)" in r.stdout
    # the arrow that closes it removed: no circle (a test module's use does not count)
    (src / "workflows" / "deps.rs").write_text("pub fn ended() {}\n#[cfg(test)]\nmod tests { use crate::jobs; }\n")
    assert run("--rust", str(src)).returncode == 0


def test_a_rust_circle_through_super_is_refused(tmp_path):
    src = tmp_path / "src"
    (src / "limits").mkdir(parents=True)
    (src / "lib.rs").write_text("mod limits;\n")
    (src / "limits" / "mod.rs").write_text("mod counts;\nmod groups;\n")
    (src / "limits" / "counts.rs").write_text("use super::groups::Group;\n")
    (src / "limits" / "groups.rs").write_text("pub struct Group;\nfn f() { super::counts::add(); }\n")
    r = run("--rust", str(src))
    assert r.returncode == 1
    assert "limits::counts -> limits::groups   (Group)" in r.stdout
    assert "limits::groups -> limits::counts   (add)" in r.stdout


def test_a_python_circle_is_refused_even_through_a_lazy_import(tmp_path):
    pkg = tmp_path / "tinyq"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from ._queue import Queue\n")
    (pkg / "_queue.py").write_text("from ._worker import work_loop\nclass Queue: pass\n")
    (pkg / "_worker.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._queue import Queue\n"
        "def work_loop():\n    from ._queue import Queue\n"
    )
    r = run("--python", str(pkg))
    assert r.returncode == 1, r.stdout
    assert "_queue -> _worker   (work_loop)" in r.stdout
    assert "_worker -> _queue   (Queue)" in r.stdout
    # a TYPE_CHECKING import alone is no arrow
    (pkg / "_worker.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._queue import Queue\ndef work_loop(): pass\n"
    )
    assert run("--python", str(pkg)).returncode == 0


def test_a_node_circle_is_refused(tmp_path):
    node = tmp_path / "node"
    node.mkdir()
    (node / "index.js").write_text("const { work } = require('./worker');\n")
    (node / "worker.js").write_text("const run = require('./run.js');\n")
    (node / "run.js").write_text("// require('./index') in a comment is no arrow\nimport { Queue } from './index';\n")
    r = run("--node", str(node))
    assert r.returncode == 1, r.stdout
    assert "a circle of 3 modules: index.js, run.js, worker.js" in r.stdout
    (node / "run.js").write_text("module.exports = {};\n")
    assert run("--node", str(node)).returncode == 0
