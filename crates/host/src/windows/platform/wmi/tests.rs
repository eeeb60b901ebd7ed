//! These run against the machine's real WMI: under Wine 8 that is wbemprox, which has ROOT\CIMV2
//! Win32_* classes (and StdRegProv) but no Storage or SMB namespace.

use super::variant::CIM_UINT32;
use super::*;
use csi_proxy_sync::LockExt;
use std::time::Duration;
use windows::Win32::System::Com::COINIT_APARTMENTTHREADED;
use windows::Win32::System::Variant::VT_BSTR;

const HKEY_LOCAL_MACHINE: u32 = 0x8000_0002;

fn cimv2(class: &'static str, props: &[&'static str]) -> Query {
    Query::select(Namespace::Cimv2, class, props)
}

fn is_wine(w: &ComWmi) -> bool {
    let os = w.query(&cimv2("Win32_OperatingSystem", &["Manufacturer"])).unwrap();
    os[0].str("Manufacturer").unwrap() == "The Wine Project"
}

#[test]
fn operating_system_has_real_values() {
    let w = ComWmi::new();
    let rows = w
        .query(&cimv2("Win32_OperatingSystem", &["Caption", "Version", "Primary", "OSType", "TotalVisibleMemorySize"]))
        .unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let os = &rows[0];
    assert_eq!(os.class, "Win32_OperatingSystem");
    assert!(os.str("Caption").unwrap().contains("Windows"), "{os:?}");
    let version = os.str("Version").unwrap();
    assert!(version.split('.').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())), "{version}");
    assert!(os.bool("Primary").unwrap());
    assert_eq!(os.u16("OSType").unwrap(), 18, "WINNT");
    // uint64 arrives as a decimal BSTR.
    assert!(matches!(os.get("TotalVisibleMemorySize"), Value::Str(_)), "{os:?}");
    assert!(os.u64("TotalVisibleMemorySize").unwrap() > 0);
    assert_eq!(os.props.len(), 5, "only what was selected: {os:?}");

    // SELECT *: every non-system property, and the object path without Wine's padding NULs.
    let all = w.query(&cimv2("Win32_OperatingSystem", &[])).unwrap();
    let os = &all[0];
    assert!(os.path.contains(r"\ROOT\CIMV2:Win32_OperatingSystem"), "{:?}", os.path);
    assert!(!os.path.contains('\0'), "{:?}", os.path);
    assert!(os.props.len() > 10 && os.props.contains_key("BuildNumber"), "{os:?}");
    assert!(os.props.keys().all(|k| !k.starts_with("__")), "{os:?}");
}

#[test]
fn bios_has_real_values() {
    let w = ComWmi::new();
    let rows = w.query(&cimv2("Win32_BIOS", &[])).unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let bios = &rows[0];
    assert_eq!(bios.class, "Win32_BIOS");
    assert!(bios.path.contains(":Win32_BIOS."), "{:?}", bios.path);
    assert!(!bios.str("Manufacturer").unwrap().is_empty());
    assert!(bios.u16("SMBIOSMajorVersion").unwrap() >= 2, "{bios:?}");
    // A NULL property is present and Null, not missing.
    if is_wine(&w) {
        assert_eq!(bios.props.get("CurrentLanguage"), Some(&Value::Null), "{bios:?}");
    }
}

#[test]
fn service_by_name() {
    let w = ComWmi::new();
    let rows = w.query(&cimv2("Win32_Service", &["Name", "State", "ProcessId"]).eq("Name", "Spooler")).unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let svc = &rows[0];
    assert_eq!(svc.class, "Win32_Service");
    assert_eq!(svc.str("Name").unwrap(), "Spooler");
    let state = svc.str("State").unwrap();
    assert!(["Stopped", "Start Pending", "Stop Pending", "Running", "Paused"].contains(&state), "{state}");
    svc.u32("ProcessId").unwrap();
    // A property the class doesn't have names itself.
    let err = w.query(&cimv2("Win32_Service", &["Name", "NoSuchProperty"]).eq("Name", "Spooler")).unwrap_err();
    assert!(err.to_string().contains("NoSuchProperty"), "{err}");
}

