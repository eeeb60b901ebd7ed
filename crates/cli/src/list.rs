//! The read-only listings: each is a few typed calls of one API version (the newest that has
//! them), shown as a table or JSON.

use crate::table::size;
use crate::{rpc, term, Ctx, Failure};
use csi_proxy_client::{find_api, v1, v1alpha1, v1alpha2, Api, APIS};
use serde_json::json;
use std::time::Duration;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};

fn api(group: &str, version: &str) -> Api {
    find_api(group, version).expect("a served API")
}

/// One endpoint's answer to discovery.
async fn probe(ctx: &Ctx, api: Api, limit: Duration) -> (String, Option<String>) {
    let check = async {
        let channel = ctx.connector.connect(api).await.map_err(|e| e.to_string())?;
        match HealthClient::new(channel).check(HealthCheckRequest { service: String::new() }).await {
            Ok(r) => Ok(ServingStatus::try_from(r.into_inner().status)
                .map(|s| s.as_str_name().to_string())
                .unwrap_or_else(|_| "UNKNOWN".into())),
            // A daemon without the health service (upstream's) still answers on the endpoint.
            Err(s) if s.code() == tonic::Code::Unimplemented => Ok("answers".to_string()),
            Err(s) => Err(format!("health check: code {:?}: {}", s.code(), s.message())),
        }
    };
    match tokio::time::timeout(limit, check).await {
        Ok(Ok(state)) => (state, None),
        Ok(Err(e)) => ("absent".into(), Some(e)),
        Err(_) => ("absent".into(), Some(format!("no answer within {limit:?}"))),
    }
}

/// Which of the 23 endpoints answer: all probed at once.
pub async fn apis(ctx: &Ctx) -> Result<(), Failure> {
    let limit = ctx.timeout.min(Duration::from_secs(5));
    let probes = APIS.iter().map(|a| probe(ctx, *a, limit));
    let results = join_all(probes).await;
    let mut rows = Vec::new();
    let mut out = Vec::new();
    for (api, (state, error)) in APIS.iter().zip(results) {
        let endpoint = ctx.connector.endpoint(api);
        let name = format!("{}/{}", api.group, api.version);
        rows.push(vec![
            name.clone(),
            api.service_name(),
            state.clone(),
            endpoint.clone(),
            error.clone().unwrap_or_default(),
        ]);
        out.push(
            json!({"api": name, "service": api.service_name(), "state": state, "endpoint": endpoint, "error": error}),
        );
    }
    let answering = out.iter().filter(|o| o["state"] != "absent").count();
    ctx.print(&["API", "SERVICE", "STATE", "ENDPOINT", "ERROR"], 4, rows, out.into());
    if !ctx.json {
        println!("{answering} of {} APIs answer", APIS.len());
    }
    if answering == 0 {
        return Err(Failure::Other(anyhow::anyhow!(
            "no API answers: is csi-proxy running (and is this its -socket-dir)?"
        )));
    }
    if answering < APIS.len() {
        return Err(Failure::Partial(format!(
            "{} of {} APIs do not answer (-o wide or -o json shows why)",
            APIS.len() - answering,
            APIS.len()
        )));
    }
    Ok(())
}

/// Runs the futures one after another on this thread's runtime; discovery's connections are
/// quick, and a current-thread runtime interleaves their waiting anyway through `join`.
async fn join_all<F: std::future::Future>(futs: impl Iterator<Item = F>) -> Vec<F::Output> {
    let futs: Vec<_> = futs.map(Box::pin).collect();
    let mut slots: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    let mut futs: Vec<_> = futs.into_iter().map(Some).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, slot) in futs.iter_mut().zip(slots.iter_mut()) {
            if let Some(fut) = f {
                match fut.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        *slot = Some(v);
                        *f = None;
                    }
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    slots.into_iter().map(|s| s.expect("every future finished")).collect()
}

/// A table cell: the value, or the failed call's code (its message goes to stderr once).
fn cell<T: ToString>(r: &Result<T, tonic::Status>) -> String {
    match r {
        Ok(v) => v.to_string(),
        Err(s) => format!("error: {:?}", s.code()),
    }
}

/// Reports a failed per-item call on stderr, so the table keeps its shape.
fn warn<T>(what: &str, r: &Result<T, tonic::Status>) {
    if let Err(s) = r {
        eprintln!("{}", warning(what, s));
    }
}

/// The warning line for the call `what` (which may quote a daemon's value, bounded by the
/// caller) that failed with `s`: both escaped, the message bounded.
fn warning(what: &str, s: &tonic::Status) -> String {
    format!("warning: {}: code {:?}: {}", term::printable(what), s.code(), term::shown(s.message(), term::MESSAGE))
}

fn value<T: Into<serde_json::Value> + Clone>(r: &Result<T, tonic::Status>) -> serde_json::Value {
    match r {
        Ok(v) => v.clone().into(),
        Err(s) => json!({"error": {"code": format!("{:?}", s.code()), "message": s.message()}}),
    }
}

