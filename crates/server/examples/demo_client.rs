//! Calls a running daemon over its unix sockets (through the csi-proxy-client crate, as a Rust
//! driver would) and prints what it answers.
//!
//! `cargo run -p csi-proxy-server --example demo_client -- <socket-dir> [<kubelet-path>]`

#[cfg(unix)]
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    use csi_proxy_client::{Connector, Group};
    use csi_proxy_wire::{v1, v1alpha1};

    let dir =
        std::path::PathBuf::from(std::env::args().nth(1).ok_or("usage: demo_client <socket-dir> [<kubelet-path>]")?);
    let connector = Connector::new().socket_dir(dir);
    let channel = |group: Group, version: &'static str| connector.connect_to(group, version);
    fn show<T: std::fmt::Debug>(call: &str, r: Result<tonic::Response<T>, tonic::Status>) {
        match r {
            Ok(resp) => println!("{call}: OK {:?}", resp.into_inner()),
            Err(s) => println!("{call}: {:?}: {}", s.code(), s.message()),
        }
    }
    /// A call the daemon should refuse, marked so that its error does not look like a failure.
    fn refused<T: std::fmt::Debug>(call: &str, r: Result<tonic::Response<T>, tonic::Status>) {
        match r {
            Ok(resp) => println!("(expected to be refused, but was not) {call}: OK {:?}", resp.into_inner()),
            Err(s) => println!("(expected to be refused) {call}: {:?}: {}", s.code(), s.message()),
        }
    }

    let mut system = v1alpha1::system_client::SystemClient::new(channel(Group::System, "v1alpha1").await?);
    show(
        "system v1alpha1 GetBIOSSerialNumber",
        system.get_bios_serial_number(v1alpha1::GetBiosSerialNumberRequest {}).await,
    );
    let mut disk = v1::disk_client::DiskClient::new(channel(Group::Disk, "v1").await?);
    show("disk v1 ListDiskLocations", disk.list_disk_locations(v1::ListDiskLocationsRequest {}).await);
    let mut old = v1alpha1::disk_client::DiskClient::new(channel(Group::Disk, "v1alpha1").await?);
    refused(
        "disk v1alpha1 PartitionDisk(diskID=\"4294967296\")",
        old.partition_disk(v1alpha1::PartitionDiskRequest { disk_id: "4294967296".into() }).await,
    );
    if let Some(kubelet) = std::env::args().nth(2) {
        let mut fs = v1::filesystem_client::FilesystemClient::new(channel(Group::Filesystem, "v1").await?);
        let made = format!("{kubelet}/pods/demo/volumes");
        show(&format!("filesystem v1 Mkdir({made})"), fs.mkdir(v1::MkdirRequest { path: made.clone() }).await);
        show(&format!("filesystem v1 PathExists({made})"), fs.path_exists(v1::PathExistsRequest { path: made }).await);
        let escape = format!("{kubelet}-evil/x");
        refused(&format!("filesystem v1 Mkdir({escape})"), fs.mkdir(v1::MkdirRequest { path: escape }).await);
    }
    Ok(())
}

#[cfg(not(unix))]
fn main() {
    eprintln!("demo_client talks to unix sockets; on Windows use the named pipes");
}