#[test]
fn literals_with_backslashes_and_quotes_match_nothing() {
    let w = ComWmi::new();
    for name in [r"a \ b", r"\\?\Volume{x}\", "say \"hi\""] {
        let rows = w.query(&cimv2("Win32_Service", &["Name"]).eq("Name", name));
        assert_eq!(rows.unwrap(), vec![], "{name:?}");
    }
    // WQL escapes a quote as \'. Wine's lexer has no escapes: it ends the literal at the quote
    // and then fails the query, so the value still can't select anything.
    for name in ["o'brien \\", "x\\' OR Name <> \\'"] {
        let res = w.query(&cimv2("Win32_Service", &["Name"]).eq("Name", name));
        if is_wine(&w) {
            let err = res.unwrap_err();
            assert!(matches!(err, Error::Internal(_)) && err.to_string().contains("WBEM_E_INVALID_QUERY"), "{err:?}");
        } else {
            assert_eq!(res.unwrap(), vec![], "{name:?}");
        }
    }
}

#[test]
fn missing_classes_and_namespaces_are_a_failed_precondition() {
    let w = ComWmi::new();
    let cases = [
        (Namespace::Storage, "MSFT_Disk"),
        (Namespace::Cimv2, "MSFT_Disk"),
        (Namespace::Smb, "MSFT_SmbGlobalMapping"),
        (Namespace::Cimv2, "Win32_NoSuchClass"),
    ];
    for (ns, class) in cases {
        if !is_wine(&w) && ns != Namespace::Cimv2 {
            continue; // a real Windows may have these
        }
        for _ in 0..2 {
            let err = w.query(&Query::select(ns, class, &[])).unwrap_err();
            let msg = err.to_string();
            assert!(matches!(err, Error::FailedPrecondition(_)), "{err:?}");
            assert!(msg.starts_with(&format!("WMI class {class} is not available in {}: 0x8004", ns.path())), "{msg}");
            assert!(msg.contains("(WBEM_E_"), "{msg}");
        }
        let err = w.associators(ns, r"\\.\ROOT\CIMV2:Win32_BIOS=@", "X_Assoc", class, &[]).unwrap_err();
        assert!(matches!(err, Error::FailedPrecondition(_)), "{err:?}");
        let err = w.call(ns, class, "Method", &[]).unwrap_err();
        assert!(matches!(err, Error::FailedPrecondition(_)) && err.to_string().contains(class), "{err:?}");
    }
}

#[test]
fn instance_method_on_a_running_service() {
    let w = ComWmi::new();
    // SELECT * so that Wine fills __PATH.
    let running = w.query(&cimv2("Win32_Service", &[]).eq("State", "Running")).unwrap();
    let svc =
        running.iter().find(|r| r.str("Name").is_ok_and(|n| n == "RpcSs" || n == "Eventlog")).unwrap_or_else(|| {
            panic!("no running RpcSs or Eventlog among {:?}", running.iter().map(|r| r.get("Name")).collect::<Vec<_>>())
        });
    assert!(svc.path.contains(":Win32_Service.Name="), "{:?}", svc.path);
    let out = w.call(Namespace::Cimv2, &svc.path, "StartService", &[]).unwrap();
    assert_eq!(out.class, "__PARAMETERS");
    assert_eq!(out.path, "");
    // 10: the service is already running; nothing changed.
    assert_eq!(out.return_value().unwrap(), 10, "{out:?}");
}

fn hklm() -> Value {
    // uint32 on Windows, sint32 under Wine: the VT_I4 bits are the same either way.
    Value::I64(HKEY_LOCAL_MACHINE as i32 as i64)
}

#[test]
fn static_method_with_arguments() {
    let w = ComWmi::new();
    let out = w
        .call(
            Namespace::Cimv2,
            "StdRegProv",
            "GetStringValue",
            &[
                ("hDefKey", hklm()),
                ("sSubKeyName", r"SOFTWARE\Microsoft\Windows NT\CurrentVersion".into()),
                ("sValueName", "ProductName".into()),
            ],
        )
        .unwrap();
    assert_eq!(out.return_value().unwrap(), 0, "{out:?}");
    assert!(out.str("sValue").unwrap().contains("Windows"), "{out:?}");

    let out = w
        .call(
            Namespace::Cimv2,
            "StdRegProv",
            "EnumKey",
            &[("hDefKey", hklm()), ("sSubKeyName", r"SOFTWARE\Microsoft".into())],
        )
        .unwrap();
    assert_eq!(out.return_value().unwrap(), 0, "{out:?}");
    match out.get("sNames") {
        Value::StrArray(names) => assert!(names.iter().any(|n| n == "Windows NT"), "{names:?}"),
        other => panic!("sNames is {other:?}"),
    }

    let out = w
        .call(
            Namespace::Cimv2,
            "StdRegProv",
            "EnumKey",
            &[("hDefKey", hklm()), ("sSubKeyName", r"SOFTWARE\No\Such\Key\csi-proxy".into())],
        )
        .unwrap();
    assert_eq!(out.return_value().unwrap(), 2, "ERROR_FILE_NOT_FOUND: {out:?}");
}

