use super::op;
use crate::dry_run::{Look, Plan};
use crate::fields::required;
use crate::policy::args::{Arg, Args};
use csi_proxy_host::types::{Secret, SmbMapping};

/// The request's remote path, checked by the one rule both backends use
/// ([`csi_proxy_host::smb::normalise_remote`]).
fn normalise_remote(remote_path: &str) -> csi_proxy_host::Result<String> {
    csi_proxy_host::smb::normalise_remote("remote_path", required("remote_path", remote_path)?)
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewSmbGlobalMapping {
    pub remote_path: String,
    pub local_path: String,
    pub username: String,
    pub password: Secret,
}
op!(NewSmbGlobalMapping -> (), own_turns, |s, ctx| {
    let mapping = SmbMapping {
        remote_path: normalise_remote(&s.remote_path)?,
        local_path: s.local_path,
        username: s.username,
        password: s.password,
        require_privacy: ctx.config().require_privacy,
    };
    ctx.hosts().smb.new_smb_global_mapping(&mapping)
});

#[derive(Debug, Clone, PartialEq)]
pub struct RemoveSmbGlobalMapping {
    pub remote_path: String,
}
op!(RemoveSmbGlobalMapping -> (), own_turns, |s, ctx| ctx.hosts().smb.remove_smb_global_mapping(&normalise_remote(&s.remote_path)?));

// Dry runs (crate::dry_run). The password is never part of a plan.

impl Plan for NewSmbGlobalMapping {
    fn plan(&self, look: &Look<'_>) -> csi_proxy_host::Result<String> {
        let remote = normalise_remote(&self.remote_path)?;
        let at = match self.local_path.as_str() {
            "" => String::new(),
            local => format!(" for {}", csi_proxy_host::error::clip(local)),
        };
        let user = csi_proxy_host::error::clip(&self.username);
        Ok(format!(
            "would map {remote} globally{at} as user {user:?} (RequirePrivacy {}; the server checks the credentials then)",
            look.config().require_privacy
        ))
    }
}

impl Plan for RemoveSmbGlobalMapping {
    fn plan(&self, _look: &Look<'_>) -> csi_proxy_host::Result<String> {
        Ok(format!("would remove the global mapping of {}", normalise_remote(&self.remote_path)?))
    }
}

// What each operation names, for the authorization policy (crate::policy).

impl Args for NewSmbGlobalMapping {
    fn args(&self) -> Vec<Arg<'_>> {
        // The mapping is of the share, whatever folder below it is asked for: both are judged.
        let root = crate::policy::share_root(&self.remote_path);
        let mut args = vec![Arg::Remote(self.remote_path.as_str().into())];
        if root != self.remote_path {
            args.push(Arg::Remote(root.into()));
        }
        // An empty local path asks for no folder (a mapping only).
        if !self.local_path.is_empty() {
            args.push(Arg::Path(&self.local_path));
        }
        args
    }
}

impl Args for RemoveSmbGlobalMapping {
    fn args(&self) -> Vec<Arg<'_>> {
        // What is removed is the share's mapping, whatever folder below it the request names.
        vec![Arg::Remote(crate::policy::share_root(&self.remote_path).into())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use csi_proxy_host::Error;

    #[test]
    fn remote_paths_need_host_and_share() {
        assert_eq!(normalise_remote("//srv/share/sub").unwrap(), r"\\srv\share\sub");
        assert_eq!(normalise_remote(r"\\srv\share").unwrap(), r"\\srv\share");
        for bad in ["", "srv", r"\\srv\", "//"] {
            assert!(matches!(normalise_remote(bad), Err(Error::InvalidArgument(_))), "{bad:?}");
        }
    }
}