/// Every disk the daemon reports, by number.
async fn disk_numbers(ctx: &Ctx) -> Result<(v1::ListDiskIDsResponse, v1::ListDiskLocationsResponse), Failure> {
    let mut disks = v1::disk_client::DiskClient::new(ctx.connect(api("disk", "v1")).await?);
    let ids = disks.list_disk_i_ds(v1::ListDiskIDsRequest {}).await.map_err(rpc("v1.Disk/ListDiskIDs"))?;
    let locations =
        disks.list_disk_locations(v1::ListDiskLocationsRequest {}).await.map_err(rpc("v1.Disk/ListDiskLocations"))?;
    Ok((ids.into_inner(), locations.into_inner()))
}

pub async fn disks(ctx: &Ctx) -> Result<(), Failure> {
    let (ids, locations) = disk_numbers(ctx).await?;
    let mut disks = v1::disk_client::DiskClient::new(ctx.connect(api("disk", "v1")).await?);
    let numbers: std::collections::BTreeSet<u32> =
        ids.disk_i_ds.keys().chain(locations.disk_locations.keys()).copied().collect();
    let (mut rows, mut out) = (Vec::new(), Vec::new());
    let mut failed = 0;
    for n in numbers {
        let total =
            disks.get_disk_stats(v1::GetDiskStatsRequest { disk_number: n }).await.map(|r| r.into_inner().total_bytes);
        let online =
            disks.get_disk_state(v1::GetDiskStateRequest { disk_number: n }).await.map(|r| r.into_inner().is_online);
        warn(&format!("disk {n}: v1.Disk/GetDiskStats"), &total);
        warn(&format!("disk {n}: v1.Disk/GetDiskState"), &online);
        failed += usize::from(total.is_err() || online.is_err());
        let id = ids.disk_i_ds.get(&n).cloned().unwrap_or_default();
        let loc = locations.disk_locations.get(&n).cloned().unwrap_or_default();
        rows.push(vec![
            n.to_string(),
            cell(&total.as_ref().map(|b| size(*b)).map_err(Clone::clone)),
            format!("{}/{}/{}/{}", loc.adapter, loc.bus, loc.target, loc.lunid),
            id.page83.clone(),
            id.serial_number.clone(),
            cell(&online),
            cell(&total),
        ]);
        out.push(json!({
            "number": n,
            "size_bytes": value(&total),
            "location": {"adapter": loc.adapter, "bus": loc.bus, "target": loc.target, "lun": loc.lunid},
            "page83": id.page83,
            "serial_number": id.serial_number,
            "online": value(&online),
        }));
    }
    let n = rows.len();
    ctx.print(
        &["DISK", "SIZE", "LOCATION (ADAPTER/BUS/TARGET/LUN)", "PAGE83", "SERIAL", "ONLINE", "SIZE (BYTES)"],
        6,
        rows,
        out.into(),
    );
    partial(failed, n, "disks")
}

/// Exit status 1 when any of a listing's `total` rows could not be read in full.
fn partial(failed: usize, total: usize, what: &str) -> Result<(), Failure> {
    if failed == 0 {
        return Ok(());
    }
    Err(Failure::Partial(format!("{failed} of {total} {what} could not be read in full (see the warnings above)")))
}

pub async fn volumes(ctx: &Ctx) -> Result<(), Failure> {
    let (ids, locations) = disk_numbers(ctx).await?;
    let numbers: std::collections::BTreeSet<u32> =
        ids.disk_i_ds.keys().chain(locations.disk_locations.keys()).copied().collect();
    let mut volumes = v1::volume_client::VolumeClient::new(ctx.connect(api("volume", "v1")).await?);
    let (mut rows, mut out) = (Vec::new(), Vec::new());
    let (mut failed_disks, mut failed_volumes) = (0, 0);
    let disk_count = numbers.len();
    for n in numbers {
        let listed =
            volumes.list_volumes_on_disk(v1::ListVolumesOnDiskRequest { disk_number: n, partition_number: 0 }).await;
        let ids = match listed {
            Ok(r) => r.into_inner().volume_ids,
            Err(s) => {
                eprintln!("{}", warning(&format!("disk {n}: v1.Volume/ListVolumesOnDisk"), &s));
                failed_disks += 1;
                continue;
            }
        };
        for id in ids {
            let formatted = volumes
                .is_volume_formatted(v1::IsVolumeFormattedRequest { volume_id: id.clone() })
                .await
                .map(|r| r.into_inner().formatted);
            let stats = volumes
                .get_volume_stats(v1::GetVolumeStatsRequest { volume_id: id.clone() })
                .await
                .map(|r| r.into_inner());
            let shown_id = term::bounded(&id, term::VALUE);
            warn(&format!("volume {shown_id}: v1.Volume/IsVolumeFormatted"), &formatted);
            warn(&format!("volume {shown_id}: v1.Volume/GetVolumeStats"), &stats);
            failed_volumes += usize::from(formatted.is_err() || stats.is_err());
            let (total, used, total_bytes, used_bytes) = match &stats {
                Ok(s) => (size(s.total_bytes), size(s.used_bytes), s.total_bytes.to_string(), s.used_bytes.to_string()),
                Err(s) => (cell::<String>(&Err(s.clone())), String::new(), String::new(), String::new()),
            };
            rows.push(vec![id.clone(), n.to_string(), cell(&formatted), total, used, total_bytes, used_bytes]);
            out.push(json!({
                "id": id,
                "disk": n,
                "formatted": value(&formatted),
                "size_bytes": value(&stats.as_ref().map(|s| s.total_bytes).map_err(Clone::clone)),
                "used_bytes": value(&stats.as_ref().map(|s| s.used_bytes).map_err(Clone::clone)),
            }));
        }
    }
    let volume_count = rows.len();
    ctx.print(&["VOLUME", "DISK", "FORMATTED", "SIZE", "USED", "SIZE (BYTES)", "USED (BYTES)"], 5, rows, out.into());
    partial(failed_disks, disk_count, "disks' volumes")?;
    partial(failed_volumes, volume_count, "volumes")
}