#[test]
fn method_errors_name_class_method_and_parameter_but_never_values() {
    let w = ComWmi::new();
    let err = w.call(Namespace::Cimv2, "StdRegProv", "NoSuchMethod", &[]).unwrap_err();
    assert!(matches!(err, Error::FailedPrecondition(_)), "{err:?}");
    assert!(err.to_string().contains("StdRegProv.NoSuchMethod"), "{err}");

    let secret = "hunter2-do-not-show";
    let args = [("hDefKey", hklm()), ("sBogus", Value::Secret(crate::types::Secret::new(secret)))];
    let err = w.call(Namespace::Cimv2, "StdRegProv", "GetStringValue", &args).unwrap_err().to_string();
    assert!(err.contains("StdRegProv.GetStringValue") && err.contains("sBogus") && !err.contains(secret), "{err}");

    // A string where an integer is declared: Put refuses it, and says which parameter.
    let args = [("hDefKey", Value::Secret(crate::types::Secret::new(secret)))];
    let err = w.call(Namespace::Cimv2, "StdRegProv", "EnumKey", &args).unwrap_err().to_string();
    assert!(err.contains("parameter hDefKey") && err.contains("Put failed") && !err.contains(secret), "{err}");
}

#[test]
fn associators_of_a_logical_disk() {
    // Wine follows associations only from the dependent end, so: drive letter -> partition.
    let w = ComWmi::new();
    let disks = w.query(&cimv2("Win32_LogicalDisk", &[]).eq("DeviceID", "C:")).unwrap();
    assert_eq!(disks.len(), 1, "{disks:?}");
    let parts = w
        .associators(
            Namespace::Cimv2,
            &disks[0].path,
            "Win32_LogicalDiskToPartition",
            "Win32_DiskPartition",
            &["DiskIndex"],
        )
        .unwrap();
    assert_eq!(parts.len(), 1, "{parts:?}");
    assert_eq!(parts[0].class, "Win32_DiskPartition");
    assert!(parts[0].path.contains(":Win32_DiskPartition.DeviceId="), "{:?}", parts[0].path);
    assert_eq!(parts[0].props.len(), 1, "only what was asked: {:?}", parts[0]);
    let index = parts[0].u32("DiskIndex").unwrap();
    let drives = w.query(&cimv2("Win32_DiskDrive", &["Index"]).eq("Index", index)).unwrap();
    assert_eq!(drives.len(), 1, "disk {index} of C: exists: {drives:?}");
    // Braces would end the reference early.
    assert!(w
        .associators(Namespace::Cimv2, "Win32_LogicalDisk.DeviceId=\"}\"", "A", "Win32_DiskPartition", &[])
        .is_err());
}

