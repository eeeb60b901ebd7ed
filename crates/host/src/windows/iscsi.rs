//! The iSCSI initiator through the Storage module's `MSFT_iSCSI*` classes
//! (`ROOT\Microsoft\Windows\Storage`).
//!
//! The Win32 iSCSI Discovery API (iscsidsc) was considered. WMI is used because its semantics
//! match upstream one to one (portals, persistent logins, sessions, and the session → disk
//! association that iscsidsc only offers through device numbers we would have to map
//! ourselves), iSCSI calls are rare (attach and detach, never polling), and the logic is tested
//! against the same scripted WMI as the rest of the backend.
//!
//! Where this differs from upstream (docs/upstream.md#iscsi, #idempotency):
//! - Return values of `Connect`, `Disconnect`, `Unregister` and `SetCHAPSecret` are checked, as
//!   upstream checks them since eeba470; the v1.3.0 release ignores them and reports success for
//!   a failed login (docs/upstream.md#v1-3-0).
//! - A login refused for its credentials (ISDSC_AUTHENTICATION_FAILURE or
//!   ISDSC_AUTHORIZATION_FAILURE, as a return value or in the error text) is PermissionDenied
//!   naming the target; a CHAP secret or user name the initiator refuses outright is
//!   InvalidArgument.
//! - A target that is connected but has no session (it ended in between) disconnects as success
//!   with a warning; upstream dereferences nil and panics.
//! - A target not found on the portal is NotFound naming the IQN and the portal, and says when
//!   a target differs only in case (IQNs are compared exactly, as upstream does).
//! - GetTargetDisks answers each disk number once, sorted; upstream lists a disk once per
//!   connection (multiple connections per session give duplicates).
//! - RemoveTargetPortal of a missing portal stays NotFound, as upstream: a portal is named only
//!   by address and port, so a typo would otherwise "succeed" and leave the real portal
//!   registered, and NotFound is a distinct gRPC code a retrying client can treat as done.
//!
//! CHAP secrets only travel inside [`Value::Secret`]; an error text that contains one is
//! withheld.

use super::wmi::{Namespace, Query, Row, Value, Wmi};
use crate::error::{map_message, scrub};
use crate::types::{AuthType, ConnectTarget, Secret, TargetPortal};
use crate::{Error, IscsiHost, Result};
use std::sync::Arc;
use tracing::{debug, info, warn};

const NS: Namespace = Namespace::Storage;
const PORTAL: &str = "MSFT_iSCSITargetPortal";
const TARGET: &str = "MSFT_iSCSITarget";
const SESSION: &str = "MSFT_iSCSISession";
const CONNECTION: &str = "MSFT_iSCSIConnection";
const DISK: &str = "MSFT_Disk";
const PORTAL_PROPS: &[&str] = &["TargetPortalAddress", "TargetPortalPortNumber"];
const TARGET_PROPS: &[&str] = &["NodeAddress", "IsConnected"];

/// iscsierr.h codes the logic tells apart.
pub mod code {
    pub const ISDSC_LOGIN_FAILED: u32 = 0xEFFF_0002;
    pub const ISDSC_CONNECTION_FAILED: u32 = 0xEFFF_0003;
    pub const ISDSC_AUTHENTICATION_FAILURE: u32 = 0xEFFF_0009;
    pub const ISDSC_AUTHORIZATION_FAILURE: u32 = 0xEFFF_000A;
    pub const ISDSC_TARGET_NOT_FOUND: u32 = 0xEFFF_0029;
    pub const ISDSC_INVALID_CHAP_SECRET: u32 = 0xEFFF_004A;
    pub const ISDSC_INVALID_TARGET_CHAP_SECRET: u32 = 0xEFFF_004B;
    pub const ISDSC_INVALID_INITIATOR_CHAP_SECRET: u32 = 0xEFFF_004C;
    pub const ISDSC_INVALID_CHAP_USER_NAME: u32 = 0xEFFF_004D;

    /// The iscsierr.h name of `code`, for messages.
    pub fn name(code: u32) -> Option<&'static str> {
        Some(match code {
            ISDSC_LOGIN_FAILED => "ISDSC_LOGIN_FAILED",
            ISDSC_CONNECTION_FAILED => "ISDSC_CONNECTION_FAILED",
            ISDSC_AUTHENTICATION_FAILURE => "ISDSC_AUTHENTICATION_FAILURE",
            ISDSC_AUTHORIZATION_FAILURE => "ISDSC_AUTHORIZATION_FAILURE",
            ISDSC_TARGET_NOT_FOUND => "ISDSC_TARGET_NOT_FOUND",
            ISDSC_INVALID_CHAP_SECRET => "ISDSC_INVALID_CHAP_SECRET",
            ISDSC_INVALID_TARGET_CHAP_SECRET => "ISDSC_INVALID_TARGET_CHAP_SECRET",
            ISDSC_INVALID_INITIATOR_CHAP_SECRET => "ISDSC_INVALID_INITIATOR_CHAP_SECRET",
            ISDSC_INVALID_CHAP_USER_NAME => "ISDSC_INVALID_CHAP_USER_NAME",
            _ => return None,
        })
    }
}

