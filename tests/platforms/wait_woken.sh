#!/usr/bin/env bash
# A tq_wait in one sqlite3 process, woken by another process's add: the waiter of platforms
# without inotify (the portable one, polling PRAGMA data_version). scripts/release.sh runs it
# with the Windows build under Wine:   wait_woken.sh SQLITE3 EXTENSION DB
# It prints what it saw; it fails unless the 60 s wait ended with 1 after the add, which comes
# 3 s after the waiter started (a wait that ended before the add would be no wake-up).
set -euo pipefail
sqlite=$1 ext=$2 db=$3
ext=${ext%.*}
# The processes that write (the first add, the add, the claim) wait for the others' locks
# (.timeout, SQLite's busy_timeout), as an application does. The waiter has none: a look at
# the store that meets the add's commit is no error to it, only nothing yet (HOST-01).
rm -f "$db" "$db-wal" "$db-shm" "$db-journal"
"$sqlite" "$db" ".timeout 10000" ".load $ext" "SELECT tq_add('other', '{}')" > /dev/null   # the store exists
start=$(date +%s.%N)
out=$(mktemp) && trap 'rm -f "$out"' EXIT
("$sqlite" "$db" ".load $ext" "SELECT tq_wait('wake', '60s')" > "$out" || echo failed > "$out"
 date +%s.%N >> "$out") &
waiter=$!
sleep 3
added=$(date +%s.%N)
"$sqlite" "$db" ".timeout 10000" ".load $ext" "SELECT tq_add('wake', '{}', '{\"id\":\"w1\"}')" > /dev/null
wait "$waiter"
result=$(head -1 "$out") ended=$(tail -1 "$out")
claimed=$("$sqlite" "$db" ".timeout 10000" ".load $ext" "SELECT id FROM tq_claim('wake', 'w1', 10)")
after=$(echo "$ended - $added" | bc) waited=$(echo "$ended - $start" | bc)
echo "tq_wait('wake', '60s') gave $result ${waited}s after it began, ${after}s after the other process's add; claimed $claimed"
[ "$result" = 1 ] && [ "$claimed" = w1 ] && (( $(echo "$after > 0 && $after < 30" | bc) )) ||
  { echo "wait_woken: not woken by the add" >&2; exit 1; }
