// Build settings for the loadable extension.
fn main() {
    // Each platform gets its own link flags: the ones below are for ELF linkers (Linux and
    // the BSDs); Windows' and Apple's linkers refuse them, and need none of their own.
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if ["linux", "android", "freebsd", "netbsd", "openbsd", "dragonfly", "illumos", "solaris"].contains(&os.as_str()) {
        elf_link_args();
    }
    commit();
}

/// ELF only: the library stays loaded, and has the soname `make install` relies on.
fn elf_link_args() {
    // SQLite unloads an extension when the last connection that loaded it closes; the
    // next load would allocate tinyq's process-wide statics again (a leak per cycle).
    // Marking the library "nodelete" keeps it loaded for the life of the process.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    // `make install` puts libtinyq.so in /usr/local/lib; ldconfig lists it under its soname,
    // so that a bare `.load tinyq` (dlopen("tinyq.so")) finds it from any folder.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,tinyq.so");
}

/// The commit tq_debug() reports ("unknown" outside a git checkout, as in a packaged crate).
fn commit() {
    let commit = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=TINYQ_COMMIT={commit}");
    // Again when HEAD moves: to another branch (HEAD) or to a new commit on this one (the
    // branch's ref, loose or packed). Git says where those files are (in a worktree, .git is
    // a file and they live elsewhere); only files that exist are named, since cargo reruns a
    // build script at every build for a missing one, and that rebuilt tinyq every time.
    println!("cargo:rerun-if-changed=build.rs");
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"]), git(&["rev-parse", "--git-path", "packed-refs"])];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(git(&["rev-parse", "--git-path", &branch]));
    }
    for path in watched.into_iter().flatten() {
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}

/// What git prints for `args` in this folder, if git is there and succeeds.
fn git(args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("git").args(args).output().ok().filter(|o| o.status.success())?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string()).filter(|s| !s.is_empty())
}
