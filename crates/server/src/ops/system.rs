use super::op;
use crate::call::required;
use csi_proxy_host::types::ServiceInfo;

op!(GetBiosSerialNumber {} -> String, |_s, ctx| ctx.hosts().system.bios_serial_number());
op!(StartService { name: String } -> (), |s, ctx| ctx.hosts().system.start_service(required("name", &s.name)?));
op!(StopService { name: String, force: bool } -> (),
    |s, ctx| ctx.hosts().system.stop_service(required("name", &s.name)?, s.force));
op!(GetService { name: String } -> ServiceInfo, |s, ctx| ctx.hosts().system.service(required("name", &s.name)?));
