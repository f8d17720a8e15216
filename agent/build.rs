//! Embeds the git commit the binary is built from as `STRATA_COMMIT`, for
//! `strata --version` and the start-up log ("unknown" outside a git checkout).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_string())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=STRATA_COMMIT={commit}");
    // Built again when HEAD moves (a commit, a checkout), not on every edit. Only files
    // that exist: cargo runs a build script every time for a missing one.
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])];
    watched.push(git(&["rev-parse", "--git-path", "packed-refs"]));
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(git(&["rev-parse", "--git-path", &branch]));
    }
    for path in watched.into_iter().flatten() {
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
