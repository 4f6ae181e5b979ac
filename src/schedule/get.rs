//! `tq_schedule_get(name)`: one schedule as `tq_schedule` returns it (payload and options
//! included), or NULL. Read-only: it lets an operator's tool pause or resume a schedule by
//! calling `tq_schedule` again with the same definition.

use serde_json::json;

use crate::sqlite::Conn;
use crate::sqlite::{Out, Result, Val};
use crate::{json, options, store};

/// tq_schedule_get(name) -> JSON of the schedule, or NULL when there is no such schedule.
pub fn tq_schedule_get(conn: &Conn, args: &[Val]) -> Result<Out> {
    if args.len() != 1 {
        bail!("expects (name)");
    }
    let name = options::name("name", &args[0])?;
    if !store::exists(conn)? {
        return Ok(Out::Null);
    }
    Ok(describe(conn, &name)?.map_or(Out::Null, Out::Text))
}

/// The schedule as tq_schedule returns it, or None.
pub fn describe(conn: &Conn, name: &str) -> Result<Option<String>> {
    conn.row(
        "SELECT name, queue, expr, tz, payload, priority, grp, budget, meta, missed, paused, next_at, last_at, last_id
         FROM tinyq_schedules WHERE name = ?1",
        &[&name],
        |st| {
            let paused = st.int(10) != 0;
            let payload = st.val(4);
            let obj = json!({
                "name": st.text(0),
                "queue": st.text(1),
                "when": st.text(2),
                "tz": st.text(3),
                "payload_type": json::kind(&payload),
                "priority": st.int(5),
                "group": st.text(6),
                "attempts": st.opt_int(7),
                "missed": st.text(9),
                "paused": paused,
                "next_at": if paused { None } else { st.opt_int(11) },
                "last_at": st.opt_int(12),
                "last_id": st.text(13),
            });
            // The payload and meta as stored (json.rs), so that passing them back to
            // tq_schedule keeps them byte for byte.
            json::object(obj, &[("payload", &payload), ("meta", &st.val(8))])
        },
    )
}
