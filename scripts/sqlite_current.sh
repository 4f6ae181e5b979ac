#!/usr/bin/env bash
# A second, current SQLite for the whole test suite (issue 7): builds libsqlite3.so.0 and a
# matching sqlite3 shell from one official SQLite autoconf amalgamation, then runs a command
# with them in front of Debian's 3.40, so that Debian's /usr/bin/python3 (its stdlib sqlite3
# module, every subprocess it starts) and `sqlite3` on PATH all use the current SQLite.
#
#   bash scripts/sqlite_current.sh                      # build (cached) and print the versions
#   bash scripts/sqlite_current.sh CMD [ARGS...]        # build (cached), check, then run CMD
#   e.g. bash scripts/sqlite_current.sh /usr/bin/python3 -m pytest -q tests
#
# Source: the sqlite-autoconf tarball that the npm package `sqlite3` (node-sqlite3) ships in
# deps/ (the only registry package found that carries shell.c as well as sqlite3.c). It is
# fetched once with `npm pack` (npm's cache then serves it offline), checked by sha256 and kept
# in target/sqlite-current/ (gitignored; `make clean` removes it). The build takes ~1 minute
# on 2 cores and is skipped when the outputs exist and the stamp (version + flags) matches.
# Compile options follow Debian's libsqlite3 (PRAGMA compile_options of bookworm's 3.40.1)
# where they change behaviour; FTS3/4/5 and RTREE are left out (tinyq uses none).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Another SQLite is built the same way by setting these (scripts/sqlite_old.sh does).
NPM_PKG="${SQLITE_NPM_PKG:-sqlite3@6.0.1}"
VERSION="${SQLITE_VERSION:-3.52.0}"
TARBALL="${SQLITE_TARBALL:-sqlite-autoconf-3520000.tar.gz}"
SHA256="${SQLITE_SHA256:-f6b50b0c103392af32a8be15b2b9d25959de9a00a70c3979128aafeaa5338b3f}"
OUT="${SQLITE_CURRENT_DIR:-$ROOT/target/sqlite-current}"
CC="${CC:-gcc}"

DEFS=(
  -DSQLITE_THREADSAFE=1 -DSQLITE_ENABLE_LOAD_EXTENSION -DSQLITE_USE_URI=1
  -DSQLITE_SECURE_DELETE -DSQLITE_OMIT_LOOKASIDE=1 -DSQLITE_MALLOC_SOFT_LIMIT=1024
  -DSQLITE_TEMP_STORE=1 -DSQLITE_MAX_SCHEMA_RETRY=25 -DSQLITE_MAX_VARIABLE_NUMBER=250000
  -DSQLITE_LIKE_DOESNT_MATCH_BLOBS -DSQLITE_SOUNDEX=1 -DSQLITE_ENABLE_MATH_FUNCTIONS
  -DSQLITE_ENABLE_COLUMN_METADATA -DSQLITE_ENABLE_DBSTAT_VTAB -DSQLITE_ENABLE_STMTVTAB
  -DSQLITE_ENABLE_UNLOCK_NOTIFY -DSQLITE_ENABLE_UPDATE_DELETE_LIMIT=1
  -DSQLITE_ENABLE_PREUPDATE_HOOK -DSQLITE_ENABLE_SESSION
  -DSQLITE_MAX_MMAP_SIZE=0x7fff0000 -DSQLITE_MAX_PAGE_COUNT=1073741823
  -DSQLITE_DEFAULT_PAGE_SIZE=4096 -DSQLITE_MAX_DEFAULT_PAGE_SIZE=32768
  -DHAVE_ISNAN -DHAVE_USLEEP=1 -DHAVE_FDATASYNC=1 -DHAVE_LOCALTIME_R=1 -DHAVE_GMTIME_R=1
  -DHAVE_STRCHRNUL=1 -DHAVE_MALLOC_USABLE_SIZE=1 -D_REENTRANT=1
)
# SQLITE_CFLAGS: the compiler flags (sqlite_old.sh builds without optimizing: only its refusal is tested)
read -ra CFLAGS <<< "${SQLITE_CFLAGS:--O2 -g -fno-strict-aliasing}"
STAMP="$VERSION ${CFLAGS[*]} ${DEFS[*]}"

