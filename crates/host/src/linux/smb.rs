//! SMB on Linux: not implemented yet (issue 14: a mount.cifs backend); every call says so.

use super::unimplemented;
use crate::types::SmbMapping;
use crate::{Result, SmbHost};

pub struct Smb;

impl SmbHost for Smb {
    fn new_global_mapping(&self, _mapping: &SmbMapping) -> Result<()> {
        Err(unimplemented("Smb.NewSmbGlobalMapping"))
    }
    fn remove_global_mapping(&self, _remote_path: &str) -> Result<()> {
        Err(unimplemented("Smb.RemoveSmbGlobalMapping"))
    }
}
