#!/usr/bin/env bash
# make test-drivers: the scenario of tests/drivers/scenario.json through every driver, each on a
# fresh store, and PHP's query() trap pinned. Installs what is missing first (Debian packages,
# Bun and Deno from their npm packages, rusqlite from crates.io) and builds the compiled runners
# under target/drivers/, each again only when its source changed. Each runner prints
# `<driver>: passed (SQLite <version>; <driver and version>)` or `<driver>: failed: <reason>`;
# this exits 1 if any failed. TINYQ_DRIVERS="php go" runs only those (names as printed).
# Expects dist/tinyq.so and node/node_modules (the Makefile's prerequisites).
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
so=$root/dist/tinyq.so
scenario=$root/tests/drivers/scenario.json
out=$root/target/drivers
py=${PY:-/usr/bin/python3}
jdbc=/usr/share/java/sqlite-jdbc.jar
mkdir -p "$out"

note() { echo "test-drivers: $*" >&2; }

# Debian: the shell, the C compiler and headers, apsw, PHP, Ruby, Java with Debian's sqlite-jdbc
# (the system SQLite), Go with Debian's mattn/go-sqlite3 (which links the system SQLite too).
install_debian() {
  local missing=() pkg
  for pkg in sqlite3 libsqlite3-dev python3-apsw php-cli php-sqlite3 ruby ruby-sqlite3 \
             libxerial-sqlite-jdbc-java golang-go golang-github-mattn-go-sqlite3-dev; do
    dpkg -s "$pkg" > /dev/null 2>&1 || missing+=("$pkg")
  done
  command -v cc > /dev/null || missing+=(gcc)
  command -v javac > /dev/null || missing+=(default-jdk-headless)
  [ ${#missing[@]} -eq 0 ] && return 0
  note "installing ${missing[*]}"
  (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" > /dev/null
}

# Bun and Deno (and the Node of make test-node-drivers) from their npm packages.
# shellcheck source=tests/drivers/npm_binaries.sh
source tests/drivers/npm_binaries.sh

# True when $1 is missing or older than any of the other files.
stale() {
  local target=$1 source
  shift
  [ -e "$target" ] || return 0
  for source; do [ "$source" -nt "$target" ] && return 0; done
  return 1
}

# The compiled runners. The C host links against dist/tinyq.so, found next to it at run time.
build() {
  local d=tests/drivers
  if stale "$out/c-host" $d/c/host.c; then
    cc -O1 -Wall -Wextra -Werror -o "$out/c-host" $d/c/host.c "$so" -lsqlite3 -Wl,-rpath,"$root/dist" || return 1
  fi
  if stale "$out/go-runner" $d/go/main.go; then
    # GOPATH mode over Debian's Go sources: offline, no module download.
    GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE="$out/go-cache" GOFLAGS= \
      go build -o "$out/go-runner" $d/go/main.go || return 1
  fi
  if stale "$out/java/Runner.class" $d/java/Runner.java; then
    javac -d "$out/java" -cp "$jdbc" $d/java/Runner.java || return 1
  fi
  CARGO_TARGET_DIR="$out/rust" cargo build --quiet --locked --manifest-path $d/rust/Cargo.toml || return 1
  CARGO_TARGET_DIR="$out/rust-linked" cargo build --quiet --locked --features linked \
    --manifest-path $d/rust/Cargo.toml || return 1
}

install_debian || note "apt-get install failed: the runners that need it will fail"
install_npm_binaries || note "npm install failed: bun and deno will fail"
build || note "a build failed: its runner will fail"

# name, then the command; the store's path is its last argument.
runners=(
  "sqlite3-shell|bash tests/drivers/shell/runner.sh $so $scenario"
  "python-sqlite3|$py tests/drivers/python/runner.py sqlite3 $so $scenario"
  "python-apsw|$py tests/drivers/python/runner.py apsw $so $scenario"
  "better-sqlite3|node tests/drivers/js/better-sqlite3.mjs $so $scenario"
  "bun|$bun tests/drivers/js/bun.mjs $so $scenario"
  "deno|env DENO_DIR=$out/deno-cache DENO_NO_UPDATE_CHECK=1 NO_COLOR=1 $deno run --allow-read --allow-write --allow-ffi tests/drivers/js/deno.mjs $so $scenario"
  "ruby|ruby tests/drivers/ruby/runner.rb $so $scenario"
  "php|php -d sqlite3.extension_dir=$root/dist tests/drivers/php/runner.php $so $scenario"
  "php-query-trap|php -d sqlite3.extension_dir=$root/dist tests/drivers/php/query_trap.php $so"
  "java|java -cp $out/java:$jdbc Runner $so $scenario"
  "go|$out/go-runner $so $scenario"
  "c-host|$out/c-host $scenario"
  "rusqlite|$out/rust/debug/tinyq-driver-rusqlite $so $scenario"
  "rusqlite-linked|$out/rust-linked/debug/tinyq-driver-rusqlite $so $scenario"
)

stores=$(mktemp -d) && trap 'rm -rf "$stores"' EXIT
names=()
for entry in "${runners[@]}"; do
  name=${entry%%|*}
  [ -z "${TINYQ_DRIVERS:-}" ] || [[ " $TINYQ_DRIVERS " == *" $name "* ]] || continue
  names+=("$name")
  # word splitting of the command is meant: no path here has a space
  # shellcheck disable=SC2086
  timeout 300 ${entry#*|} "$stores/$name.db" > "$stores/$name.out" 2>&1 < /dev/null &
done
wait

passed=0 failed=0
for name in "${names[@]}"; do
  if grep -q "^$name: passed" "$stores/$name.out"; then
    grep "^$name: passed" "$stores/$name.out"
    passed=$((passed + 1))
  else
    line=$(grep "^$name: failed" "$stores/$name.out" || true)
    echo "${line:-$name: failed: $(tail -3 "$stores/$name.out" | tr '\n' ' ')}"
    failed=$((failed + 1))
  fi
done
echo "drivers: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
