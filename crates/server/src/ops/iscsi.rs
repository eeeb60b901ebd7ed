use super::op;
use crate::call::required;
use csi_proxy_host::types::{ConnectTarget as Connect, Secret, TargetPortal};

op!(AddTargetPortal { portal: TargetPortal } -> (), |s, ctx| ctx.hosts().iscsi.add_target_portal(&s.portal));
op!(DiscoverTargetPortal { portal: TargetPortal } -> Vec<String>,
    |s, ctx| ctx.hosts().iscsi.discover_target_portal(&s.portal));
op!(RemoveTargetPortal { portal: TargetPortal } -> (), |s, ctx| ctx.hosts().iscsi.remove_target_portal(&s.portal));
op!(ListTargetPortals {} -> Vec<TargetPortal>, |_s, ctx| ctx.hosts().iscsi.list_target_portals());
op!(ConnectTarget { request: Connect } -> (), |s, ctx| {
    required("iqn", &s.request.iqn)?;
    ctx.hosts().iscsi.connect_target(&s.request)
});
op!(DisconnectTarget { portal: TargetPortal, iqn: String } -> (),
    |s, ctx| ctx.hosts().iscsi.disconnect_target(&s.portal, required("iqn", &s.iqn)?));
op!(GetTargetDisks { portal: TargetPortal, iqn: String } -> Vec<u32>,
    |s, ctx| ctx.hosts().iscsi.target_disks(&s.portal, required("iqn", &s.iqn)?));
op!(SetMutualChapSecret { secret: Secret } -> (), |s, ctx| ctx.hosts().iscsi.set_mutual_chap_secret(&s.secret));