#[test]
fn paths_lose_server_and_namespace_for_associators() {
    assert_eq!(
        relative_path(r#"\\VM\ROOT\CIMV2:Win32_LogicalDisk.DeviceId="C:""#),
        r#"Win32_LogicalDisk.DeviceId="C:""#
    );
    assert_eq!(relative_path(r#"Win32_LogicalDisk.DeviceId="C:""#), r#"Win32_LogicalDisk.DeviceId="C:""#);
    assert_eq!(
        relative_path(r#"\\H\ROOT\X:MSFT_Volume.ObjectId="{1}\\H\r:VO:x""#),
        r#"MSFT_Volume.ObjectId="{1}\\H\r:VO:x""#
    );
}

#[test]
fn four_threads_share_one_connection() {
    let w = ComWmi::new();
    std::thread::scope(|s| {
        for t in 0..4 {
            let w = &w;
            // Fresh threads: none has initialised COM.
            s.spawn(move || {
                for i in 0..15 {
                    match (t + i) % 3 {
                        0 => assert_eq!(w.query(&cimv2("Win32_OperatingSystem", &["Caption"])).unwrap().len(), 1),
                        1 => {
                            let q = cimv2("Win32_Service", &["Name"]).eq("Name", "Spooler");
                            assert_eq!(w.query(&q).unwrap()[0].str("Name").unwrap(), "Spooler");
                        }
                        _ => assert!(matches!(
                            w.query(&Query::select(Namespace::Cimv2, "MSFT_Disk", &[])),
                            Err(Error::FailedPrecondition(_))
                        )),
                    }
                }
            });
        }
    });
    assert_eq!(w.conns.lock_ignoring_poison().len(), 1, "one connection to ROOT\\CIMV2");
}

#[test]
fn single_threaded_callers_are_served_from_the_mta() {
    let w = ComWmi::new();
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: test thread joins an STA before anything else touches COM on it.
            let code = unsafe { CoInitializeEx(None, COINIT_APARTMENTTHREADED) };
            assert!(code.is_ok(), "{}", hr_text(code));
            let refused = Apartment::join().refused;
            assert_eq!(refused.map(|c| c.0 as u32), Some(hr::RPC_E_CHANGED_MODE));
            let rows = w.query(&cimv2("Win32_BIOS", &["Manufacturer"])).unwrap();
            assert_eq!(rows.len(), 1);
            // SAFETY: balances the CoInitializeEx above.
            unsafe { CoUninitialize() };
        });
    });
}

/// R6: a call leaves COM on its thread before it returns, so the thread's exit has nothing to
/// undo. (A thread-local guard left it at thread exit, from Rust's TLS destructor, which Windows
/// runs under the loader lock, where CoUninitialize must not be called.) Wine shows the thread's
/// COM state after the call; a hang or crash at thread exit would show only on Windows.
#[test]
fn calls_leave_com_before_they_return() {
    let w = ComWmi::new();
    std::thread::scope(|s| {
        s.spawn(|| {
            assert_eq!(w.query(&cimv2("Win32_BIOS", &["Manufacturer"])).unwrap().len(), 1);
            // A thread still in the MTA can't join an STA (RPC_E_CHANGED_MODE), and one still
            // initialised gets S_FALSE: only a thread with COM closed gets S_OK.
            // SAFETY: FFI with no pointers, on this test thread only; balanced just below.
            let code = unsafe { CoInitializeEx(None, COINIT_APARTMENTTHREADED) };
            if code.is_ok() {
                // SAFETY: balances the successful CoInitializeEx above.
                unsafe { CoUninitialize() };
            }
            assert_eq!(code.0, 0, "the thread is still in COM after the call: {}", hr_text(code));
        });
    });
}

#[test]
fn reused_connection_timing() {
    let q = cimv2("Win32_OperatingSystem", &["Caption"]);
    let time = |w: &ComWmi| {
        let t = Instant::now();
        w.query(&q).unwrap();
        t.elapsed()
    };
    // The first in the process also loads the provider and sets process security.
    let process_first = time(&ComWmi::new());
    let w = ComWmi::new();
    let connection_first = time(&w);
    let mut again: Vec<Duration> = (0..20).map(|_| time(&w)).collect();
    again.sort();
    let median = again[again.len() / 2];
    println!(
        "WMI query timing: first in process {process_first:?}; first on a new connection {connection_first:?}; \
         reused connection, median of 20: {median:?}"
    );
    assert_eq!(w.conns.lock_ignoring_poison().len(), 1);
    assert!(w.classes.lock_ignoring_poison().contains(&(Namespace::Cimv2, "Win32_OperatingSystem".to_owned())));
    assert!(median < Duration::from_secs(1));
}

// ---- Pure parts: VARIANT conversion (through the real OLE runtime), errors, paths.

fn round_trip(v: &Value, cim: i32) -> Value {
    to_value(&arg_variant(v, cim).unwrap(), cim).ok().unwrap()
}

