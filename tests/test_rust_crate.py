"""The crate linked into a Rust program, with no tinyq.so (issue 22): examples/rust/ depends
on tinyq (`rusqlite` feature, no default features) and rusqlite with its bundled SQLite, calls
tinyq::register and tinyq::auto_extension, and runs a producer and a worker in plain SQL.
Built and run here; its dependency tree holds one SQLite, rusqlite's."""
import os
import subprocess

from helpers import ROOT, check_rust_example_output

EXAMPLE = os.path.join(ROOT, "examples", "rust")
MANIFEST = os.path.join(EXAMPLE, "Cargo.toml")
TARGET = os.path.join(ROOT, "target", "examples")


def cargo(command, *args, timeout=1800):
    proc = subprocess.run(["cargo", command, "--locked", "--manifest-path", MANIFEST, *args],
                          capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, CARGO_TARGET_DIR=TARGET))
    # A dependency added to tinyq makes examples/rust/Cargo.lock stale (--locked): refresh it
    # with `cargo update -p tinyq --manifest-path examples/rust/Cargo.toml`.
    assert proc.returncode == 0, "cargo %s failed:\n%s" % (command, proc.stderr[-3000:])
    return proc.stdout


def test_the_rust_example_runs_with_tinyq_linked_in(tmp_path):
    db = str(tmp_path / "jobs.db")
    check_rust_example_output(cargo("run", "--quiet", "--", db).splitlines())
    # The store it wrote is an ordinary tinyq store: the loadable build reads it.
    shell = subprocess.run(["sqlite3", db, ".load %s" % os.path.join(ROOT, "dist", "tinyq"),
                            "SELECT group_concat(state) FROM tq_jobs"], capture_output=True, text=True)
    assert shell.stdout.strip() == "done,done", shell.stderr


def test_one_sqlite_in_the_program():
    tree = cargo("tree", "--prefix", "none", "-e", "normal,build")
    crates = {line.split()[0] for line in tree.splitlines() if line.strip()}
    assert {"tinyq", "rusqlite", "libsqlite3-sys"} <= crates
    # sqlite-loadable's sqlite3ext-sys compiles a SQLite of its own: not in this build.
    assert not crates & {"sqlite-loadable", "sqlite3ext-sys", "bindgen"}, crates
