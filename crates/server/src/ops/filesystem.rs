use super::op;
use crate::call::required;

op!(PathExists { path: String } -> bool, quick |s, ctx| ctx.hosts().filesystem.path_exists(required("path", &s.path)?));
op!(Mkdir { path: String } -> (), quick |s, ctx| ctx.hosts().filesystem.mkdir(required("path", &s.path)?));
op!(Rmdir { path: String, force: bool } -> (),
    |s, ctx| ctx.hosts().filesystem.rmdir(required("path", &s.path)?, s.force));
op!(RmdirContents { path: String } -> (),
    |s, ctx| ctx.hosts().filesystem.rmdir_contents(required("path", &s.path)?));
op!(
    /// Creates a link at `target_path` that points to `source_path` (upstream's roles).
    CreateSymlink { source_path: String, target_path: String } -> (),
    quick |s, ctx| {
        let link = required("target_path", &s.target_path)?;
        let destination = required("source_path", &s.source_path)?;
        ctx.hosts().filesystem.create_symlink(destination, link)
    }
);
op!(IsSymlink { path: String } -> bool, quick |s, ctx| ctx.hosts().filesystem.is_symlink(required("path", &s.path)?));