#[test]
fn arguments_become_variants_wmi_reads_back() {
    assert_eq!(round_trip(&Value::Null, 0), Value::Null);
    assert_eq!(round_trip(&Value::Bool(true), 0), Value::Bool(true));
    assert_eq!(round_trip(&Value::Bool(false), 0), Value::Bool(false));
    assert_eq!(round_trip(&Value::I64(-7), 0), Value::I64(-7));
    assert_eq!(round_trip(&Value::I64(1 << 40), 0), Value::Str((1u64 << 40).to_string()));
    assert_eq!(round_trip(&Value::U64(u64::MAX), 0), Value::Str(u64::MAX.to_string()));
    assert_eq!(round_trip(&Value::Str("é\\'x".into()), 0), Value::Str("é\\'x".into()));
    // uint32 travels as VT_I4 with the same bits.
    let big = Value::I64(0xFFFF_FFFE);
    assert_eq!(round_trip(&big, CIM_UINT32), big);
    assert_eq!(to_value(&arg_variant(&big, CIM_UINT32).unwrap(), 0).ok().unwrap(), Value::I64(-2));
    let strs = Value::StrArray(vec!["a".into(), String::new(), "ü \\ c".into()]);
    assert_eq!(round_trip(&strs, 0), strs);
    assert_eq!(round_trip(&Value::StrArray(vec![]), 0), Value::StrArray(vec![]));
    let ints = Value::IntArray(vec![0, -1, i32::MAX.into()]);
    assert_eq!(round_trip(&ints, 0), ints);
    let uints = Value::IntArray(vec![u32::MAX.into(), 2]);
    assert_eq!(round_trip(&uints, CIM_UINT32 | 0x2000), uints);
    assert!(arg_variant(&Value::IntArray(vec![1 << 33]), 0).is_err());
}

/// The BSTR pointer a VT_BSTR variant holds, null included (`BSTR::as_ptr` hides null).
fn bstr_ptr(v: &Variant) -> *const u16 {
    assert_eq!(v.vt(), VT_BSTR);
    // SAFETY: the tag says `bstrVal` is live; its pointer is copied, not owned.
    unsafe { std::mem::transmute_copy(&v.0.Anonymous.Anonymous.Anonymous.bstrVal) }
}

/// R8: an empty string argument (MSFT_Volume.Format's FileSystemLabel, as upstream sends it)
/// is a real zero-length BSTR, not the null one windows-rs makes of "". Whether a Storage
/// provider tells them apart shows only on Windows (Wine has no MSFT_Volume); this checks the
/// value handed to ExecMethod.
#[test]
fn empty_strings_are_allocated_not_null() {
    for value in [Value::Str(String::new()), Value::Secret(crate::types::Secret::new(""))] {
        let v = arg_variant(&value, 0).unwrap();
        assert!(!bstr_ptr(&v).is_null(), "{value:?} became a null BSTR");
        assert_eq!(to_value(&v, 0).ok().unwrap(), Value::Str(String::new()));
    }
    let v = arg_variant(&Value::Str("NTFS".into()), 0).unwrap();
    assert_eq!(to_value(&v, 0).ok().unwrap(), Value::Str("NTFS".into()));
}

// A COM object laid out as a proxy manager presents a remote object: an identity IUnknown (slot
// 0), an interface proxy (slot 1) and IClientSecurity (slot 2), whose SetBlanket records the
// proxy it was asked to set. Reference counts are not kept: the object outlives every use.
#[repr(C)]
#[allow(dead_code)] // the vtable slots are read by COM, through the object's pointers
struct FakeProxy {
    identity: &'static windows::core::IUnknown_Vtbl,
    iface: &'static windows::core::IUnknown_Vtbl,
    security: &'static windows::Win32::System::Com::IClientSecurity_Vtbl,
    blanket_set_on: std::sync::atomic::AtomicPtr<c_void>,
}

const SLOT: usize = std::mem::size_of::<usize>();

unsafe extern "system" fn fake_qi<const K: usize>(
    this: *mut c_void,
    iid: *const windows::core::GUID,
    out: *mut *mut c_void,
) -> HRESULT {
    use windows::Win32::System::Com::{IClientSecurity, IPersist};
    // SAFETY: COM calls this with `this` = slot K of a live FakeProxy, a valid IID and a
    // writable out pointer.
    unsafe {
        let base = this.cast::<u8>().sub(K * SLOT);
        let iid = *iid;
        let slot = if iid == windows::core::IUnknown::IID {
            0
        } else if iid == IPersist::IID {
            1
        } else if iid == IClientSecurity::IID {
            2
        } else {
            *out = std::ptr::null_mut();
            return HRESULT(hr::E_NOINTERFACE as i32);
        };
        *out = base.add(slot * SLOT).cast();
    }
    HRESULT(0)
}

