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
use std::sync::{Mutex, Once};
use std::time::Instant;
use windows::core::{Interface, BSTR, HRESULT, PCWSTR};
use windows::Win32::System::Com::{
    CoCreateInstance, CoIncrementMTAUsage, CoInitializeEx, CoInitializeSecurity, CoSetProxyBlanket, CoUninitialize,
    CLSCTX_INPROC_SERVER, COINIT_MULTITHREADED, EOAC_NONE, RPC_C_AUTHN_LEVEL_PKT_PRIVACY, RPC_C_IMP_LEVEL_IMPERSONATE,
};
use windows::Win32::System::Wmi::{
    IEnumWbemClassObject, IWbemClassObject, IWbemContext, IWbemLocator, IWbemServices, WbemLocator,
    WBEM_FLAG_CONNECT_USE_MAX_WAIT, WBEM_FLAG_FORWARD_ONLY, WBEM_FLAG_NONSYSTEM_ONLY, WBEM_FLAG_RETURN_IMMEDIATELY,
    WBEM_FLAG_RETURN_WBEM_COMPLETE,
};

mod hresult;
mod variant;

use hresult::{hr, hr_text, is_missing, is_transport};
use variant::{arg_variant, bstr_string, get, to_value, wide, Unsupported, Variant};

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
            !module.is_null() && !GetProcAddress(module, c"wine_get_version".as_ptr().cast()).is_null()
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

// ---------------------------------------------------------------------------------------------
// Objects to rows.

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
            elapsed_ms = started.elapsed().as_micros() as f64 / 1000.0,
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
            elapsed_ms = started.elapsed().as_micros() as f64 / 1000.0,
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
