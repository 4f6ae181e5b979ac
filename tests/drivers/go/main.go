// The driver scenario (tests/drivers/scenario.json) through mattn/go-sqlite3 and database/sql:
//
//	go-runner TINYQ_SO SCENARIO DB
package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strings"

	sqlite3 "github.com/mattn/go-sqlite3"
)

type step struct {
	Name  string
	SQL   string
	Args  []any
	Rows  [][]any
	Error *string
}

// cell is a value as the scenario writes it: integers as int64, texts as string, nulls as nil.
func cell(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		return x.String()
	case []byte:
		return string(x)
	}
	return v
}

func rows(conn *sql.Conn, query string, args []any) ([][]any, error) {
	r, err := conn.QueryContext(context.Background(), query, args...)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	columns, _ := r.Columns()
	got := [][]any{}
	for r.Next() {
		row := make([]any, len(columns))
		ptrs := make([]any, len(columns))
		for i := range row {
			ptrs[i] = &row[i]
		}
		if err := r.Scan(ptrs...); err != nil {
			return nil, err
		}
		for i := range row {
			row[i] = cell(row[i])
		}
		got = append(got, row)
	}
	return got, r.Err()
}

// play returns the first step that does not answer as written, as a reason; "" when all do.
func play(conn *sql.Conn, steps []step) string {
	for _, s := range steps {
		for i := range s.Args {
			s.Args[i] = cell(s.Args[i])
		}
		for _, row := range s.Rows {
			for i := range row {
				row[i] = cell(row[i])
			}
		}
		got, err := rows(conn, s.SQL, s.Args)
		switch {
		case err != nil && s.Error != nil && strings.Contains(err.Error(), *s.Error):
		case err != nil:
			return fmt.Sprintf("%s: unexpected error %v", s.Name, err)
		case s.Error != nil:
			return fmt.Sprintf("%s: no error, got %v", s.Name, got)
		case !reflect.DeepEqual(s.Rows, got):
			return fmt.Sprintf("%s: expected %v, got %v", s.Name, s.Rows, got)
		}
	}
	return ""
}

func run(so, scenario, path string) (version string, reason string) {
	// Extensions: database/sql loads tinyq into every connection its pool opens.
	sql.Register("sqlite3_tinyq", &sqlite3.SQLiteDriver{Extensions: []string{so}})
	db, err := sql.Open("sqlite3_tinyq", path)
	if err != nil {
		return "", err.Error()
	}
	defer db.Close()
	// One connection for the whole scenario: tq_clock pins the clock of one connection only.
	conn, err := db.Conn(context.Background())
	if err != nil {
		return "", err.Error()
	}
	defer conn.Close()
	if err := conn.QueryRowContext(context.Background(), "SELECT sqlite_version()").Scan(&version); err != nil {
		return "", err.Error()
	}
	text, err := os.ReadFile(scenario)
	if err != nil {
		return version, err.Error()
	}
	var parsed struct{ Steps []step }
	decoder := json.NewDecoder(bytes.NewReader(text))
	decoder.UseNumber()
	if err := decoder.Decode(&parsed); err != nil {
		return version, err.Error()
	}
	return version, play(conn, parsed.Steps)
}

func main() {
	version, reason := run(os.Args[1], os.Args[2], os.Args[3])
	if reason != "" {
		fmt.Printf("go: failed: %s\n", reason)
		os.Exit(1)
	}
	fmt.Printf("go: passed (SQLite %s; mattn/go-sqlite3, %s)\n", version, runtime.Version())
}
