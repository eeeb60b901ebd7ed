//! The example policies of deploy/policies/ against the driver flows (crate::flows) on the
//! scripted Windows node of driver_flows_scripted.rs, through the real server with its
//! authorizer in force and each call made as a driver's pod.
//!
//! - Each file parses, and grants exactly the methods its driver's flows call (no more, no
//!   fewer), each version named.
//! - Every flow of a driver passes under its own policy as that driver's pod: nothing refused,
//!   nothing only logged.
//! - Another driver's pod doing this driver's flows under its own policy (what a compromised
//!   or misused driver would try) is refused at the first call that policy does not cover: a
//!   method it does not grant or a path outside its roots. The refusal is PermissionDenied and
//!   names the pod; every call before it runs.
//! - A pod no rule names is refused its first call.

#![cfg(unix)]
// The scripted node is included whole; these tests use part of it.
#![allow(dead_code)]

include!("support/scripted_windows.rs");

use csi_proxy_server::policy::{Authorizer, Mode};
use csi_proxy_stack_tests::Answer as Reply;
use csi_proxy_wire::{Caller, PodContainer, Workload};

/// deploy/policies/.
fn policies_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/policies")
}

/// One persistent volume name for every driver, so that the drivers' paths differ only where
/// their names are in them (the staging folder under `plugins\kubernetes.io\csi\<driver>\`).
const PV: &str = "pvc-5e1c0d9a";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Driver {
    AzureDisk,
    AzureFile,
    Smb,
    GcePd,
    Ebs,
    VSphere,
}

const DRIVERS: [Driver; 6] =
    [Driver::AzureDisk, Driver::AzureFile, Driver::Smb, Driver::GcePd, Driver::Ebs, Driver::VSphere];

impl Driver {
    /// Its file in deploy/policies/, without `.yaml`.
    fn file(self) -> &'static str {
        match self {
            Driver::AzureDisk => "azuredisk",
            Driver::AzureFile => "azurefile",
            Driver::Smb => "smb",
            Driver::GcePd => "gce-pd",
            Driver::Ebs => "ebs",
            Driver::VSphere => "vsphere",
        }
    }

    /// The CSI driver name, as the kubelet names the driver's staging folder.
    fn csi_name(self) -> &'static str {
        match self {
            Driver::AzureDisk => "disk.csi.azure.com",
            Driver::AzureFile => "file.csi.azure.com",
            Driver::Smb => "smb.csi.k8s.io",
            Driver::GcePd => "pd.csi.storage.gke.io",
            Driver::Ebs => "ebs.csi.aws.com",
            Driver::VSphere => "csi.vsphere.vmware.com",
        }
    }

    /// A pod of the driver's Windows node DaemonSet, as the container runtime names it (the
    /// manifests each policy file cites).
    fn pod(self) -> PodContainer {
        let (namespace, pod, container, image) = match self {
            Driver::AzureDisk => (
                "kube-system",
                "csi-azuredisk-node-win-8x2kq",
                "azuredisk",
                "mcr.microsoft.com/oss/kubernetes-csi/azuredisk-csi:v1.34.5",
            ),
            Driver::AzureFile => (
                "kube-system",
                "csi-azurefile-node-win-4mzt7",
                "azurefile",
                "mcr.microsoft.com/oss/kubernetes-csi/azurefile-csi:v1.35.7",
            ),
            Driver::Smb => {
                ("kube-system", "csi-smb-node-win-q9w3d", "smb", "registry.k8s.io/sig-storage/smbplugin:v1.20.3")
            }
            Driver::GcePd => (
                "gce-pd-csi-driver",
                "csi-gce-pd-node-win-h7c5n",
                "gce-pd-driver",
                "registry.k8s.io/cloud-provider-gcp/gcp-compute-persistent-disk-csi-driver:v1.20.0",
            ),
            Driver::Ebs => (
                "kube-system",
                "ebs-csi-node-windows-z2p6r",
                "ebs-plugin",
                "public.ecr.aws/ebs-csi-driver/aws-ebs-csi-driver:v1.64.0",
            ),
            Driver::VSphere => (
                "vmware-system-csi",
                "vsphere-csi-node-windows-b4k8s",
                "vsphere-csi-node",
                "registry.k8s.io/csi-vsphere/driver:v3.4.0",
            ),
        };
        PodContainer {
            namespace: namespace.into(),
            pod: pod.into(),
            pod_uid: "6f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0".into(),
            container: container.into(),
            container_id: "4f9c".repeat(16),
            image: image.into(),
        }
    }

    fn caller(self) -> Arc<Caller> {
        Arc::new(Caller { pid: Some(4242), workload: Some(Workload::Pod(self.pod())), ..Caller::default() })
    }

    fn policy_text(self) -> String {
        let path = policies_dir().join(format!("{}.yaml", self.file()));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn variants(self) -> &'static [Variant] {
        match self {
            Driver::AzureDisk => &[Variant::AzureDisk, Variant::AzureDiskV1_34, Variant::AzureDiskV1beta],
            Driver::AzureFile => &[Variant::AzureFile, Variant::AzureFileV1beta],
            Driver::Smb => &[Variant::Smb, Variant::SmbEphemeral, Variant::SmbV1beta],
            Driver::GcePd => &[Variant::GcePd, Variant::GcePdMaster, Variant::GcePdV1beta],
            Driver::Ebs => &[Variant::Ebs, Variant::EbsV1_64],
            Driver::VSphere => &[Variant::VSphere],
        }
    }
}