build() {
  if [[ -x "$OUT/bin/sqlite3" && -f "$OUT/lib/libsqlite3.so.0" && -f "$OUT/stamp" \
        && "$(cat "$OUT/stamp")" == "$STAMP" ]]; then
    return 0
  fi
  local t0=$SECONDS src="$OUT/src"
  mkdir -p "$src" "$OUT/lib" "$OUT/bin"
  if [[ ! -f "$src/$TARBALL" ]] || ! echo "$SHA256  $src/$TARBALL" | sha256sum -c --quiet - 2>/dev/null; then
    command -v npm >/dev/null || { echo "sqlite_current: npm is needed once to fetch $NPM_PKG (make deps installs it)" >&2; exit 2; }
    local tmp; tmp="$(mktemp -d)"
    (cd "$tmp" && npm pack --prefer-offline --silent "$NPM_PKG" >/dev/null \
       && tar xzf ./*.tgz "package/deps/$TARBALL") \
      || { echo "sqlite_current: could not fetch $NPM_PKG" >&2; rm -rf "$tmp"; exit 2; }
    mv "$tmp/package/deps/$TARBALL" "$src/$TARBALL"
    rm -rf "$tmp"
    echo "$SHA256  $src/$TARBALL" | sha256sum -c --quiet - \
      || { echo "sqlite_current: $TARBALL checksum mismatch" >&2; rm -f "$src/$TARBALL"; exit 2; }
  fi
  tar xzf "$src/$TARBALL" -C "$src"
  local dir="$src/${TARBALL%.tar.gz}"
  echo "sqlite_current: building SQLite $VERSION into $OUT ..." >&2
  # The library and the shell compile in parallel; the shell links the library ($ORIGIN rpath),
  # as Debian's does, so `sqlite3 --version` is the library's version.
  "$CC" "${CFLAGS[@]}" "${DEFS[@]}" -fPIC -shared -Wl,-soname,libsqlite3.so.0 \
      -o "$OUT/lib/libsqlite3.so.0.tmp" "$dir/sqlite3.c" -lm -ldl -lpthread &
  local lib_pid=$!
  "$CC" "${CFLAGS[@]}" "${DEFS[@]}" -I"$dir" -c -o "$OUT/bin/shell.o" "$dir/shell.c"
  wait "$lib_pid"
  mv -f "$OUT/lib/libsqlite3.so.0.tmp" "$OUT/lib/libsqlite3.so.0"
  ln -sf libsqlite3.so.0 "$OUT/lib/libsqlite3.so"
  "$CC" -o "$OUT/bin/sqlite3" "$OUT/bin/shell.o" -L"$OUT/lib" -lsqlite3 \
      -Wl,-rpath,'$ORIGIN/../lib' -lm -ldl -lpthread
  rm -f "$OUT/bin/shell.o"
  rm -rf "$dir"
  echo "$STAMP" > "$OUT/stamp"
  echo "sqlite_current: built in $((SECONDS - t0))s" >&2
}

build
export LD_LIBRARY_PATH="$OUT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$OUT/bin:$PATH"
export TINYQ_SQLITE_CURRENT="$VERSION"

# Refuse to run anything unless Python's stdlib module and the shell both see the new SQLite
# (the shell only, with SQLITE_SHELL_ONLY=1: Debian's Python needs a SQLite as new as its own).
py_version="$VERSION"
[[ "${SQLITE_SHELL_ONLY:-0}" == 1 ]] || py_version="$(/usr/bin/python3 -c 'import sqlite3; print(sqlite3.sqlite_version)')"
sh_version="$(sqlite3 --version | cut -d' ' -f1)"
sh_path="$(command -v sqlite3)"
if [[ "$py_version" != "$VERSION" || "$sh_version" != "$VERSION" ]]; then
  echo "sqlite_current: expected SQLite $VERSION, got python=$py_version shell=$sh_version ($sh_path)" >&2
  exit 2
fi
echo "sqlite_current: SQLite $VERSION ($([[ "${SQLITE_SHELL_ONLY:-0}" == 1 ]] || echo "python3 sqlite3 module and ")$sh_path)" >&2
[[ $# -eq 0 ]] && exit 0
exec "$@"
