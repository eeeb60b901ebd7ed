use super::op;
use crate::fields::required;

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
