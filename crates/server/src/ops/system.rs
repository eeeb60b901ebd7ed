use super::op;
use crate::dry_run::{Look, Plan};
use crate::fields::required;
use crate::policy::args::{Arg, Args};
use crate::Config;
use csi_proxy_host::types::{ServiceInfo, ServiceStatus};
use csi_proxy_host::{Error, Result};

/// Whether `name` is one of `allowed`, compared as the OS compares service names: Windows'
/// service control manager ignores case (character by character, in upper case), systemd unit
/// names are exact.
pub fn service_allowed(name: &str, allowed: &[String]) -> bool {
    allowed.iter().any(|a| same_service(a, name))
}

fn same_service(a: &str, b: &str) -> bool {
    csi_proxy_host::SAME_SERVICE_NAME(a, b)
}

/// The name of a service that may be started or stopped under `-allowed-service`.
fn controllable<'a>(config: &Config, name: &'a str) -> Result<&'a str> {
    let name = required("name", name)?;
    match &config.allowed_services {
        Some(allowed) if !service_allowed(name, allowed) => Err(Error::denied(format!(
            "service {name:?} may not be started or stopped: it is not among the allowed services [{}] \
             (-allowed-service)",
            allowed.join(", ")
        ))),
        _ => Ok(name),
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct GetBiosSerialNumber {}
op!(GetBiosSerialNumber -> String, read_only, |_s, ctx| ctx.hosts().system.get_bios_serial_number());

#[derive(Debug, Clone, PartialEq)]
pub struct StartService {
    pub name: String,
}
op!(StartService -> (), own_turns, |s, ctx| ctx.hosts().system.start_service(controllable(ctx.config(), &s.name)?));

/// With `force`, the dependents stopped along with the service must be allowed too.
#[derive(Debug, Clone, PartialEq)]
pub struct StopService {
    pub name: String,
    pub force: bool,
}
op!(StopService -> (), own_turns, |s, ctx| {
    let name = controllable(ctx.config(), &s.name)?;
    let allowed = ctx.config().allowed_services.as_deref();
    ctx.hosts().system.stop_service(name, s.force, &|dep: &str| allowed.is_none_or(|a| service_allowed(dep, a)))
});

#[derive(Debug, Clone, PartialEq)]
pub struct GetService {
    pub name: String,
}
op!(GetService -> ServiceInfo, read_only, |s, ctx| ctx.hosts().system.get_service(required("name", &s.name)?));

// Dry runs (crate::dry_run): the allowed services are checked as for the real call.

impl Plan for StartService {
    fn plan(&self, look: &Look<'_>) -> Result<String> {
        let name = controllable(look.config(), &self.name)?;
        let now = look.service(name)?.status;
        Ok(if now == ServiceStatus::Running {
            format!("service {name:?} is running: nothing would change")
        } else {
            format!("would start service {name:?} (now {now:?})")
        })
    }
}

impl Plan for StopService {
    fn plan(&self, look: &Look<'_>) -> Result<String> {
        let name = controllable(look.config(), &self.name)?;
        let now = look.service(name)?.status;
        let with = if self.force { ", and the running services that depend on it (each must be allowed)" } else { "" };
        Ok(if now == ServiceStatus::Stopped {
            format!("service {name:?} is stopped: nothing would change")
        } else {
            format!("would stop service {name:?} (now {now:?}){with}")
        })
    }
}

// What each operation names, for the authorization policy (crate::policy).

impl Args for GetBiosSerialNumber {
    fn args(&self) -> Vec<Arg<'_>> {
        vec![]
    }
}

impl Args for StartService {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Service(&s.name)]
    }
}

impl Args for StopService {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Service(&s.name)]
    }
}

impl Args for GetService {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Service(&s.name)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn allowed_services_compare_as_the_os_does() {
        let allowed = list(&["iscsid", "MSiSCSI"]);
        assert!(service_allowed("iscsid", &allowed));
        assert!(service_allowed("MSiSCSI", &allowed));
        assert!(!service_allowed("kubelet", &allowed));
        assert!(!service_allowed("", &allowed));
        assert!(!service_allowed("iscsid ", &allowed));
        assert!(!service_allowed("iscsi", &allowed), "no prefix matching");
        assert!(!service_allowed("iscsid", &[]), "an empty list allows nothing");
        assert_eq!(service_allowed("ISCSID", &allowed), cfg!(windows));
        assert_eq!(service_allowed("msiscsi", &allowed), cfg!(windows));
        assert!(!service_allowed("iscsid.service", &allowed), "Linux compares unit names exactly");
    }
}