/// How upstream names the authentication type to `MSFT_iSCSITarget.Connect`.
pub fn auth_type_name(auth: AuthType) -> &'static str {
    match auth {
        AuthType::None => "NONE",
        AuthType::OneWayChap => "ONEWAYCHAP",
        AuthType::MutualChap => "MUTUALCHAP",
    }
}

/// A method's return value as an unsigned code. The iscsierr.h codes have the top bit set, and
/// a layer that reads the uint32 as VT_I4 hands them over negative.
fn return_code(out: &Row) -> Result<u32> {
    match out.get("ReturnValue") {
        Value::I64(n) if (i64::from(i32::MIN)..0).contains(n) => Ok(*n as i32 as u32),
        _ => out.return_value(),
    }
}

/// Describes a return code for messages: `4026466313 (0xEFFF0009, ISDSC_AUTHENTICATION_FAILURE)`.
fn describe(code: u32) -> String {
    match code::name(code) {
        Some(name) => format!("{code} ({code:#X}, {name})"),
        None if code > 0xFFFF => format!("{code} ({code:#X})"),
        None => code.to_string(),
    }
}

/// What a failed login means, from its code or its error text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// The target refused the credentials.
    Credentials,
    /// The initiator refused the CHAP user name or secret before trying.
    BadChapParameter,
}

fn refusal_of_code(c: u32) -> Option<Refusal> {
    use code::*;
    match c {
        ISDSC_AUTHENTICATION_FAILURE | ISDSC_AUTHORIZATION_FAILURE => Some(Refusal::Credentials),
        ISDSC_INVALID_CHAP_SECRET
        | ISDSC_INVALID_TARGET_CHAP_SECRET
        | ISDSC_INVALID_INITIATOR_CHAP_SECRET
        | ISDSC_INVALID_CHAP_USER_NAME => Some(Refusal::BadChapParameter),
        _ => None,
    }
}

/// Looks for an iscsierr.h code (hexadecimal, or decimal as WMI prints uint32) or its message
/// text in an error.
fn refusal_of_text(text: &str) -> Option<Refusal> {
    let lower = text.to_ascii_lowercase();
    if lower.contains("authentication failure") || lower.contains("authorization failure") {
        return Some(Refusal::Credentials);
    }
    let codes = [
        code::ISDSC_AUTHENTICATION_FAILURE,
        code::ISDSC_AUTHORIZATION_FAILURE,
        code::ISDSC_INVALID_CHAP_SECRET,
        code::ISDSC_INVALID_TARGET_CHAP_SECRET,
        code::ISDSC_INVALID_INITIATOR_CHAP_SECRET,
        code::ISDSC_INVALID_CHAP_USER_NAME,
    ];
    codes
        .into_iter()
        .find(|c| {
            lower.contains(&format!("{c:x}"))
                || lower.contains(&c.to_string())
                || lower.contains(&(*c as i32).to_string())
        })
        .and_then(refusal_of_code)
}

fn refused(r: Refusal, iqn: &str, portal: &TargetPortal, detail: &str) -> Error {
    match r {
        Refusal::Credentials => Error::denied(format!(
            "iSCSI target {iqn} at portal {portal} refused the login: {detail}; expected CHAP credentials the target accepts"
        )),
        Refusal::BadChapParameter => Error::invalid(format!(
            "the CHAP user name or secret for iSCSI target {iqn} at portal {portal} was refused by the initiator: {detail}; \
             expected a user name it accepts and a secret of 12 to 16 bytes"
        )),
    }
}

pub struct Iscsi {
    wmi: Arc<dyn Wmi>,
}

impl Iscsi {
    pub fn new(wmi: Arc<dyn Wmi>) -> Self {
        Iscsi { wmi }
    }

    fn find_portal(&self, portal: &TargetPortal) -> Result<Option<Row>> {
        let q = Query::select(NS, PORTAL, PORTAL_PROPS)
            .eq("TargetPortalAddress", portal.address.as_str())
            .eq("TargetPortalPortNumber", portal.port);
        Ok(self.wmi.query(&q)?.into_iter().next())
    }

