"""The package's version, read from the repository's Cargo.toml: the one place it is
written. Wheels and sdists carry a copy of this file with the version fixed in it
(written by the build backend, _tinyq_build.py)."""
import os
import re


def _from_cargo() -> str:
    cargo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "Cargo.toml")
    with open(cargo, encoding="utf-8") as f:
        package = f.read().split("[package]", 1)[1].split("\n[", 1)[0]
    return re.search(r'^version = "([^"]+)"', package, re.M).group(1)


__version__ = _from_cargo()
