//! Records the commit the binary is built from, for `lancet --version`.
//!
//! `LANCET_COMMIT` (set by a container build, which has no `.git`) wins; otherwise `git` is
//! asked. Without either: `unknown`. (No `-dirty` mark: this script reruns only when HEAD
//! moves, so it could not keep such a mark true.)

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=LANCET_COMMIT");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // Rebuild when HEAD moves: HEAD itself (a checkout), the ref it names and the reflog (a
    // commit). Only files that exist: cargo reruns a script whose watched file is missing.
    let git = repo.join(".git");
    let mut watched = vec![git.join("HEAD"), git.join("logs").join("HEAD")];
    if let Ok(head) = std::fs::read_to_string(git.join("HEAD"))
        && let Some(name) = head.trim().strip_prefix("ref: ")
    {
        watched.push(git.join(name));
    }
    for path in watched.iter().filter(|p| p.is_file()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    let commit = std::env::var("LANCET_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(|| git_commit(&repo))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=LANCET_COMMIT={commit}");
}

fn git_commit(repo: &Path) -> Option<String> {
    let out = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(repo)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let commit = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!commit.is_empty()).then_some(commit)
}
