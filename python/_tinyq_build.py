"""The build backend of the tinyq Python package (PEP 517), standard library only.

`pip install ./python` and `pip wheel ./python` need nothing from the network: pip's
isolated build environment has nothing to install (pyproject.toml: requires = []).

The distribution is `sqlite-tinyq` (the name `tinyq` on PyPI belongs to another project);
it installs the package `tinyq`. The wheel holds tinyq/**/*.py, tinyq/*.html, tinyq/py.typed
(the package's type hints are for type checkers, PEP 561), tinyq/_version.py (written here)
and the compiled extension as tinyq/tinyq.so (tinyq/tinyq.dll when `so` names a .dll: the
Windows wheel). The version is the crate's: tinyq/_version.py
reads it from ../Cargo.toml, and the wheel or sdist gets a copy with it written in. It is a platform wheel (py3-none-<platform>): the
extension depends on the machine, not on the Python version.

Two config settings (`pip wheel -C so=PATH -C platform=TAG ./python`) let `make release`
build one wheel per architecture: `so`, the extension to ship (default: the repository's
dist/tinyq.so, built by `make`, or tinyq/tinyq.so in an sdist), and `platform`, the wheel's
platform tag (default: this machine's, such as linux_x86_64; a release's .so needs at most
glibc 2.17, so it is tagged manylinux_2_17_x86_64.manylinux2014_x86_64).
"""
import base64
import hashlib
import io
import os
import re
import runpy
import sysconfig
import tarfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.join(HERE, "tinyq")
NAME = "sqlite-tinyq"
FILE_NAME = NAME.replace("-", "_")  # the distribution's name in file names (PEP 427)


# Cargo.toml's, through the package's own _version.py (in an sdist, the copy written below).
VERSION = runpy.run_path(os.path.join(PACKAGE, "_version.py"))["__version__"]
DIST_INFO = "%s-%s.dist-info/" % (FILE_NAME, VERSION)
VERSION_PY = '"""Written by the build backend (_tinyq_build.py) from Cargo.toml."""\n__version__ = "%s"\n' % VERSION

METADATA = """\
Metadata-Version: 2.1
Name: sqlite-tinyq
Version: %s
Summary: A durable job queue inside a SQLite file: the loadable extension, a worker helper, a CLI and a dashboard
License: MIT
Keywords: sqlite,queue,jobs,worker,extension
Classifier: License :: OSI Approved :: MIT License
Classifier: Operating System :: POSIX :: Linux
Classifier: Topic :: Database
Requires-Python: >=3.9
Provides-Extra: pysqlite3
Requires-Dist: pysqlite3-binary; extra == "pysqlite3"
""" % VERSION

ENTRY_POINTS = """\
[console_scripts]
tinyq = tinyq.cli:main
"""


def _extension(config_settings):
    given = (config_settings or {}).get("so")
    if given:
        if not os.path.isfile(given):
            raise RuntimeError("tinyq.so not found at %s (config setting `so`)" % given)
        return given
    for path in (os.path.join(HERE, "..", "dist", "tinyq.so"), os.path.join(PACKAGE, "tinyq.so")):
        if os.path.isfile(path):
            return os.path.normpath(path)
    raise RuntimeError("tinyq.so not found: build the extension first (`make` puts it in dist/)")


def _package_files(config_settings):
    """(name in the archive, bytes) of every file the package ships."""
    files = []
    for folder, dirs, names in os.walk(PACKAGE):   # tinyq/ and its packages (tinyq/django/...)
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        inner = os.path.relpath(folder, PACKAGE).replace(os.sep, "/")
        prefix = "tinyq/" if inner == "." else "tinyq/%s/" % inner
        files += [(prefix + name, _read(os.path.join(folder, name))) for name in sorted(names)
                  if name.endswith((".py", ".html")) and prefix + name != "tinyq/_version.py"
                  or name == "py.typed"]
    # Named after the given file's suffix: tinyq.so, or tinyq.dll in a Windows wheel (the
    # package's extension_path looks for .so, .dylib and .dll beside it).
    extension = _extension(config_settings)
    return files + [("tinyq/_version.py", VERSION_PY.encode()),
                    ("tinyq/tinyq" + os.path.splitext(extension)[1], _read(extension))]


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _tag(config_settings):
    platform = (config_settings or {}).get("platform") or re.sub(r"[-.]", "_", sysconfig.get_platform())
    return "py3-none-" + platform


def _write_wheel(directory, files, config_settings=None):
    """Write a wheel of `files` [(archive name, bytes)] plus its .dist-info; returns its name."""
    tag = _tag(config_settings)
    # One Tag line per platform of a compressed tag set (manylinux_2_17_x86_64.manylinux2014_x86_64).
    tags = "".join("Tag: py3-none-%s\n" % p for p in tag.split("-", 2)[2].split("."))
    wheel = "Wheel-Version: 1.0\nGenerator: _tinyq_build\nRoot-Is-Purelib: false\n" + tags
    files = files + [(DIST_INFO + "METADATA", METADATA.encode()),
                     (DIST_INFO + "WHEEL", wheel.encode()),
                     (DIST_INFO + "entry_points.txt", ENTRY_POINTS.encode())]
    filename = "%s-%s-%s.whl" % (FILE_NAME, VERSION, tag)
    record = []
    with zipfile.ZipFile(os.path.join(directory, filename), "w", zipfile.ZIP_DEFLATED) as zf:
        for arcname, data in files:
            info = zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if arcname.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append("%s,sha256=%s,%d" % (arcname, digest.decode(), len(data)))
        record.append(DIST_INFO + "RECORD,,")
        zf.writestr(zipfile.ZipInfo(DIST_INFO + "RECORD", date_time=(1980, 1, 1, 0, 0, 0)),
                    "\n".join(record) + "\n")
    return filename


# -- PEP 517 / PEP 660 hooks --------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, _package_files(config_settings), config_settings)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """`pip install -e ./python`: a .pth file that puts this folder on sys.path. The
    extension is then found in the repository's dist/ (see tinyq.extension_path), and the
    version in Cargo.toml (tinyq/__init__.py)."""
    return _write_wheel(wheel_directory, [("tinyq.pth", (HERE + "\n").encode())], config_settings)


def build_sdist(sdist_directory, config_settings=None):
    """A source archive that builds on its own: it carries the compiled extension too."""
    base = "%s-%s" % (FILE_NAME, VERSION)
    filename = base + ".tar.gz"
    files = [("PKG-INFO", METADATA.encode()),
             ("pyproject.toml", _read(os.path.join(HERE, "pyproject.toml"))),
             ("_tinyq_build.py", _read(os.path.join(HERE, "_tinyq_build.py")))] + _package_files(config_settings)
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as tar:
        for arcname, data in files:
            info = tarfile.TarInfo("%s/%s" % (base, arcname))
            info.size, info.mode = len(data), 0o755 if arcname.endswith(".so") else 0o644
            tar.addfile(info, io.BytesIO(data))
    return filename
