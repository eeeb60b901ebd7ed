use super::op;
use crate::call::required;
use csi_proxy_host::types::{Secret, SmbMapping};
use csi_proxy_host::Error;

/// `\\host\share[\...]` with `/` accepted as a separator (upstream #128). At least host and
/// share must be present.
fn normalise_remote(remote_path: &str) -> csi_proxy_host::Result<String> {
    let p = required("remote_path", remote_path)?.replace('/', "\\");
    let mut parts = p.split('\\').filter(|c| !c.is_empty());
    if parts.next().is_none() || parts.next().is_none() {
        return Err(Error::invalid(format!(
            "remote_path {remote_path:?} is invalid: expected \\\\host\\share[\\path]"
        )));
    }
    Ok(p)
}

op!(NewSmbGlobalMapping { remote_path: String, local_path: String, username: String, password: Secret } -> (),
|s, ctx| {
    let mapping = SmbMapping {
        remote_path: normalise_remote(&s.remote_path)?,
        local_path: s.local_path,
        username: s.username,
        password: s.password,
        require_privacy: ctx.config().require_privacy,
    };
    ctx.hosts().smb.new_global_mapping(&mapping)
});
op!(RemoveSmbGlobalMapping { remote_path: String } -> (),
    |s, ctx| ctx.hosts().smb.remove_global_mapping(&normalise_remote(&s.remote_path)?));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_paths_need_host_and_share() {
        assert_eq!(normalise_remote("//srv/share/sub").unwrap(), r"\\srv\share\sub");
        assert_eq!(normalise_remote(r"\\srv\share").unwrap(), r"\\srv\share");
        for bad in ["", "srv", r"\\srv\", "//"] {
            assert!(matches!(normalise_remote(bad), Err(Error::InvalidArgument(_))), "{bad:?}");
        }
    }
}
