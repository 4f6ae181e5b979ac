#!/usr/bin/env bash
# The driver scenario (tests/drivers/scenario.json) through the sqlite3 shell:
#   runner.sh TINYQ_SO SCENARIO DB
# The shell itself turns the scenario into a script (each step: its arguments put in
# temp.sqlite_parameters, which the shell binds to ?1, ?2 ..., then its SQL, in .mode quote)
# and into the output that script must print; an error step must print its text on stderr,
# at its own line.
set -uo pipefail
so=$1 scenario=$2 db=$3
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT
fail() { echo "sqlite3-shell: failed: $*"; exit 1; }

header=(".bail off" ".load ${so%.so}" ".mode quote" ".parameter init")
# A step is three lines (marker, arguments, SQL): step i's SQL is on line HEADER + 3i + 3.
read_steps="WITH steps AS (SELECT key AS i, value AS s
                           FROM json_each(readfile('${scenario//\'/\'\'}'), '\$.steps'))"
sqlite3 -batch :memory: "$read_steps
  SELECT '.print ==step ' || i || char(10) || 'DELETE FROM temp.sqlite_parameters;'
         || coalesce((SELECT ' INSERT INTO temp.sqlite_parameters VALUES '
                      || group_concat('(''?' || (a.key + 1) || ''', ' || quote(a.value) || ')', ', ') || ';'
                      FROM json_each(s, '\$.args') AS a), '')
         || char(10) || (s ->> 'sql') || ';'
  FROM steps ORDER BY i" > "$work/body.sql" || fail "cannot read $scenario"
sqlite3 -batch :memory: "$read_steps
  SELECT '==step ' || i || coalesce(char(10) || (
           SELECT group_concat(line, char(10)) FROM (
             SELECT (SELECT group_concat(q, ',') FROM (SELECT quote(c.value) AS q FROM json_each(r.value) AS c ORDER BY c.key)) AS line
             FROM json_each(s, '\$.rows') AS r ORDER BY r.key)), '')
  FROM steps ORDER BY i" > "$work/expected.out" || fail "cannot read $scenario"
sqlite3 -batch -separator $'\t' :memory: "$read_steps
  SELECT ${#header[@]} + 3 * i + 3, s ->> 'error' FROM steps WHERE s ->> 'error' IS NOT NULL ORDER BY i" \
  > "$work/errors.tsv" || fail "cannot read $scenario"

{ printf '%s\n' "${header[@]}"; cat "$work/body.sql"; } > "$work/script.sql"
sqlite3 -batch "$db" < "$work/script.sql" > "$work/actual.out" 2> "$work/actual.err"
version=$(sqlite3 -batch :memory: "SELECT sqlite_version()")

if ! diff "$work/expected.out" "$work/actual.out" > "$work/diff"; then
  fail "output differs (< expected, > got): $(grep '^[<>]' "$work/diff" | head -4 | tr '\n' ' ') $(head -2 "$work/actual.err" | tr '\n' ' ')"
fi
while IFS=$'\t' read -r line text; do
  # (the shell says "Error near line" since 3.5x, "error near line" before)
  grep -qiF "error near line $line: " "$work/actual.err" && grep -iF "error near line $line: " "$work/actual.err" | grep -qF "$text" \
    || fail "no error containing '$text' at line $line (stderr: $(head -2 "$work/actual.err" | tr '\n' ' '))"
done < "$work/errors.tsv"
[ "$(wc -l < "$work/actual.err")" = "$(wc -l < "$work/errors.tsv")" ] || fail "unexpected errors: $(cat "$work/actual.err")"
echo "sqlite3-shell: passed (SQLite $version; sqlite3 shell)"
