#![cfg(unix)]
//! Every system RPC, through a real socket, against the in-memory host.

use csi_proxy_host::memory::{MemoryHost, SimService};
use csi_proxy_host::types::{ServiceInfo, ServiceStatus, StartType};
use csi_proxy_host::Hosts;
use csi_proxy_server::Config;
use csi_proxy_stack_tests::{api, assert_status, TestServer};
use csi_proxy_transport::ConnPolicy;
use csi_proxy_wire::{v1alpha1, Group};
use std::sync::Arc;
use tonic::Code;

async fn client(s: &TestServer) -> v1alpha1::system_client::SystemClient<tonic::transport::Channel> {
    v1alpha1::system_client::SystemClient::new(s.channel(Group::System, "v1alpha1").await)
}

fn status_of(s: &TestServer, name: &str) -> ServiceStatus {
    s.host.with(|st| st.services[name].info.status)
}

fn get(name: &str) -> v1alpha1::GetServiceRequest {
    v1alpha1::GetServiceRequest { name: name.into() }
}

#[tokio::test]
async fn bios_serial_number() {
    let s = TestServer::start().await;
    let mut c = client(&s).await;
    let r = c.get_bios_serial_number(v1alpha1::GetBiosSerialNumberRequest {}).await.unwrap().into_inner();
    assert_eq!(r.serial_number, "SIM-SERIAL-0001");
    s.host.with(|st| st.bios_serial = "VMware-42 1a 2b".into());
    let r = c.get_bios_serial_number(v1alpha1::GetBiosSerialNumberRequest {}).await.unwrap().into_inner();
    assert_eq!(r.serial_number, "VMware-42 1a 2b");
    s.host.with(|st| st.bios_serial.clear());
    assert_status(
        c.get_bios_serial_number(v1alpha1::GetBiosSerialNumberRequest {}).await,
        Code::NotFound,
        "serial number",
    );
}

#[tokio::test]
async fn get_service_answers_wire_enum_values() {
    let s = TestServer::start().await;
    let mut c = client(&s).await;
    let r = c.get_service(get("iscsid")).await.unwrap().into_inner();
    assert_eq!(r.display_name, "iSCSI initiator");
    assert_eq!(r.start_type, 3, "MANUAL");
    assert_eq!(r.status, 1, "STOPPED");
    assert_eq!(r.start_type(), v1alpha1::StartType::Manual);
    assert_eq!(r.status(), v1alpha1::ServiceStatus::Stopped);

    // Every host value travels as the number the proto gives it.
    let start_types = [
        (StartType::Boot, 0, v1alpha1::StartType::Boot),
        (StartType::System, 1, v1alpha1::StartType::System),
        (StartType::Automatic, 2, v1alpha1::StartType::Automatic),
        (StartType::Manual, 3, v1alpha1::StartType::Manual),
        (StartType::Disabled, 4, v1alpha1::StartType::Disabled),
    ];
    for (host, wire, generated) in start_types {
        s.host.with(|st| st.services.get_mut("iscsid").unwrap().info.start_type = host);
        let r = c.get_service(get("iscsid")).await.unwrap().into_inner();
        assert_eq!(r.start_type, wire, "{host:?}");
        assert_eq!(r.start_type(), generated, "{host:?}");
    }
    let statuses = [
        (ServiceStatus::Unknown, 0, v1alpha1::ServiceStatus::Unknown),
        (ServiceStatus::Stopped, 1, v1alpha1::ServiceStatus::Stopped),
        (ServiceStatus::StartPending, 2, v1alpha1::ServiceStatus::StartPending),
        (ServiceStatus::StopPending, 3, v1alpha1::ServiceStatus::StopPending),
        (ServiceStatus::Running, 4, v1alpha1::ServiceStatus::Running),
        (ServiceStatus::ContinuePending, 5, v1alpha1::ServiceStatus::ContinuePending),
        (ServiceStatus::PausePending, 6, v1alpha1::ServiceStatus::PausePending),
        (ServiceStatus::Paused, 7, v1alpha1::ServiceStatus::Paused),
    ];
    for (host, wire, generated) in statuses {
        s.host.with(|st| st.services.get_mut("iscsid").unwrap().info.status = host);
        let r = c.get_service(get("iscsid")).await.unwrap().into_inner();
        assert_eq!(r.status, wire, "{host:?}");
        assert_eq!(r.status(), generated, "{host:?}");
        assert_eq!(r.display_name, "iSCSI initiator");
    }

    assert_status(c.get_service(get("nosuch")).await, Code::NotFound, "\"nosuch\"");
    assert_status(c.get_service(get("")).await, Code::InvalidArgument, "name is empty");
}

