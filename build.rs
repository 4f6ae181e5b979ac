// Build settings for the loadable extension.
fn main() {
    // SQLite unloads an extension when the last connection that loaded it closes; the
    // next load would allocate tinyq's process-wide statics again (a leak per cycle).
    // Marking the library "nodelete" keeps it loaded for the life of the process.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    // `make install` puts libtinyq.so in /usr/local/lib; ldconfig lists it under its soname,
    // so that a bare `.load tinyq` (dlopen("tinyq.so")) finds it from any folder.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,tinyq.so");
    // The commit tq_debug() reports.
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or_else(|| "unknown".into(), |o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    println!("cargo:rustc-env=TINYQ_COMMIT={commit}");
    // Again when HEAD moves: to another branch (.git/HEAD) or to a new commit on this one
    // (the branch's ref file, which .git/HEAD names).
    println!("cargo:rerun-if-changed=.git/HEAD");
    if let Ok(head) = std::fs::read_to_string(".git/HEAD") {
        if let Some(branch) = head.trim().strip_prefix("ref: ") {
            println!("cargo:rerun-if-changed=.git/{branch}");
        }
    }
}