pub async fn iscsi_portals(ctx: &Ctx) -> Result<(), Failure> {
    let mut c = v1alpha2::iscsi_client::IscsiClient::new(ctx.connect(api("iscsi", "v1alpha2")).await?);
    let portals = c
        .list_target_portals(v1alpha2::ListTargetPortalsRequest {})
        .await
        .map_err(rpc("v1alpha2.Iscsi/ListTargetPortals"))?
        .into_inner()
        .target_portals;
    let rows = portals.iter().map(|p| vec![p.target_address.clone(), p.target_port.to_string()]).collect();
    let out = portals.iter().map(|p| json!({"address": p.target_address, "port": p.target_port})).collect::<Vec<_>>();
    ctx.print(&["ADDRESS", "PORT"], 2, rows, out.into());
    Ok(())
}

pub async fn bios_serial(ctx: &Ctx) -> Result<(), Failure> {
    let mut c = v1alpha1::system_client::SystemClient::new(ctx.connect(api("system", "v1alpha1")).await?);
    let serial = c
        .get_bios_serial_number(v1alpha1::GetBiosSerialNumberRequest {})
        .await
        .map_err(rpc("v1alpha1.System/GetBIOSSerialNumber"))?
        .into_inner()
        .serial_number;
    ctx.print(&["BIOS SERIAL"], 1, vec![vec![serial.clone()]], json!({"serial_number": serial}));
    Ok(())
}

pub async fn service(ctx: &Ctx, name: &str) -> Result<(), Failure> {
    let mut c = v1alpha1::system_client::SystemClient::new(ctx.connect(api("system", "v1alpha1")).await?);
    let s = c
        .get_service(v1alpha1::GetServiceRequest { name: name.to_string() })
        .await
        .map_err(rpc("v1alpha1.System/GetService"))?
        .into_inner();
    let start = v1alpha1::StartType::try_from(s.start_type)
        .map(|t| t.as_str_name().to_string())
        .unwrap_or(s.start_type.to_string());
    let status = v1alpha1::ServiceStatus::try_from(s.status)
        .map(|t| t.as_str_name().to_string())
        .unwrap_or(s.status.to_string());
    ctx.print(
        &["NAME", "DISPLAY NAME", "START TYPE", "STATUS"],
        4,
        vec![vec![name.to_string(), s.display_name.clone(), start.clone(), status.clone()]],
        json!({"name": name, "display_name": s.display_name, "start_type": start, "status": status}),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A volume ID and a message as a hostile daemon might send them: the warning is one line,
    /// with no control or bidi character, and bounded.
    #[test]
    fn a_warning_escapes_and_bounds_the_daemons_value_and_message() {
        let id =
            format!("vol\u{1b}]0;x\u{7}\u{7f}\u{85}\u{9b}2J\r\nwarning: forged\u{202e}{}", "i".repeat(2 * term::VALUE));
        let message = format!("gone\u{1b}[2J\u{9d}\n{}", "m".repeat(2 * term::MESSAGE));
        let what = format!("volume {}: v1.Volume/GetVolumeStats", term::bounded(&id, term::VALUE));
        let line = warning(&what, &tonic::Status::not_found(message));
        assert_eq!(line.lines().count(), 1, "{line}");
        assert!(!line.chars().any(term::escaped), "{line:?}");
        assert!(
            line.starts_with(r"warning: volume vol\u{1b}]0;x\u{7}\u{7f}\u{85}\u{9b}2J\r\nwarning: forged\u{202e}iii"),
            "{line}"
        );
        assert!(line.contains(r"…: v1.Volume/GetVolumeStats: code NotFound: gone\u{1b}[2J\u{9d}\nmmm"), "{line}");
        assert!(line.chars().count() < term::VALUE + term::MESSAGE + 200, "{}", line.chars().count());
    }
}
