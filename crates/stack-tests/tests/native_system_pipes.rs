#![cfg(windows)]
//! The system API on its real named pipe, served by the native Windows backend (SMBIOS and the
//! service control manager), with `-allowed-service` in force. Under Wine: the print spooler is a
//! real demand-start service that can be cycled safely, PlugPlay runs from boot.
//!
//! Binds `\\.\pipe\csi-proxy-system-v1alpha1`, like `pipes_e2e`; cargo runs test binaries one at
//! a time, and this file holds ONE test.

use csi_proxy_server::{Config, Context};
use csi_proxy_stack_tests::api;
use csi_proxy_stack_tests::pipes::{channel, PipeServer};
use csi_proxy_wire::v1alpha1::{
    system_client::SystemClient, GetBiosSerialNumberRequest, GetServiceRequest, StartServiceRequest, StopServiceRequest,
};
use csi_proxy_wire::Group;
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_system_api_on_its_pipe() {
    // Allowed in another case than the SCM's own spelling: SCM names are case-insensitive.
    let config = Config { allowed_services: Some(vec!["spooler".into()]), ..Config::default() };
    let ctx = Context::new(csi_proxy_host::native(Default::default()), config);
    let server = PipeServer::start(&[api(Group::System, "v1alpha1")], ctx);
    let mut c = SystemClient::new(channel(Group::System, "v1alpha1").await);
    let get = |n: &str| GetServiceRequest { name: n.into() };

    let r = c.get_service(get("PlugPlay")).await.unwrap().into_inner();
    assert_eq!((r.display_name.as_str(), r.start_type, r.status), ("Plug and Play Service", 2, 4));
    let r = c.get_service(get("Spooler")).await.unwrap().into_inner();
    assert_eq!((r.display_name.as_str(), r.start_type), ("Print Spooler", 3));
    let e = c.get_service(get("csi-proxy-no-such-service")).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    assert!(e.message().contains("\"csi-proxy-no-such-service\""), "{e:?}");

    c.start_service(StartServiceRequest { name: "Spooler".into() }).await.unwrap();
    assert_eq!(c.get_service(get("Spooler")).await.unwrap().into_inner().status, 4, "RUNNING");
    c.stop_service(StopServiceRequest { name: "SPOOLER".into(), force: false }).await.unwrap();
    assert_eq!(c.get_service(get("Spooler")).await.unwrap().into_inner().status, 1, "STOPPED");

    // Not on the list: refused before the SCM is asked, PlugPlay keeps running.
    let e = c.stop_service(StopServiceRequest { name: "PlugPlay".into(), force: true }).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("\"PlugPlay\"") && e.message().contains("spooler"), "{e:?}");
    assert_eq!(c.get_service(get("PlugPlay")).await.unwrap().into_inner().status, 4);

    // The SMBIOS serial: whatever the firmware table says, as a serial or NotFound.
    match c.get_bios_serial_number(GetBiosSerialNumberRequest {}).await {
        Ok(r) => assert!(!r.into_inner().serial_number.trim().is_empty()),
        Err(e) => assert_eq!(e.code(), Code::NotFound, "{e:?}"),
    }

    server.stop().await;
}