#[tokio::test]
async fn start_and_stop_service() {
    let s = TestServer::start().await;
    let mut c = client(&s).await;
    let start = |n: &str| v1alpha1::StartServiceRequest { name: n.into() };
    let stop = |n: &str, force: bool| v1alpha1::StopServiceRequest { name: n.into(), force };

    c.start_service(start("iscsid")).await.unwrap();
    assert_eq!(status_of(&s, "iscsid"), ServiceStatus::Running);
    let r = c.get_service(get("iscsid")).await.unwrap().into_inner();
    assert_eq!(r.status, 4, "RUNNING");
    c.start_service(start("iscsid")).await.unwrap();
    assert_eq!(status_of(&s, "iscsid"), ServiceStatus::Running);

    c.stop_service(stop("iscsid", false)).await.unwrap();
    assert_eq!(status_of(&s, "iscsid"), ServiceStatus::Stopped);
    assert_eq!(c.get_service(get("iscsid")).await.unwrap().into_inner().status, 1, "STOPPED");
    c.stop_service(stop("iscsid", false)).await.unwrap();

    // A running dependent blocks a plain stop; force stops it too.
    s.host.with(|st| {
        st.services.insert(
            "msiscsi-helper".into(),
            SimService {
                info: ServiceInfo {
                    display_name: "Helper".into(),
                    start_type: StartType::Automatic,
                    status: ServiceStatus::Running,
                },
                dependents: vec![],
            },
        );
        st.services.get_mut("iscsid").unwrap().dependents = vec!["msiscsi-helper".into()];
    });
    c.start_service(start("iscsid")).await.unwrap();
    assert_status(c.stop_service(stop("iscsid", false)).await, Code::FailedPrecondition, "msiscsi-helper");
    assert_eq!(status_of(&s, "iscsid"), ServiceStatus::Running);
    assert_eq!(status_of(&s, "msiscsi-helper"), ServiceStatus::Running);
    c.stop_service(stop("iscsid", true)).await.unwrap();
    assert_eq!(status_of(&s, "iscsid"), ServiceStatus::Stopped);
    assert_eq!(status_of(&s, "msiscsi-helper"), ServiceStatus::Stopped);

    assert_status(c.start_service(start("nosuch")).await, Code::NotFound, "\"nosuch\"");
    assert_status(c.stop_service(stop("nosuch", true)).await, Code::NotFound, "\"nosuch\"");
    assert_status(c.start_service(start("")).await, Code::InvalidArgument, "name is empty");
    assert_status(c.stop_service(stop("", false)).await, Code::InvalidArgument, "name is empty");
    assert_status(c.stop_service(stop("", true)).await, Code::InvalidArgument, "name is empty");
    assert_eq!(status_of(&s, "iscsid"), ServiceStatus::Stopped);
}

/// Upstream's forced stop collects the running dependents breadth-first, transitively (a service
/// that depends on a dependent is stopped too), stops them last-found-first and the requested
/// service last. No service may be left running on top of a stopped one.
#[tokio::test]
async fn forced_stop_stops_dependents_of_dependents() {
    let s = TestServer::start().await;
    let mut c = client(&s).await;
    let svc = |dependents: &[&str]| SimService {
        info: ServiceInfo {
            display_name: "dep".into(),
            start_type: StartType::Automatic,
            status: ServiceStatus::Running,
        },
        dependents: dependents.iter().map(|d| d.to_string()).collect(),
    };
    s.host.with(|st| {
        // iscsid <- mid <- leaf
        st.services.insert("mid".into(), svc(&["leaf"]));
        st.services.insert("leaf".into(), svc(&[]));
        let iscsid = st.services.get_mut("iscsid").unwrap();
        iscsid.dependents = vec!["mid".into()];
        iscsid.info.status = ServiceStatus::Running;
    });
    c.stop_service(v1alpha1::StopServiceRequest { name: "iscsid".into(), force: true }).await.unwrap();
    assert_eq!(status_of(&s, "iscsid"), ServiceStatus::Stopped);
    assert_eq!(status_of(&s, "mid"), ServiceStatus::Stopped);
    assert_eq!(status_of(&s, "leaf"), ServiceStatus::Stopped, "leaf depends on mid, which was stopped");
}

/// The system API alone, on a socket of its own, with `config`, over a fresh sample memory host.
async fn configured(config: Config) -> TestServer {
    let host = Arc::new(MemoryHost::sample());
    let apis = [api(Group::System, "v1alpha1")];
    TestServer::start_apis(&apis, host.clone(), Hosts::from_one(host), config, ConnPolicy::default()).await
}

/// PermissionDenied naming the service and the allowed list.
#[track_caller]
fn denied<T: std::fmt::Debug>(r: Result<T, tonic::Status>, name: &str) {
    assert_status(r, Code::PermissionDenied, &format!("service {name:?} may not be started or stopped"));
}

fn helper(status: ServiceStatus) -> SimService {
    SimService {
        info: ServiceInfo { display_name: "Helper".into(), start_type: StartType::Manual, status },
        dependents: vec![],
    }
}