    fn portal(&self, portal: &TargetPortal) -> Result<Row> {
        self.find_portal(portal)?.ok_or_else(|| {
            Error::not_found(format!(
                "iSCSI target portal {portal} does not exist; expected one added with AddTargetPortal"
            ))
        })
    }

    fn targets(&self, portal_row: &Row) -> Result<Vec<Row>> {
        self.wmi.associators(NS, &portal_row.path, "MSFT_iSCSITargetToiSCSITargetPortal", TARGET, TARGET_PROPS)
    }

    /// The portal's target whose NodeAddress is exactly `iqn`.
    fn target(&self, portal: &TargetPortal, iqn: &str) -> Result<Row> {
        let targets = self.targets(&self.portal(portal)?)?;
        let mut near = None;
        for t in targets {
            let node = t.str("NodeAddress")?;
            if node == iqn {
                return Ok(t);
            }
            if node.eq_ignore_ascii_case(iqn) {
                near = Some(node.to_owned());
            }
        }
        Err(Error::not_found(match near {
            Some(n) => format!(
                "iSCSI target {iqn} is not among the targets of portal {portal}; {n} differs only in case, \
                 and IQNs are compared exactly"
            ),
            None => format!("iSCSI target {iqn} is not among the targets of portal {portal}"),
        }))
    }

    fn check(&self, out: &Row, what: impl FnOnce() -> String) -> Result<()> {
        match return_code(out)? {
            0 => Ok(()),
            c => Err(Error::internal(format!("{} failed: returned {}, expected 0", what(), describe(c)))),
        }
    }
}

impl IscsiHost for Iscsi {
    fn add_target_portal(&self, portal: &TargetPortal) -> Result<()> {
        if self.find_portal(portal)?.is_some() {
            info!(%portal, "the iSCSI target portal exists already");
            return Ok(());
        }
        let args = [
            ("TargetPortalAddress", Value::from(portal.address.as_str())),
            ("TargetPortalPortNumber", Value::from(portal.port)),
        ];
        let out = self.wmi.call(NS, PORTAL, "New", &args)?;
        self.check(&out, || format!("adding iSCSI target portal {portal} ({PORTAL}.New)"))?;
        info!(%portal, "added the iSCSI target portal");
        Ok(())
    }

    fn discover_target_portal(&self, portal: &TargetPortal) -> Result<Vec<String>> {
        let targets = self.targets(&self.portal(portal)?)?;
        targets.iter().map(|t| t.str("NodeAddress").map(str::to_owned)).collect()
    }

    fn remove_target_portal(&self, portal: &TargetPortal) -> Result<()> {
        let row = match self.portal(portal) {
            // Gone already (a retry after the call that removed it): nothing to do.
            Err(Error::NotFound(_)) => {
                info!(%portal, "the iSCSI target portal is not registered; nothing to remove");
                return Ok(());
            }
            other => other?,
        };
        let args = [
            ("TargetPortalAddress", Value::from(row.str("TargetPortalAddress")?)),
            ("TargetPortalPortNumber", Value::from(row.u16("TargetPortalPortNumber")?)),
        ];
        let out = self.wmi.call(NS, &row.path, "Remove", &args)?;
        self.check(&out, || format!("removing iSCSI target portal {portal} ({PORTAL}.Remove)"))?;
        info!(%portal, "removed the iSCSI target portal");
        Ok(())
    }

    fn list_target_portals(&self) -> Result<Vec<TargetPortal>> {
        let rows = self.wmi.query(&Query::select(NS, PORTAL, PORTAL_PROPS))?;
        rows.iter()
            .map(|r| {
                Ok(TargetPortal {
                    address: r.str("TargetPortalAddress")?.to_owned(),
                    port: r.u16("TargetPortalPortNumber")?,
                })
            })
            .collect()
    }

