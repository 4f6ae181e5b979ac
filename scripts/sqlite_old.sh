#!/usr/bin/env bash
# A SQLite older than the oldest tinyq is tested on (3.40.1), for the load-time check
# (tests/test_load_check.py): SQLite 3.34.0, whose autoconf amalgamation npm's sqlite3@5.0.2
# ships in deps/, built exactly as scripts/sqlite_current.sh builds the current one (same
# flags; cached in target/sqlite-old/). Only its shell is checked: Debian's Python module
# needs symbols a SQLite this old lacks.
#
#   bash scripts/sqlite_old.sh                  # build (cached) and print the version
#   bash scripts/sqlite_old.sh CMD [ARGS...]    # run CMD with that SQLite first on PATH
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SQLITE_NPM_PKG="sqlite3@5.0.2" \
SQLITE_VERSION="3.34.0" \
SQLITE_TARBALL="sqlite-autoconf-3340000.tar.gz" \
SQLITE_SHA256="bf6db7fae37d51754737747aaaf413b4d6b3b5fbacd52bdb2d0d6e5b2edd9aee" \
SQLITE_CURRENT_DIR="${SQLITE_OLD_DIR:-$ROOT/target/sqlite-old}" \
SQLITE_SHELL_ONLY=1 \
SQLITE_CFLAGS="-O0 -fno-strict-aliasing" \
exec bash "$ROOT/scripts/sqlite_current.sh" "$@"
