"""The build backend of the tinyq Python package (PEP 517), standard library only.

`pip install ./python` and `pip wheel ./python` need nothing from the network: pip's
isolated build environment has nothing to install (pyproject.toml: requires = []).

The wheel holds the tinyq package (tinyq/*.py, tinyq/*.html, and tinyq/py.typed: the
package's type hints are for type checkers, PEP 561) and the compiled extension
as tinyq/tinyq.so, taken from the repository's dist/tinyq.so (built by `make`), or, when
building from an sdist, from tinyq/tinyq.so. It is a platform wheel (py3-none-<platform>):
the extension does not depend on the Python version, only on the machine.
"""
import base64
import hashlib
import io
import os
import re
import sysconfig
import tarfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.join(HERE, "tinyq")
NAME = "tinyq"
with open(os.path.join(PACKAGE, "__init__.py"), encoding="utf-8") as _f:
    VERSION = re.search(r'^__version__ = "([^"]+)"', _f.read(), re.M).group(1)
DIST_INFO = "%s-%s.dist-info/" % (NAME, VERSION)

METADATA = """\
Metadata-Version: 2.1
Name: tinyq
Version: %s
Summary: A durable job queue inside a SQLite file: the loadable extension, a worker helper, a CLI and a dashboard
License: MIT
Requires-Python: >=3.9
""" % VERSION

ENTRY_POINTS = """\
[console_scripts]
tinyq = tinyq.cli:main
"""


def _extension():
    for path in (os.path.join(HERE, "..", "dist", "tinyq.so"), os.path.join(PACKAGE, "tinyq.so")):
        if os.path.isfile(path):
            return os.path.normpath(path)
    raise RuntimeError("tinyq.so not found: build the extension first (`make` puts it in dist/)")


def _package_files():
    """(name in the archive, path on disk) of every file the package ships."""
    files = [("tinyq/" + name, os.path.join(PACKAGE, name))
             for name in sorted(os.listdir(PACKAGE)) if name.endswith((".py", ".html")) or name == "py.typed"]
    return files + [("tinyq/tinyq.so", _extension())]


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _tag():
    return "py3-none-" + re.sub(r"[-.]", "_", sysconfig.get_platform())


def _write_wheel(directory, files):
    """Write a wheel of `files` [(archive name, bytes)] plus its .dist-info; returns its name."""
    tag = _tag()
    wheel = "Wheel-Version: 1.0\nGenerator: _tinyq_build\nRoot-Is-Purelib: false\nTag: %s\n" % tag
    files = files + [(DIST_INFO + "METADATA", METADATA.encode()),
                     (DIST_INFO + "WHEEL", wheel.encode()),
                     (DIST_INFO + "entry_points.txt", ENTRY_POINTS.encode())]
    filename = "%s-%s-%s.whl" % (NAME, VERSION, tag)
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
    return _write_wheel(wheel_directory, [(arc, _read(path)) for arc, path in _package_files()])


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """`pip install -e ./python`: a .pth file that puts this folder on sys.path. The
    extension is then found in the repository's dist/ (see tinyq.extension_path)."""
    return _write_wheel(wheel_directory, [("tinyq.pth", (HERE + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    """A source archive that builds on its own: it carries the compiled extension too."""
    base = "%s-%s" % (NAME, VERSION)
    filename = base + ".tar.gz"
    files = [("pyproject.toml", os.path.join(HERE, "pyproject.toml")),
             ("_tinyq_build.py", os.path.join(HERE, "_tinyq_build.py"))] + _package_files()
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as tar:
        for arcname, data in [("PKG-INFO", METADATA.encode())] + \
                [(arc, _read(path)) for arc, path in files]:
            info = tarfile.TarInfo("%s/%s" % (base, arcname))
            info.size, info.mode = len(data), 0o755 if arcname.endswith(".so") else 0o644
            tar.addfile(info, io.BytesIO(data))
    return filename
