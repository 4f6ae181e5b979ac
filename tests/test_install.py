"""Installing tinyq: `make install` for the sqlite3 shell (into a DESTDIR, never the real
system), the Python package into a fresh venv, and the npm package into a fresh project
(that one only with TINYQ_TEST_NPM=1, as `make test-npm-package` runs it: it compiles
better-sqlite3, 1-3 minutes). Everything runs from folders outside the repository."""
import glob
import json
import os
import posixpath
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile

import pytest

from helpers import ROOT, SO, cargo_version

PY = "/usr/bin/python3"
# Never rebuilds the extension (-o): these tests use dist/tinyq.so as it is.
MAKE = ["make", "--no-print-directory", "-C", ROOT,
        "-f", os.environ.get("TINYQ_MAKEFILE", "Makefile"), "-o", "dist/tinyq.so"]


def run(args, timeout=120, **kw):
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kw)
    assert proc.returncode == 0, "%s failed (%d):\n%s\n%s" % (
        " ".join(map(str, args)), proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc


def clean_env(**extra):
    """The environment without anything that points at the repository's copy of tinyq."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "TINYQ_EXT", "LD_LIBRARY_PATH", "PIP_FIND_LINKS")}
    return dict(env, **extra)


def same_bytes(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


# -- make install: `.load tinyq` in the sqlite3 shell from any folder ----------------------

def test_make_install_and_uninstall(tmp_path):
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    elsewhere.mkdir()
    run(MAKE + ["install", "DESTDIR=%s" % root, "PREFIX=/usr/local"])
    lib = root / "usr" / "local" / "lib"
    assert same_bytes(lib / "libtinyq.so", SO)
    assert os.readlink(lib / "tinyq.so") == "libtinyq.so"

    # SQLite resolves `.load tinyq` by dlopen("tinyq"), then dlopen("tinyq.so"): a bare
    # name, which the loader looks up in LD_LIBRARY_PATH, ld.so.cache and the system folders.
    shell = run(["sqlite3", ":memory:", ".load tinyq", "SELECT tq_version()"], cwd=elsewhere,
                env=clean_env(LD_LIBRARY_PATH=str(lib)))
    assert shell.stdout.strip() and shell.stderr == ""

    # A real install runs ldconfig, whose cache is how the loader finds /usr/local/lib/tinyq.so.
    # ldconfig lists only files named lib*, under their soname: build the same cache for
    # this folder alone (-C, -f; -X touches no links, -i no system state) and look.
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    (tmp_path / "ld.so.conf").write_text(str(lib) + "\n")
    cache = str(tmp_path / "ld.so.cache")
    run([ldconfig, "-X", "-i", "-C", cache, "-f", str(tmp_path / "ld.so.conf")])
    listed = run([ldconfig, "-p", "-C", cache]).stdout
    assert "\ttinyq.so (" in listed and "=> %s/tinyq.so" % lib in listed, \
        "ldconfig does not list tinyq.so: the library needs the soname tinyq.so " \
        "(build.rs: -Wl,-soname,tinyq.so)"

    run(MAKE + ["uninstall", "DESTDIR=%s" % root, "PREFIX=/usr/local"])
    assert os.listdir(lib) == []


# -- the Python package --------------------------------------------------------------------

EXAMPLE = textwrap.dedent("""\
    import os, sqlite3, sys, tinyq
    here = os.path.dirname(tinyq.__file__)
    assert here.startswith(sys.prefix), here                    # the venv's copy
    assert tinyq.extension_path() == os.path.join(here, "tinyq.so")
    conn = tinyq.load(sqlite3.connect("app.db"))                # any sqlite3 connection
    print(conn.execute("SELECT tq_version()").fetchone()[0])
    conn.close()
    mail = tinyq.Queue("app.db", "mail")
    mail.add({"to": "ada@example.com"}, id="welcome:ada")
    mail.add({"to": "bob@example.com"}, id="welcome:bob")

    def send(payload, run):
        if len(seen) == 1:
            mail.stop()
        seen.append(payload["to"])
        return {"sent": True}

    seen = []
    mail.work(send, poll=0.1)
    print(mail.get("welcome:ada")["state"], mail.get("welcome:bob")["result"])
""")


def test_pip_install_into_a_fresh_venv(tmp_path):
    venv, elsewhere = tmp_path / "venv", tmp_path / "elsewhere"
    elsewhere.mkdir()
    if subprocess.run([PY, "-m", "venv", str(venv)], capture_output=True).returncode != 0:
        pytest.skip("python3 -m venv does not work here (Debian: apt-get install python3-venv)")
    env = clean_env(PIP_NO_INDEX="1")                          # offline: nothing to download
    run([str(venv / "bin" / "pip"), "install", "--no-index", os.path.join(ROOT, "python")],
        cwd=elsewhere, env=env)
    assert not os.path.exists(os.path.join(ROOT, "python", "tinyq", "tinyq.so"))
    assert not os.path.exists(os.path.join(ROOT, "python", "build"))

    out = run([str(venv / "bin" / "python"), "-c", EXAMPLE], cwd=elsewhere, env=env).stdout
    assert out.splitlines()[1] == "done {'sent': True}", out
    stats = run([str(venv / "bin" / "tinyq"), "stats", "app.db"], cwd=elsewhere, env=env)
    # queue, scheduled, waiting, blocked, running, leases, done, failed
    assert stats.stdout.splitlines()[1].split()[:8] == ["mail", "0", "0", "0", "0", "0", "2", "0"]
    jobs = run([str(venv / "bin" / "python"), "-m", "tinyq", "jobs", "app.db", "--json"],
               cwd=elsewhere, env=env)
    assert [json.loads(line)["id"] for line in jobs.stdout.splitlines()] == \
        ["welcome:ada", "welcome:bob"]


def test_the_wheel_carries_the_extension(tmp_path):
    run([PY, "-m", "pip", "wheel", "--no-deps", "--no-index", "-w", str(tmp_path),
         os.path.join(ROOT, "python")], env=clean_env())
    # Published as sqlite-tinyq (tinyq on PyPI is another project's), imported as tinyq.
    [wheel] = glob.glob(str(tmp_path / "sqlite_tinyq-*.whl"))
    assert os.path.basename(wheel) == "sqlite_tinyq-%s-py3-none-linux_%s.whl" % (
        cargo_version(), os.uname().machine)
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        assert {"tinyq/__init__.py", "tinyq/cli.py", "tinyq/dashboard.py", "tinyq/_aio.py",
                "tinyq/dashboard.html", "tinyq/tinyq.so", "tinyq/py.typed", "tinyq/_version.py"} <= names
        assert zf.read("tinyq/_version.py").decode().splitlines()[-1] == \
            '__version__ = "%s"' % cargo_version()
        with open(SO, "rb") as f:
            assert zf.read("tinyq/tinyq.so") == f.read()
        info = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        assert "tinyq = tinyq.cli:main" in zf.read(info[0]).decode()


# -- the npm package -----------------------------------------------------------------------

@pytest.mark.skipif(not os.environ.get("TINYQ_TEST_NPM"),
                    reason="compiles better-sqlite3 (1-3 min): make test-npm-package")
def test_npm_package_in_a_fresh_project(tmp_path):
    target = "linux-x64" if os.uname().machine == "x86_64" else "linux-arm64"
    run(["node", os.path.join(ROOT, "node", "pack.js"), str(tmp_path), "%s=%s" % (target, SO)])
    [tarball] = glob.glob(str(tmp_path / "tinyq-*.tgz"))
    assert os.path.basename(tarball) == "tinyq-%s.tgz" % cargo_version()
    project = tmp_path / "project"
    project.mkdir()
    (project / "package.json").write_text('{"private": true}\n')
    run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", tarball],
        cwd=project, env=clean_env(), timeout=900)
    if subprocess.run(["node", "-e", "require('better-sqlite3')"], cwd=project).returncode:
        run(["npx", "--yes", "node-gyp", "rebuild", "--release"], timeout=900,
            cwd=project / "node_modules" / "better-sqlite3")       # no prebuilt binary
    script = textwrap.dedent("""\
        const path = require('path');
        const tinyq = require('tinyq');
        const Database = require('better-sqlite3');
        const packaged = path.join(__dirname, 'node_modules', 'tinyq', 'prebuilds',
                                   `${process.platform}-${process.arch}`, 'tinyq.so');
        if (tinyq.extensionPath() !== packaged) throw new Error(tinyq.extensionPath());
        const db = tinyq.load(new Database(':memory:'));
        console.log(db.prepare('SELECT tq_version()').pluck().get());
        const mail = new tinyq.Queue('app.db', 'mail');
        mail.add({ to: 'ada@example.com' }, { id: 'welcome:ada' });
        console.log(mail.get('welcome:ada').state);
    """)
    (project / "example.js").write_text(script)
    out = run(["node", "example.js"], cwd=project, env=clean_env()).stdout.split()
    assert out[1] == "waiting", out


def test_the_npm_package_readme_links_work_inside_the_package(tmp_path):
    """node/README.md links the repository's docs; the package carries them, so every relative
    link of its README resolves inside the tarball (npm shows it; node_modules has no ../docs)."""
    target = "linux-x64" if os.uname().machine == "x86_64" else "linux-arm64"
    run(["node", os.path.join(ROOT, "node", "pack.js"), str(tmp_path), "%s=%s" % (target, SO)])
    [tarball] = glob.glob(str(tmp_path / "tinyq-*.tgz"))
    with tarfile.open(tarball) as tf:
        names = set(tf.getnames())
        readme = tf.extractfile("package/README.md").read().decode()
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    relative = [link for link in links if "://" not in link and not link.startswith("mailto:")]
    assert relative, "the README links the docs"
    missing = [link for link in relative if posixpath.normpath("package/" + link) not in names]
    assert not missing, missing
