//! Embeds the git commit the daemon is built from, and whether the work tree had uncommitted
//! changes, as `CSI_PROXY_COMMIT` (12 hex digits, or `unknown`) and `CSI_PROXY_DIRTY` (`true` or
//! `false`).
//!
//! Building outside a git checkout (a source tarball, a vendored copy) or without `git` on the
//! PATH is fine: the commit is then `unknown`. A packager can set `CSI_PROXY_COMMIT` (and
//! `CSI_PROXY_DIRTY`) in the build environment to name the commit themselves.
//!
//! The script runs again only when `HEAD`, the branch it points to, or the index change (a
//! checkout, a commit, a staged change), not at every build. The dirty flag is therefore the state
//! when one of those last changed: edits made since, and not yet staged, do not flip it.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=CSI_PROXY_COMMIT");
    println!("cargo:rerun-if-env-changed=CSI_PROXY_DIRTY");
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());

    let (commit, dirty) = match std::env::var("CSI_PROXY_COMMIT") {
        Ok(c) if !c.trim().is_empty() => {
            (c.trim().to_string(), std::env::var("CSI_PROXY_DIRTY").is_ok_and(|d| d.trim() == "true"))
        }
        _ => from_git(&manifest_dir).unwrap_or_else(|| ("unknown".to_string(), false)),
    };
    println!("cargo:rustc-env=CSI_PROXY_COMMIT={commit}");
    println!("cargo:rustc-env=CSI_PROXY_DIRTY={dirty}");
}

/// Runs `git` in `dir` with `args` (no shell); its trimmed stdout when it succeeds.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8(out.stdout).ok()?.trim().to_string())
}

fn from_git(dir: &Path) -> Option<(String, bool)> {
    let commit = git(dir, &["rev-parse", "--verify", "--quiet", "HEAD"])?;
    if commit.len() < 12 || !commit.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    watch_git_files(dir);
    let dirty = git(dir, &["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    Some((commit[..12].to_string(), dirty))
}

/// Asks Cargo to run the script again when the checked-out commit can have changed. Only files
/// that exist are named: Cargo reruns at every build for a named file that is missing.
fn watch_git_files(dir: &Path) {
    let absolute = |p: String| {
        let p = PathBuf::from(p);
        if p.is_absolute() {
            p
        } else {
            dir.join(p)
        }
    };
    let watch = |p: PathBuf| {
        if p.is_file() {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    };
    // `--git-dir` holds HEAD and the index (per work tree); `--git-common-dir` the refs.
    let Some(git_dir) = git(dir, &["rev-parse", "--git-dir"]).map(absolute) else { return };
    let common_dir = git(dir, &["rev-parse", "--git-common-dir"]).map(absolute).unwrap_or_else(|| git_dir.clone());
    watch(git_dir.join("HEAD"));
    watch(git_dir.join("index"));
    if let Some(branch) = git(dir, &["symbolic-ref", "--quiet", "HEAD"]) {
        // A loose ref, or a line of packed-refs when it has been packed.
        watch(common_dir.join(&branch));
        watch(common_dir.join("packed-refs"));
    }
}
