#![cfg(unix)]
//! The real `csi-proxyctl` against a server whose answers carry hostile text (the real server
//! and transport on unix sockets over the memory host, whose disks, volumes and firmware serial
//! the test sets): ESC, BEL, CR LF, DEL, C1 controls and a bidi override reach no output raw, in
//! tables, warnings, errors and JSON; the JSON still decodes to the daemon's exact strings.

use csi_proxy_host::memory::SimVolume;
use csi_proxy_stack_tests::server::TestServer;
use std::process::{Command, Output, Stdio};

const CTL: &str = env!("CARGO_BIN_EXE_csi-proxyctl");

/// What a disk, a target or a firmware controls: a title and a clear (ESC, BEL), CR LF and a
/// forged line, DEL, C1 (NEL, CSI), a right-to-left override and its pop.
const HOSTILE: &str = "x\u{1b}]0;pwned\u{7}\u{1b}[2J\r\nwarning: forged\u{7f}\u{85}\u{9b}31m\u{202e}gpj.exe\u{202c}";

/// Never printed raw: control characters (C0, DEL, C1) but the line ends, and bidi formatting.
fn raw(c: char) -> bool {
    (c.is_control() && c != '\n')
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn assert_clean(what: &str, text: &str) {
    let found: Vec<char> = text.chars().filter(|c| raw(*c)).collect();
    assert!(found.is_empty(), "{what}: raw {found:?} in {text:?}");
}

async fn ctl(server: &TestServer, args: &[&str]) -> Output {
    let mut cmd = Command::new(CTL);
    cmd.arg("-socket-dir").arg(&server.dir).args(args).stdin(Stdio::null());
    tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).expect("UTF-8 output")
}

/// Disk 0's serial and page83 are hostile, and so are its two volumes' IDs: the first a volume
/// the host knows, the second one it does not (its calls fail: a warning names it).
fn hostile_server_state(server: &TestServer) -> (String, String) {
    let (known, unknown) = (format!("vol-{HOSTILE}"), format!("gone-{HOSTILE}"));
    server.host.with(|s| {
        let d = s.disks.get_mut(&0).unwrap();
        d.ids.serial_number = HOSTILE.into();
        d.ids.page83 = format!("6002{HOSTILE}");
        d.partitions.insert(1, known.clone());
        d.partitions.insert(2, unknown.clone());
        let volume = SimVolume {
            disk: 0,
            partition: 1,
            size: 1 << 20,
            used: 0,
            formatted: true,
            mounts: Default::default(),
            flushes: 0,
        };
        s.volumes.insert(known.clone(), volume);
        s.bios_serial = HOSTILE.into();
    });
    (known, unknown)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_volumes_warning_and_table_escape_the_volume_id() {
    let server = TestServer::start().await;
    let (_, unknown) = hostile_server_state(&server);
    for form in [&["volumes"][..], &["-o", "wide", "volumes"]] {
        let out = ctl(&server, form).await;
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(1), "{form:?}: {stdout}{stderr}");
        assert_clean("the table", &stdout);
        assert_clean("the warnings", &stderr);
        // One warning per failed call of the unknown volume (and the exit's error): no line forged.
        let warnings: Vec<&str> = stderr.lines().filter(|l| l.starts_with("warning: ")).collect();
        assert_eq!(warnings.len(), 2, "{stderr}");
        for w in warnings {
            assert!(
                w.starts_with(r"warning: volume gone-x\u{1b}]0;pwned\u{7}\u{1b}[2J\r\nwarning: forged\u{7f}"),
                "{w}"
            );
            assert!(w.contains(r"\u{85}\u{9b}31m\u{202e}gpj.exe\u{202c}: v1.Volume/"), "{w}");
        }
        assert_eq!(stdout.lines().count(), 3, "a header and two rows: {stdout}");
        assert!(!unknown.is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_listings_escape_del_c1_and_bidi_and_keep_the_exact_strings() {
    let server = TestServer::start().await;
    let (known, unknown) = hostile_server_state(&server);
    let out = ctl(&server, &["-o", "json", "volumes"]).await;
    let stdout = text(&out.stdout);
    assert_clean("volumes -o json", &stdout);
    assert!(
        stdout.contains(
            r#""id": "vol-x\u001b]0;pwned\u0007\u001b[2J\r\nwarning: forged\u007f\u0085\u009b31m\u202egpj.exe\u202c""#
        ),
        "{stdout}"
    );
    let volumes: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let ids: Vec<&str> = volumes.as_array().unwrap().iter().map(|v| v["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [known.as_str(), unknown.as_str()]);
    assert_clean("volumes -o json warnings", &text(&out.stderr));

    let out = ctl(&server, &["-json", "disks"]).await;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert_clean("disks -json", &stdout);
    let disks: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(disks[0]["serial_number"], HOSTILE);
    assert_eq!(disks[0]["page83"], format!("6002{HOSTILE}"));

    let out = ctl(&server, &["-o", "json", "bios-serial"]).await;
    let stdout = text(&out.stdout);
    assert_clean("bios-serial -o json", &stdout);
    let serial: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(serial["serial_number"], HOSTILE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_and_any_calls_answer_escape_the_daemons_strings() {
    let server = TestServer::start().await;
    hostile_server_state(&server);
    for form in [&["disks"][..], &["-o", "wide", "disks"], &["bios-serial"]] {
        let out = ctl(&server, form).await;
        let stdout = text(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{form:?}: {stdout}{}", text(&out.stderr));
        assert_clean(&format!("{form:?}"), &stdout);
        assert!(
            stdout.contains(r"x\u{1b}]0;pwned\u{7}\u{1b}[2J\r\nwarning: forged\u{7f}\u{85}\u{9b}31m\u{202e}gpj"),
            "{stdout}"
        );
    }
    // `call` prints the answer as JSON.
    let out = ctl(&server, &["call", "system/v1alpha1", "GetBIOSSerialNumber"]).await;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert_clean("call's answer", &stdout);
    let answer: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(answer["serial_number"], HOSTILE);
    let out = ctl(&server, &["call", "disk/v1", "ListDiskIDs"]).await;
    assert_clean("call's answer", &text(&out.stdout));
    assert!(text(&out.stdout).contains(r"forged\u007f\u0085\u009b31m\u202egpj.exe\u202c"), "{}", text(&out.stdout));
}

/// A call's error quotes the daemon's message: escaped, and bounded (this one is 8,000
/// characters, the volume ID the memory host quotes in full).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calls_error_escapes_and_bounds_the_daemons_message() {
    let server = TestServer::start().await;
    let id = format!("{HOSTILE}{}", "i".repeat(8000));
    let request = serde_json::json!({ "volume_id": id }).to_string();
    let out = ctl(&server, &["call", "volume/v1", "GetVolumeStats", &request]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_clean("the error", &stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("error: v1.Volume/GetVolumeStats: code NotFound (5): "), "{stderr}");
    assert!(stderr.contains(r"\u{9b}31m\u{202e}gpj.exe\u{202c}iii"), "{stderr}");
    assert!(stderr.chars().count() < 1500, "{} characters", stderr.chars().count());
}
