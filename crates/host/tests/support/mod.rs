//! Test support for the Linux block backend: loop disks over sparse files. Needs root.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// A loop device over a sparse file, detached and deleted on drop.
pub struct LoopDisk {
    pub file: PathBuf,
    /// `/dev/loopN`
    pub dev: PathBuf,
    /// `loopN`
    pub name: String,
}

impl LoopDisk {
    /// `size` bytes, 512-byte sectors, partition scanning on.
    pub fn new(tag: &str, size: u64) -> LoopDisk {
        Self::with_sector(tag, size, 512)
    }

    pub fn with_sector(tag: &str, size: u64, sector: u32) -> LoopDisk {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let file = std::env::temp_dir().join(format!("csi-proxy-loop-{tag}-{}-{n}.img", std::process::id()));
        let f = std::fs::File::create(&file).unwrap();
        f.set_len(size).unwrap();
        drop(f);
        // Test-only: losetup is the quickest way to a loop device here; the daemon never runs it.
        let out = Command::new("losetup")
            .args(["--find", "--show", "--partscan", "--sector-size", &sector.to_string()])
            .arg(&file)
            .output()
            .unwrap();
        assert!(out.status.success(), "losetup: {}", String::from_utf8_lossy(&out.stderr));
        let dev = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
        let name = dev.file_name().unwrap().to_str().unwrap().to_string();
        LoopDisk { file, dev, name }
    }

    /// (major, minor) from sysfs.
    pub fn devnum(&self) -> (u32, u32) {
        let s = std::fs::read_to_string(format!("/sys/class/block/{}/dev", self.name)).unwrap();
        let (a, b) = s.trim().split_once(':').unwrap();
        (a.parse().unwrap(), b.parse().unwrap())
    }

    /// The disk number the backend gives this disk.
    pub fn number(&self) -> u32 {
        let (major, minor) = self.devnum();
        (major << 20) | minor
    }

    /// Grows the backing file (the loop device sees it after a Rescan).
    pub fn grow_file(&self, size: u64) {
        std::fs::OpenOptions::new().write(true).open(&self.file).unwrap().set_len(size).unwrap();
    }
}

impl Drop for LoopDisk {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
        let _ = std::fs::remove_file(&self.file);
    }
}

pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Runs a test tool (never the daemon's way of doing things) and returns its stdout.
pub fn run(argv: &[&str]) -> String {
    let out = Command::new(argv[0]).args(&argv[1..]).output().unwrap();
    assert!(out.status.success(), "{argv:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

pub fn exists(p: &Path) -> bool {
    p.exists()
}

/// `lsblk -P` rows (`KEY="value"` pairs) as maps, for cross-checks; `args` choose the columns.
pub fn lsblk(args: &[&str]) -> Vec<std::collections::BTreeMap<String, String>> {
    let mut argv = vec!["lsblk", "-P", "-b"];
    argv.extend_from_slice(args);
    run(&argv)
        .lines()
        .map(|line| {
            let mut row = std::collections::BTreeMap::new();
            let mut rest = line.trim();
            while let Some((key, after)) = rest.split_once("=\"") {
                let (value, after) = after.split_once('"').unwrap();
                row.insert(key.trim().to_string(), value.to_string());
                rest = after;
            }
            row
        })
        .collect()
}
