//! The real [`Wmi`]: WMI over COM, in the multithreaded apartment (MTA).
//!
//! - Every call joins the MTA on its thread and leaves it before it returns; a thread that is
//!   already single-threaded hands the work to a short-lived helper thread instead. The first
//!   caller also pins the MTA for the life of the process (`CoIncrementMTAUsage`): the cached
//!   proxies belong to it, and it would otherwise be torn down whenever no call is running.
//! - Process security is set once (packet privacy, impersonation) unless `WMI_COM_SECURITY`
//!   turns it off, and every `IWbemServices` proxy gets the same blanket anyway, so privacy holds
//!   even when someone else initialised security first.
//! - One connection per namespace, made on first use and reused; a transport failure drops it
//!   and the operation is tried once more on a fresh one.
//! - A class is looked up (`GetObject`) before its rows are trusted: Wine, and a Windows without
//!   the provider, answer zero rows for a class they don't have.

use crate::windows::wmi::{associators_wql, Namespace, Query, Row, Value, Wmi};
use crate::{Error, Result};
use csi_proxy_sync::LockExt;
use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::sync::{Mutex, Once};
use std::time::Instant;
use windows::core::{Interface, BSTR, HRESULT, PCWSTR};
use windows::Win32::Foundation::{SysAllocStringLen, VARIANT_BOOL, VARIANT_FALSE, VARIANT_TRUE};
use windows::Win32::System::Com::{
    CoCreateInstance, CoIncrementMTAUsage, CoInitializeEx, CoInitializeSecurity, CoSetProxyBlanket, CoUninitialize,
    CLSCTX_INPROC_SERVER, COINIT_MULTITHREADED, EOAC_NONE, RPC_C_AUTHN_LEVEL_PKT_PRIVACY, RPC_C_IMP_LEVEL_IMPERSONATE,
    SAFEARRAY,
};
use windows::Win32::System::Ole::{
    SafeArrayAccessData, SafeArrayCreateVector, SafeArrayGetDim, SafeArrayGetLBound, SafeArrayGetUBound,
    SafeArrayPutElement, SafeArrayUnaccessData,
};
use windows::Win32::System::Variant::{
    VariantClear, VARENUM, VARIANT, VT_ARRAY, VT_BOOL, VT_BSTR, VT_EMPTY, VT_I1, VT_I2, VT_I4, VT_I8, VT_INT, VT_NULL,
    VT_TYPEMASK, VT_UI1, VT_UI2, VT_UI4, VT_UI8, VT_UINT,
};
use windows::Win32::System::Wmi::{
    IEnumWbemClassObject, IWbemClassObject, IWbemContext, IWbemLocator, IWbemServices, WbemLocator,
    WBEM_FLAG_CONNECT_USE_MAX_WAIT, WBEM_FLAG_FORWARD_ONLY, WBEM_FLAG_NONSYSTEM_ONLY, WBEM_FLAG_RETURN_IMMEDIATELY,
    WBEM_FLAG_RETURN_WBEM_COMPLETE,
};

/// HRESULTs the layer tells apart (winerror.h, wbemcli.h), as u32 for matching.
mod hr {
    pub const E_ACCESSDENIED: u32 = 0x8007_0005;
    pub const E_NOINTERFACE: u32 = 0x8000_4002;
    pub const RPC_E_CHANGED_MODE: u32 = 0x8001_0106;
    pub const RPC_E_DISCONNECTED: u32 = 0x8001_0108;
    pub const RPC_E_TOO_LATE: u32 = 0x8001_0119;
    /// HRESULT_FROM_WIN32(RPC_S_SERVER_UNAVAILABLE = 1722).
    pub const RPC_S_SERVER_UNAVAILABLE: u32 = 0x8007_06BA;
    /// HRESULT_FROM_WIN32(RPC_S_CALL_FAILED = 1726).
    pub const RPC_S_CALL_FAILED: u32 = 0x8007_06BE;
    pub const WBEM_S_FALSE: u32 = 0x0000_0001;
    pub const WBEM_S_TIMEDOUT: u32 = 0x0004_0004;
    pub const WBEM_E_FAILED: u32 = 0x8004_1001;
    pub const WBEM_E_NOT_FOUND: u32 = 0x8004_1002;
    pub const WBEM_E_ACCESS_DENIED: u32 = 0x8004_1003;
    pub const WBEM_E_PROVIDER_FAILURE: u32 = 0x8004_1004;
    pub const WBEM_E_TYPE_MISMATCH: u32 = 0x8004_1005;
    pub const WBEM_E_OUT_OF_MEMORY: u32 = 0x8004_1006;
    pub const WBEM_E_INVALID_PARAMETER: u32 = 0x8004_1008;
    pub const WBEM_E_NOT_AVAILABLE: u32 = 0x8004_1009;
    pub const WBEM_E_NOT_SUPPORTED: u32 = 0x8004_100C;
    pub const WBEM_E_INVALID_NAMESPACE: u32 = 0x8004_100E;
    pub const WBEM_E_INVALID_OBJECT: u32 = 0x8004_100F;
    pub const WBEM_E_INVALID_CLASS: u32 = 0x8004_1010;
    pub const WBEM_E_PROVIDER_NOT_FOUND: u32 = 0x8004_1011;
    pub const WBEM_E_PROVIDER_LOAD_FAILURE: u32 = 0x8004_1013;
    pub const WBEM_E_TRANSPORT_FAILURE: u32 = 0x8004_1015;
    pub const WBEM_E_INVALID_QUERY: u32 = 0x8004_1017;
    pub const WBEM_E_INVALID_QUERY_TYPE: u32 = 0x8004_1018;
    pub const WBEM_E_ALREADY_EXISTS: u32 = 0x8004_1019;
    pub const WBEM_E_INVALID_SYNTAX: u32 = 0x8004_1021;
    pub const WBEM_E_INVALID_METHOD: u32 = 0x8004_102E;
    pub const WBEM_E_INVALID_METHOD_PARAMETERS: u32 = 0x8004_102F;
    pub const WBEM_E_INVALID_PROPERTY: u32 = 0x8004_1031;
    pub const WBEM_E_INVALID_OBJECT_PATH: u32 = 0x8004_103A;
    pub const WBEM_E_METHOD_NOT_IMPLEMENTED: u32 = 0x8004_1055;
    pub const WBEM_E_METHOD_DISABLED: u32 = 0x8004_1056;
    pub const WBEM_E_TIMED_OUT: u32 = 0x8004_1069;
}

