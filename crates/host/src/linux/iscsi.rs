//! iSCSI on Linux: not implemented yet (issue 14: an open-iscsi backend); every call says so.

use super::unimplemented;
use crate::types::{ConnectTarget, Secret, TargetPortal};
use crate::{IscsiHost, Result};

pub struct Iscsi;

impl IscsiHost for Iscsi {
    fn add_target_portal(&self, _portal: &TargetPortal) -> Result<()> {
        Err(unimplemented("Iscsi.AddTargetPortal"))
    }
    fn discover_target_portal(&self, _portal: &TargetPortal) -> Result<Vec<String>> {
        Err(unimplemented("Iscsi.DiscoverTargetPortal"))
    }
    fn remove_target_portal(&self, _portal: &TargetPortal) -> Result<()> {
        Err(unimplemented("Iscsi.RemoveTargetPortal"))
    }
    fn list_target_portals(&self) -> Result<Vec<TargetPortal>> {
        Err(unimplemented("Iscsi.ListTargetPortals"))
    }
    fn connect_target(&self, _request: &ConnectTarget) -> Result<()> {
        Err(unimplemented("Iscsi.ConnectTarget"))
    }
    fn disconnect_target(&self, _portal: &TargetPortal, _iqn: &str) -> Result<()> {
        Err(unimplemented("Iscsi.DisconnectTarget"))
    }
    fn target_disks(&self, _portal: &TargetPortal, _iqn: &str) -> Result<Vec<u32>> {
        Err(unimplemented("Iscsi.GetTargetDisks"))
    }
    fn set_mutual_chap_secret(&self, _secret: &Secret) -> Result<()> {
        Err(unimplemented("Iscsi.SetMutualChapSecret"))
    }
}
