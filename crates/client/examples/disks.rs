//! Lists the disks the daemon sees: `cargo run -p csi-proxy-client --example disks [SOCKET_DIR]`
//! (the socket directory on Linux, default /run/csi-proxy; Windows uses the pipes).

use csi_proxy_client::v1::{disk_client::DiskClient, GetDiskStatsRequest, ListDiskIDsRequest};
use csi_proxy_client::{Connector, Group};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    #[allow(unused_mut)]
    let mut connector = Connector::new();
    #[cfg(unix)]
    if let Some(dir) = std::env::args_os().nth(1) {
        connector = connector.socket_dir(dir);
    }
    let mut disks = DiskClient::new(connector.connect_to(Group::Disk, "v1").await?);
    let ids = disks.list_disk_i_ds(ListDiskIDsRequest {}).await?.into_inner().disk_i_ds;
    for (number, id) in ids {
        let size = disks.get_disk_stats(GetDiskStatsRequest { disk_number: number }).await?.into_inner().total_bytes;
        println!("disk {number}: {size} bytes, page83 {:?}, serial {:?}", id.page83, id.serial_number);
    }
    Ok(())
}