/// `-allowed-service`: Start/Stop of a listed name work; any other name is PermissionDenied naming
/// it and the list, and nothing is started or stopped. GetService stays unrestricted.
#[tokio::test]
async fn allowed_services_restrict_start_and_stop() {
    let config = Config { allowed_services: Some(vec!["iscsid".into()]), ..Config::default() };
    let s = configured(config).await;
    s.host.with(|st| {
        st.services.insert("stopped-one".into(), helper(ServiceStatus::Stopped));
        st.services.insert("running-one".into(), helper(ServiceStatus::Running));
    });
    let mut c = client(&s).await;
    let start = |n: &str| v1alpha1::StartServiceRequest { name: n.into() };
    let stop = |n: &str, force: bool| v1alpha1::StopServiceRequest { name: n.into(), force };

    c.start_service(start("iscsid")).await.unwrap();
    assert_eq!(status_of(&s, "iscsid"), ServiceStatus::Running);
    c.stop_service(stop("iscsid", false)).await.unwrap();
    assert_eq!(status_of(&s, "iscsid"), ServiceStatus::Stopped);

    let e = c.start_service(start("stopped-one")).await.unwrap_err();
    assert!(e.message().contains("allowed services [iscsid]"), "{e:?}");
    denied(c.start_service(start("stopped-one")).await, "stopped-one");
    denied(c.stop_service(stop("running-one", false)).await, "running-one");
    denied(c.stop_service(stop("running-one", true)).await, "running-one");
    // Not in the list and not on the host: still PermissionDenied, which reveals nothing.
    denied(c.start_service(start("nosuch")).await, "nosuch");
    // Names compare exactly on Linux (systemd unit names are case-sensitive).
    denied(c.start_service(start("ISCSID")).await, "ISCSID");
    denied(c.start_service(start("iscsid.service")).await, "iscsid.service");
    assert_eq!(status_of(&s, "stopped-one"), ServiceStatus::Stopped, "nothing started");
    assert_eq!(status_of(&s, "running-one"), ServiceStatus::Running, "nothing stopped");
    assert_eq!(status_of(&s, "iscsid"), ServiceStatus::Stopped);

    // Validation still comes first; GetService is not restricted.
    assert_status(c.start_service(start("")).await, Code::InvalidArgument, "name is empty");
    let r = c.get_service(get("running-one")).await.unwrap().into_inner();
    assert_eq!((r.display_name.as_str(), r.status), ("Helper", 4));
}

/// StopService with `force` also stops running dependents; under `-allowed-service` each of them
/// must be allowed too, and a refusal stops nothing at all.
#[tokio::test]
async fn forced_stop_takes_down_only_allowed_dependents() {
    // iscsid running, with a running service that depends on it.
    let arrange = |s: &TestServer| {
        s.host.with(|st| {
            st.services.insert("dependent".into(), helper(ServiceStatus::Running));
            let iscsid = st.services.get_mut("iscsid").unwrap();
            iscsid.info.status = ServiceStatus::Running;
            iscsid.dependents = vec!["dependent".into()];
        })
    };
    let config = Config { allowed_services: Some(vec!["iscsid".into()]), ..Config::default() };
    let s = configured(config).await;
    arrange(&s);
    let mut c = client(&s).await;
    let stop = |force: bool| v1alpha1::StopServiceRequest { name: "iscsid".into(), force };
    assert_status(c.stop_service(stop(false)).await, Code::FailedPrecondition, "dependent");
    assert_status(c.stop_service(stop(true)).await, Code::PermissionDenied, "would also stop dependent");
    assert_eq!((status_of(&s, "iscsid"), status_of(&s, "dependent")), (ServiceStatus::Running, ServiceStatus::Running));
    drop(s);

    let config = Config { allowed_services: Some(vec!["iscsid".into(), "dependent".into()]), ..Config::default() };
    let s = configured(config).await;
    arrange(&s);
    let mut c = client(&s).await;
    c.stop_service(stop(true)).await.unwrap();
    assert_eq!((status_of(&s, "iscsid"), status_of(&s, "dependent")), (ServiceStatus::Stopped, ServiceStatus::Stopped));
}

/// An empty list (`-allowed-service=`) allows no service at all; no list allows any.
#[tokio::test]
async fn empty_allow_list_allows_none_and_no_list_allows_any() {
    let s = configured(Config { allowed_services: Some(vec![]), ..Config::default() }).await;
    let mut c = client(&s).await;
    assert_status(
        c.start_service(v1alpha1::StartServiceRequest { name: "iscsid".into() }).await,
        Code::PermissionDenied,
        "\"iscsid\"",
    );
    assert_eq!(status_of(&s, "iscsid"), ServiceStatus::Stopped);
    drop(s);

    let s = configured(Config::default()).await;
    let mut c = client(&s).await;
    c.start_service(v1alpha1::StartServiceRequest { name: "iscsid".into() }).await.unwrap();
    assert_eq!(status_of(&s, "iscsid"), ServiceStatus::Running);
}
