use super::op;
use crate::fields::required;
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