unsafe extern "system" fn fake_ref(_: *mut c_void) -> u32 {
    1
}

#[allow(clippy::too_many_arguments)]
unsafe extern "system" fn fake_set_blanket(
    this: *mut c_void,
    proxy: *mut c_void,
    _: u32,
    _: u32,
    _: PCWSTR,
    _: windows::Win32::System::Com::RPC_C_AUTHN_LEVEL,
    _: windows::Win32::System::Com::RPC_C_IMP_LEVEL,
    _: *const c_void,
    _: u32,
) -> HRESULT {
    // SAFETY: COM calls this with `this` = slot 2 of a live FakeProxy.
    let fake = unsafe { &*this.cast::<u8>().sub(2 * SLOT).cast::<FakeProxy>() };
    fake.blanket_set_on.store(proxy, std::sync::atomic::Ordering::SeqCst);
    HRESULT(0)
}

#[allow(clippy::too_many_arguments)]
unsafe extern "system" fn fake_query_blanket(
    _: *mut c_void,
    _: *mut c_void,
    _: *mut u32,
    _: *mut u32,
    _: *mut *mut u16,
    _: *mut windows::Win32::System::Com::RPC_C_AUTHN_LEVEL,
    _: *mut windows::Win32::System::Com::RPC_C_IMP_LEVEL,
    _: *mut *mut c_void,
    _: *mut u32,
) -> HRESULT {
    HRESULT(hr::E_NOINTERFACE as i32)
}

unsafe extern "system" fn fake_copy_proxy(_: *mut c_void, _: *mut c_void, _: *mut *mut c_void) -> HRESULT {
    HRESULT(hr::E_NOINTERFACE as i32)
}

const fn unknown_vtbl<const K: usize>() -> windows::core::IUnknown_Vtbl {
    windows::core::IUnknown_Vtbl { QueryInterface: fake_qi::<K>, AddRef: fake_ref, Release: fake_ref }
}

static IDENTITY_VTBL: windows::core::IUnknown_Vtbl = unknown_vtbl::<0>();
static IFACE_VTBL: windows::core::IUnknown_Vtbl = unknown_vtbl::<1>();
static SECURITY_VTBL: windows::Win32::System::Com::IClientSecurity_Vtbl =
    windows::Win32::System::Com::IClientSecurity_Vtbl {
        base__: unknown_vtbl::<2>(),
        QueryBlanket: fake_query_blanket,
        SetBlanket: fake_set_blanket,
        CopyProxy: fake_copy_proxy,
    };

/// R1: the blanket goes on the interface proxy the calls use, not on the proxy manager's
/// IUnknown (what QueryInterface for IUnknown answers). CoSetProxyBlanket hands its argument to
/// IClientSecurity::SetBlanket as "the proxy to be set"; the fake records which one it got.
/// Whether the Storage providers then accept the calls shows only on Windows (Wine's WMI is
/// in-process and has no proxy).
#[test]
fn the_blanket_is_set_on_the_interface_not_on_iunknown() {
    let fake = FakeProxy {
        identity: &IDENTITY_VTBL,
        iface: &IFACE_VTBL,
        security: &SECURITY_VTBL,
        blanket_set_on: Default::default(),
    };
    let iface_ptr: *mut c_void = std::ptr::addr_of!(fake.iface).cast_mut().cast();
    let identity_ptr: *mut c_void = std::ptr::addr_of!(fake.identity).cast_mut().cast();
    // SAFETY: `iface_ptr` points to a vtable pointer whose table starts with IUnknown's methods
    // (IPersist's own method is never called); `fake` outlives the borrow.
    let proxy = unsafe { windows::Win32::System::Com::IPersist::from_raw_borrowed(&iface_ptr) }.unwrap();
    set_blanket(proxy, "IPersist").unwrap_or_else(|_| panic!("set_blanket failed"));
    let got = fake.blanket_set_on.load(std::sync::atomic::Ordering::SeqCst);
    assert_ne!(got, identity_ptr, "the blanket went to the proxy manager's IUnknown");
    assert_eq!(got, iface_ptr);
}

