"""The crate on WASI (wasm32-wasip1): examples/rust (tinyq's `rusqlite` feature, rusqlite's
bundled SQLite) built for it and run under Node's node:wasi: add, claim, settle and get, as on
Linux. Where there is no process id (std::process::id() panics there) nor inotify, tinyq does
without: leases simply run out, and tq_wait polls. Needs the wasm32-wasip1 standard library
(rustup target add wasm32-wasip1) and zig as its C compiler (make release fetches it into
target/release-tools/zig); skips without them. Part of the release smoke (make test-all)."""
import os
import subprocess

import pytest

from helpers import ROOT, check_rust_example_output

EXAMPLE = os.path.join(ROOT, "examples", "rust", "Cargo.toml")
ZIG_BIN = os.path.join(ROOT, "target", "release-tools", "zig", "bin")
TARGET = os.path.join(ROOT, "target", "wasi")


def wasm32_std():
    out = subprocess.run(["rustc", "--print", "target-libdir", "--target", "wasm32-wasip1"],
                         capture_output=True, text=True)
    return out.returncode == 0 and os.path.isdir(out.stdout.strip()) and os.listdir(out.stdout.strip())


def test_the_crate_runs_add_claim_settle_get_on_wasi_under_node(tmp_path):
    if not os.access(os.path.join(ZIG_BIN, "cargo-zigbuild"), os.X_OK):
        pytest.skip("no zig (make release fetches it into target/release-tools/zig)")
    if not wasm32_std():
        pytest.skip("no wasm32-wasip1 standard library: rustup target add wasm32-wasip1")
    env = dict(os.environ, PATH=ZIG_BIN + os.pathsep + os.environ["PATH"])
    build = subprocess.run(["cargo", "zigbuild", "--quiet", "--release", "--locked", "--manifest-path", EXAMPLE,
                            "--target", "wasm32-wasip1", "--target-dir", TARGET],
                           capture_output=True, text=True, timeout=3600, env=env, cwd=str(tmp_path))
    assert build.returncode == 0, build.stderr[-3000:]
    wasm = os.path.join(TARGET, "wasm32-wasip1", "release", "tinyq-example-rusqlite.wasm")
    run = subprocess.run(["node", "--no-warnings", os.path.join(ROOT, "tests", "platforms", "wasi_run.js"), wasm,
                          str(tmp_path), "/data/jobs.db"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    check_rust_example_output(run.stdout.splitlines())
    assert os.path.getsize(tmp_path / "jobs.db") > 0    # a file in the folder WASI was given
