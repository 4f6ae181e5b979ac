"""The builds `make release` makes beyond glibc Linux, once it has made them (dist/release/),
each tried where it runs on this machine: the musl build (Alpine) in a sqlite3 built with
musl-gcc, the Windows build in a sqlite3.exe under Wine. The tools are the ones make release
keeps in target/release-tools/; without them (or without a release) these tests skip."""
import glob
import os
import re
import subprocess
import tarfile
import zipfile

import pytest

from helpers import ROOT, cargo_version

RELEASE = os.path.join(ROOT, "dist", "release")
TOOLS = os.path.join(ROOT, "target", "release-tools")
SCENARIO = os.path.join(ROOT, "tests", "drivers", "scenario.json")
MUSL_SQLITE = os.path.join(TOOLS, "sqlite-musl", "bin", "sqlite3")
WINE_SQLITE = os.path.join(TOOLS, "wine", "bin", "sqlite3")    # runs sqlite3.exe under wine64


def run(args, **kw):
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600, **kw)
    assert proc.returncode == 0, "%s failed:\n%s\n%s" % (" ".join(args), proc.stdout, proc.stderr)
    return proc.stdout


def release_file(name):
    path = os.path.join(RELEASE, name % cargo_version())
    if not os.path.exists(path):
        pytest.skip("no dist/release/%s: make release builds it" % os.path.basename(path))
    return path


def tool(path, what):
    if not os.access(path, os.X_OK):
        pytest.skip("no %s (make release keeps it in target/release-tools/)" % what)
    return path


def shell_scenario(sqlite3, ext, db):
    """The driver scenario through the sqlite3 shell that is `sqlite3`."""
    bin_dir = os.path.dirname(sqlite3)
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"])
    return run(["bash", os.path.join(ROOT, "tests", "drivers", "shell", "runner.sh"), ext, SCENARIO, db], env=env)


@pytest.fixture
def musl_so(tmp_path):
    name = "tinyq-%s-linux-x86_64-musl" % cargo_version()
    with tarfile.open(release_file("tinyq-%s-linux-x86_64-musl.tar.gz")) as tar:
        assert sorted(tar.getnames()) == [name] + [name + "/" + f for f in ("LICENSE", "README.md", "tinyq.so")]
        so = tmp_path / "tinyq.so"
        so.write_bytes(tar.extractfile(name + "/tinyq.so").read())
    return str(so)


def test_the_musl_build_needs_libc_alone(musl_so):
    """No libgcc_s, no glibc loader, no glibc-only symbol: what keeps the manylinux build off Alpine."""
    dynamic = run(["readelf", "-d", musl_so])
    assert re.findall(r"\(NEEDED\).*\[(.*)\]", dynamic) == ["libc.so"]
    assert "GLIBC_" not in run(["objdump", "-T", musl_so])
    assert "__register_atfork" not in run(["objdump", "-T", musl_so])


def test_the_musl_build_plays_the_driver_scenario_in_a_musl_sqlite3(musl_so, tmp_path):
    sqlite3 = tool(MUSL_SQLITE, "musl sqlite3")
    assert "ld-musl-x86_64.so.1" in run(["file", sqlite3])
    assert run([sqlite3, ":memory:", ".load " + musl_so[:-3], "SELECT tq_version()"]).strip() == cargo_version()
    assert "sqlite3-shell: passed" in shell_scenario(sqlite3, musl_so, str(tmp_path / "t.db"))


def test_the_musllinux_wheel_carries_the_musl_build(musl_so):
    wheel = release_file("sqlite_tinyq-%s-py3-none-musllinux_1_2_x86_64.whl")
    with zipfile.ZipFile(wheel) as zf:
        with open(musl_so, "rb") as f:
            assert zf.read("tinyq/tinyq.so") == f.read()
        assert "Tag: py3-none-musllinux_1_2_x86_64\n" in zf.read("sqlite_tinyq-%s.dist-info/WHEEL" % cargo_version()).decode()


def test_the_npm_package_carries_the_musl_build(musl_so):
    with tarfile.open(release_file("tinyq-%s.tgz")) as tar:
        with open(musl_so, "rb") as f:
            assert tar.extractfile("package/prebuilds/linux-x64-musl/tinyq.so").read() == f.read()


@pytest.fixture
def windows_dll(tmp_path):
    with zipfile.ZipFile(release_file("tinyq-%s-windows-x86_64.zip")) as zf:
        assert sorted(zf.namelist()) == ["LICENSE", "README.md", "tinyq.dll"]
        zf.extractall(tmp_path)
    dll = str(tmp_path / "tinyq.dll")
    assert "PE32+ executable (DLL)" in run(["file", dll]) and "x86-64" in run(["file", dll])
    return dll


def wine():
    if not os.access("/usr/lib/wine/wine64", os.X_OK):     # Debian's wine64
        pytest.skip("no wine64 (make release installs it)")
    return tool(WINE_SQLITE, "sqlite3.exe under Wine")


def test_the_windows_build_plays_the_driver_scenario_under_wine(windows_dll, tmp_path):
    sqlite3 = wine()
    assert run([sqlite3, ":memory:", ".load " + windows_dll[:-4], "SELECT tq_version()"]).strip() == cargo_version()
    assert "sqlite3-shell: passed" in shell_scenario(sqlite3, windows_dll, str(tmp_path / "t.db"))


def test_the_windows_build_wakes_a_tq_wait_for_another_process_add_under_wine(windows_dll, tmp_path):
    """No inotify on Windows: the portable waiter (PRAGMA data_version) ends the wait."""
    out = run(["bash", os.path.join(ROOT, "tests", "platforms", "wait_woken.sh"), wine(), windows_dll,
               str(tmp_path / "w.db")])
    assert out.startswith("tq_wait('wake', '60s') gave 1 ") and out.rstrip().endswith("claimed w1"), out