#[test]
fn secrets_are_wiped_after_use() {
    let mut v = arg_variant(&Value::Secret(crate::types::Secret::new("pw")), 0).unwrap();
    assert_eq!(to_value(&v, 0).ok().unwrap(), Value::Str("pw".into()));
    v.wipe_bstr();
    assert_eq!(to_value(&v, 0).ok().unwrap(), Value::Str(String::new()));
}

#[test]
fn variants_without_a_value_type_are_refused() {
    let real = Variant::tagged(windows::Win32::System::Variant::VT_R8, |u| u.dblVal = 1.5);
    assert!(matches!(to_value(&real, 0), Err(Unsupported(5))));
    let err = unsupported("MSFT_Disk", "Size", 5).to_string();
    assert!(err.contains("MSFT_Disk") && err.contains("Size") && err.contains("0x0005"), "{err}");
}

#[test]
fn hresults_read_and_classify() {
    let h = |n: u32| HRESULT(n as i32);
    assert_eq!(hr_text(h(0x8004_100E)), "0x8004100E (WBEM_E_INVALID_NAMESPACE)");
    assert_eq!(hr_text(h(0x8004_1010)), "0x80041010 (WBEM_E_INVALID_CLASS)");
    assert!(hr_text(h(0x8004_1099)).starts_with("0x80041099"));
    let fail = |n: u32| Fail::Com { step: "ExecMethod".into(), code: h(n) };
    let e = fail(hr::WBEM_E_ACCESS_DENIED).into_error("WMI X.Y", true);
    assert!(matches!(e, Error::PermissionDenied(_)));
    assert_eq!(e.to_string(), "WMI X.Y: ExecMethod failed: 0x80041003 (WBEM_E_ACCESS_DENIED)");
    assert!(matches!(fail(hr::E_ACCESSDENIED).into_error("w", false), Error::PermissionDenied(_)));
    assert!(matches!(fail(hr::WBEM_E_NOT_FOUND).into_error("w", true), Error::NotFound(_)));
    assert!(matches!(fail(hr::WBEM_E_NOT_FOUND).into_error("w", false), Error::Internal(_)));
    assert!(matches!(fail(hr::WBEM_E_INVALID_NAMESPACE).into_error("w", false), Error::FailedPrecondition(_)));
    assert!(matches!(fail(hr::WBEM_E_INVALID_CLASS).into_error("w", false), Error::FailedPrecondition(_)));
    assert!(matches!(fail(hr::RPC_E_DISCONNECTED).into_error("w", false), Error::Unavailable(_)));
    assert!(matches!(fail(hr::WBEM_E_INVALID_QUERY).into_error("w", false), Error::Internal(_)));
    for code in
        [hr::RPC_E_DISCONNECTED, hr::RPC_S_SERVER_UNAVAILABLE, hr::RPC_S_CALL_FAILED, hr::WBEM_E_TRANSPORT_FAILURE]
    {
        assert!(is_transport(h(code)), "{code:x}");
    }
    assert!(!is_transport(h(hr::WBEM_E_FAILED)));
}

#[test]
fn targets_name_their_class() {
    assert_eq!(class_of("StdRegProv").unwrap(), "StdRegProv");
    assert_eq!(class_of(r#"\\H.corp.example\ROOT\CIMV2:Win32_Service.Name="a:b.c""#).unwrap(), "Win32_Service");
    let volume = r#"\\H\ROOT\Microsoft\Windows\Storage:MSFT_Volume.ObjectId="{1}\\H\root/Microsoft/Windows/Storage/Providers_v2\WSP_Volume.ObjectId=\"{a}:VO:\\?\Volume{b}\\\"""#;
    assert_eq!(class_of(volume).unwrap(), "MSFT_Volume");
    assert_eq!(class_of(r"\\H\ROOT\CIMV2:Win32_OperatingSystem=@").unwrap(), "Win32_OperatingSystem");
    assert!(class_of("").is_err());
    assert!(class_of(r#"X:"oops""#).is_err());
    assert!(is_path(volume) && !is_path("StdRegProv"));
}

#[test]
fn com_security_setting() {
    for off in ["0", "false", "No", " OFF "] {
        assert!(!security_wanted(Some(off)), "{off}");
    }
    for on in [None, Some("1"), Some("true"), Some(""), Some("yes")] {
        assert!(security_wanted(on), "{on:?}");
    }
}
