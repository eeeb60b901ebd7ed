//! System: one version.

use super::{empty_responses, from_output, grpc_service, into_op};
use crate::ops::system::*;
use csi_proxy_host::types::ServiceInfo;
use csi_proxy_wire::v1alpha1;

// What each version serves: `RpcName => Op: trait_method(Request) -> Response;` (see grpc_service!).

grpc_service!(v1alpha1::system_server::System {
    GetBIOSSerialNumber => GetBiosSerialNumber:
        get_bios_serial_number(GetBiosSerialNumberRequest) -> GetBiosSerialNumberResponse;
    StartService => StartService: start_service(StartServiceRequest) -> StartServiceResponse;
    StopService => StopService: stop_service(StopServiceRequest) -> StopServiceResponse;
    GetService => GetService: get_service(GetServiceRequest) -> GetServiceResponse;
});

// How each version's messages convert.

into_op!(v1alpha1::GetBiosSerialNumberRequest => GetBiosSerialNumber, |r| GetBiosSerialNumber {});
from_output!(v1alpha1::GetBiosSerialNumberResponse, String, |o| v1alpha1::GetBiosSerialNumberResponse {
    serial_number: o
});
into_op!(v1alpha1::StartServiceRequest => StartService, |r| StartService { name: r.name });
into_op!(v1alpha1::StopServiceRequest => StopService, |r| StopService { name: r.name, force: r.force });
empty_responses!(v1alpha1::StartServiceResponse, v1alpha1::StopServiceResponse);
into_op!(v1alpha1::GetServiceRequest => GetService, |r| GetService { name: r.name });
// The host enums carry the wire values as discriminants.
from_output!(v1alpha1::GetServiceResponse, ServiceInfo, |o| v1alpha1::GetServiceResponse {
    display_name: o.display_name,
    start_type: o.start_type as i32,
    status: o.status as i32,
});
