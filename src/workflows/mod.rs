//! Workflows: jobs that wait for other jobs (`after`, deps.rs), a running job that waits
//! for jobs or a signal (tq_settle's `'wait'`, waits.rs), and signals (signals.rs).

pub mod deps;
pub mod signals;
pub mod waits;