/// WMI's CIM type numbers (wbemcli.h CIMTYPE_ENUMERATION) that change how a value is read or
/// written: uint32 travels as VT_I4, so its sign bit is a value bit.
const CIM_UINT32: i32 = 19;
const CIM_TYPE_MASK: i32 = 0xFF;

fn hr_name(code: u32) -> Option<&'static str> {
    use hr::*;
    Some(match code {
        E_ACCESSDENIED => "E_ACCESSDENIED",
        E_NOINTERFACE => "E_NOINTERFACE",
        RPC_E_CHANGED_MODE => "RPC_E_CHANGED_MODE",
        RPC_E_DISCONNECTED => "RPC_E_DISCONNECTED",
        RPC_E_TOO_LATE => "RPC_E_TOO_LATE",
        RPC_S_SERVER_UNAVAILABLE => "RPC_S_SERVER_UNAVAILABLE",
        RPC_S_CALL_FAILED => "RPC_S_CALL_FAILED",
        WBEM_E_FAILED => "WBEM_E_FAILED",
        WBEM_E_NOT_FOUND => "WBEM_E_NOT_FOUND",
        WBEM_E_ACCESS_DENIED => "WBEM_E_ACCESS_DENIED",
        WBEM_E_PROVIDER_FAILURE => "WBEM_E_PROVIDER_FAILURE",
        WBEM_E_TYPE_MISMATCH => "WBEM_E_TYPE_MISMATCH",
        WBEM_E_OUT_OF_MEMORY => "WBEM_E_OUT_OF_MEMORY",
        WBEM_E_INVALID_PARAMETER => "WBEM_E_INVALID_PARAMETER",
        WBEM_E_NOT_AVAILABLE => "WBEM_E_NOT_AVAILABLE",
        WBEM_E_NOT_SUPPORTED => "WBEM_E_NOT_SUPPORTED",
        WBEM_E_INVALID_NAMESPACE => "WBEM_E_INVALID_NAMESPACE",
        WBEM_E_INVALID_OBJECT => "WBEM_E_INVALID_OBJECT",
        WBEM_E_INVALID_CLASS => "WBEM_E_INVALID_CLASS",
        WBEM_E_PROVIDER_NOT_FOUND => "WBEM_E_PROVIDER_NOT_FOUND",
        WBEM_E_PROVIDER_LOAD_FAILURE => "WBEM_E_PROVIDER_LOAD_FAILURE",
        WBEM_E_TRANSPORT_FAILURE => "WBEM_E_TRANSPORT_FAILURE",
        WBEM_E_INVALID_QUERY => "WBEM_E_INVALID_QUERY",
        WBEM_E_INVALID_QUERY_TYPE => "WBEM_E_INVALID_QUERY_TYPE",
        WBEM_E_ALREADY_EXISTS => "WBEM_E_ALREADY_EXISTS",
        WBEM_E_INVALID_SYNTAX => "WBEM_E_INVALID_SYNTAX",
        WBEM_E_INVALID_METHOD => "WBEM_E_INVALID_METHOD",
        WBEM_E_INVALID_METHOD_PARAMETERS => "WBEM_E_INVALID_METHOD_PARAMETERS",
        WBEM_E_INVALID_PROPERTY => "WBEM_E_INVALID_PROPERTY",
        WBEM_E_INVALID_OBJECT_PATH => "WBEM_E_INVALID_OBJECT_PATH",
        WBEM_E_METHOD_NOT_IMPLEMENTED => "WBEM_E_METHOD_NOT_IMPLEMENTED",
        WBEM_E_METHOD_DISABLED => "WBEM_E_METHOD_DISABLED",
        WBEM_E_TIMED_OUT => "WBEM_E_TIMED_OUT",
        _ => return None,
    })
}

/// `0x8004100E (WBEM_E_INVALID_NAMESPACE)`; codes outside the table get the system's text, if any.
fn hr_text(code: HRESULT) -> String {
    let n = code.0 as u32;
    match hr_name(n) {
        Some(name) => format!("0x{n:08X} ({name})"),
        None => {
            let msg = code.message();
            let msg = msg.trim();
            if msg.is_empty() {
                format!("0x{n:08X}")
            } else {
                format!("0x{n:08X} ({msg})")
            }
        }
    }
}

/// The connection itself broke (winmgmt restarted, RPC gone): worth one retry on a fresh one.
fn is_transport(code: HRESULT) -> bool {
    matches!(
        code.0 as u32,
        hr::RPC_E_DISCONNECTED | hr::RPC_S_SERVER_UNAVAILABLE | hr::RPC_S_CALL_FAILED | hr::WBEM_E_TRANSPORT_FAILURE
    )
}

/// The namespace or class does not exist here (no provider installed).
fn is_missing(code: HRESULT) -> bool {
    matches!(code.0 as u32, hr::WBEM_E_INVALID_CLASS | hr::WBEM_E_NOT_FOUND | hr::WBEM_E_INVALID_NAMESPACE)
}

/// A failure inside one attempt, before it is given the operation's context.
enum Fail {
    /// A COM call failed; `step` names it (never with argument values).
    Com { step: String, code: HRESULT },
    /// Already a complete host error.
    Host(Error),
}

impl Fail {
    fn com(step: impl Into<String>) -> impl FnOnce(windows::core::Error) -> Fail {
        let step = step.into();
        move |e| Fail::Com { step, code: e.code() }
    }

    /// The host error for a failure of `what` (e.g. "WMI query `…` in ROOT\CIMV2"); `instance`
    /// says the operation addressed one instance by its path, so "not found" is about it.
    fn into_error(self, what: &str, instance: bool) -> Error {
        let (step, code) = match self {
            Fail::Host(e) => return e,
            Fail::Com { step, code } => (step, code),
        };
        let msg = format!("{what}: {step} failed: {}", hr_text(code));
        match code.0 as u32 {
            hr::WBEM_E_ACCESS_DENIED | hr::E_ACCESSDENIED => Error::denied(msg),
            hr::WBEM_E_NOT_FOUND if instance => Error::not_found(msg),
            // The host lacks the provider: no retry will change that, and Unavailable would
            // read to a gRPC client as a broken connection.
            hr::WBEM_E_INVALID_CLASS | hr::WBEM_E_INVALID_NAMESPACE => Error::precondition(msg),
            _ if is_transport(code) => Error::unavailable(msg),
            _ => Error::internal(msg),
        }
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail::Host(e)
    }
}