    fn connect_target(&self, req: &ConnectTarget) -> Result<()> {
        let (iqn, portal) = (req.iqn.as_str(), &req.portal);
        let target = self.target(portal, iqn)?;
        if target.bool("IsConnected")? {
            info!(iqn, %portal, "the iSCSI target is connected already");
            return Ok(());
        }
        // As upstream: user name and secret always passed (empty without CHAP), not persistent.
        let args = [
            ("NodeAddress", Value::from(iqn)),
            ("TargetPortalAddress", Value::from(portal.address.as_str())),
            ("TargetPortalPortNumber", Value::from(portal.port)),
            ("AuthenticationType", Value::from(auth_type_name(req.auth))),
            ("ChapUsername", Value::from(req.chap_username.as_str())),
            ("ChapSecret", Value::Secret(req.chap_secret.clone())),
            ("IsPersistent", Value::Bool(false)),
        ];
        let out = match self.wmi.call(NS, TARGET, "Connect", &args) {
            Ok(out) => out,
            Err(e) => {
                // Classified before scrubbing, which may withhold the very text that says why.
                let refusal = refusal_of_text(&e.to_string());
                let e = scrub(e, &req.chap_secret);
                if let Some(r) = refusal {
                    return Err(refused(r, iqn, portal, &e.to_string()));
                }
                return Err(map_message(e, |m| format!("connecting to iSCSI target {iqn} at portal {portal}: {m}")));
            }
        };
        match return_code(&out)? {
            0 => {
                info!(iqn, %portal, auth = auth_type_name(req.auth), "connected the iSCSI target");
                Ok(())
            }
            c => match refusal_of_code(c) {
                Some(r) => Err(refused(r, iqn, portal, &format!("{TARGET}.Connect returned {}", describe(c)))),
                None => Err(Error::internal(format!(
                    "connecting to iSCSI target {iqn} at portal {portal} failed: {TARGET}.Connect returned {}, expected 0",
                    describe(c)
                ))),
            },
        }
    }

    fn disconnect_target(&self, portal: &TargetPortal, iqn: &str) -> Result<()> {
        let target = self.target(portal, iqn)?;
        if !target.bool("IsConnected")? {
            info!(iqn, %portal, "the iSCSI target is not connected");
            return Ok(());
        }
        let sessions = self.wmi.associators(
            NS,
            &target.path,
            "MSFT_iSCSITargetToiSCSISession",
            SESSION,
            &["SessionIdentifier", "IsPersistent"],
        )?;
        let Some(session) = sessions.first() else {
            warn!(iqn, %portal, "the iSCSI target was connected but has no session now; nothing to disconnect");
            return Ok(());
        };
        let id = session.str("SessionIdentifier")?;
        if session.bool("IsPersistent")? {
            let out = self.wmi.call(NS, &session.path, "Unregister", &[])?;
            self.check(&out, || format!("unregistering the persistent login of session {id} to iSCSI target {iqn}"))?;
            debug!(iqn, session = id, "unregistered the persistent login");
        }
        let out = self.wmi.call(NS, &target.path, "Disconnect", &[("SessionIdentifier", Value::from(id))])?;
        self.check(&out, || format!("disconnecting session {id} from iSCSI target {iqn} at portal {portal}"))?;
        info!(iqn, %portal, session = id, "disconnected the iSCSI target");
        Ok(())
    }

    fn get_target_disks(&self, portal: &TargetPortal, iqn: &str) -> Result<Vec<u32>> {
        let target = self.target(portal, iqn)?;
        if !target.bool("IsConnected")? {
            info!(iqn, %portal, "the iSCSI target is not connected; it has no disks");
            return Ok(Vec::new());
        }
        let connections = self.wmi.associators(
            NS,
            &target.path,
            "MSFT_iSCSITargetToiSCSIConnection",
            CONNECTION,
            &["ConnectionIdentifier"],
        )?;
        let mut disks = Vec::new();
        for c in &connections {
            for d in self.wmi.associators(NS, &c.path, "MSFT_iSCSIConnectionToDisk", DISK, &["Number"])? {
                disks.push(d.u32("Number")?);
            }
        }
        disks.sort_unstable();
        disks.dedup();
        Ok(disks)
    }

    fn set_mutual_chap_secret(&self, secret: &Secret) -> Result<()> {
        let out =
            self.wmi.call(NS, SESSION, "SetCHAPSecret", &[("ChapSecret", Value::Secret(secret.clone()))]).map_err(
                |e| map_message(scrub(e, secret), |m| format!("setting the initiator's mutual CHAP secret: {m}")),
            )?;
        match return_code(&out)? {
            0 => {
                info!("set the initiator's mutual CHAP secret");
                Ok(())
            }
            c if refusal_of_code(c) == Some(Refusal::BadChapParameter) => Err(Error::invalid(format!(
                "the initiator refused the mutual CHAP secret: {SESSION}.SetCHAPSecret returned {}; expected a secret of 12 to 16 bytes",
                describe(c)
            ))),
            c => Err(Error::internal(format!(
                "setting the initiator's mutual CHAP secret failed: {SESSION}.SetCHAPSecret returned {}, expected 0",
                describe(c)
            ))),
        }
    }
}

#[cfg(test)]
mod tests;
