//! Filesystem group, contained in the allowed roots.

use crate::paths::Roots;
use crate::sys::unimplemented;
use crate::Result;

pub struct Filesystem {
    #[allow(dead_code)]
    roots: Roots,
}

impl Filesystem {
    pub fn new(roots: Roots) -> Self {
        Filesystem { roots }
    }
    pub fn path_exists(&self, _path: &str) -> Result<bool> {
        Err(unimplemented("Filesystem.PathExists"))
    }
    pub fn mkdir(&self, _path: &str) -> Result<()> {
        Err(unimplemented("Filesystem.Mkdir"))
    }
    pub fn rmdir(&self, _path: &str, _force: bool) -> Result<()> {
        Err(unimplemented("Filesystem.Rmdir"))
    }
    pub fn rmdir_contents(&self, _path: &str) -> Result<()> {
        Err(unimplemented("Filesystem.RmdirContents"))
    }
    pub fn create_symlink(&self, _destination: &str, _link: &str) -> Result<()> {
        Err(unimplemented("Filesystem.CreateSymlink"))
    }
    pub fn is_symlink(&self, _path: &str) -> Result<bool> {
        Err(unimplemented("Filesystem.IsSymlink"))
    }
}