type Attempt<T> = std::result::Result<T, Fail>;

// ---------------------------------------------------------------------------------------------
// Apartment and process security.

/// This thread's membership of the MTA for one call: joined when made, left when dropped, on
/// the same thread, before the call returns.
///
/// Never held in a thread-local: Rust runs thread-local destructors on Windows from a TLS
/// callback at DLL_THREAD_DETACH, under the loader lock (tokio's blocking threads exit that
/// way when idle), and CoUninitialize's documentation forbids calling it from DllMain.
struct Apartment {
    /// CoInitializeEx succeeded (S_OK or S_FALSE), so the thread owes one CoUninitialize.
    joined: bool,
    /// Why the thread can't use MTA objects directly, if it can't.
    refused: Option<HRESULT>,
}

impl Apartment {
    fn join() -> Self {
        // SAFETY: plain FFI call with no pointers; it only affects this thread's COM state.
        let code = unsafe { CoInitializeEx(None, COINIT_MULTITHREADED) };
        if code.is_ok() {
            Apartment { joined: true, refused: None }
        } else {
            Apartment { joined: false, refused: Some(code) }
        }
    }
}

impl Drop for Apartment {
    fn drop(&mut self) {
        if self.joined {
            // SAFETY: balances the successful CoInitializeEx of this guard, which is a local of
            // `in_mta` and so is dropped on the thread that made it.
            unsafe { CoUninitialize() };
        }
    }
}

static PROCESS: Once = Once::new();

/// Whether `WMI_COM_SECURITY` (as upstream reads it) leaves process security to us.
fn security_wanted(setting: Option<&str>) -> bool {
    !matches!(setting.map(|s| s.trim().to_ascii_lowercase()).as_deref(), Some("0" | "false" | "no" | "off"))
}

/// Once per process, from a thread in the MTA.
fn process_setup() {
    PROCESS.call_once(|| {
        // The cookie is dropped on purpose: the MTA stays for the life of the process.
        // SAFETY: plain FFI call with no pointers.
        if let Err(e) = unsafe { CoIncrementMTAUsage() } {
            tracing::warn!("CoIncrementMTAUsage failed: {}", hr_text(e.code()));
        }
        let setting = std::env::var("WMI_COM_SECURITY").ok();
        if !security_wanted(setting.as_deref()) {
            tracing::debug!("WMI_COM_SECURITY={setting:?}: leaving COM process security as it is");
            return;
        }
        // SAFETY: FFI; every pointer argument is None (defaults), the rest are plain values.
        let res = unsafe {
            CoInitializeSecurity(
                None,
                -1,
                None,
                None,
                RPC_C_AUTHN_LEVEL_PKT_PRIVACY,
                RPC_C_IMP_LEVEL_IMPERSONATE,
                None,
                EOAC_NONE,
                None,
            )
        };
        match res {
            Ok(()) => tracing::debug!("COM process security set: packet privacy, impersonate"),
            Err(e) if e.code().0 as u32 == hr::RPC_E_TOO_LATE => {
                tracing::debug!("COM process security was already set; proxies get their own blanket")
            }
            Err(e) => tracing::warn!("CoInitializeSecurity failed: {}", hr_text(e.code())),
        }
    });
}

/// Runs `f` on a thread of the MTA: this one, joined for the duration of `f`, or, if this thread
/// already lives in a single-threaded apartment, a helper thread.
fn in_mta<T: Send>(f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    // Per call: the pinned MTA (process_setup) keeps the proxies while no thread is in it, so
    // joining is cheap, and nothing is left for the thread's exit.
    let apartment = Apartment::join();
    match apartment.refused {
        None => {
            process_setup();
            f()
        }
        Some(code) if code.0 as u32 == hr::RPC_E_CHANGED_MODE => {
            std::thread::scope(|s| match s.spawn(|| in_mta(f)).join() {
                Ok(r) => r,
                Err(panic) => std::panic::resume_unwind(panic),
            })
        }
        Some(code) => Err(Error::internal(format!("CoInitializeEx(COINIT_MULTITHREADED) failed: {}", hr_text(code)))),
    }
}

// ---------------------------------------------------------------------------------------------
// Wine.

#[link(name = "kernel32")]
extern "system" {
    fn GetModuleHandleW(name: *const u16) -> *mut c_void;
    fn GetProcAddress(module: *mut c_void, name: *const u8) -> *mut c_void;
}

/// Whether this process runs under Wine (whose ntdll exports `wine_get_version`).
fn under_wine() -> bool {
    static WINE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WINE.get_or_init(|| {
        let ntdll = wide("ntdll.dll");
        // SAFETY: FFI with a NUL-terminated name; the module handle is not released (it is not
        // a reference) and the procedure is only tested for presence, never called.
        unsafe {
            let module = GetModuleHandleW(ntdll.as_ptr());
            !module.is_null() && !GetProcAddress(module, b"wine_get_version\0".as_ptr()).is_null()
        }
    })
}

/// Wine's WMI provider (wbemprox, Wine 8) fills shared tables without a lock and crashes when
/// two threads query at once; under Wine, and only there, provider work is serialised.
static WINE_PROVIDER: Mutex<()> = Mutex::new(());

// ---------------------------------------------------------------------------------------------
// Connections.

/// A connection to one namespace.
#[derive(Clone)]
struct Services(IWbemServices);

// SAFETY: the proxy was created in the MTA, which this process keeps alive (CoIncrementMTAUsage)
// and every calling thread joins; an MTA proxy may be used from any thread of the MTA, at once.
unsafe impl Send for Services {}
// SAFETY: as for Send; IWbemServices proxies are free-threaded within the MTA.
unsafe impl Sync for Services {}

