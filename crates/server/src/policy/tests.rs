//! Policies read from YAML and judged against callers and arguments.

use super::*;
use csi_proxy_host::types::TargetPortal;
use csi_proxy_wire::PodContainer;

struct NoHost;

impl Facts for NoHost {
    fn disk(&self, number: u32) -> csi_proxy_host::Result<(String, DiskLocation)> {
        let serial = if number == 2 { "DATA-2" } else { "OS-0" };
        Ok((
            serial.into(),
            DiskLocation { adapter: "0".into(), bus: "0".into(), target: number.to_string(), lun_id: "0".into() },
        ))
    }
    fn disk_of_volume(&self, volume_id: &str) -> csi_proxy_host::Result<u32> {
        match volume_id {
            "vol-on-2" => Ok(2),
            "vol-on-0" => Ok(0),
            _ => Err(csi_proxy_host::Error::NotFound(format!("volume {volume_id}"))),
        }
    }
}

const POLICY: &str = r#"
rules:
- name: azuredisk
  callers:
  - pod: {namespace: kube-system, name: "csi-azuredisk-node-*", container: azuredisk}
  allow:
  - {api: disk, versions: [v1], methods: [ListDiskLocations, PartitionDisk, GetDiskStats]}
  - {api: volume, methods: ["*"]}
  - {api: filesystem, methods: [Mkdir, CreateSymlink]}
  paths: ['C:\var\lib\kubelet\plugins\disk.csi.azure.com', 'c:\var\lib\kubelet\pods\*\volumes']
  disks: ["serial=DATA-*", "7"]
- name: smb
  callers:
  - pod: {namespace: kube-system, name: "csi-smb-node-*", image: "registry.k8s.io/sig-storage/smbplugin:*"}
  allow:
  - {api: smb, methods: [NewSmbGlobalMapping]}
  - {api: system, methods: [StartService]}
  paths: [/var/lib/kubelet/pods]
  smb_remotes: ['\\*.file.core.windows.net\*']
  services: [iscsid]
- name: admin
  callers:
  - host: {exe: /usr/bin/csi-proxyctl, user: "0"}
  allow:
  - {api: iscsi, methods: ["*"]}
  iscsi_portals: ["10.0.0.*:3260"]
"#;

fn pod(namespace: &str, name: &str, container: &str, image: &str) -> Caller {
    Caller {
        pid: Some(10),
        workload: Some(Workload::Pod(PodContainer {
            namespace: namespace.into(),
            pod: name.into(),
            container: container.into(),
            image: image.into(),
            ..PodContainer::default()
        })),
        ..Caller::default()
    }
}

fn azuredisk() -> Caller {
    pod("kube-system", "csi-azuredisk-node-abc", "azuredisk", "mcr/azuredisk:v1")
}

