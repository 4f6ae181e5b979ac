/* The driver scenario (tests/drivers/scenario.json) in a C host that registers tinyq with
 * sqlite3_auto_extension: every connection opened afterwards has tinyq, with no load call and
 * load_extension left off. The host links against dist/tinyq.so for its entry point
 * (tests/drivers/run.sh); a static library would be linked the same way.
 *
 *   host SCENARIO DB
 *
 * The scenario is read with SQLite's JSON functions, on a connection opened before the
 * registration. Answers are compared as quote() renders them: 41, 'text', NULL. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sqlite3_tinyq_init(sqlite3 *db, char **error, const sqlite3_api_routines *api);

static sqlite3_stmt *prepare(sqlite3 *db, const char *sql) {
  sqlite3_stmt *stmt = NULL;
  if (sqlite3_prepare_v2(db, sql, -1, &stmt, NULL) != SQLITE_OK) {
    printf("c-host: failed: %s: %s\n", sql, sqlite3_errmsg(db));
    exit(1);
  }
  return stmt;
}

/* The rows of a JSON text (a list of lists of cells) the way quote() writes them, one a line. */
static char *expected_rows(sqlite3 *json, sqlite3_value *rows) {
  sqlite3_stmt *q = prepare(json,
      "SELECT coalesce(group_concat(line, char(10)), '') FROM ("
      "  SELECT (SELECT group_concat(q, ',') FROM (SELECT quote(c.value) AS q FROM json_each(r.value) AS c"
      "          ORDER BY c.key)) AS line FROM json_each(?1) AS r ORDER BY r.key)");
  sqlite3_bind_value(q, 1, rows);
  sqlite3_step(q);
  char *text = sqlite3_mprintf("%s", sqlite3_column_text(q, 0));
  sqlite3_finalize(q);
  return text;
}

/* Steps the statement to its end: its rows as expected_rows() writes them, or NULL on an error. */
static char *actual_rows(sqlite3_stmt *stmt) {
  sqlite3_str *out = sqlite3_str_new(NULL);
  int rc, rows = 0;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    if (rows++) sqlite3_str_appendchar(out, 1, '\n');
    for (int i = 0; i < sqlite3_column_count(stmt); i++) {
      if (i) sqlite3_str_appendchar(out, 1, ',');
      switch (sqlite3_column_type(stmt, i)) {
        case SQLITE_INTEGER: sqlite3_str_appendf(out, "%lld", sqlite3_column_int64(stmt, i)); break;
        case SQLITE_NULL: sqlite3_str_appendf(out, "NULL"); break;
        case SQLITE_FLOAT: sqlite3_str_appendf(out, "%!.15g", sqlite3_column_double(stmt, i)); break;
        default: sqlite3_str_appendf(out, "%Q", (const char *)sqlite3_column_text(stmt, i));
      }
    }
  }
  char *text = sqlite3_str_finish(out);
  if (rc != SQLITE_DONE) {
    sqlite3_free(text);
    return NULL;
  }
  return text ? text : sqlite3_mprintf("");
}

/* The first step that does not answer as written, as a reason; NULL when all do. */
static char *play(sqlite3 *db, sqlite3 *json, const char *scenario) {
  sqlite3_stmt *steps = prepare(json,
      "SELECT value ->> 'name', value ->> 'sql', value -> 'args', value -> 'rows', value ->> 'error'"
      " FROM json_each(?1, '$.steps') ORDER BY key");
  sqlite3_stmt *args = prepare(json, "SELECT value FROM json_each(?1) ORDER BY key");
  sqlite3_bind_text(steps, 1, scenario, -1, SQLITE_STATIC);
  char *reason = NULL;
  while (!reason && sqlite3_step(steps) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(steps, 0);
    const char *error = (const char *)sqlite3_column_text(steps, 4);
    sqlite3_stmt *stmt = NULL;
    char *got = NULL;
    if (sqlite3_prepare_v2(db, (const char *)sqlite3_column_text(steps, 1), -1, &stmt, NULL) == SQLITE_OK) {
      sqlite3_bind_value(args, 1, sqlite3_column_value(steps, 2));
      for (int i = 1; sqlite3_step(args) == SQLITE_ROW; i++) sqlite3_bind_value(stmt, i, sqlite3_column_value(args, 0));
      sqlite3_reset(args);
      got = actual_rows(stmt);
    }
    if (!got && !(error && strstr(sqlite3_errmsg(db), error))) {
      reason = sqlite3_mprintf("%s: unexpected error %s", name, sqlite3_errmsg(db));
    } else if (got && error) {
      reason = sqlite3_mprintf("%s: no error, got %s", name, got);
    } else if (got) {
      char *want = expected_rows(json, sqlite3_column_value(steps, 3));
      if (strcmp(want, got)) reason = sqlite3_mprintf("%s: expected %s, got %s", name, want, got);
      sqlite3_free(want);
    }
    sqlite3_free(got);
    sqlite3_finalize(stmt);
  }
  sqlite3_finalize(args);
  sqlite3_finalize(steps);
  return reason;
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  sqlite3_str *out = sqlite3_str_new(NULL);
  char chunk[4096];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) sqlite3_str_append(out, chunk, (int)n);
  fclose(f);
  return sqlite3_str_finish(out);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: host SCENARIO DB\n");
    return 2;
  }
  char *scenario = read_file(argv[1]);
  sqlite3 *json = NULL, *db = NULL;
  sqlite3_open(":memory:", &json);
  if (!scenario) {
    printf("c-host: failed: cannot read %s\n", argv[1]);
    return 1;
  }
  sqlite3_auto_extension((void (*)(void))sqlite3_tinyq_init);
  if (sqlite3_open(argv[2], &db) != SQLITE_OK) {
    printf("c-host: failed: open %s: %s\n", argv[2], sqlite3_errmsg(db));
    return 1;
  }
  char *reason = play(db, json, scenario);
  if (reason) {
    printf("c-host: failed: %s\n", reason);
    return 1;
  }
  if (sqlite3_close(db) != SQLITE_OK) {
    printf("c-host: failed: close: %s\n", sqlite3_errmsg(db));
    return 1;
  }
  printf("c-host: passed (SQLite %s; sqlite3_auto_extension, linked against tinyq.so)\n", sqlite3_libversion());
  sqlite3_close(json);
  sqlite3_free(scenario);
  return 0;
}
