"""One version, written once (Cargo.toml), read by everything that ships: tq_version() of the
built extension, the Python package (tinyq.__version__, the wheel's name and metadata), the
npm tarball (node/pack.js stamps it) and the crate. And, once `make release` has run, what
dist/release/ holds: each tinyq.so needs at most glibc 2.17 and reports that version."""
import glob
import json
import os
import re
import sqlite3
import subprocess
import tarfile
import zipfile

import pytest

from helpers import EXT, ROOT, cargo_version

PY = "/usr/bin/python3"
RELEASE = os.path.join(ROOT, "dist", "release")


def run(args, **kw):
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, **kw)
    assert proc.returncode == 0, "%s failed:\n%s\n%s" % (" ".join(args), proc.stdout, proc.stderr)
    return proc.stdout


def tq_version(conn_or_ext):
    conn = sqlite3.connect(":memory:")
    conn.enable_load_extension(True)
    conn.load_extension(conn_or_ext)
    return conn.execute("SELECT tq_version()").fetchone()[0]


def test_the_extension_reports_cargo_version():
    assert re.fullmatch(r"\d+\.\d+\.\d+(-[0-9A-Za-z.]+)?", cargo_version())
    assert tq_version(EXT) == cargo_version()


def test_the_python_package_reads_it():
    code = "import tinyq, _tinyq_build as b; print(tinyq.__version__, b.VERSION, b.DIST_INFO)"
    out = run([PY, "-c", code], cwd=os.path.join(ROOT, "python"),
              env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python")))
    assert out.split() == [cargo_version(), cargo_version(), "sqlite_tinyq-%s.dist-info/" % cargo_version()]


def test_the_npm_tarball_reads_it(tmp_path):
    run(["node", os.path.join(ROOT, "node", "pack.js"), str(tmp_path), "linux-x64=%s.so" % EXT])
    [tarball] = glob.glob(str(tmp_path / "*.tgz"))
    assert os.path.basename(tarball) == "tinyq-%s.tgz" % cargo_version()
    with tarfile.open(tarball) as tar:
        manifest = json.load(tar.extractfile("package/package.json"))
        assert manifest["version"] == cargo_version()
        assert "package/prebuilds/linux-x64/tinyq.so" in tar.getnames()
    # The source tree writes no version of its own that could drift from Cargo.toml's.
    with open(os.path.join(ROOT, "node", "package.json")) as f:
        assert json.load(f)["version"] == "0.0.0-source"


def release_files(pattern):
    files = sorted(glob.glob(os.path.join(RELEASE, pattern)))
    if not files:
        pytest.skip("no dist/release/%s: make release builds it" % pattern)
    return files


def glibc_versions(data, path):
    so = path / "tinyq.so"
    so.write_bytes(data)
    out = run(["objdump", "-T", str(so)])
    return sorted(set(re.findall(r"GLIBC_([0-9.]+)", out)), key=lambda v: tuple(map(int, v.split("."))))


def test_release_tarballs_need_glibc_2_17_at_most(tmp_path):
    version = cargo_version()
    names = [os.path.basename(f) for f in release_files("tinyq-*-linux-*.tar.gz")
             if not f.endswith("-musl.tar.gz")]    # the musl build: tests/test_platforms.py
    assert names == ["tinyq-%s-linux-aarch64.tar.gz" % version, "tinyq-%s-linux-x86_64.tar.gz" % version]
    for name in names:
        folder = name[:-len(".tar.gz")]    # a folder of its own: no loose tinyq.so where unpacked
        with tarfile.open(os.path.join(RELEASE, name)) as tar:
            assert sorted(tar.getnames()) == [folder] + [folder + "/" + f for f in ("LICENSE", "README.md", "tinyq.so")]
            needed = glibc_versions(tar.extractfile(folder + "/tinyq.so").read(), tmp_path)
        assert needed and tuple(map(int, needed[-1].split("."))) <= (2, 17), (name, needed)


def test_release_wheels_carry_their_own_build(tmp_path):
    version = cargo_version()
    for arch in ("x86_64", "aarch64"):
        [wheel] = release_files("sqlite_tinyq-%s-py3-none-manylinux_2_17_%s.manylinux2014_%s.whl"
                                % (version, arch, arch))
        with zipfile.ZipFile(wheel) as zf:
            so = zf.read("tinyq/tinyq.so")
            with tarfile.open(os.path.join(RELEASE, "tinyq-%s-linux-%s.tar.gz" % (version, arch))) as tar:
                assert so == tar.extractfile("tinyq-%s-linux-%s/tinyq.so" % (version, arch)).read()
            metadata = zf.read("sqlite_tinyq-%s.dist-info/METADATA" % version).decode()
            assert "\nName: sqlite-tinyq\n" in metadata and "\nVersion: %s\n" % version in metadata
            tags = zf.read("sqlite_tinyq-%s.dist-info/WHEEL" % version).decode()
            assert "Tag: py3-none-manylinux2014_%s\n" % arch in tags
    x86 = os.path.join(RELEASE, "tinyq-%s-linux-x86_64.tar.gz" % version)
    with tarfile.open(x86) as tar:
        (tmp_path / "tinyq.so").write_bytes(tar.extractfile("tinyq-%s-linux-x86_64/tinyq.so" % version).read())
    assert tq_version(str(tmp_path / "tinyq")) == version


def test_release_npm_tarball_carries_both_builds():
    [tarball] = release_files("tinyq-%s.tgz" % cargo_version())
    with tarfile.open(tarball) as tar:
        assert {"package/prebuilds/linux-x64/tinyq.so", "package/prebuilds/linux-arm64/tinyq.so"} <= \
            set(tar.getnames())
        assert json.load(tar.extractfile("package/package.json"))["version"] == cargo_version()
    release_files("tinyq-%s.crate" % cargo_version())
