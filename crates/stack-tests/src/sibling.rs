//! Another package's binary for a test that runs it: cargo builds only the tested package's own
//! binaries (`CARGO_BIN_EXE_*`), so the other one is built into the same target directory and
//! profile, and found beside ours.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `package`'s binary `bin` beside `ours`, a binary of the tested package
/// (`env!("CARGO_BIN_EXE_<name>")`). `rebuild`: built even when present (cargo does nothing when
/// it is up to date); else only when missing, for tests that also run where there is no cargo
/// (the storage VM, given both binaries).
pub fn binary(ours: &str, package: &str, bin: &str, rebuild: bool) -> PathBuf {
    let ours = Path::new(ours);
    let path = ours.with_file_name(format!("{bin}{}", std::env::consts::EXE_SUFFIX));
    if !rebuild && path.exists() {
        return path;
    }
    let profile_dir = ours.parent().expect("target/<profile>/");
    let target = profile_dir.parent().expect("target/");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    build.args(["build", "-p", package, "--bin", bin, "--target-dir"]).arg(target);
    if profile_dir.file_name().is_some_and(|p| p == "release") {
        build.arg("--release");
    }
    let status = build.status().unwrap_or_else(|e| panic!("running cargo build -p {package}: {e}"));
    assert!(status.success() && path.exists(), "could not build {}", path.display());
    path
}