/// One release's node flows of a driver, as driver_flows_scripted.rs runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    AzureDisk,
    AzureDiskV1_34,
    AzureDiskV1beta,
    AzureFile,
    AzureFileV1beta,
    Smb,
    SmbEphemeral,
    SmbV1beta,
    GcePd,
    GcePdMaster,
    GcePdV1beta,
    Ebs,
    EbsV1_64,
    VSphere,
}

type Stepped = std::result::Result<(), (&'static str, flows::Failure)>;

/// The RPC `name`'s outcome, or the step that failed.
fn step<T>(name: &'static str, r: flows::Outcome<T>) -> std::result::Result<T, (&'static str, flows::Failure)> {
    r.map_err(|f| (name, f))
}

/// Runs `variant`'s node RPCs in the kubelet's order (stage, publish, stats, expand, unpublish,
/// unstage, as each release has them) on `w`, stopping at the first that fails.
async fn run(variant: Variant, w: &Win, p: &mut Proxy) -> Stepped {
    let node = &w.node;
    let local = ModelLocal(w.machine.clone());
    match variant {
        Variant::AzureDisk => {
            let v = w.block_volume(Driver::AzureDisk.csi_name(), PV);
            step("NodeStageVolume", azuredisk::stage(p, node, &v).await)?;
            step("NodePublishVolume", azuredisk::publish(p, node, &v).await)?;
            step("NodeGetVolumeStats", azuredisk::stats(p, &v).await)?;
            w.machine().disk_size = 20 * GIB;
            step("NodeExpandVolume", azuredisk::expand(p, node, &v, 19 * GIB as i64).await)?;
            step("NodeUnpublishVolume", azuredisk::unpublish(p, node, &v).await)?;
            step("NodeUnstageVolume", azuredisk::unstage(p, node, &v).await)?;
        }
        Variant::AzureDiskV1_34 => {
            {
                let mut m = w.machine();
                larger_clone(&mut m);
                m.identities.push(Identity { number: DISK, lun: "3", page83: None, serial: None });
            }
            let v = w.block_volume(Driver::AzureDisk.csi_name(), PV);
            step("getDevicePathWithLUN", azuredisk::v1_34::find_disk_by_lun(p, "3").await)?;
            step("NodeStageVolume", azuredisk::v1_34::stage(p, node, &local, &v, "3").await)?;
            step("NodePublishVolume", azuredisk::v1_34::publish(p, node, &local, &v).await)?;
            step("NodeGetVolumeStats", azuredisk::stats(p, &v).await)?;
            step("NodeExpandVolume", azuredisk::v1_34::expand(p, node, &v, 10 * GIB as i64).await)?;
            step("NodeUnpublishVolume", azuredisk::unpublish(p, node, &v).await)?;
            step("NodeUnstageVolume", azuredisk::unstage(p, node, &v).await)?;
        }
        Variant::AzureDiskV1beta => {
            w.machine().identities.push(Identity { number: DISK, lun: "3", page83: None, serial: None });
            let v = w.block_volume(Driver::AzureDisk.csi_name(), PV);
            let disk = step("getDevicePathWithLUN", azuredisk::v1beta::find_disk_by_lun(p, "3").await)?;
            step("NodeStageVolume", azuredisk::v1beta::stage(p, node, &disk, &v).await)?;
            step("NodePublishVolume", azuredisk::v1beta::publish(p, node, &v).await)?;
            step("NodeGetVolumeStats", azuredisk::v1beta::stats(p, &v).await)?;
            step("NodeUnpublishVolume", azuredisk::v1beta::unpublish(p, node, &v).await)?;
            step("NodeUnstageVolume", azuredisk::v1beta::unstage(p, node, &v).await)?;
        }
        Variant::AzureFile | Variant::AzureFileV1beta => {
            let s = w.share(Driver::AzureFile.csi_name(), r"\\acct.file.core.windows.net\share", r"AZURE\acct");
            let d = smb::Driver::AzureFile;
            if variant == Variant::AzureFile {
                step("NodeStageVolume", smb::stage(p, node, &local, d, &s).await)?;
                step("NodePublishVolume", smb::publish(p, node, &local, d, &s).await)?;
                step("NodeUnpublishVolume", smb::unpublish(p, node, &s).await)?;
                step("NodeUnstageVolume", smb::unstage(p, node, &local, d, &s).await)?;
            } else {
                step("NodeStageVolume", smb::v1beta::stage(p, node, &local, d, &s).await)?;
                step("NodePublishVolume", smb::v1beta::publish(p, node, &local, &s).await)?;
                step("NodeUnpublishVolume", smb::v1beta::unpublish(p, node, &s).await)?;
                step("NodeUnstageVolume", smb::v1beta::unstage(p, node, &s).await)?;
            }
        }
        Variant::Smb | Variant::SmbV1beta => {
            let s = w.share(Driver::Smb.csi_name(), "//fileserver/share/dir/", r"CONTOSO\kube");
            let d = smb::Driver::Smb;
            if variant == Variant::Smb {
                step("NodeStageVolume", smb::stage(p, node, &local, d, &s).await)?;
                step("NodePublishVolume", smb::publish(p, node, &local, d, &s).await)?;
                step("NodeUnpublishVolume", smb::unpublish(p, node, &s).await)?;
                step("NodeUnstageVolume", smb::unstage(p, node, &local, d, &s).await)?;
            } else {
                step("NodeStageVolume", smb::v1beta::stage(p, node, &local, d, &s).await)?;
                step("NodePublishVolume", smb::v1beta::publish(p, node, &local, &s).await)?;
                step("NodeUnpublishVolume", smb::v1beta::unpublish(p, node, &s).await)?;
                step("NodeUnstageVolume", smb::v1beta::unstage(p, node, &s).await)?;
            }
        }
        Variant::SmbEphemeral => {
            let e = w.share(Driver::Smb.csi_name(), "//fileserver/share/inline", r"CONTOSO\kube");
            step("NodePublishVolume (ephemeral)", smb::publish_ephemeral(p, node, &local, &e).await)?;
            step("NodeUnpublishVolume (ephemeral)", smb::unpublish(p, node, &e).await)?;
        }
        Variant::GcePd => {
            let v = w.block_volume(Driver::GcePd.csi_name(), PV);
            step("NodeStageVolume", gce_pd::stage(p, &v).await)?;
            step("NodePublishVolume", gce_pd::publish(p, node, &local, &v).await)?;
            step("NodeGetVolumeStats", gce_pd::stats(p, &v).await)?;
            w.machine().disk_size = 20 * GIB;
            step("NodeExpandVolume", gce_pd::expand(p, &v, 20 * GIB as i64).await)?;
            step("NodeUnpublishVolume", gce_pd::unpublish(p, node, &v).await)?;
            step("NodeUnstageVolume", gce_pd::unstage(p, node, &v).await)?;
        }
        Variant::GcePdMaster => {
            w.machine().identities.push(Identity {
                number: DISK,
                lun: "2",
                page83: Some((CODE_SET_ASCII, format!("Google  {PV}").into_bytes())),
                serial: Some(PV),
            });
            let v = w.block_volume(Driver::GcePd.csi_name(), PV);
            step("GetDiskNumber", gce_pd::master::disk_number_by_page83(p, PV).await)?;
            step("NodeStageVolume", gce_pd::master::stage(p, &v, Some(10)).await)?;
            step("NodePublishVolume", gce_pd::master::publish(p, node, &local, &v).await)?;
            step("NodeGetVolumeStats", gce_pd::stats(p, &v).await)?;
            step("NodeUnpublishVolume", gce_pd::unpublish(p, node, &v).await)?;
            step("NodeUnstageVolume", gce_pd::unstage(p, node, &v).await)?;
        }
        Variant::GcePdV1beta => {
            w.machine().identities.push(Identity {
                number: DISK,
                lun: "2",
                page83: Some((CODE_SET_ASCII, format!("Google  {PV}").into_bytes())),
                serial: Some(PV),
            });
            let v = w.block_volume(Driver::GcePd.csi_name(), PV);
            let disk = step("GetDiskNumber", gce_pd::v1beta::disk_number_by_page83(p, PV).await)?;
            step("NodeStageVolume", gce_pd::v1beta::stage(p, &disk, &v).await)?;
            step("NodePublishVolume", gce_pd::v1beta::publish(p, node, &local, &v).await)?;
            step("NodeUnpublishVolume", gce_pd::v1beta::unpublish(p, node, &v).await)?;
            step("NodeUnstageVolume", gce_pd::v1beta::unstage(p, node, &v).await)?;
        }
        Variant::Ebs => {
            let v = w.block_volume(Driver::Ebs.csi_name(), PV);
            step("NodeStageVolume", ebs::stage(p, node, &v).await)?;
            step("NodePublishVolume", ebs::publish(p, node, &v).await)?;
            step("NodeGetVolumeStats", ebs::stats_exists(p, node, &v).await)?;
            w.machine().disk_size = 20 * GIB;
            step("NodeExpandVolume", ebs::expand(p, node, &v).await)?;
            step("NodeUnpublishVolume", ebs::unpublish(p, node, &v).await)?;
            step("NodeUnstageVolume", ebs::unstage(p, node, &v).await)?;
        }
        Variant::EbsV1_64 => {
            w.machine().identities.push(Identity {
                number: DISK,
                lun: "1",
                page83: Some((CODE_SET_BINARY, vec![0x60, 0x0d, 0x02, 0x31])),
                serial: Some("vol0123456789abcdef0"),
            });
            let v = w.block_volume(Driver::Ebs.csi_name(), PV);
            let id = "vol-0123456789abcdef0";
            let open = || w.server.channel(Group::Disk, "v1");
            step("NodeStageVolume", ebs::v1_64::stage(p, open(), node, &v, "/dev/xvdba", id).await)?;
            step("NodePublishVolume", ebs::publish(p, node, &v).await)?;
            w.machine().disk_size = 20 * GIB;
            step("NodeExpandVolume", ebs::v1_64::expand(p, open(), node, &v, id).await)?;
            step("NodeUnpublishVolume", ebs::unpublish(p, node, &v).await)?;
            step("NodeUnstageVolume", ebs::unstage(p, node, &v).await)?;
        }
        Variant::VSphere => {
            let naa = [0x60, 0x00, 0xc2, 0x9b, 0x1a, 0x2b, 0x3c, 0x4d, 0x5e, 0x6f, 0x70, 0x81, 0x92, 0xa3, 0xb4, 0xc5];
            w.machine().identities.push(Identity {
                number: DISK,
                lun: "1",
                page83: Some((CODE_SET_BINARY, naa.to_vec())),
                serial: Some("6000c29b1a2b3c4d5e6f708192a3b4c5"),
            });
            let v = w.block_volume(Driver::VSphere.csi_name(), PV);
            step("NodeGetInfo", vsphere::node_info(p).await)?;
            step("GetDiskNumber", vsphere::disk_number(p, "6000c29b1a2b3c4d5e6f708192a3b4c5").await)?;
            step("NodeStageVolume", vsphere::stage(p, node, &v).await)?;
            step("NodePublishVolume", vsphere::publish(p, node, &v).await)?;
            step("NodeGetVolumeStats", vsphere::stats(p, &v).await)?;
            w.machine().disk_size = 20 * GIB;
            // The disk grew already: nothing to do; then a request past it: the volume is grown.
            step("NodeExpandVolume", vsphere::expand(p, node, &v, 20 * GIB as i64).await)?;
            step("NodeExpandVolume (past the disk)", vsphere::expand(p, node, &v, 21 * GIB as i64).await)?;
            step("NodeUnpublishVolume", vsphere::unpublish(p, node, &v).await)?;
            step("NodeUnstageVolume", vsphere::unstage(p, node, &v).await)?;
        }
    }
    Ok(())
}

/// What one run of a variant did.
struct Run {
    calls: Vec<String>,
    warnings: Vec<String>,
    outcome: Stepped,
    answers: Vec<Reply>,
}

/// `variant` on a fresh node: with no authorizer, or with `policy` in force (enforced) and every
/// call made as `caller`.
async fn run_on_fresh_node(variant: Variant, authz: Option<(Arc<Caller>, &str)>) -> Run {
    let authz = authz.map(|(caller, text)| {
        let policy = csi_proxy_server::policy::parse(text).expect("the policy parses");
        (caller, Arc::new(Authorizer::new(policy, Mode::Enforce)))
    });
    let w = Win::start_as(authz).await;
    let mut p = w.legacy_proxy().await;
    let outcome = run(variant, &w, &mut p).await;
    let answers = w.server.answers.lock().unwrap().clone();
    Run { calls: std::mem::take(&mut p.calls), warnings: std::mem::take(&mut p.warnings), outcome, answers }
}

/// The calls `variant` makes with no policy (they do not vary: each run is on a fresh node),
/// run once for every test of this process that asks.
async fn calls_with_no_policy(variant: Variant) -> Vec<String> {
    static SEEN: Mutex<BTreeMap<String, Vec<String>>> = Mutex::new(BTreeMap::new());
    let key = format!("{variant:?}");
    if let Some(calls) = SEEN.lock().unwrap().get(&key) {
        return calls.clone();
    }
    let r = run_on_fresh_node(variant, None).await;
    assert_eq!(r.outcome, Ok(()), "{variant:?} with no policy: {:#?}", r.calls);
    assert!(r.warnings.is_empty(), "{variant:?} with no policy logged {:#?}", r.warnings);
    SEEN.lock().unwrap().insert(key, r.calls.clone());
    r.calls
}

/// `group/version.Method` of a recorded call line.
fn method_of(line: &str) -> &str {
    line.split(' ').next().unwrap()
}

/// The gRPC path of a recorded call line (`/v1.Filesystem/PathExists`).
fn grpc_path(line: &str) -> String {
    let (api, method) = method_of(line).split_once('.').unwrap();
    let (group, version) = api.split_once('/').unwrap();
    let api = APIS.iter().find(|a| a.group.name() == group && a.version == version).unwrap();
    format!("/{}/{method}", api.service_name())
}

/// A policy file as data (the fields these tests read).
#[derive(serde::Deserialize)]
struct PolicyFile {
    rules: Vec<RuleFile>,
}

#[derive(serde::Deserialize)]
struct RuleFile {
    name: String,
    allow: Vec<AllowFile>,
    #[serde(default)]
    paths: Vec<String>,
}

#[derive(serde::Deserialize)]
struct AllowFile {
    api: String,
    #[serde(default)]
    versions: Vec<String>,
    methods: Vec<String>,
}

fn policy_file(d: Driver) -> PolicyFile {
    serde_saphyr::from_str(&d.policy_text()).unwrap_or_else(|e| panic!("{}.yaml: {e}", d.file()))
}

/// The methods `d`'s policy grants, as `group/version.Method`.
fn granted(d: Driver) -> BTreeSet<String> {
    let mut all = BTreeSet::new();
    for rule in policy_file(d).rules {
        for a in rule.allow {
            assert!(!a.versions.is_empty(), "{}.yaml: {} names no version", d.file(), a.api);
            for v in &a.versions {
                for m in &a.methods {
                    assert_ne!(m, "*", "{}.yaml: {}/{v} grants every method", d.file(), a.api);
                    all.insert(format!("{}/{v}.{m}", a.api));
                }
            }
        }
    }
    all
}

/// Whether `path` is at or under `root`, segment by segment (a `*` segment stands for any
/// one), Windows-style: without case, either separator. A path without a drive is on C:, as the
/// drivers' containers and the daemon see it.
fn under(root: &str, path: &str) -> bool {
    let parts = |p: &str| -> Vec<String> {
        let p = if p.starts_with('\\') && !p.starts_with(r"\\") { format!("c:{p}") } else { p.to_owned() };
        p.split(['\\', '/']).filter(|s| !s.is_empty()).map(str::to_lowercase).collect()
    };
    let (root, path) = (parts(root), parts(path));
    path.len() >= root.len() && root.iter().zip(&path).all(|(r, p)| r == "*" || r == p)
}

/// The paths a recorded call line names (its arguments that are drive paths or rooted
/// without a drive; volume IDs and shares start with `\\`).
fn paths_in(line: &str) -> Vec<&str> {
    line.split(' ')
        .skip(1)
        .filter(|a| {
            let b = a.as_bytes();
            (b.len() > 2 && b[0].is_ascii_alphabetic() && b[1] == b':')
                || (a.starts_with('\\') && !a.starts_with(r"\\"))
        })
        .collect()
}

/// Whether the policy of `d` covers the recorded call `line`: it grants the method and every
/// path the call names is under one of its roots.
fn covers(d: Driver, line: &str) -> bool {
    let roots: Vec<String> = policy_file(d).rules.into_iter().flat_map(|r| r.paths).collect();
    granted(d).contains(method_of(line)) && paths_in(line).iter().all(|p| roots.iter().any(|r| under(r, p)))
}

/// What a refusal of `d`'s pod says first.
fn refusal_prefix(d: Driver) -> String {
    format!("authorization policy: {}: ", Workload::Pod(d.pod()))
}

#[test]
fn every_policy_file_parses() {
    let mut files: Vec<String> = std::fs::read_dir(policies_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    files.sort();
    let mut expected: Vec<String> = DRIVERS.iter().map(|d| format!("{}.yaml", d.file())).collect();
    expected.sort();
    assert_eq!(files, expected, "deploy/policies/ has a file for each driver, and no other");
    for d in DRIVERS {
        let policy = csi_proxy_server::policy::parse(&d.policy_text())
            .unwrap_or_else(|e| panic!("deploy/policies/{}.yaml: {e}", d.file()));
        assert_eq!(policy.rule_count(), 1, "{}.yaml: one rule", d.file());
        let file = policy_file(d);
        assert_eq!(file.rules[0].name, d.file());
    }
}

/// A typo in a policy is refused with its line: the checks the test above relies on.
#[test]
fn a_policy_with_a_typo_is_refused() {
    let text = Driver::AzureDisk.policy_text().replacen("PartitionDisk", "PartitonDisk", 1);
    let e = csi_proxy_server::policy::parse(&text).unwrap_err();
    assert!(e.0.contains("line ") && e.0.contains("PartitonDisk"), "{e}");
}

/// Each policy grants exactly the methods (each version named) its driver's flows call.
#[tokio::test]
async fn each_policy_grants_exactly_the_methods_its_flows_call() {
    let mut wrong = Vec::new();
    for d in DRIVERS {
        let mut called = BTreeSet::new();
        for &v in d.variants() {
            called.extend(calls_with_no_policy(v).await.iter().map(|c| method_of(c).to_owned()));
        }
        let granted = granted(d);
        let extra: Vec<_> = granted.difference(&called).collect();
        let missing: Vec<_> = called.difference(&granted).collect();
        if !extra.is_empty() || !missing.is_empty() {
            wrong.push(format!(
                "{}.yaml grants {extra:?} that no flow calls, and not {missing:?} that they call",
                d.file()
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Every flow of `d`, as its pod under its policy: nothing refused, nothing only logged.
async fn passes_under_its_own_policy(d: Driver) {
    let text = d.policy_text();
    for &v in d.variants() {
        let r = run_on_fresh_node(v, Some((d.caller(), &text))).await;
        let refused: Vec<&Reply> = r.answers.iter().filter(|a| a.code == Code::PermissionDenied).collect();
        assert!(refused.is_empty(), "{v:?} under {}.yaml: refused {refused:#?}", d.file());
        assert_eq!(r.outcome, Ok(()), "{v:?} under {}.yaml: {:#?}", d.file(), r.calls);
        assert!(r.warnings.is_empty(), "{v:?} under {}.yaml logged {:#?}", d.file(), r.warnings);
        assert_eq!(r.answers.len(), r.calls.len(), "every call reached the server");
        // And the test's own reading of the policy agrees.
        for c in &r.calls {
            assert!(covers(d, c), "{}.yaml does not cover {c}", d.file());
        }
    }
}

/// This driver passes on staging paths rooted without a drive (`\var\lib\kubelet\...`, as the
/// kubelet sends them): the policy judges them on the system drive, where the host puts them.
#[tokio::test]
async fn azuredisk_flows_pass_under_its_policy() {
    passes_under_its_own_policy(Driver::AzureDisk).await;
}

#[tokio::test]
async fn azurefile_flows_pass_under_its_policy() {
    passes_under_its_own_policy(Driver::AzureFile).await;
}

#[tokio::test]
async fn smb_flows_pass_under_its_policy() {
    passes_under_its_own_policy(Driver::Smb).await;
}

/// This driver passes on staging paths rooted without a drive (`\var\lib\kubelet\...`, as the
/// kubelet sends them): the policy judges them on the system drive, where the host puts them.
#[tokio::test]
async fn gce_pd_flows_pass_under_its_policy() {
    passes_under_its_own_policy(Driver::GcePd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ebs_flows_pass_under_its_policy() {
    passes_under_its_own_policy(Driver::Ebs).await;
}

#[tokio::test]
async fn vsphere_flows_pass_under_its_policy() {
    passes_under_its_own_policy(Driver::VSphere).await;
}

/// `owner`'s pod, under `owner`'s policy, doing each other driver's flows: the first call the
/// policy does not cover is refused, PermissionDenied naming the pod, and every call before it
/// ran as it does with no policy.
async fn refuses_the_other_drivers_flows(owner: Driver) {
    let text = owner.policy_text();
    for d in DRIVERS.into_iter().filter(|&d| d != owner) {
        for &v in d.variants() {
            let free = calls_with_no_policy(v).await;
            let first = free
                .iter()
                .position(|c| !covers(owner, c))
                .unwrap_or_else(|| panic!("{}.yaml covers every call of {v:?}: {free:#?}", owner.file()));
            let r = run_on_fresh_node(v, Some((owner.caller(), &text))).await;
            let at = r
                .answers
                .iter()
                .position(|a| a.code == Code::PermissionDenied)
                .unwrap_or_else(|| panic!("{v:?} as {owner:?}'s pod: nothing refused; answers {:#?}", r.answers));
            assert_eq!(
                at,
                first,
                "{v:?} as {owner:?}'s pod: refused {:?}, expected {:?}",
                r.calls.get(at),
                free[first]
            );
            assert_eq!(r.calls[..=at], free[..=at], "{v:?}: the same calls up to the refusal");
            let refused = &r.answers[at];
            assert_eq!(refused.method, grpc_path(&free[first]));
            assert!(
                refused.message.starts_with(&refusal_prefix(owner)),
                "{v:?} as {owner:?}'s pod: {:?} does not name the pod",
                refused.message
            );
            // What the driver got back (its failure, or the warning it logs) is that refusal.
            let seen = match &r.outcome {
                Err((_, f)) => f.message.contains("code = PermissionDenied"),
                Ok(()) => false,
            } || r.warnings.iter().any(|w| w.contains("code = PermissionDenied"));
            assert!(seen, "{v:?}: the driver did not see the refusal: {:?} {:#?}", r.outcome, r.warnings);
        }
    }
}

#[tokio::test]
async fn azuredisk_policy_refuses_the_other_drivers_flows() {
    refuses_the_other_drivers_flows(Driver::AzureDisk).await;
}

#[tokio::test]
async fn azurefile_policy_refuses_the_other_drivers_flows() {
    refuses_the_other_drivers_flows(Driver::AzureFile).await;
}

#[tokio::test]
async fn smb_policy_refuses_the_other_drivers_flows() {
    refuses_the_other_drivers_flows(Driver::Smb).await;
}

#[tokio::test]
async fn gce_pd_policy_refuses_the_other_drivers_flows() {
    refuses_the_other_drivers_flows(Driver::GcePd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ebs_policy_refuses_the_other_drivers_flows() {
    refuses_the_other_drivers_flows(Driver::Ebs).await;
}

#[tokio::test]
async fn vsphere_policy_refuses_the_other_drivers_flows() {
    refuses_the_other_drivers_flows(Driver::VSphere).await;
}

/// A driver's pod under another driver's policy (which names other pods) is refused its first
/// call, and the refusal names it.
#[tokio::test]
async fn a_pod_no_rule_names_is_refused_its_first_call() {
    for d in DRIVERS {
        for other in DRIVERS.into_iter().filter(|&o| o != d) {
            let v = d.variants()[0];
            let r = run_on_fresh_node(v, Some((d.caller(), &other.policy_text()))).await;
            let first = r.answers.first().expect("a call was made");
            assert_eq!(first.code, Code::PermissionDenied, "{v:?} as {d:?}'s pod under {}.yaml", other.file());
            assert!(first.message.starts_with(&refusal_prefix(d)), "{:?}", first.message);
            assert!(first.message.contains("no rule names this caller"), "{:?}", first.message);
        }
    }
}