fn decide(caller: &Caller, service: &str, method: &str, args: &[Arg<'_>]) -> Result<String, String> {
    let policy = parse(POLICY).unwrap();
    let api = api_of(service).unwrap();
    policy.decide(Some(caller), api, method, args, &NoHost).map(str::to_string)
}

#[test]
fn a_caller_gets_what_its_rule_grants_and_nothing_else() {
    let d = azuredisk();
    assert_eq!(decide(&d, "v1.Disk", "ListDiskLocations", &[]).unwrap(), "azuredisk");
    // disk v1 only
    let e = decide(&d, "v1beta3.Disk", "ListDiskLocations", &[]).unwrap_err();
    assert!(e.contains("no rule for this caller (azuredisk) allows disk/v1beta3 ListDiskLocations"), "{e}");
    let e = decide(&d, "v1.Smb", "NewSmbGlobalMapping", &[]).unwrap_err();
    assert!(e.contains("allows smb/v1 NewSmbGlobalMapping"), "{e}");
    // Another pod's name, another namespace, another container.
    for other in [
        pod("kube-system", "csi-smb-node-x", "azuredisk", "i"),
        pod("default", "csi-azuredisk-node-abc", "azuredisk", "i"),
        pod("kube-system", "csi-azuredisk-node-abc", "liveness-probe", "i"),
    ] {
        let e = decide(&other, "v1.Disk", "ListDiskLocations", &[]).unwrap_err();
        assert!(e.contains("no rule names this caller") || e.contains("allows"), "{e}");
    }
}

#[test]
fn paths_must_be_under_a_root_as_written() {
    let d = azuredisk();
    let ok = [
        r"C:\var\lib\kubelet\plugins\disk.csi.azure.com\staging\pv1",
        r"c:/VAR/lib/kubelet/pods/123/volumes/kubernetes.io~csi/pv/mount",
        r"\\?\C:\var\lib\kubelet\plugins\disk.csi.azure.com",
        // Rooted without a drive, as the kubelet gives staging paths: on the system drive.
        r"\var\lib\kubelet\plugins\disk.csi.azure.com\staging",
    ];
    for p in ok {
        assert!(decide(&d, "v1.Filesystem", "Mkdir", &[Arg::Path(p)]).is_ok(), "{p}");
    }
    for p in [
        r"C:\var\lib\kubelet\plugins\file.csi.azure.com\x",
        r"C:\var\lib\kubelet\plugins\disk.csi.azure.com\..\..\..\Windows",
        r"C:\var\lib\kubelet\pods\123",
        r"D:\var\lib\kubelet\plugins\disk.csi.azure.com",
        "/var/lib/kubelet/plugins/disk.csi.azure.com",
        "relative\\path",
    ] {
        let e = decide(&d, "v1.Filesystem", "Mkdir", &[Arg::Path(p)]).unwrap_err();
        assert!(e.contains("azuredisk") && e.contains("path"), "{p}: {e}");
    }
    // Both paths of a link are judged.
    let inside = r"C:\var\lib\kubelet\plugins\disk.csi.azure.com\a";
    let e = decide(&d, "v1.Filesystem", "CreateSymlink", &[Arg::Path(inside), Arg::Path(r"C:\Windows")]).unwrap_err();
    assert!(e.contains(r#"C:\\Windows"#), "{e}");
    // POSIX paths compare with case.
    let s = pod("kube-system", "csi-smb-node-1", "smb", "registry.k8s.io/sig-storage/smbplugin:v1");
    let remote = || Arg::Remote(r"\\acct.file.core.windows.net\share".into());
    assert!(decide(&s, "v1.Smb", "NewSmbGlobalMapping", &[remote(), Arg::Path("/var/lib/kubelet/pods/x")]).is_ok());
    assert!(decide(&s, "v1.Smb", "NewSmbGlobalMapping", &[remote(), Arg::Path("/VAR/lib/kubelet/pods/x")]).is_err());
}

#[test]
fn disks_and_volumes_are_judged_by_number_serial_or_location() {
    let d = azuredisk();
    assert!(decide(&d, "v1.Disk", "PartitionDisk", &[Arg::Disk(2)]).is_ok(), "serial DATA-2");
    assert!(decide(&d, "v1.Disk", "PartitionDisk", &[Arg::Disk(7)]).is_ok(), "by number");
    let e = decide(&d, "v1.Disk", "PartitionDisk", &[Arg::Disk(0)]).unwrap_err();
    assert!(e.contains("does not admit disk 0 (its disks)"), "{e}");
    assert!(decide(&d, "v1.Volume", "FormatVolume", &[Arg::Volume("vol-on-2")]).is_ok());
    let e = decide(&d, "v1.Volume", "FormatVolume", &[Arg::Volume("vol-on-0")]).unwrap_err();
    assert!(e.contains("on disk 0"), "{e}");
    let e = decide(&d, "v1.Volume", "FormatVolume", &[Arg::Volume("gone")]).unwrap_err();
    assert!(e.contains("could not be found"), "{e}");
}

#[test]
fn shares_services_portals_and_host_callers() {
    let s = pod("kube-system", "csi-smb-node-1", "smb", "registry.k8s.io/sig-storage/smbplugin:v1");
    assert!(decide(&s, "v1.Smb", "NewSmbGlobalMapping", &[Arg::Remote("//ACCT.file.core.windows.net/share".into())])
        .is_ok());
    assert!(decide(&s, "v1.Smb", "NewSmbGlobalMapping", &[Arg::Remote(r"\\evil.example\share".into())]).is_err());
    // A * does not span a separator: a share under another host's path is not matched.
    assert!(decide(&s, "v1.Smb", "NewSmbGlobalMapping", &[Arg::Remote(r"\\evil\x\a.file.core.windows.net\s".into())])
        .is_err());
    assert!(decide(&s, "v1alpha1.System", "StartService", &[Arg::Service("ISCSID")]).is_ok());
    assert!(decide(&s, "v1alpha1.System", "StartService", &[Arg::Service("kubelet")]).is_err());
    let wrong_image = pod("kube-system", "csi-smb-node-1", "smb", "evil/smbplugin:v1");
    assert!(decide(&wrong_image, "v1alpha1.System", "StartService", &[Arg::Service("iscsid")]).is_err());

    let admin = Caller {
        uid: Some(0),
        exe: Some("/usr/bin/csi-proxyctl".into()),
        workload: Some(Workload::Host),
        ..Caller::default()
    };
    let portal = TargetPortal { address: "10.0.0.5".into(), port: 3260 };
    assert!(decide(&admin, "v1alpha2.Iscsi", "AddTargetPortal", &[Arg::Portal(&portal)]).is_ok());
    let far = TargetPortal { address: "192.168.1.1".into(), port: 3260 };
    assert!(decide(&admin, "v1alpha2.Iscsi", "AddTargetPortal", &[Arg::Portal(&far)]).is_err());
    let other_user = Caller { uid: Some(1000), ..admin.clone() };
    assert!(decide(&other_user, "v1alpha2.Iscsi", "AddTargetPortal", &[Arg::Portal(&portal)]).is_err());
    // A caller that could not be named, or a host process claiming a pod's name, matches nothing.
    let unknown = Caller { workload: Some(Workload::Unknown { why: "no runtime".into() }), ..admin.clone() };
    assert!(decide(&unknown, "v1alpha2.Iscsi", "AddTargetPortal", &[Arg::Portal(&portal)]).is_err());
    let not_resolved = Caller { workload: None, ..admin };
    assert!(decide(&not_resolved, "v1alpha2.Iscsi", "AddTargetPortal", &[Arg::Portal(&portal)]).is_err());
}

#[test]
fn faults_in_the_file_name_their_line_and_field() {
    let cases = [
        ("rules:\n- name: a\n  callers: [{pod: {namespace: x}}]\n  allow:\n  - {api: dsk, methods: [X]}\n", "line 5, api: \"dsk\" is no API group"),
        ("rules:\n- name: a\n  callers: [{pod: {namespace: x}}]\n  allow:\n  - api: disk\n    methods:\n    - PartitionDisks\n", "line 7, methods: disk has no method \"PartitionDisks\""),
        ("rules:\n- name: a\n  callers: [{pod: {namespace: x}}]\n  allow:\n  - {api: disk, versions: [v2], methods: ['*']}\n", "line 5, versions: disk has no version \"v2\""),
        ("rules:\n- name: a\n  callers: [{pod: {namespace: x}}]\n  allow: []\n  disks: [\"serial=\"]\n", "line 5, disks:"),
        ("rules:\n- name: a\n  callers: [{pod: {namespace: x}}]\n  allow: []\n  paths: [relative]\n", "line 5, paths: \"relative\": not an absolute path"),
        ("rules:\n- name: a\n  callers: []\n  allow: []\n", "line 2, callers: a rule needs at least one caller"),
        ("rules:\n- name: a\n  callers: [{pod: {namespace: x}}]\n  allow: []\n- name: a\n  callers: [{pod: {namespace: x}}]\n  allow: []\n", "line 5, name: a second rule named \"a\""),
    ];
    for (text, expected) in cases {
        let e = parse(text).unwrap_err().to_string();
        assert!(e.contains(expected), "{e}\n  expected: {expected}");
    }
    // A misspelt field is named, with its line.
    let e = parse("rules:\n- name: a\n  callers: [{pod: {namespace: x}}]\n  allow: []\n  path: [/x]\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("path") && e.contains('5'), "{e}");
    let e =
        parse("rules:\n- name: a\n  callers: [{pod: {namespace: x, nmae: y}}]\n  allow: []\n").unwrap_err().to_string();
    assert!(e.contains("nmae"), "{e}");
}

#[test]
fn the_authorizer_enforces_or_warns_and_takes_a_new_policy_whole() {
    let a = Authorizer::new(parse(POLICY).unwrap(), Mode::Enforce);
    let d = azuredisk();
    let v = a.check(Some(&d), "v1.Disk", "PartitionDisk", &[Arg::Disk(0)], &NoHost);
    let Verdict::Denied { why, enforced: true } = v else { panic!("{v:?}") };
    assert!(why.contains("pod=kube-system/csi-azuredisk-node-abc container=azuredisk"), "{why}");
    a.replace(parse("rules:\n- name: all\n  callers: [{pod: {namespace: '*'}}]\n  allow: [{api: disk, methods: ['*']}]\n  disks: ['*']\n").unwrap());
    assert_eq!(
        a.check(Some(&d), "v1.Disk", "PartitionDisk", &[Arg::Disk(0)], &NoHost),
        Verdict::Granted { rule: "all".into() }
    );
    let w = Authorizer::new(parse(POLICY).unwrap(), Mode::Warn);
    assert!(matches!(
        w.check(Some(&d), "v1.Disk", "PartitionDisk", &[Arg::Disk(0)], &NoHost),
        Verdict::Denied { enforced: false, .. }
    ));
}

#[test]
fn what_the_host_acts_on_is_judged_not_only_the_text() {
    // A share is mapped and removed whole: a rule for one folder of it does not admit it.
    assert_eq!(share_root(r"\\fs\share\team-a\x"), r"\\fs\share");
    assert_eq!(share_root("//fs/share"), r"\\fs\share");
    let policy = "rules:\n- name: team\n  callers: [{pod: {namespace: ns}}]\n  allow: [{api: smb, methods: ['*']}, {api: iscsi, methods: ['*']}, {api: filesystem, methods: ['*']}]\n  smb_remotes: ['\\\\fs\\share\\team-a\\*']\n  iscsi_portals: ['10.0.0.*:3260']\n  paths: ['C:\\plugins\\disk.csi.azure.com']\n";
    let policy = parse(policy).unwrap();
    let caller = pod("ns", "p", "c", "i");
    let decide = |service: &str, method: &str, args: &[Arg<'_>]| {
        policy.decide(Some(&caller), api_of(service).unwrap(), method, args, &NoHost).map(str::to_string)
    };
    let remove = crate::ops::smb::RemoveSmbGlobalMapping { remote_path: r"\\fs\share\team-a\x".into() };
    let e = decide("v1.Smb", "RemoveSmbGlobalMapping", &args::Args::args(&remove)).unwrap_err();
    assert!(e.contains(r#"SMB share "\\\\fs\\share""#), "{e}");
    // A * in a portal pattern stays within one part of the address.
    let near = TargetPortal { address: "10.0.0.7".into(), port: 3260 };
    let far = TargetPortal { address: "10.0.0.evil.example".into(), port: 3260 };
    assert!(decide("v1alpha2.Iscsi", "AddTargetPortal", &[Arg::Portal(&near)]).is_ok());
    assert!(decide("v1alpha2.Iscsi", "AddTargetPortal", &[Arg::Portal(&far)]).is_err());
    // Names compare as NTFS compares them: the Kelvin sign is not K.
    assert!(decide("v1.Filesystem", "Mkdir", &[Arg::Path(r"C:\PLUGINS\DISK.csi.azure.com\x")]).is_ok());
    assert!(decide("v1.Filesystem", "Mkdir", &[Arg::Path("C:\\plugins\\dis\u{212A}.csi.azure.com\\x")]).is_err());
}
