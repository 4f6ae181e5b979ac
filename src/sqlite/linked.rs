//! SQLite's routines when tinyq is linked into a Rust program (the `rusqlite` feature):
//! the program's own SQLite, called by its symbols as rusqlite's libsqlite3-sys declares
//! them, bundled or the system's, whichever the program chose. Nothing here is a second
//! SQLite, and the routines table an entry point is handed is not read: the symbols are
//! the same SQLite's routines (docs/design.md, "One crate, two builds").

pub use rusqlite::ffi::{
    sqlite3, sqlite3_api_routines, sqlite3_context, sqlite3_index_constraint, sqlite3_index_info, sqlite3_module,
    sqlite3_stmt, sqlite3_value, sqlite3_vtab, sqlite3_vtab_cursor,
};

/// The routines `sql!` calls, by the names of the routines table (`step` for sqlite3_step).
pub mod routine {
    pub use rusqlite::ffi::{
        sqlite3_bind_blob64 as bind_blob64, sqlite3_bind_double as bind_double, sqlite3_bind_int64 as bind_int64,
        sqlite3_bind_null as bind_null, sqlite3_bind_text64 as bind_text64, sqlite3_changes64 as changes64,
        sqlite3_clear_bindings as clear_bindings, sqlite3_close as close, sqlite3_column_int64 as column_int64,
        sqlite3_column_value as column_value, sqlite3_create_function_v2 as create_function_v2,
        sqlite3_create_module_v2 as create_module_v2, sqlite3_db_config as db_config,
        sqlite3_db_filename as db_filename, sqlite3_db_readonly as db_readonly, sqlite3_declare_vtab as declare_vtab,
        sqlite3_errmsg as errmsg, sqlite3_exec as exec, sqlite3_extended_errcode as extended_errcode,
        sqlite3_file_control as file_control, sqlite3_finalize as finalize, sqlite3_free as free,
        sqlite3_get_autocommit as get_autocommit, sqlite3_libversion as libversion,
        sqlite3_libversion_number as libversion_number, sqlite3_malloc as malloc, sqlite3_next_stmt as next_stmt,
        sqlite3_open_v2 as open_v2, sqlite3_prepare_v2 as prepare_v2, sqlite3_prepare_v3 as prepare_v3,
        sqlite3_reset as reset, sqlite3_result_blob64 as result_blob64, sqlite3_result_double as result_double,
        sqlite3_result_error as result_error, sqlite3_result_error_code as result_error_code,
        sqlite3_result_int64 as result_int64, sqlite3_result_null as result_null,
        sqlite3_result_text64 as result_text64, sqlite3_sql as sql, sqlite3_step as step,
        sqlite3_stmt_busy as stmt_busy, sqlite3_stmt_readonly as stmt_readonly, sqlite3_stmt_status as stmt_status,
        sqlite3_txn_state as txn_state, sqlite3_user_data as user_data, sqlite3_value_blob as value_blob,
        sqlite3_value_bytes as value_bytes, sqlite3_value_double as value_double, sqlite3_value_int64 as value_int64,
        sqlite3_value_text as value_text, sqlite3_value_type as value_type, sqlite3_vtab_config as vtab_config,
        sqlite3_wal_checkpoint as wal_checkpoint, sqlite3_wal_hook as wal_hook,
    };
}

/// Calls one of SQLite's routines: `sql!(step(stmt))`, as in the loadable build. Glue
/// only: the macro is not exported, and calling a routine is `unsafe`.
macro_rules! sql {
    ($name:ident ( $($arg:expr),* $(,)? )) => {
        $crate::sqlite::api::routine::$name($($arg),*)
    };
}
pub(crate) use sql;
