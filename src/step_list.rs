//! `tq_steps(id)`: the steps kept under a job (JOB-06), for operators: name, the attempt
//! that kept it, its value and when. Read-only.

use std::rc::Rc;

use crate::sqlite::Conn;
use crate::sqlite::{Result, Val};
use crate::sqlite::{Rows, TableFn};
use crate::{options, schema};

/// SELECT * FROM tq_steps(id): in the order they were kept.
pub struct Steps;

impl TableFn for Steps {
    const NAME: &'static str = "tq_steps";
    const SCHEMA: &'static str = "CREATE TABLE x(name TEXT, attempt INTEGER, value, created_at INTEGER, job HIDDEN)";
    const VISIBLE: usize = 4;
    const FILTERS: &'static [usize] = &[4];
    const DIRECT_ONLY: bool = false;
    fn rows(conn: &Rc<Conn>, filters: &[Option<Val>]) -> Result<Rows> {
        let id = match filters.first().and_then(Option::as_ref) {
            None => bail!("expects (id): SELECT * FROM tq_steps('job-id')"),
            Some(v) => options::name("id", v)?,
        };
        if !schema::exists(conn)? {
            return Ok(Rows::list(vec![]));
        }
        let st = conn.query(
            "SELECT s.name, s.attempt, s.value, s.created_at FROM tinyq_steps s JOIN tinyq_jobs j ON s.job = j.seq
             WHERE j.id = ?1 ORDER BY s.created_at, s.name",
            &[&id],
        )?;
        Ok(Rows::query(st))
    }
}
