//! SMB and iSCSI on Linux: not implemented (mount.cifs and iscsiadm backends are future work);
//! every call says so rather than pretending.

use super::unimplemented;
use crate::types::{ConnectTarget, Secret, SmbMapping, TargetPortal};
use crate::{IscsiHost, Result, SmbHost};

pub struct Remote;

impl SmbHost for Remote {
    fn new_global_mapping(&self, _mapping: &SmbMapping) -> Result<()> {
        Err(unimplemented("Smb.NewSmbGlobalMapping"))
    }
    fn remove_global_mapping(&self, _remote_path: &str) -> Result<()> {
        Err(unimplemented("Smb.RemoveSmbGlobalMapping"))
    }
}

impl IscsiHost for Remote {
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
