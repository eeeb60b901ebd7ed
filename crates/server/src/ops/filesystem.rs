use super::op;
use crate::dry_run::{Look, Plan};
use crate::fields::required;
use crate::policy::args::{Arg, Args};

#[derive(Debug, Clone, PartialEq)]
pub struct PathExists {
    pub path: String,
}
op!(PathExists -> bool, read_only quick, |s, ctx| ctx.hosts().filesystem.path_exists(required("path", &s.path)?));

#[derive(Debug, Clone, PartialEq)]
pub struct Mkdir {
    pub path: String,
}
op!(Mkdir -> (), own_turns quick, |s, ctx| ctx.hosts().filesystem.mkdir(required("path", &s.path)?));

#[derive(Debug, Clone, PartialEq)]
pub struct Rmdir {
    pub path: String,
    pub force: bool,
}
op!(Rmdir -> (), own_turns, |s, ctx| ctx.hosts().filesystem.rmdir(required("path", &s.path)?, s.force));

#[derive(Debug, Clone, PartialEq)]
pub struct RmdirContents {
    pub path: String,
}
op!(RmdirContents -> (), own_turns, |s, ctx| ctx.hosts().filesystem.rmdir_contents(required("path", &s.path)?));

/// Creates a link at `target_path` that points to `source_path` (upstream's roles).
#[derive(Debug, Clone, PartialEq)]
pub struct CreateSymlink {
    pub source_path: String,
    pub target_path: String,
}
op!(CreateSymlink -> (), own_turns quick, |s, ctx| {
    let link = required("target_path", &s.target_path)?;
    let destination = required("source_path", &s.source_path)?;
    ctx.hosts().filesystem.create_symlink(destination, link)
});

#[derive(Debug, Clone, PartialEq)]
pub struct IsSymlink {
    pub path: String,
}
op!(IsSymlink -> bool, read_only quick, |s, ctx| ctx.hosts().filesystem.is_symlink(required("path", &s.path)?));

// Dry runs (crate::dry_run). PathExists checks each path's form and containment as the real
// call would.

impl Plan for Mkdir {
    fn plan(&self, look: &Look<'_>) -> csi_proxy_host::Result<String> {
        let p = required("path", &self.path)?;
        Ok(if look.path_exists(p)? {
            format!("{p} exists: nothing would be created")
        } else {
            format!("would create the directory {p} and any missing parents")
        })
    }
}

impl Plan for Rmdir {
    fn plan(&self, look: &Look<'_>) -> csi_proxy_host::Result<String> {
        let p = required("path", &self.path)?;
        Ok(match (look.path_exists(p)?, self.force) {
            (false, _) => format!("{p} does not exist: nothing would be removed"),
            (true, true) => format!("would remove {p} and everything under it"),
            (true, false) => format!("would remove {p} if it is an empty directory or a link"),
        })
    }
}

impl Plan for RmdirContents {
    fn plan(&self, look: &Look<'_>) -> csi_proxy_host::Result<String> {
        let p = required("path", &self.path)?;
        Ok(if look.path_exists(p)? {
            format!("would remove everything under {p}, keeping {p}")
        } else {
            format!("{p} does not exist: nothing would be removed")
        })
    }
}

impl Plan for CreateSymlink {
    fn plan(&self, look: &Look<'_>) -> csi_proxy_host::Result<String> {
        let link = required("target_path", &self.target_path)?;
        let destination = required("source_path", &self.source_path)?;
        let there = if look.path_exists(destination)? { "" } else { " (which does not exist yet)" };
        if look.path_exists(link)? {
            let what = if look.is_symlink(link)? { "a link" } else { "something" };
            return Ok(format!(
                "{link} is already {what}: CreateSymlink would succeed only if it is a link to {destination}, and \
                 replaces nothing"
            ));
        }
        Ok(format!("would create the link {link} pointing to {destination}{there}"))
    }
}

// What each operation names, for the authorization policy (crate::policy).

impl Args for PathExists {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Path(&s.path)]
    }
}

impl Args for Mkdir {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Path(&s.path)]
    }
}

impl Args for Rmdir {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Path(&s.path)]
    }
}

impl Args for RmdirContents {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Path(&s.path)]
    }
}

impl Args for CreateSymlink {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Path(&s.source_path), Arg::Path(&s.target_path)]
    }
}

impl Args for IsSymlink {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Path(&s.path)]
    }
}
