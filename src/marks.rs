//! Attempts across the jobs of one id (JOB-05): an attempt belongs to one job for ever. A
//! job that is gone (done or failed and swept, cancelled) may still have a worker holding
//! one of its attempts, so a later job with the same id numbers its attempts after every
//! attempt the id ever had. Remembering each id for ever would grow the store without
//! bound; instead each chosen id has a slot (16 bits of a hash of it), and tinyq_marks keeps
//! per slot the highest attempt of a job of its ids that is gone (the trigger
//! tinyq_jobs_marked raises it). A new job of a chosen id starts from its slot's mark.
//! Generated ids never repeat, so they have no slot and always start at attempt 1
//! (docs/design.md, "Attempts across jobs of one id").

use crate::random::splitmix64;
use crate::sqlite::{Conn, Result};

/// The number of slots: tinyq_marks never holds more rows.
pub const SLOTS: u64 = 1 << 16;

/// Generated ids, and only they, start with this (chosen ids and schedule names may not).
const GENERATED: &str = "tq_";

/// The slot of a chosen id; None for a generated one. FNV-1a (64 bits) over the id's UTF-8
/// bytes, mixed by SplitMix64 (FNV alone leaves the top bits nearly blind to the last
/// byte), its top 16 bits. Fixed here, so a store's slots are the same on every platform
/// and every version of tinyq, and two replicas of a store agree (REP-01).
pub fn slot(id: &str) -> Option<i64> {
    if id.starts_with(GENERATED) {
        return None;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    Some((splitmix64(h) >> (64 - SLOTS.trailing_zeros())) as i64)
}

/// Raises the mark of `slot` to `attempt` (what the trigger does for a deleted job).
fn raise(conn: &Conn, slot: i64, attempt: i64) -> Result<()> {
    conn.exec(
        "INSERT INTO tinyq_marks (slot, attempt) VALUES (?1, ?2)
         ON CONFLICT (slot) DO UPDATE SET attempt = excluded.attempt WHERE excluded.attempt > attempt",
        &[&slot, &attempt],
    )?;
    Ok(())
}

/// The part of the upgrade to schema 6 that needs the hash (after sql/migrate_5_to_6.sql):
/// every job present gets its id's slot, in passes of 1000 rows; the tombstones of
/// cancelled ids (schema 2 to 5 kept them for `keep`) become marks; then they go.
pub fn migrate(conn: &Conn) -> Result<()> {
    assign_slots(conn)?;
    let stones =
        conn.rows("SELECT id, attempt FROM tinyq_tombstones", &[], |st| (st.text(0).unwrap_or_default(), st.int(1)))?;
    for (id, attempt) in stones {
        if let Some(slot) = slot(&id) {
            raise(conn, slot, attempt)?;
        }
    }
    conn.exec_script("DROP TABLE tinyq_tombstones")
}

/// Gives every job present its id's slot (the upgrade to schema 6, and tq_check's recount),
/// in passes of 1000 rows; returns the number of jobs whose slot changed.
pub fn assign_slots(conn: &Conn) -> Result<i64> {
    let mut changed = 0;
    let mut after = 0;
    loop {
        let page =
            conn.rows("SELECT seq, id FROM tinyq_jobs WHERE seq > ?1 ORDER BY seq LIMIT 1000", &[&after], |st| {
                (st.int(0), st.text(1).unwrap_or_default())
            })?;
        let Some(&(last, _)) = page.last() else { break };
        for (seq, id) in page {
            changed +=
                conn.exec("UPDATE tinyq_jobs SET slot = ?2 WHERE seq = ?1 AND slot IS NOT ?2", &[&seq, &slot(&id)])?;
        }
        after = last;
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_fixed_and_in_range() {
        // Pinned: a store migrated or replayed anywhere computes these same slots (REP-01).
        assert_eq!(slot(""), Some(0xc381));
        assert_eq!(slot("a"), Some(0x5f29));
        assert_eq!(slot("order:41"), Some(2473));
        assert_eq!(slot("order:41"), slot("order:41"));
        assert_ne!(slot("order:41"), slot("order:42"));
        assert_eq!(slot("tq_01JDX0000000000000000000000"), None);
        for i in 0..10_000 {
            let s = slot(&format!("id-{i}")).unwrap();
            assert!((0..SLOTS as i64).contains(&s));
        }
    }

    #[test]
    fn slots_spread() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..10_000 {
            seen.insert(slot(&format!("order:{i}")));
        }
        // 10,000 ids in 65,536 slots: about 9,300 distinct if the hash spreads them.
        assert!(seen.len() > 9_000, "{}", seen.len());
    }
}
