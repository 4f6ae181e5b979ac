//! `tq_schedule_get(name)`: one schedule as `tq_schedule` returns it (payload and options
//! included), or NULL. Read-only: it lets an operator's tool pause or resume a schedule by
//! calling `tq_schedule` again with the same definition.

use crate::sqlite::Conn;
use crate::sqlite::{Out, Result, Val};
use crate::{options, schedules, schema};

/// tq_schedule_get(name) -> JSON of the schedule, or NULL when there is no such schedule.
pub fn tq_schedule_get(conn: &Conn, args: &[Val]) -> Result<Out> {
    if args.len() != 1 {
        bail!("expects (name)");
    }
    let name = options::name("name", &args[0])?;
    if !schema::exists(conn)? {
        return Ok(Out::Null);
    }
    Ok(schedules::describe(conn, &name)?.map_or(Out::Null, Out::Text))
}
