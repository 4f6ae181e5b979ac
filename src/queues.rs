//! tq_queue: reads or sets a queue's settings (settings.rs), and has the limits follow a
//! change (limits/).

use crate::limits;
use crate::options::{self, Options};
use crate::settings::{self, Settings, KEYS};
use crate::sqlite::{Conn, Out, Result, Val};
use crate::store;

/// tq_queue(name [, options]): reads, or sets, a queue's settings; returns the effective ones.
pub fn tq_queue(conn: &Conn, args: &[Val]) -> Result<Out> {
    if args.is_empty() || args.len() > 2 {
        bail!("expects (name [, options])");
    }
    let name = options::name("queue name", &args[0])?;
    if args.len() == 1 {
        if !store::exists(conn)? {
            return Ok(Out::Text(Settings::defaults(&name).to_json()));
        }
        return Ok(Out::Text(settings::load(conn, &name)?.to_json()));
    }
    let opts = Options::parse(Some(&args[1]), KEYS)?;
    conn.write_tx(|| {
        let before = settings::load(conn, &name)?;
        let s = before.updated(&opts)?;
        settings::save(conn, &s)?;
        if !s.same_limits(&before) {
            // The counters and the set-aside jobs follow the new limits. Only on a change:
            // a worker that sets its queue's limits at every start pays nothing, while a
            // rebuild walks the queue's set-aside jobs.
            limits::rebuild(conn, &s, conn.now())?;
        }
        Ok(Out::Text(s.to_json()))
    })
}