/// Applies packet privacy and impersonation to the interface proxy `proxy` itself. An
/// in-process object (Wine's WMI) has no proxy to configure and says E_NOINTERFACE, which is fine.
///
/// The blanket is per interface proxy (IClientSecurity: "control over the security settings for
/// each individual interface proxy"; SetBlanket takes "the proxy to be set"), so it must be
/// given the very pointer later calls go through. QueryInterface for IUnknown would answer the
/// proxy manager's IUnknown, whose blanket governs only AddRef/Release/QueryInterface: the
/// IWbemServices proxy would keep the process default (Identify, where CoInitializeSecurity did
/// not take) and the Storage, SMB and iSCSI providers would refuse it.
fn set_blanket<I: Interface>(proxy: &I, what: &str) -> Attempt<()> {
    let raw = proxy.as_raw();
    // SAFETY: every COM interface pointer is also an IUnknown pointer (its vtable begins with
    // IUnknown's methods); this borrows `proxy`'s own pointer as one, without QueryInterface
    // and without touching its reference count, for no longer than `proxy` lives.
    let unknown = unsafe { windows::core::IUnknown::from_raw_borrowed(&raw) }
        .ok_or_else(|| Fail::Host(Error::internal(format!("{what}: null interface pointer"))))?;
    // SAFETY: FFI on a live interface; the principal is the documented "default" sentinel and
    // no auth identity is passed.
    let res = unsafe {
        CoSetProxyBlanket(
            unknown,
            10, // RPC_C_AUTHN_WINNT
            0,  // RPC_C_AUTHZ_NONE
            PCWSTR::null(),
            RPC_C_AUTHN_LEVEL_PKT_PRIVACY,
            RPC_C_IMP_LEVEL_IMPERSONATE,
            None,
            EOAC_NONE,
        )
    };
    match res {
        Ok(()) => Ok(()),
        Err(e) if e.code().0 as u32 == hr::E_NOINTERFACE => {
            tracing::trace!("{what} is not a proxy; no blanket to set");
            Ok(())
        }
        Err(e) => Err(Fail::Com { step: format!("CoSetProxyBlanket on {what}"), code: e.code() }),
    }
}

fn connect(ns: Namespace) -> Attempt<Services> {
    // SAFETY: FFI creating an in-process object by its documented CLSID.
    let locator: IWbemLocator = unsafe { CoCreateInstance(&WbemLocator, None, CLSCTX_INPROC_SERVER) }
        .map_err(Fail::com("CoCreateInstance(WbemLocator)"))?;
    let empty = BSTR::new();
    // SAFETY: FFI on a live locator; all BSTRs outlive the call, the context is None.
    let svc = unsafe {
        locator.ConnectServer(
            &BSTR::from(ns.path()),
            &empty,
            &empty,
            &empty,
            WBEM_FLAG_CONNECT_USE_MAX_WAIT.0,
            &empty,
            None::<&IWbemContext>,
        )
    }
    .map_err(Fail::com("ConnectServer"))?;
    set_blanket(&svc, "IWbemServices")?;
    Ok(Services(svc))
}

/// NUL-terminated UTF-16 for PCWSTR parameters.
fn wide(s: &str) -> Vec<u16> {
    s.encode_utf16().chain(Some(0)).collect()
}

/// A BSTR's text up to its first NUL: Wine counts padding NULs into some lengths (`__PATH`),
/// and no string WMI stores holds one.
fn bstr_string(b: &BSTR) -> String {
    let units: &[u16] = b;
    let end = units.iter().position(|&u| u == 0).unwrap_or(units.len());
    String::from_utf16_lossy(&units[..end])
}

// ---------------------------------------------------------------------------------------------
// VARIANTs and SAFEARRAYs.

/// An owned VARIANT, cleared (freeing any BSTR or SAFEARRAY in it) on drop.
struct Variant(VARIANT);

impl Variant {
    fn empty() -> Self {
        Variant(VARIANT::default())
    }

    fn vt(&self) -> VARENUM {
        // SAFETY: `vt` is the tag every VARIANT has, whichever member is live.
        unsafe { self.0.Anonymous.Anonymous.vt }
    }

    /// Sets the tag of an empty VARIANT and lets `fill` write the matching member.
    fn tagged(vt: VARENUM, fill: impl FnOnce(&mut windows::Win32::System::Variant::VARIANT_0_0_0)) -> Self {
        let mut v = Variant::empty();
        // SAFETY: the VARIANT is zeroed (VT_EMPTY, owns nothing); we write the tag and the
        // member it names, so VariantClear later frees exactly what was stored.
        unsafe {
            let inner = &mut *v.0.Anonymous.Anonymous;
            inner.vt = vt;
            fill(&mut inner.Anonymous);
        }
        v
    }

    fn null() -> Self {
        Variant::tagged(VT_NULL, |_| {})
    }

    fn bool(b: bool) -> Self {
        let val: VARIANT_BOOL = if b { VARIANT_TRUE } else { VARIANT_FALSE };
        Variant::tagged(VT_BOOL, |u| u.boolVal = val)
    }

    fn i4(n: i32) -> Self {
        Variant::tagged(VT_I4, |u| u.lVal = n)
    }

    fn bstr(s: BSTR) -> Self {
        Variant::tagged(VT_BSTR, |u| u.bstrVal = ManuallyDrop::new(s))
    }

    /// Takes ownership of `array`, whose elements are of type `elem`.
    fn array(elem: VARENUM, array: *mut SAFEARRAY) -> Self {
        Variant::tagged(VARENUM(VT_ARRAY.0 | elem.0), |u| u.parray = array)
    }

    /// Overwrites the characters of a held BSTR before it is freed (for secrets).
    fn wipe_bstr(&mut self) {
        if self.vt() != VT_BSTR {
            return;
        }
        // SAFETY: the tag says `bstrVal` is live. We read its raw pointer without taking
        // ownership and overwrite its SysStringLen characters, all inside the allocation.
        unsafe {
            let b: &BSTR = &self.0.Anonymous.Anonymous.Anonymous.bstrVal;
            let len = b.len();
            let p: *mut u16 = std::mem::transmute_copy(b);
            for i in 0..len {
                std::ptr::write_volatile(p.add(i), 0);
            }
        }
    }
}

impl Drop for Variant {
    fn drop(&mut self) {
        // SAFETY: the VARIANT is either zeroed or was filled by COM or by `tagged`, so its tag
        // matches its content; VariantClear frees it and resets it to VT_EMPTY.
        if let Err(e) = unsafe { VariantClear(&mut self.0) } {
            tracing::warn!("VariantClear failed: {}", hr_text(e.code()));
        }
    }
}

/// Widens one integer element of type `vt`; `uint32` (CIM) arrives as VT_I4 and is read unsigned.
fn int_of(vt: VARENUM, raw: &windows::Win32::System::Variant::VARIANT_0_0_0, unsigned32: bool) -> Option<i64> {
    // SAFETY: callers pass the tag of `raw`, so the member read is the live one.
    unsafe {
        Some(match vt {
            VT_I1 => raw.cVal as i64,
            VT_UI1 => raw.bVal as i64,
            VT_I2 => raw.iVal as i64,
            VT_UI2 => raw.uiVal as i64,
            VT_I4 if unsigned32 => raw.lVal as u32 as i64,
            VT_I4 => raw.lVal as i64,
            VT_UI4 => raw.ulVal as i64,
            VT_INT => raw.intVal as i64,
            VT_UINT => raw.uintVal as i64,
            VT_I8 => raw.llVal,
            _ => return None,
        })
    }
}

