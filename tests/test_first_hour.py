"""The first hour of a new user: what `make` says on a machine without a new enough Rust."""
import os
import stat
import subprocess

from helpers import ROOT


def make_rust(path):
    return subprocess.run(["make", "--no-print-directory", "-C", ROOT, "rust"], capture_output=True, text=True,
                          env={**os.environ, "PATH": path}, timeout=60)


def test_make_without_cargo_says_rust_is_needed_and_where_it_comes_from(tmp_path):
    # a PATH with make and the shell's tools, and no cargo
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("make", "bash", "sh", "sed", "sort", "head", "cut", "printf", "env"):
        for folder in ("/usr/bin", "/bin"):
            if os.path.exists(os.path.join(folder, tool)):
                os.symlink(os.path.join(folder, tool), tools / tool)
                break
    r = make_rust(str(tools))
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert "tinyq needs Rust 1.82 or newer, and cargo is not on PATH" in out, out
    assert "rustup" in out
    assert "command not found" not in out


def test_make_with_an_old_rust_says_which_it_found(tmp_path):
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name, says in (("cargo", "cargo 1.65.0"), ("rustc", "rustc 1.63.0 (4b91a6ea7 2022-08-08)")):
        f = stubs / name
        f.write_text("#!/bin/sh\necho '%s'\n" % says)
        f.chmod(f.stat().st_mode | stat.S_IXUSR)
    r = make_rust("%s:%s" % (stubs, os.environ["PATH"]))
    assert r.returncode != 0
    assert "tinyq needs Rust 1.82 or newer; this rustc is 1.63.0" in r.stdout + r.stderr
    # and the Rust that builds tinyq passes
    assert make_rust(os.environ["PATH"]).returncode == 0
