#!/usr/bin/env bash
# make test-node-drivers: the Node helper's own tests (node/test/) again on the drivers other
# than better-sqlite3 (make test-node runs them there): node:sqlite on a Node from npm (a new
# one, and 22.13, the oldest node/README.md supports), and bun:sqlite and node:sqlite on Bun
# from npm ($TINYQ_DRIVER picks the driver, drivers.js). The binaries are installed under
# target/drivers/ once. Each run prints
# `<runtime>/<driver>: passed (<n> tests; versions)` or its failures; exits 1 if any failed.
# TINYQ_SUITES="bun/bun:sqlite" runs only those (names as printed).
set -uo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tests/drivers/npm_binaries.sh
source tests/drivers/npm_binaries.sh
install_npm_binaries || echo "test-node-drivers: npm install failed: the runs below will fail" >&2

# name|driver|command, run in node/
suites=(
  "node/node:sqlite|node:sqlite|$node_new --test test/*.test.js test/*.test.mjs"
  "node22/node:sqlite|node:sqlite|$node_old --test test/*.test.js test/*.test.mjs"
  "bun/bun:sqlite|bun:sqlite|$bun test --timeout 120000 test/"
  "bun/node:sqlite|node:sqlite|$bun test --timeout 120000 test/"
)
sqlite_of() { # the SQLite version a runtime's driver runs on
  "$1" -e "const D = require('$2'); const db = new (D.DatabaseSync || D.Database)(':memory:');
    console.log(db.prepare('SELECT sqlite_version() AS v').get().v)" 2> /dev/null
}

logs=$(mktemp -d) && trap 'rm -rf "$logs"' EXIT
names=()
for entry in "${suites[@]}"; do
  name=${entry%%|*} rest=${entry#*|}
  driver=${rest%%|*} command=${rest#*|}
  [ -z "${TINYQ_SUITES:-}" ] || [[ " $TINYQ_SUITES " == *" $name "* ]] || continue
  names+=("$name")
  log=$logs/${name//[:\/]/_}
  # one after the other: several of the tests wait on timers that a loaded machine delays
  # word splitting and globbing of the command are meant: no path here has a space
  # shellcheck disable=SC2086
  (cd node && TINYQ_DRIVER=$driver timeout 900 $command > "$log.log" 2>&1 < /dev/null; echo $? > "$log.rc")
  if [ "$(cat "$log.rc")" != 0 ]; then
    # A suite that fails once is run once more, and what failed the first time is printed:
    # a failure seen once under Bun (bun:sqlite) at the end of this session, not
    # reproduced in three runs after it, is still to be found (see the issue's note).
    echo "$name: failed a first run; running it again. What failed:"
    grep -E '^(✖|\(fail\)|not ok)' "$log.log" | sort -u | head -20 | sed 's/^/  /'
    (cd node && TINYQ_DRIVER=$driver timeout 900 $command > "$log.log" 2>&1 < /dev/null; echo $? > "$log.rc")
  fi
done

passed=0 failed=0
for name in "${names[@]}"; do
  log=$logs/${name//[:\/]/_}
  # node --test ends with "ℹ pass N" (or "# pass N"), bun test with " N pass"
  count=$(grep -Eo '^((ℹ|#) pass [0-9]+| *[0-9]+ pass)$' "$log.log" | grep -Eo '[0-9]+' | tail -1)
  runtime=$node_new version=v$node_version
  [ "${name%%/*}" = bun ] && runtime=$bun version=$bun_version
  [ "${name%%/*}" = node22 ] && runtime=$node_old version=v$node_old_version
  if [ "$(cat "$log.rc")" = 0 ]; then
    echo "$name: passed (${count:-?} tests; ${name%%/*} $version, SQLite $(sqlite_of "$runtime" "${name#*/}"))"
    passed=$((passed + 1))
  else
    echo "$name: failed:"
    grep -E '^(✖|\(fail\)|not ok)' "$log.log" | sort -u | head -20 | sed 's/^/  /'
    tail -5 "$log.log" | sed 's/^/  /'
    failed=$((failed + 1))
  fi
done
echo "node-drivers: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