/// Why a VARIANT could not become a [`Value`]: its type, for the caller's message.
struct Unsupported(u16);

/// Converts `v` (of CIM type `cim`, when known) into a [`Value`].
fn to_value(v: &Variant, cim: i32) -> std::result::Result<Value, Unsupported> {
    let vt = v.vt();
    let unsigned32 = cim & CIM_TYPE_MASK == CIM_UINT32;
    // SAFETY: each arm reads the member its tag names.
    let raw = unsafe { &v.0.Anonymous.Anonymous.Anonymous };
    Ok(match vt {
        VT_EMPTY | VT_NULL => Value::Null,
        // SAFETY: as above.
        VT_BOOL => Value::Bool(unsafe { raw.boolVal.0 } != 0),
        // SAFETY: as above.
        VT_UI8 => Value::U64(unsafe { raw.ullVal }),
        // SAFETY: as above.
        VT_BSTR => Value::Str(bstr_string(unsafe { &raw.bstrVal })),
        _ if vt.0 & VT_ARRAY.0 != 0 => {
            // SAFETY: the tag says `parray` is live; the array stays owned by `v`.
            return array_value(unsafe { raw.parray }, VARENUM(vt.0 & VT_TYPEMASK.0), unsigned32)
                .ok_or(Unsupported(vt.0));
        }
        _ => Value::I64(int_of(vt, raw, unsigned32).ok_or(Unsupported(vt.0))?),
    })
}

/// The elements of a one-dimensional SAFEARRAY of BSTR or integers; None for anything else.
fn array_value(psa: *mut SAFEARRAY, elem: VARENUM, unsigned32: bool) -> Option<Value> {
    if psa.is_null() {
        return Some(Value::Null);
    }
    let size = match elem {
        VT_BSTR => std::mem::size_of::<BSTR>(),
        VT_I1 | VT_UI1 => 1,
        VT_I2 | VT_UI2 => 2,
        VT_I4 | VT_UI4 | VT_INT | VT_UINT => 4,
        VT_I8 => 8,
        _ => return None,
    };
    // SAFETY: `psa` is a live SAFEARRAY owned by the VARIANT being read. Its data is accessed
    // between AccessData and UnaccessData only, as `count` elements of the tagged type; BSTR
    // elements are borrowed, never freed here.
    unsafe {
        if SafeArrayGetDim(psa) != 1 {
            return None;
        }
        let lo = SafeArrayGetLBound(psa, 1).ok()?;
        let hi = SafeArrayGetUBound(psa, 1).ok()?;
        let count = usize::try_from(i64::from(hi) - i64::from(lo) + 1).unwrap_or(0);
        let mut data: *mut c_void = std::ptr::null_mut();
        SafeArrayAccessData(psa, &mut data).ok()?;
        let out = if elem == VT_BSTR {
            let items = std::slice::from_raw_parts(data as *const BSTR, count);
            Some(Value::StrArray(items.iter().map(bstr_string).collect()))
        } else {
            let mut ints = Vec::with_capacity(count);
            for i in 0..count {
                let p = (data as *const u8).add(i * size);
                let mut raw = windows::Win32::System::Variant::VARIANT_0_0_0::default();
                std::ptr::copy_nonoverlapping(p, &mut raw as *mut _ as *mut u8, size);
                ints.push(int_of(elem, &raw, unsigned32)?);
            }
            Some(Value::IntArray(ints))
        };
        let _ = SafeArrayUnaccessData(psa);
        out
    }
}

/// A SAFEARRAY vector of `elem`, owned by the returned VARIANT from the start so that a failure
/// while filling it frees it.
fn vector(elem: VARENUM, len: usize) -> std::result::Result<Variant, &'static str> {
    let n = u32::try_from(len).map_err(|_| "too many elements")?;
    // SAFETY: FFI allocation; a null result is checked.
    let psa = unsafe { SafeArrayCreateVector(elem, 0, n) };
    if psa.is_null() {
        return Err("SafeArrayCreateVector failed");
    }
    Ok(Variant::array(elem, psa))
}

fn put_element(v: &Variant, index: usize, item: *const c_void) -> std::result::Result<(), &'static str> {
    let i = i32::try_from(index).map_err(|_| "too many elements")?;
    // SAFETY: `v` holds a live vector (made by `vector`) and `item` points to an element of its
    // type (or is a BSTR itself, as SafeArrayPutElement takes them); the array copies it.
    unsafe { SafeArrayPutElement(v.0.Anonymous.Anonymous.Anonymous.parray, &i, item) }
        .map_err(|_| "SafeArrayPutElement failed")
}

/// A BSTR of `units`, allocated even when empty. windows-rs turns "" into a null BSTR, and a
/// VT_BSTR argument holding null is no string at all to the provider that receives it (R8:
/// MSFT_Volume.Format got a null FileSystemLabel); upstream, through go-ole's SysAllocString,
/// passes a real empty string, and so does this.
fn alloc_bstr(units: &[u16]) -> std::result::Result<BSTR, &'static str> {
    // SysAllocStringLen(NULL, 0) allocates a zero-length string (documented: with a null
    // source, a string of the requested length is allocated).
    // SAFETY: FFI; `units` is valid for its length and the call copies it.
    let raw = unsafe { SysAllocStringLen((!units.is_empty()).then_some(units)) }.into_raw();
    if raw.is_null() {
        return Err("SysAllocStringLen failed");
    }
    // SAFETY: `raw` is the BSTR just allocated; its ownership goes back into a BSTR.
    Ok(unsafe { BSTR::from_raw(raw) })
}

