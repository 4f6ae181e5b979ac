//! A producer and a worker in one Rust program, on one SQLite file, with tinyq linked in:
//! `tinyq-example-rusqlite [DB]` (default: jobs.db in the current folder).
use rusqlite::{Connection, OptionalExtension};

fn main() -> rusqlite::Result<()> {
    let path = std::env::args().nth(1).unwrap_or_else(|| "jobs.db".into());

    // A connection opened before anything else: register tinyq on it.
    let producer = Connection::open(&path)?;
    tinyq::register(&producer)?;
    // Every connection opened from now on has tinyq, as if it had loaded it.
    tinyq::auto_extension()?;
    let worker = Connection::open(&path)?;

    let versions: String =
        producer.query_row("SELECT 'tinyq ' || tq_version() || ' on SQLite ' || sqlite_version()", [], |r| r.get(0))?;
    println!("{versions}");
    for to in ["ada@example.com", "grace@example.com"] {
        let id: String = producer.query_row("SELECT tq_add('emails', json_object('to', ?1))", [to], |r| r.get(0))?;
        println!("added {id}");
    }

    // The worker loop in plain SQL: claim one job, do it, settle it; stop when none is left.
    let mut claim = worker.prepare("SELECT id, attempt, payload ->> 'to' FROM tq_claim('emails', 'worker-1', 1)")?;
    while let Some((id, attempt, to)) =
        claim.query_row([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, String>(2)?))).optional()?
    {
        let settled: i64 = worker.query_row(
            "SELECT tq_settle(?1, ?2, 'done', json_object('sent_to', ?3))",
            (&id, attempt, &to),
            |r| r.get(0),
        )?;
        let state: String = producer.query_row("SELECT tq_get(?1) ->> 'state'", [&id], |r| r.get(0))?;
        println!("worker-1 sent {to} (attempt {attempt}): settled {settled}, now {state}");
    }
    drop(claim);

    let done: i64 = producer.query_row("SELECT count(*) FROM tq_jobs WHERE state = 'done'", [], |r| r.get(0))?;
    println!("{done} jobs done");
    // tinyq's cached statements are finalized as SQLite drops its tables: both close cleanly.
    worker.close().map_err(|(_, e)| e)?;
    producer.close().map_err(|(_, e)| e)?;
    println!("closed");
    Ok(())
}
