//! The driver scenario (tests/drivers/scenario.json) through rusqlite:
//! `tinyq-driver-rusqlite TINYQ_SO SCENARIO DB`. Built with the `linked` feature, it runs
//! as `rusqlite-linked`: tinyq compiled in and registered with tinyq::register, TINYQ_SO unused.
use rusqlite::types::Value;
use rusqlite::{params_from_iter, Connection};
use serde_json::Value as Json;

#[cfg(feature = "linked")]
const NAME: &str = "rusqlite-linked";
#[cfg(not(feature = "linked"))]
const NAME: &str = "rusqlite";

#[cfg(feature = "linked")]
const LINKED: &str = ", tinyq linked in";
#[cfg(not(feature = "linked"))]
const LINKED: &str = "";

#[cfg(feature = "linked")]
fn open(_so: &str, db: &str) -> rusqlite::Result<Connection> {
    let conn = Connection::open(db)?;
    tinyq::register(&conn)?;
    Ok(conn)
}

#[cfg(not(feature = "linked"))]
fn open(so: &str, db: &str) -> rusqlite::Result<Connection> {
    let conn = Connection::open(db)?;
    // SAFETY: the library loaded is tinyq's own build, whose entry point only registers functions.
    unsafe {
        let _guard = rusqlite::LoadExtensionGuard::new(&conn)?;
        conn.load_extension(so, None::<&str>)?;
    }
    Ok(conn)
}

fn to_sql(arg: &Json) -> Value {
    match arg {
        Json::Null => Value::Null,
        Json::Number(n) => Value::Integer(n.as_i64().expect("scenario arguments are integers")),
        Json::String(s) => Value::Text(s.clone()),
        other => panic!("scenario argument {other} is not an integer, text or null"),
    }
}

/// A cell as the scenario writes it: integers, texts and nulls keep their type.
fn to_json(cell: Value) -> Json {
    match cell {
        Value::Null => Json::Null,
        Value::Integer(i) => Json::from(i),
        Value::Real(r) => Json::from(r),
        Value::Text(s) => Json::String(s),
        Value::Blob(b) => Json::String(format!("blob of {} bytes", b.len())),
    }
}

fn run(conn: &Connection, sql: &str, args: &[Json]) -> rusqlite::Result<Vec<Json>> {
    let mut stmt = conn.prepare(sql)?;
    let width = stmt.column_count();
    let rows = stmt.query_map(params_from_iter(args.iter().map(to_sql)), |row| {
        (0..width).map(|i| row.get::<_, Value>(i).map(to_json)).collect::<rusqlite::Result<Vec<_>>>().map(Json::from)
    })?;
    rows.collect()
}

/// The first step that does not answer as written, as a reason.
fn play(conn: &Connection, steps: &[Json]) -> Result<(), String> {
    for step in steps {
        let name = &step["name"];
        let args = step["args"].as_array().map_or(&[][..], Vec::as_slice);
        match (run(conn, step["sql"].as_str().unwrap_or_default(), args), step.get("error")) {
            (Err(e), Some(Json::String(want))) if e.to_string().contains(want.as_str()) => {}
            (Err(e), _) => return Err(format!("{name}: unexpected error {e}")),
            (Ok(rows), Some(_)) => return Err(format!("{name}: no error, got {rows:?}")),
            (Ok(rows), None) if Json::from(rows.clone()) != step["rows"] => {
                return Err(format!("{name}: expected {}, got {}", step["rows"], Json::from(rows)));
            }
            (Ok(_), None) => {}
        }
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, so, scenario, db] = &args[..] else {
        eprintln!("usage: tinyq-driver-rusqlite TINYQ_SO SCENARIO DB");
        std::process::exit(2);
    };
    let outcome = (|| {
        let conn = open(so, db).map_err(|e| format!("load: {e}"))?;
        let version: String = conn.query_row("SELECT sqlite_version()", [], |r| r.get(0)).map_err(|e| e.to_string())?;
        let text = std::fs::read_to_string(scenario).map_err(|e| format!("{scenario}: {e}"))?;
        let scenario: Json = serde_json::from_str(&text).map_err(|e| format!("{scenario}: {e}"))?;
        play(&conn, scenario["steps"].as_array().ok_or("no steps")?)?;
        Ok::<_, String>(version)
    })();
    match outcome {
        Ok(version) => println!("{NAME}: passed (SQLite {version}; rusqlite 0.43, bundled{})", LINKED),
        Err(reason) => {
            println!("{NAME}: failed: {reason}");
            std::process::exit(1);
        }
    }
}