/// The VARIANT for an argument whose declared CIM type is `cim`. Errors never show the value.
fn arg_variant(value: &Value, cim: i32) -> std::result::Result<Variant, &'static str> {
    let unsigned32 = cim & CIM_TYPE_MASK == CIM_UINT32;
    Ok(match value {
        Value::Null => Variant::null(),
        Value::Bool(b) => Variant::bool(*b),
        Value::I64(n) => match i32::try_from(*n) {
            Ok(n) => Variant::i4(n),
            // WMI carries uint32 in VT_I4: keep the bits.
            Err(_) if unsigned32 && u32::try_from(*n).is_ok() => Variant::i4(*n as u32 as i32),
            Err(_) => Variant::bstr(BSTR::from(n.to_string())),
        },
        Value::U64(n) => Variant::bstr(BSTR::from(n.to_string())),
        Value::Str(s) => Variant::bstr(alloc_bstr(&s.encode_utf16().collect::<Vec<u16>>())?),
        Value::Secret(s) => {
            let mut units: Vec<u16> = s.expose().encode_utf16().collect();
            let b = alloc_bstr(&units);
            units.fill(0);
            std::hint::black_box(&units);
            Variant::bstr(b?)
        }
        Value::StrArray(items) => {
            let v = vector(VT_BSTR, items.len())?;
            for (i, s) in items.iter().enumerate() {
                let b = alloc_bstr(&s.encode_utf16().collect::<Vec<u16>>())?;
                // SAFETY: reads the BSTR's pointer, which is what PutElement takes for VT_BSTR;
                // `b` stays alive across the call.
                let raw: *const c_void = unsafe { std::mem::transmute_copy(&b) };
                put_element(&v, i, raw)?;
            }
            v
        }
        Value::IntArray(items) => {
            let v = vector(VT_I4, items.len())?;
            for (i, n) in items.iter().enumerate() {
                let n: i32 = match i32::try_from(*n) {
                    Ok(n) => n,
                    Err(_) if unsigned32 && u32::try_from(*n).is_ok() => *n as u32 as i32,
                    Err(_) => return Err("an element does not fit in 32 bits"),
                };
                put_element(&v, i, &n as *const i32 as *const c_void)?;
            }
            v
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Objects to rows.

/// Reads property `name` of `obj`: its value and CIM type.
fn get(obj: &IWbemClassObject, name: &str) -> windows::core::Result<(Variant, i32)> {
    let mut v = Variant::empty();
    let mut cim = 0i32;
    let w = wide(name);
    // SAFETY: FFI on a live object; `w` is NUL-terminated and outlives the call; the VARIANT
    // is empty and becomes owned by `v`.
    unsafe { obj.Get(PCWSTR(w.as_ptr()), 0, &mut v.0, Some(&mut cim), None) }?;
    Ok((v, cim))
}

/// A system string property (`__CLASS`, `__PATH`); empty when NULL.
fn system_str(obj: &IWbemClassObject, name: &str) -> Attempt<String> {
    let (v, _) = get(obj, name).map_err(Fail::com(format!("Get({name})")))?;
    match to_value(&v, 0) {
        Ok(Value::Str(s)) => Ok(s),
        _ => Ok(String::new()),
    }
}

fn unsupported(class: &str, prop: &str, vt: u16) -> Error {
    Error::internal(format!(
        "WMI {class}: property {prop} has VARTYPE 0x{vt:04X}, expected null, a boolean, an integer, a string or an \
         array of strings or integers"
    ))
}

/// Every non-system property of `obj`. Properties whose type has no [`Value`] (embedded objects
/// such as `ExtendedStatus`, reals) are left out: nothing asked for them by name.
fn all_props(obj: &IWbemClassObject, class: &str) -> Attempt<Row> {
    let mut row = Row::new(class, "");
    // SAFETY: FFI on a live object.
    unsafe { obj.BeginEnumeration(WBEM_FLAG_NONSYSTEM_ONLY.0) }.map_err(Fail::com("BeginEnumeration"))?;
    loop {
        let mut name = BSTR::new();
        let mut v = Variant::empty();
        let mut cim = 0i32;
        // SAFETY: FFI on a live object; the out BSTR and VARIANT become owned by `name`, `v`.
        // WBEM_S_NO_MORE_DATA is a success code that leaves the name unset.
        unsafe { obj.Next(0, &mut name, &mut v.0, &mut cim, std::ptr::null_mut()) }.map_err(Fail::com("Next"))?;
        if name.is_empty() {
            break;
        }
        let name = bstr_string(&name);
        match to_value(&v, cim) {
            Ok(value) => {
                row.props.insert(name, value);
            }
            Err(Unsupported(vt)) => tracing::debug!("WMI {class}: skipping property {name} of VARTYPE 0x{vt:04X}"),
        }
    }
    // SAFETY: FFI on a live object.
    let _ = unsafe { obj.EndEnumeration() };
    Ok(row)
}

/// A result object as a row: `props` by name, or every non-system property when `props` is empty.
fn to_row(obj: &IWbemClassObject, props: &[&str]) -> Attempt<Row> {
    let class = system_str(obj, "__CLASS")?;
    let path = system_str(obj, "__PATH")?;
    let mut row = if props.is_empty() { all_props(obj, &class)? } else { Row::new(class.as_str(), "") };
    row.class = class;
    row.path = path;
    for &p in props {
        let (v, cim) = get(obj, p).map_err(Fail::com(format!("Get({p})")))?;
        let value = to_value(&v, cim).map_err(|Unsupported(vt)| unsupported(&row.class, p, vt))?;
        row.props.insert(p.to_owned(), value);
    }
    Ok(row)
}

/// How long one query may take to deliver all its rows. A hung provider (seen with Storage
/// providers behind a dead iSCSI or SMB connection) must not hold a host call, and with it the
/// disk's lock, forever.
const QUERY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);
/// One wait of `Next`, in milliseconds; the deadline is checked between waits.
const NEXT_WAIT_MS: i32 = 1000;

fn collect(en: &IEnumWbemClassObject, props: &[&str]) -> Attempt<Vec<Row>> {
    let deadline = std::time::Instant::now() + QUERY_TIMEOUT;
    let mut rows = Vec::new();
    loop {
        let mut batch: [Option<IWbemClassObject>; 16] = Default::default();
        let mut got = 0u32;
        // SAFETY: FFI on a live enumerator; it fills at most `batch.len()` slots, each an
        // owned reference, and reports how many.
        let code = unsafe { en.Next(NEXT_WAIT_MS, &mut batch, &mut got) };
        if code.is_err() {
            return Err(Fail::Com { step: "IEnumWbemClassObject::Next".into(), code });
        }
        for obj in batch.iter().take(got as usize).flatten() {
            rows.push(to_row(obj, props)?);
        }
        if code.0 as u32 == hr::WBEM_S_TIMEDOUT {
            if std::time::Instant::now() >= deadline {
                return Err(Fail::Host(Error::unavailable(format!(
                    "the WMI provider delivered {} rows and then nothing for {} s; giving up",
                    rows.len(),
                    QUERY_TIMEOUT.as_secs()
                ))));
            }
            continue;
        }
        if got == 0 || code.0 as u32 == hr::WBEM_S_FALSE {
            return Ok(rows);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Object paths.

/// The class an object path or bare class name addresses: after the namespace's last ':' and
/// before the key list. Key values are quoted and may hold ':' and '.' themselves (MSFT
/// ObjectIds do), so only the part before the first quote is searched.
fn class_of(target: &str) -> Result<&str> {
    let head = &target[..target.find('"').unwrap_or(target.len())];
    let start = head.rfind(':').map_or(0, |i| i + 1);
    let rest = &head[start..];
    let class = &rest[..rest.find(['.', '=']).unwrap_or(rest.len())];
    if class.is_empty() || !class.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(Error::internal(format!("{target:?} is not a WMI class name or object path")));
    }
    Ok(class)
}

/// `Class.Key="…"` from `\\Server\Namespace:Class.Key="…"`. The connection already names the
/// namespace, and Wine resolves ASSOCIATORS OF only for relative paths.
fn relative_path(path: &str) -> &str {
    let head = &path[..path.find('"').unwrap_or(path.len())];
    match head.find(':') {
        Some(i) if path.starts_with(r"\\") => &path[i + 1..],
        _ => path,
    }
}

/// An instance path rather than a bare class name.
fn is_path(target: &str) -> bool {
    target.contains([':', '.', '='])
}

// ---------------------------------------------------------------------------------------------
// The layer.

/// WMI over COM. Cheap to make: connections are opened on first use and kept.
pub struct ComWmi {
    conns: Mutex<HashMap<Namespace, Services>>,
    /// Classes seen to exist, so the existence check costs one round trip per class.
    classes: Mutex<HashSet<(Namespace, String)>>,
}

impl Default for ComWmi {
    fn default() -> Self {
        Self::new()
    }
}

impl ComWmi {
    pub fn new() -> Self {
        ComWmi { conns: Mutex::new(HashMap::new()), classes: Mutex::new(HashSet::new()) }
    }

    fn services(&self, ns: Namespace) -> Attempt<Services> {
        if let Some(s) = self.conns.lock_ignoring_poison().get(&ns) {
            return Ok(s.clone());
        }
        // Connect unlocked: a slow namespace must not hold up the others. A racing thread's
        // connection wins and ours is dropped.
        let fresh = connect(ns)?;
        tracing::debug!("WMI connected to {}", ns.path());
        Ok(self.conns.lock_ignoring_poison().entry(ns).or_insert(fresh).clone())
    }

    /// Drops `broken` from the cache, unless another thread already replaced it.
    fn forget(&self, ns: Namespace, broken: &Services) {
        let mut conns = self.conns.lock_ignoring_poison();
        if conns.get(&ns).is_some_and(|s| s.0.as_raw() == broken.0.as_raw()) {
            conns.remove(&ns);
        }
    }

    fn missing_class(ns: Namespace, class: &str, code: HRESULT) -> Fail {
        Fail::Host(Error::precondition(format!(
            "WMI class {class} is not available in {}: {}",
            ns.path(),
            hr_text(code)
        )))
    }

    /// The class definition, which also proves the class exists.
    fn class_object(&self, ns: Namespace, svc: &Services, class: &str) -> Attempt<IWbemClassObject> {
        let mut obj = None;
        // SAFETY: FFI on a live proxy; the BSTR outlives the call and `obj` receives an owned
        // reference.
        let res = unsafe {
            svc.0.GetObject(
                &BSTR::from(class),
                WBEM_FLAG_RETURN_WBEM_COMPLETE,
                None::<&IWbemContext>,
                Some(&mut obj),
                None,
            )
        };
        match res {
            Err(e) if is_missing(e.code()) => Err(Self::missing_class(ns, class, e.code())),
            Err(e) => Err(Fail::Com { step: format!("GetObject({class})"), code: e.code() }),
            Ok(()) => {
                let obj =
                    obj.ok_or_else(|| Fail::Host(Error::internal(format!("WMI GetObject({class}) returned nothing"))))?;
                self.classes.lock_ignoring_poison().insert((ns, class.to_owned()));
                Ok(obj)
            }
        }
    }

    fn ensure_class(&self, ns: Namespace, svc: &Services, class: &str) -> Attempt<()> {
        if self.classes.lock_ignoring_poison().contains(&(ns, class.to_owned())) {
            return Ok(());
        }
        self.class_object(ns, svc, class).map(drop)
    }

    /// One attempt of `op` on the namespace's connection (after checking `check`, if given),
    /// and a second on a fresh connection if the first broke in transit.
    fn run<T>(&self, ns: Namespace, class: &str, check: bool, op: &dyn Fn(&Services) -> Attempt<T>) -> Attempt<T> {
        let mut retried = false;
        loop {
            let svc = match self.services(ns) {
                Ok(s) => s,
                Err(Fail::Com { code, .. }) if is_missing(code) => return Err(Self::missing_class(ns, class, code)),
                Err(Fail::Com { code, .. }) if is_transport(code) && !retried => {
                    retried = true;
                    continue;
                }
                Err(f) => return Err(f),
            };
            let serial = under_wine().then(|| WINE_PROVIDER.lock_ignoring_poison());
            let res = if check { self.ensure_class(ns, &svc, class) } else { Ok(()) }.and_then(|()| op(&svc));
            drop(serial);
            match res {
                Err(Fail::Com { step, code }) if is_transport(code) && !retried => {
                    tracing::debug!("WMI {}: {step} failed in transit ({}); reconnecting", ns.path(), hr_text(code));
                    self.forget(ns, &svc);
                    retried = true;
                }
                res => return res,
            }
        }
    }

    fn select(&self, ns: Namespace, class: &str, wql: &str, props: &[&str], instance: bool) -> Result<Vec<Row>> {
        let started = Instant::now();
        let what = format!("WMI query `{wql}` in {}", ns.path());
        let rows = in_mta(|| {
            self.run(ns, class, true, &|svc| {
                // SAFETY: FFI on a live proxy; both BSTRs outlive the call.
                let en = unsafe {
                    svc.0.ExecQuery(
                        &BSTR::from("WQL"),
                        &BSTR::from(wql),
                        WBEM_FLAG_FORWARD_ONLY | WBEM_FLAG_RETURN_IMMEDIATELY,
                        None::<&IWbemContext>,
                    )
                }
                .map_err(Fail::com("ExecQuery"))?;
                set_blanket(&en, "IEnumWbemClassObject")?;
                collect(&en, props)
            })
            .map_err(|f| f.into_error(&what, instance))
        });
        tracing::debug!(
            wql,
            namespace = ns.path(),
            rows = rows.as_ref().map_or(0, Vec::len),
            elapsed_ms = started.elapsed().as_secs_f64() * 1000.0,
            ok = rows.is_ok(),
            "WMI query"
        );
        rows
    }
}

impl Wmi for ComWmi {
    fn query(&self, query: &Query) -> Result<Vec<Row>> {
        let mut wql = query.wql()?;
        // A chosen property list leaves `__PATH` out where the keys are not among them (and
        // always under Wine); naming it keeps rows callable.
        if !query.props.is_empty() {
            if let Some(rest) = wql.strip_prefix("SELECT ") {
                wql = format!("SELECT __PATH, {rest}");
            }
        }
        self.select(query.namespace, query.class, &wql, &query.props, false)
    }

    fn associators(
        &self,
        namespace: Namespace,
        path: &str,
        assoc_class: &'static str,
        result_class: &'static str,
        props: &[&'static str],
    ) -> Result<Vec<Row>> {
        let wql = associators_wql(relative_path(path), assoc_class, result_class)?;
        self.select(namespace, result_class, &wql, props, true)
    }

    fn call(&self, ns: Namespace, target: &str, method: &str, args: &[(&'static str, Value)]) -> Result<Row> {
        let started = Instant::now();
        let class = class_of(target)?;
        let instance = is_path(target);
        let what = if instance { format!("WMI {class}.{method} on {target}") } else { format!("WMI {class}.{method}") };
        let out = in_mta(|| {
            self.run(ns, class, false, &|svc| self.exec(ns, svc, class, target, method, args, &what))
                .map_err(|f| f.into_error(&what, instance))
        });
        tracing::debug!(
            class,
            method,
            namespace = ns.path(),
            elapsed_ms = started.elapsed().as_secs_f64() * 1000.0,
            ok = out.is_ok(),
            "WMI method call"
        );
        out
    }
}

impl ComWmi {
    #[allow(clippy::too_many_arguments)]
    fn exec(
        &self,
        ns: Namespace,
        svc: &Services,
        class: &str,
        target: &str,
        method: &str,
        args: &[(&'static str, Value)],
        what: &str,
    ) -> Attempt<Row> {
        let cls = self.class_object(ns, svc, class)?;
        let wmethod = wide(method);
        let mut in_sig: Option<IWbemClassObject> = None;
        let mut out_sig: Option<IWbemClassObject> = None;
        // SAFETY: FFI on a live class object; `wmethod` is NUL-terminated and outlives the call;
        // the signatures come back as owned references (or None).
        let res = unsafe { cls.GetMethod(PCWSTR(wmethod.as_ptr()), 0, &mut in_sig, &mut out_sig) };
        if let Err(e) = res {
            return Err(match e.code().0 as u32 {
                hr::WBEM_E_NOT_FOUND | hr::WBEM_E_INVALID_METHOD => Fail::Host(Error::precondition(format!(
                    "WMI method {class}.{method} is not available in {}: {}",
                    ns.path(),
                    hr_text(e.code())
                ))),
                _ => Fail::Com { step: format!("GetMethod({method})"), code: e.code() },
            });
        }

        let params = match in_sig {
            // SAFETY: FFI on a live signature object.
            Some(sig) => Some(unsafe { sig.SpawnInstance(0) }.map_err(Fail::com("SpawnInstance(in-parameters)"))?),
            None if args.is_empty() => None,
            None => {
                let names: Vec<&str> = args.iter().map(|(n, _)| *n).collect();
                return Err(Fail::Host(Error::internal(format!(
                    "{what}: the method takes no parameters, given {names:?}"
                ))));
            }
        };
        if let Some(params) = &params {
            for (name, value) in args {
                put_arg(params, name, value, what)?;
            }
        }

        let mut out: Option<IWbemClassObject> = None;
        // SAFETY: FFI on a live proxy; the BSTRs and the in-parameters outlive the call and the
        // out-parameters come back as an owned reference (or None).
        let res = unsafe {
            svc.0.ExecMethod(
                &BSTR::from(target),
                &BSTR::from(method),
                WBEM_FLAG_RETURN_WBEM_COMPLETE,
                None::<&IWbemContext>,
                params.as_ref(),
                Some(&mut out),
                None,
            )
        };
        if let Err(e) = res {
            let code = e.code();
            // These may arrive after the server ran the method: repeating it could do the work
            // twice (two partitions), so only undelivered calls are retried.
            if matches!(code.0 as u32, hr::RPC_S_CALL_FAILED | hr::WBEM_E_TRANSPORT_FAILURE) {
                return Err(Fail::Host(Error::unavailable(format!(
                    "{what}: ExecMethod failed in transit, the method may or may not have run: {}",
                    hr_text(code)
                ))));
            }
            return Err(Fail::Com { step: "ExecMethod".into(), code });
        }
        let mut row = match &out {
            Some(o) => all_props(o, "__PARAMETERS")?,
            None => Row::default(),
        };
        row.class = "__PARAMETERS".into();
        row.path = String::new();
        Ok(row)
    }
}

/// Sets in-parameter `name`. The declared type decides how integers travel; failures name the
/// parameter, never its value.
fn put_arg(params: &IWbemClassObject, name: &str, value: &Value, what: &str) -> Attempt<()> {
    let bad = |why: String| Fail::Host(Error::internal(format!("{what}: parameter {name}: {why}")));
    let (_, cim) = get(params, name).map_err(|e| {
        if e.code().0 as u32 == hr::WBEM_E_NOT_FOUND {
            bad("the method has no such parameter".into())
        } else {
            bad(format!("reading its type failed: {}", hr_text(e.code())))
        }
    })?;
    let mut v = arg_variant(value, cim).map_err(|why| bad(why.into()))?;
    let w = wide(name);
    // SAFETY: FFI on a live object; `w` is NUL-terminated and `v` a valid VARIANT, both outlive
    // the call, which copies the value.
    let res = unsafe { params.Put(PCWSTR(w.as_ptr()), 0, &v.0, 0) };
    if matches!(value, Value::Secret(_)) {
        v.wipe_bstr();
    }
    res.map_err(|e| bad(format!("Put failed: {}", hr_text(e.code()))))
}

#[cfg(test)]
mod tests;
