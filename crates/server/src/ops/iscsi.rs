use super::op;
use crate::dry_run::{Look, Plan};
use crate::fields::required;
use crate::policy::args::{Arg, Args};
use csi_proxy_host::types::{ConnectTarget as Connect, Secret, TargetPortal};

#[derive(Debug, Clone, PartialEq)]
pub struct AddTargetPortal {
    pub portal: TargetPortal,
}
op!(AddTargetPortal -> (), own_turns, |s, ctx| ctx.hosts().iscsi.add_target_portal(&s.portal));

#[derive(Debug, Clone, PartialEq)]
pub struct DiscoverTargetPortal {
    pub portal: TargetPortal,
}
op!(DiscoverTargetPortal -> Vec<String>, own_turns, |s, ctx| ctx.hosts().iscsi.discover_target_portal(&s.portal));

#[derive(Debug, Clone, PartialEq)]
pub struct RemoveTargetPortal {
    pub portal: TargetPortal,
}
op!(RemoveTargetPortal -> (), own_turns, |s, ctx| ctx.hosts().iscsi.remove_target_portal(&s.portal));

#[derive(Debug, Clone, PartialEq)]
pub struct ListTargetPortals {}
op!(ListTargetPortals -> Vec<TargetPortal>, read_only, |_s, ctx| ctx.hosts().iscsi.list_target_portals());

#[derive(Debug, Clone, PartialEq)]
pub struct ConnectTarget {
    pub request: Connect,
}
op!(ConnectTarget -> (), own_turns, |s, ctx| {
    required("iqn", &s.request.iqn)?;
    ctx.hosts().iscsi.connect_target(&s.request)
});

#[derive(Debug, Clone, PartialEq)]
pub struct DisconnectTarget {
    pub portal: TargetPortal,
    pub iqn: String,
}
op!(DisconnectTarget -> (), own_turns, |s, ctx| ctx.hosts().iscsi.disconnect_target(&s.portal, required("iqn", &s.iqn)?));

#[derive(Debug, Clone, PartialEq)]
pub struct GetTargetDisks {
    pub portal: TargetPortal,
    pub iqn: String,
}
op!(GetTargetDisks -> Vec<u32>, read_only, |s, ctx| ctx.hosts().iscsi.get_target_disks(&s.portal, required("iqn", &s.iqn)?));

#[derive(Debug, Clone, PartialEq)]
pub struct SetMutualChapSecret {
    pub secret: Secret,
}
op!(SetMutualChapSecret -> (), own_turns, |s, ctx| ctx.hosts().iscsi.set_mutual_chap_secret(&s.secret));

// Dry runs (crate::dry_run). Neither CHAP secret is ever part of a plan.

fn registered(look: &Look<'_>, portal: &TargetPortal) -> csi_proxy_host::Result<bool> {
    Ok(look.target_portals()?.contains(portal))
}

impl Plan for AddTargetPortal {
    fn plan(&self, look: &Look<'_>) -> csi_proxy_host::Result<String> {
        let p = &self.portal;
        Ok(if registered(look, p)? {
            format!("target portal {p} is already registered: nothing would change")
        } else {
            format!("would register target portal {p}")
        })
    }
}

impl Plan for DiscoverTargetPortal {
    fn plan(&self, look: &Look<'_>) -> csi_proxy_host::Result<String> {
        let p = &self.portal;
        Ok(if registered(look, p)? {
            format!("would ask target portal {p} for its targets")
        } else {
            format!("would register target portal {p} and ask it for its targets")
        })
    }
}

impl Plan for RemoveTargetPortal {
    fn plan(&self, look: &Look<'_>) -> csi_proxy_host::Result<String> {
        let p = &self.portal;
        Ok(if registered(look, p)? {
            format!("would remove target portal {p}")
        } else {
            format!("target portal {p} is not registered: nothing would be removed")
        })
    }
}

impl Plan for ConnectTarget {
    fn plan(&self, _look: &Look<'_>) -> csi_proxy_host::Result<String> {
        let iqn = csi_proxy_host::error::clip(required("iqn", &self.request.iqn)?);
        let auth = match self.request.auth {
            csi_proxy_host::types::AuthType::None => "without CHAP",
            csi_proxy_host::types::AuthType::OneWayChap => "with one-way CHAP",
            csi_proxy_host::types::AuthType::MutualChap => "with mutual CHAP",
        };
        Ok(format!("would log in to target {iqn:?} through portal {} {auth}", self.request.portal))
    }
}

impl Plan for DisconnectTarget {
    fn plan(&self, _look: &Look<'_>) -> csi_proxy_host::Result<String> {
        let iqn = csi_proxy_host::error::clip(required("iqn", &self.iqn)?);
        Ok(format!("would log out of target {iqn:?} at portal {}", self.portal))
    }
}

impl Plan for SetMutualChapSecret {
    fn plan(&self, _look: &Look<'_>) -> csi_proxy_host::Result<String> {
        Ok("would set the initiator's mutual CHAP secret (not shown)".to_string())
    }
}

// What each operation names, for the authorization policy (crate::policy).

impl Args for AddTargetPortal {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Portal(&s.portal)]
    }
}

impl Args for DiscoverTargetPortal {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Portal(&s.portal)]
    }
}

impl Args for RemoveTargetPortal {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Portal(&s.portal)]
    }
}

impl Args for ListTargetPortals {
    fn args(&self) -> Vec<Arg<'_>> {
        vec![]
    }
}

impl Args for ConnectTarget {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Portal(&s.request.portal)]
    }
}

impl Args for DisconnectTarget {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Portal(&s.portal)]
    }
}

impl Args for GetTargetDisks {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Portal(&s.portal)]
    }
}

impl Args for SetMutualChapSecret {
    fn args(&self) -> Vec<Arg<'_>> {
        vec![]
    }
}
