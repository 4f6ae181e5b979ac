"""The package's version, read from the repository's Cargo.toml, else 0+unknown.

Cargo.toml is the one place the version is written. Wheels and sdists carry a copy of this
file with the version fixed in it (written by the build backend, _tinyq_build.py). A copy
of the package taken out of the repository by hand, with neither, still imports, as
version 0+unknown."""
import os
import re


def _from_cargo() -> str:
    cargo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "Cargo.toml")
    if not os.path.isfile(cargo):  # a copy of the package taken out of the repository
        return "0+unknown"
    with open(cargo, encoding="utf-8") as f:
        package = f.read().split("[package]", 1)[1].split("\n[", 1)[0]
    return re.search(r'^version = "([^"]+)"', package, re.M).group(1)


__version__ = _from_cargo()
