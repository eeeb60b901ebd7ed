//! SMB and iSCSI on Windows: the logic of [`crate::win::smb`] and [`crate::win::iscsi`] on the
//! real Win32 and WMI layers, with share links made by the contained filesystem.

use super::fs::Filesystem;
use super::platform;
use crate::types::{ConnectTarget, Secret, SmbMapping, TargetPortal};
use crate::win::iscsi::Iscsi;
use crate::win::smb::Smb;
use crate::{IscsiHost, Result, SmbHost};
use std::sync::Arc;

pub struct Remote {
    smb: Smb,
    iscsi: Iscsi,
}

impl Remote {
    pub fn new(fs: Arc<Filesystem>) -> Self {
        let (win32, wmi) = platform();
        Remote { smb: Smb::new(win32, wmi.clone(), fs), iscsi: Iscsi::new(wmi) }
    }
}

impl SmbHost for Remote {
    fn new_global_mapping(&self, mapping: &SmbMapping) -> Result<()> {
        self.smb.new_global_mapping(mapping)
    }
    fn remove_global_mapping(&self, remote_path: &str) -> Result<()> {
        self.smb.remove_global_mapping(remote_path)
    }
}

impl IscsiHost for Remote {
    fn add_target_portal(&self, portal: &TargetPortal) -> Result<()> {
        self.iscsi.add_target_portal(portal)
    }
    fn discover_target_portal(&self, portal: &TargetPortal) -> Result<Vec<String>> {
        self.iscsi.discover_target_portal(portal)
    }
    fn remove_target_portal(&self, portal: &TargetPortal) -> Result<()> {
        self.iscsi.remove_target_portal(portal)
    }
    fn list_target_portals(&self) -> Result<Vec<TargetPortal>> {
        self.iscsi.list_target_portals()
    }
    fn connect_target(&self, request: &ConnectTarget) -> Result<()> {
        self.iscsi.connect_target(request)
    }
    fn disconnect_target(&self, portal: &TargetPortal, iqn: &str) -> Result<()> {
        self.iscsi.disconnect_target(portal, iqn)
    }
    fn target_disks(&self, portal: &TargetPortal, iqn: &str) -> Result<Vec<u32>> {
        self.iscsi.target_disks(portal, iqn)
    }
    fn set_mutual_chap_secret(&self, secret: &Secret) -> Result<()> {
        self.iscsi.set_mutual_chap_secret(secret)
    }
}
