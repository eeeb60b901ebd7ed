//! Windows scratch disks: a dynamic VHDX per disk, made and attached through the virtual disk
//! API (virtdisk.dll), no PowerShell. Facts from Microsoft's pages (learn.microsoft.com,
//! windows/win32/api/virtdisk/…) are cited where they decide something.
//!
//! - **Ownership.** Every operation on a disk goes through the handle CreateVirtualDisk gave for
//!   the file this run created (in its own fresh scratch directory), so a disk is only ever
//!   known by its backing file: the tool cannot grow, detach or delete a disk it did not make.
//!   The handle is held by [`VirtualDisk`], which closes it exactly once.
//! - **Lifetime.** Attached *without* ATTACH_VIRTUAL_DISK_FLAG_PERMANENT_LIFETIME: that flag
//!   "decouples the virtual disk lifetime from that of the VirtualDiskHandle. The virtual disk
//!   will be attached until the DetachVirtualDisk function is called, even if all open handles
//!   to the virtual disk are closed" (ATTACH_VIRTUAL_DISK_FLAG). Without it the disk goes when
//!   our handle closes, so even a run killed outright (TerminateProcess, which closes its
//!   handles) leaves no disk attached, only a file in the scratch directory.
//! - **Where the API is missing.** virtdisk.dll is loaded at run time from System32 and its
//!   exports looked up, so a host without it still runs the rest. Wine exports the names as
//!   stubs that raise an exception when called, which no Rust code can catch; so the first use
//!   runs the whole cycle once in a child process (`csi-proxyctl` with [`PROBE_ARG`]) that says
//!   which call it is about to make: a child that dies in a call names the API this host lacks.
#![allow(unsafe_code)] // virtdisk.dll and the mount-point calls; each block says why it is sound

use super::scratch::{ScratchDisks, Unavailable};
use anyhow::{bail, Context as _, Result};
use std::ffi::c_void;
use std::io::Write as _;
use std::os::windows::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use windows_sys::Win32::Foundation::{CloseHandle, HANDLE, INVALID_HANDLE_VALUE};
use windows_sys::Win32::Storage::Vhd::{
    ATTACH_VIRTUAL_DISK_FLAG, ATTACH_VIRTUAL_DISK_FLAG_NO_DRIVE_LETTER, ATTACH_VIRTUAL_DISK_PARAMETERS,
    ATTACH_VIRTUAL_DISK_VERSION_2, CREATE_VIRTUAL_DISK_FLAG, CREATE_VIRTUAL_DISK_FLAG_NONE,
    CREATE_VIRTUAL_DISK_PARAMETERS, CREATE_VIRTUAL_DISK_VERSION_2, DETACH_VIRTUAL_DISK_FLAG,
    DETACH_VIRTUAL_DISK_FLAG_NONE, RESIZE_VIRTUAL_DISK_FLAG, RESIZE_VIRTUAL_DISK_FLAG_NONE,
    RESIZE_VIRTUAL_DISK_PARAMETERS, RESIZE_VIRTUAL_DISK_VERSION_1, VIRTUAL_DISK_ACCESS_MASK, VIRTUAL_DISK_ACCESS_NONE,
    VIRTUAL_STORAGE_TYPE, VIRTUAL_STORAGE_TYPE_DEVICE_VHDX, VIRTUAL_STORAGE_TYPE_VENDOR_MICROSOFT,
};
use windows_sys::Win32::System::LibraryLoader::{GetProcAddress, LoadLibraryExW, LOAD_LIBRARY_SEARCH_SYSTEM32};

/// The hidden first argument that makes `csi-proxyctl` the probe child.
pub const PROBE_ARG: &str = "__conformance-vhd-probe";
/// What the probe child prints before each call, and after it.
const CALLING: &str = "calling ";
const ANSWERED: &str = "answered ";
/// ERROR_INSUFFICIENT_BUFFER, ERROR_CALL_NOT_IMPLEMENTED, ERROR_NOT_SUPPORTED (System Error Codes).
const ERROR_INSUFFICIENT_BUFFER: u32 = 122;
const ERROR_CALL_NOT_IMPLEMENTED: u32 = 120;
const ERROR_NOT_SUPPORTED: u32 = 50;
/// ERROR_SHARING_VIOLATION: the file is still open (the disk not yet gone).
const ERROR_SHARING_VIOLATION: i32 = 32;
/// The probe's disk: the smallest round size (MaximumSize "must be a multiple of 512").
const PROBE_SIZE: u64 = 8 << 20;

// The signatures of virtdisk.h, as windows-sys declares them (Win32::Storage::Vhd); the
// security descriptor and OVERLAPPED pointers are always null here, so they are `*const c_void`.
type CreateFn = unsafe extern "system" fn(
    *const VIRTUAL_STORAGE_TYPE,
    *const u16,
    VIRTUAL_DISK_ACCESS_MASK,
    *const c_void,
    CREATE_VIRTUAL_DISK_FLAG,
    u32,
    *const CREATE_VIRTUAL_DISK_PARAMETERS,
    *const c_void,
    *mut HANDLE,
) -> u32;
type AttachFn = unsafe extern "system" fn(
    HANDLE,
    *const c_void,
    ATTACH_VIRTUAL_DISK_FLAG,
    u32,
    *const ATTACH_VIRTUAL_DISK_PARAMETERS,
    *const c_void,
) -> u32;
type PhysicalPathFn = unsafe extern "system" fn(HANDLE, *mut u32, *mut u16) -> u32;
type DetachFn = unsafe extern "system" fn(HANDLE, DETACH_VIRTUAL_DISK_FLAG, u32) -> u32;
type ResizeFn = unsafe extern "system" fn(
    HANDLE,
    RESIZE_VIRTUAL_DISK_FLAG,
    *const RESIZE_VIRTUAL_DISK_PARAMETERS,
    *const c_void,
) -> u32;

/// virtdisk.dll's functions. The module is never unloaded (the pointers stay valid).
#[derive(Clone, Copy)]
struct Api {
    create: CreateFn,
    attach: AttachFn,
    physical_path: PhysicalPathFn,
    detach: DetachFn,
    resize: ResizeFn,
}

fn wide(s: &std::ffi::OsStr) -> Vec<u16> {
    s.encode_wide().chain(Some(0)).collect()
}

impl Api {
    /// Loads virtdisk.dll from System32 and looks up every export; the first missing name.
    fn load() -> Result<Api, &'static str> {
        let name = wide("virtdisk.dll".as_ref());
        // SAFETY: FFI. `name` is a NUL-terminated UTF-16 string alive for the call; hFile must be
        // null (LoadLibraryExW); LOAD_LIBRARY_SEARCH_SYSTEM32 searches System32 only.
        let module = unsafe { LoadLibraryExW(name.as_ptr(), std::ptr::null_mut(), LOAD_LIBRARY_SEARCH_SYSTEM32) };
        if module.is_null() {
            return Err("virtdisk.dll");
        }
        let find = |export: &'static std::ffi::CStr| {
            // SAFETY: FFI. `module` is a loaded module (never freed), `export` a NUL-terminated name.
            unsafe { GetProcAddress(module, export.as_ptr().cast()) }.ok_or(export.to_str().unwrap_or("virtdisk.dll"))
        };
        let (create, attach) = (find(c"CreateVirtualDisk")?, find(c"AttachVirtualDisk")?);
        let (physical_path, detach) = (find(c"GetVirtualDiskPhysicalPath")?, find(c"DetachVirtualDisk")?);
        let resize = find(c"ResizeVirtualDisk")?;
        // SAFETY: FFI. Each export has the signature virtdisk.h declares for its name (as
        // windows-sys declares it); function pointers of the same ABI have the same size.
        unsafe {
            Ok(Api {
                create: std::mem::transmute::<unsafe extern "system" fn() -> isize, CreateFn>(create),
                attach: std::mem::transmute::<unsafe extern "system" fn() -> isize, AttachFn>(attach),
                physical_path: std::mem::transmute::<unsafe extern "system" fn() -> isize, PhysicalPathFn>(
                    physical_path,
                ),
                detach: std::mem::transmute::<unsafe extern "system" fn() -> isize, DetachFn>(detach),
                resize: std::mem::transmute::<unsafe extern "system" fn() -> isize, ResizeFn>(resize),
            })
        }
    }
}

/// The handle CreateVirtualDisk returned, closed exactly once (on drop). CreateVirtualDisk:
/// "If the function succeeds, the return value is ERROR_SUCCESS and the Handle parameter
/// contains a valid pointer to the new virtual disk object"; on failure "the value of the
/// Handle parameter is undefined", so only a success makes one of these.
struct VirtualDisk(HANDLE);

// SAFETY: a kernel handle may be used and closed from any thread.
unsafe impl Send for VirtualDisk {}

impl Drop for VirtualDisk {
    fn drop(&mut self) {
        // SAFETY: FFI. The handle is ours, open, and closed only here (the field is private and
        // never copied out). Not attached with PERMANENT_LIFETIME: this also detaches the disk.
        unsafe { CloseHandle(self.0) };
    }
}

fn vhdx() -> VIRTUAL_STORAGE_TYPE {
    // VIRTUAL_STORAGE_TYPE: DeviceId VIRTUAL_STORAGE_TYPE_DEVICE_VHDX (3) with VendorId
    // VIRTUAL_STORAGE_TYPE_VENDOR_MICROSOFT.
    VIRTUAL_STORAGE_TYPE { DeviceId: VIRTUAL_STORAGE_TYPE_DEVICE_VHDX, VendorId: VIRTUAL_STORAGE_TYPE_VENDOR_MICROSOFT }
}

/// ERROR_INVALID_PARAMETER (System Error Codes).
const ERROR_INVALID_PARAMETER: u32 = 87;

/// K7: the attach parameters, version 2, as go-winio's AttachVirtualDisk passes them with a
/// handle from CreateVirtualDisk with version-2 parameters (the handle this tool attaches).
/// ATTACH_VIRTUAL_DISK_PARAMETERS (virtdisk.h) is `Version` (an ATTACH_VIRTUAL_DISK_VERSION, a
/// 4-byte enum) then a union of `Version1 { ULONG Reserved }` and `Version2 { ULONGLONG
/// RestrictedOffset; ULONGLONG RestrictedLength }`: so the union starts at offset 8 (8-byte
/// alignment) and the struct is 24 bytes (checked by the unit test). The page names the two
/// Version2 fields without saying what they do; both are zero here, no range, the whole disk (as
/// go-winio passes them). Whether a node takes them is settled by the conformance run's first
/// attach (an ERROR_INVALID_PARAMETER names this).
fn attach_parameters() -> ATTACH_VIRTUAL_DISK_PARAMETERS {
    let mut params = ATTACH_VIRTUAL_DISK_PARAMETERS { Version: ATTACH_VIRTUAL_DISK_VERSION_2, ..Default::default() };
    params.Anonymous.Version2.RestrictedOffset = 0;
    params.Anonymous.Version2.RestrictedLength = 0;
    params
}

/// A failed call's code as an `io::Error` (read back by [`code`]), with the call's name.
fn failed(call: &'static str, code: u32) -> anyhow::Error {
    anyhow::Error::new(std::io::Error::from_raw_os_error(code as i32)).context(format!("{call} failed"))
}

/// The Win32 code of an error made by [`failed`], else 1.
fn code<T>(r: &Result<T>) -> u32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.downcast_ref::<std::io::Error>().and_then(|e| e.raw_os_error()).unwrap_or(1) as u32,
    }
}

impl Api {
    /// A new dynamic VHDX of `size` bytes at `file`, which must not exist.
    fn create(&self, file: &Path, size: u64) -> Result<VirtualDisk> {
        let path = wide(file.as_os_str());
        let mut params =
            CREATE_VIRTUAL_DISK_PARAMETERS { Version: CREATE_VIRTUAL_DISK_VERSION_2, ..Default::default() };
        // CREATE_VIRTUAL_DISK_PARAMETERS, Version2: UniqueId zero: "a unique identifier is
        // created by the system"; MaximumSize in bytes, "must be a multiple of 512";
        // BlockSizeInBytes, SectorSizeInBytes and PhysicalSectorSizeInBytes zero: the defaults
        // (CREATE_VIRTUAL_DISK_PARAMETERS_DEFAULT_BLOCK_SIZE / _SECTOR_SIZE); no parent, no
        // source. The rest of the union is zeroed by Default.
        params.Anonymous.Version2.MaximumSize = size;
        let mut handle: HANDLE = std::ptr::null_mut();
        // SAFETY: FFI. Every pointer is to a live local for the call; the path is NUL-terminated.
        // CreateVirtualDisk: with Parameters' Version CREATE_VIRTUAL_DISK_VERSION_2 "only the
        // VIRTUAL_DISK_ACCESS_NONE (0) value may be specified" for VirtualDiskAccessMask; a null
        // SecurityDescriptor uses the parent directory's; CREATE_VIRTUAL_DISK_FLAG_NONE makes a
        // dynamic (sparse) disk, FULL_PHYSICAL_ALLOCATION would make a fixed one; Overlapped
        // null: synchronous.
        let code = unsafe {
            (self.create)(
                &vhdx(),
                path.as_ptr(),
                VIRTUAL_DISK_ACCESS_NONE,
                std::ptr::null(),
                CREATE_VIRTUAL_DISK_FLAG_NONE,
                0,
                &params,
                std::ptr::null(),
                &mut handle,
            )
        };
        if code != 0 {
            return Err(failed("CreateVirtualDisk", code));
        }
        if handle.is_null() || handle == INVALID_HANDLE_VALUE {
            bail!("CreateVirtualDisk succeeded but gave no handle");
        }
        Ok(VirtualDisk(handle))
    }

    /// Attaches the disk, with no drive letter, for as long as `disk` is open.
    fn attach(&self, disk: &VirtualDisk) -> Result<()> {
        let params = attach_parameters();
        // SAFETY: FFI. The handle is open (owned by `disk`), `params` a live local. A null
        // SecurityDescriptor: "the security descriptor of the virtual disk image file is used"
        // (AttachVirtualDisk). ATTACH_VIRTUAL_DISK_FLAG_NO_DRIVE_LETTER: "No drive letters are
        // assigned to the disk's volumes"; no PERMANENT_LIFETIME (see the module comment).
        let code = unsafe {
            (self.attach)(
                disk.0,
                std::ptr::null(),
                ATTACH_VIRTUAL_DISK_FLAG_NO_DRIVE_LETTER,
                0,
                &params,
                std::ptr::null(),
            )
        };
        if code == ERROR_INVALID_PARAMETER {
            // K7: the one documented input that could be refused here is the parameters' version.
            return Err(failed("AttachVirtualDisk", code).context(
                "AttachVirtualDisk refused its parameters (ERROR_INVALID_PARAMETER): this host may not take \
                 ATTACH_VIRTUAL_DISK_VERSION_2 parameters on a version-2 create handle",
            ));
        }
        if code != 0 {
            return Err(failed("AttachVirtualDisk", code));
        }
        Ok(())
    }

    /// The attached disk's number: GetVirtualDiskPhysicalPath "requires that the virtual disk
    /// be attached"; the path "is in the form \\.\PhysicalDriveX where X is an integer that
    /// represents the particular enumeration of the physical disk on the caller's system".
    fn disk_number(&self, disk: &VirtualDisk) -> Result<u32> {
        let mut buf = vec![0u16; 260];
        loop {
            let mut bytes = (buf.len() * 2) as u32;
            // SAFETY: FFI. DiskPathSizeInBytes is the size in bytes of `buf`, which is live and
            // writable for the call; the handle is open.
            let code = unsafe { (self.physical_path)(disk.0, &mut bytes, buf.as_mut_ptr()) };
            if code == ERROR_INSUFFICIENT_BUFFER && (bytes as usize) > buf.len() * 2 && bytes < 1 << 16 {
                buf = vec![0u16; (bytes as usize).div_ceil(2)];
                continue;
            }
            if code != 0 {
                return Err(failed("GetVirtualDiskPhysicalPath", code));
            }
            // "If the function fails … the buffer … is undefined": read only after success.
            let end = buf.iter().position(|&c| c == 0).unwrap_or(buf.len());
            let path = String::from_utf16_lossy(&buf[..end]);
            return parse_physical_drive(&path).with_context(|| {
                format!("GetVirtualDiskPhysicalPath answered {path:?}; expected \\\\.\\PhysicalDriveN")
            });
        }
    }

    /// The disk grows to `size` bytes: ResizeVirtualDisk with RESIZE_VIRTUAL_DISK_PARAMETERS
    /// Version1, whose NewSize "contains the new size of the virtual disk".
    fn resize(&self, disk: &VirtualDisk, size: u64) -> Result<()> {
        let mut params =
            RESIZE_VIRTUAL_DISK_PARAMETERS { Version: RESIZE_VIRTUAL_DISK_VERSION_1, ..Default::default() };
        params.Anonymous.Version1.NewSize = size;
        // SAFETY: FFI. The handle is open, `params` a live local, Overlapped null (synchronous).
        let code = unsafe { (self.resize)(disk.0, RESIZE_VIRTUAL_DISK_FLAG_NONE, &params, std::ptr::null()) };
        if code != 0 {
            return Err(failed("ResizeVirtualDisk", code));
        }
        Ok(())
    }

    /// DetachVirtualDisk with DETACH_VIRTUAL_DISK_FLAG_NONE (its page: any other value is
    /// ERROR_INVALID_PARAMETER) and no provider flags. Its page asks for a handle opened with
    /// VIRTUAL_DISK_ACCESS_DETACH, which a version-2 handle (access NONE, see create) cannot
    /// name; so a failure here is reported, and closing the handle detaches the disk anyway.
    fn detach(&self, disk: &VirtualDisk) -> Result<()> {
        // SAFETY: FFI. The handle is open.
        let code = unsafe { (self.detach)(disk.0, DETACH_VIRTUAL_DISK_FLAG_NONE, 0) };
        if code != 0 {
            return Err(failed("DetachVirtualDisk", code));
        }
        Ok(())
    }
}

fn parse_physical_drive(path: &str) -> Option<u32> {
    let rest = path.strip_prefix(r"\\.\")?;
    let n = rest.get(..13).filter(|p| p.eq_ignore_ascii_case("PhysicalDrive")).map(|_| &rest[13..])?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

/// One made disk: its file and, while it is attached, the handle that holds it.
struct Vhd {
    file: PathBuf,
    disk: Option<VirtualDisk>,
    number: u32,
}

pub struct Disks {
    dir: PathBuf,
    made: Vec<Vhd>,
    next: u32,
    /// The probe's verdict, once asked.
    api: Option<Result<Api, String>>,
}

impl Disks {
    pub fn new(dir: PathBuf) -> Disks {
        Disks { dir, made: Vec::new(), next: 0, api: None }
    }

    fn api(&mut self) -> Result<Api, Unavailable> {
        if self.api.is_none() {
            self.api = Some(probe(&self.dir));
        }
        match self.api.as_ref() {
            Some(Ok(api)) => Ok(*api),
            Some(Err(why)) => Err(Unavailable::NeedsWindows(why.clone())),
            None => unreachable!("set above"),
        }
    }

    fn find(&self, number: u32) -> Result<(&Api, &VirtualDisk)> {
        let api = match &self.api {
            Some(Ok(api)) => api,
            _ => bail!("no virtual disk API"),
        };
        let v = self.made.iter().find(|v| v.number == number).context("not a disk this run made")?;
        Ok((api, v.disk.as_ref().context("its virtual disk is detached")?))
    }
}

/// Runs the probe child once; `Err` names the API this host lacks.
fn probe(dir: &Path) -> Result<Api, String> {
    let api = Api::load().map_err(|missing| format!("{missing} (not on this host)"))?;
    let file = dir.join("probe.vhdx");
    let exe = std::env::current_exe().map_err(|e| format!("CreateVirtualDisk (cannot run the probe: {e})"))?;
    let out = std::process::Command::new(exe)
        .arg(PROBE_ARG)
        .arg(&file)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("CreateVirtualDisk (cannot run the probe: {e})"))?;
    let _ = std::fs::remove_file(&file);
    let text = String::from_utf8_lossy(&out.stdout);
    let mut calling: Option<&str> = None;
    for line in text.lines() {
        if let Some(call) = line.strip_prefix(CALLING) {
            calling = Some(call);
        } else if let Some(rest) = line.strip_prefix(ANSWERED) {
            let code: u32 = rest.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
            if code == ERROR_CALL_NOT_IMPLEMENTED || code == ERROR_NOT_SUPPORTED {
                let call = rest.split_whitespace().next().unwrap_or("CreateVirtualDisk");
                return Err(format!("{call} (answered {})", std::io::Error::from_raw_os_error(code as i32)));
            }
            calling = None;
        }
    }
    match (calling, out.status.success()) {
        (Some(call), _) => Err(format!("{call} (the probe process died calling it: {}; a stub here)", out.status)),
        (None, true) => Ok(api),
        (None, false) => Err(format!("CreateVirtualDisk (the probe process failed: {})", out.status)),
    }
}

/// The probe child: the whole cycle on `file` (create, attach, find the number, detach, close,
/// delete), saying before each call what it calls and after it what the call answered. A
/// failed call is reported and ends the cycle; only a call that does not return (a stub)
/// matters to the parent. Exit 0 when it ran to its end.
pub fn probe_main(file: &str) -> ExitCode {
    use windows_sys::Win32::System::Diagnostics::Debug::{SetUnhandledExceptionFilter, EXCEPTION_POINTERS};
    /// EXCEPTION_EXECUTE_HANDLER: the process ends with the exception's code, no debugger.
    unsafe extern "system" fn end(_: *const EXCEPTION_POINTERS) -> i32 {
        1
    }
    // SAFETY: FFI. `end` is a valid filter for the life of the process.
    unsafe { SetUnhandledExceptionFilter(Some(end)) };
    let say = |s: String| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{s}");
        let _ = out.flush();
    };
    let Ok(api) = Api::load() else { return ExitCode::from(2) };
    let file = Path::new(file);
    say(format!("{CALLING}CreateVirtualDisk"));
    let disk = api.create(file, PROBE_SIZE);
    say(format!("{ANSWERED}CreateVirtualDisk {}", code(&disk)));
    let Ok(disk) = disk else { return ExitCode::SUCCESS };
    say(format!("{CALLING}AttachVirtualDisk"));
    let attached = api.attach(&disk);
    say(format!("{ANSWERED}AttachVirtualDisk {}", code(&attached)));
    if attached.is_ok() {
        say(format!("{CALLING}GetVirtualDiskPhysicalPath"));
        let n = api.disk_number(&disk);
        say(format!("{ANSWERED}GetVirtualDiskPhysicalPath {}", code(&n)));
        say(format!("{CALLING}DetachVirtualDisk"));
        let detached = api.detach(&disk);
        say(format!("{ANSWERED}DetachVirtualDisk {}", code(&detached)));
    }
    drop(disk);
    let _ = remove_file_when_free(file);
    ExitCode::SUCCESS
}

/// Deletes `file`, waiting a little while the detached disk still holds it open.
fn remove_file_when_free(file: &Path) -> Result<()> {
    for _ in 0..50 {
        match std::fs::remove_file(file) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(ERROR_SHARING_VIOLATION) => {
                std::thread::sleep(std::time::Duration::from_millis(100))
            }
            Err(e) => return Err(e).with_context(|| format!("removing {}", file.display())),
        }
    }
    bail!("removing {}: still in use 5 s after its disk was detached", file.display())
}

/// Detaches (best effort: closing the handle detaches too), closes, deletes the file.
fn remove_vhd(api: Option<&Api>, v: Vhd) -> Result<()> {
    let mut problems = Vec::new();
    if let (Some(api), Some(disk)) = (api, v.disk.as_ref()) {
        if let Err(e) = api.detach(disk) {
            problems.push(format!("{e:#} (the disk detaches as its handle closes)"));
        }
    }
    drop(v.disk);
    let removed = remove_file_when_free(&v.file);
    match removed {
        Ok(()) => Ok(()),
        Err(e) => {
            problems.push(format!("{e:#}"));
            bail!("{}", problems.join("; "))
        }
    }
}

impl ScratchDisks for Disks {
    fn create(&mut self, size: u64) -> Result<Result<u32, Unavailable>> {
        let api = match self.api() {
            Ok(api) => api,
            Err(u) => return Ok(Err(u)),
        };
        let file = self.dir.join(format!("disk-{}.vhdx", self.next));
        self.next += 1;
        if std::fs::symlink_metadata(&file).is_ok() {
            bail!("{} exists already; not ours", file.display());
        }
        // Recorded first: the cleanup deletes the file whatever fails next.
        self.made.push(Vhd { file: file.clone(), disk: None, number: u32::MAX });
        let disk = api.create(&file, size)?;
        let v = self.made.last_mut().context("recorded above")?;
        api.attach(&disk)?;
        v.disk = Some(disk);
        v.number = api.disk_number(v.disk.as_ref().context("set above")?)?;
        Ok(Ok(v.number))
    }

    fn grow(&mut self, disk: u32, size: u64) -> Result<()> {
        let (api, vd) = self.find(disk)?;
        // Still the disk of our file's handle under that number.
        let now = api.disk_number(vd)?;
        if now != disk {
            bail!("our virtual disk is now disk {now}, not {disk}");
        }
        api.resize(vd, size)
    }

    fn remove(&mut self, disk: u32) -> Result<()> {
        let at = self.made.iter().position(|v| v.number == disk).context("not a disk this run made")?;
        let v = self.made.remove(at);
        let api = self.api.as_ref().and_then(|a| a.as_ref().ok());
        remove_vhd(api, v)
    }

    fn remove_all(&mut self) -> Vec<String> {
        let made = std::mem::take(&mut self.made);
        let api = self.api.as_ref().and_then(|a| a.as_ref().ok());
        made.into_iter().filter_map(|v| remove_vhd(api, v).err().map(|e| format!("{e:#}"))).collect()
    }
}

/// Volume mount points (registered with the mount manager) in `dir` and below, deepest first;
/// the walk does not go through any reparse point.
pub fn mounts_below(dir: &Path) -> Vec<PathBuf> {
    use std::os::windows::fs::MetadataExt;
    const FILE_ATTRIBUTE_REPARSE_POINT: u32 = 0x400;
    let mut found = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let Ok(m) = std::fs::symlink_metadata(e.path()) else { continue };
            if !m.is_dir() && m.file_attributes() & FILE_ATTRIBUTE_REPARSE_POINT == 0 {
                continue;
            }
            if m.file_attributes() & FILE_ATTRIBUTE_REPARSE_POINT != 0 {
                if volume_at(&e.path()).is_some() {
                    found.push(e.path());
                }
            } else {
                todo.push(e.path());
            }
        }
    }
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found
}

/// The mount-point calls document their folder as a plain drive path with a trailing
/// backslash ("Y:\MountX\"): `\\?\C:\…` as canonicalize gives it loses its prefix.
fn mount_point_arg(p: &Path) -> Vec<u16> {
    let s = p.to_string_lossy();
    let plain = s.strip_prefix(r"\\?\").filter(|r| r.as_bytes().get(1) == Some(&b':')).unwrap_or(&s);
    let with_slash = if plain.ends_with('\\') { plain.to_owned() } else { format!(r"{plain}\") };
    wide(with_slash.as_ref())
}

fn volume_at(p: &Path) -> Option<String> {
    use windows_sys::Win32::Storage::FileSystem::GetVolumeNameForVolumeMountPointW;
    let arg = mount_point_arg(p);
    let mut name = [0u16; 64];
    // SAFETY: FFI. `arg` is NUL-terminated, `name` writable for its length (the page: "a
    // reasonable size for the buffer … is 50 characters").
    let ok = unsafe { GetVolumeNameForVolumeMountPointW(arg.as_ptr(), name.as_mut_ptr(), name.len() as u32) };
    let end = name.iter().position(|&c| c == 0).unwrap_or(name.len());
    (ok != 0).then(|| String::from_utf16_lossy(&name[..end]))
}

/// Removes every volume mount point below `dir` (the folders stay; the volumes are untouched).
pub fn unmount_below(dir: &Path) -> Vec<String> {
    use windows_sys::Win32::Storage::FileSystem::DeleteVolumeMountPointW;
    mounts_below(dir)
        .iter()
        .filter_map(|p| {
            let arg = mount_point_arg(p);
            // SAFETY: FFI. `arg` is a NUL-terminated plain path with a trailing backslash.
            let ok = unsafe { DeleteVolumeMountPointW(arg.as_ptr()) };
            (ok == 0).then(|| format!("removing the mount point {}: {}", p.display(), std::io::Error::last_os_error()))
        })
        .collect()
}

/// DeleteVolumeMountPointW(`dir`), its folder as the plain path with a trailing backslash the
/// page documents; the Win32 code when it fails.
pub fn delete_mount_point(dir: &Path) -> std::result::Result<(), u32> {
    use windows_sys::Win32::Storage::FileSystem::DeleteVolumeMountPointW;
    let arg = mount_point_arg(dir);
    // SAFETY: FFI. `arg` is a NUL-terminated plain path with a trailing backslash, alive for the call.
    if unsafe { DeleteVolumeMountPointW(arg.as_ptr()) } == 0 {
        // SAFETY: reads this thread's last-error value, set by the failed call just above.
        return Err(unsafe { windows_sys::Win32::Foundation::GetLastError() });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// K7: version-2 attach parameters laid out as virtdisk.h declares them: Version at 0, the
    /// union at 8, RestrictedOffset at 8 and RestrictedLength at 16, 24 bytes in all, both range
    /// fields zero. Fails with the version-1 parameters the tool passed before (Version 1).
    #[test]
    fn attach_parameters_are_version_2_as_virtdisk_h_lays_them_out() {
        use std::mem::{offset_of, size_of};
        use windows_sys::Win32::Storage::Vhd::ATTACH_VIRTUAL_DISK_PARAMETERS_0_1 as V2;
        assert_eq!(size_of::<ATTACH_VIRTUAL_DISK_PARAMETERS>(), 24);
        assert_eq!(offset_of!(ATTACH_VIRTUAL_DISK_PARAMETERS, Version), 0);
        assert_eq!(offset_of!(ATTACH_VIRTUAL_DISK_PARAMETERS, Anonymous), 8);
        assert_eq!((offset_of!(V2, RestrictedOffset), offset_of!(V2, RestrictedLength)), (0, 8));
        let params = super::attach_parameters();
        assert_eq!(params.Version, 2, "ATTACH_VIRTUAL_DISK_VERSION_2");
        // SAFETY: the union's Version2 arm is the one written; plain integers.
        let v2 = unsafe { params.Anonymous.Version2 };
        assert_eq!((v2.RestrictedOffset, v2.RestrictedLength), (0, 0), "no range: the whole disk");
    }

    use super::*;

    #[test]
    fn physical_drive_paths() {
        assert_eq!(parse_physical_drive(r"\\.\PhysicalDrive3"), Some(3));
        assert_eq!(parse_physical_drive(r"\\.\PHYSICALDRIVE12"), Some(12));
        assert_eq!(parse_physical_drive(r"\\.\PhysicalDrive"), None);
        assert_eq!(parse_physical_drive(r"\\.\PhysicalDrive3a"), None);
        assert_eq!(parse_physical_drive(r"\\?\PhysicalDrive3"), None);
        assert_eq!(parse_physical_drive(r"\\.\CdRom0"), None);
    }

    #[test]
    fn mount_point_arguments_are_plain() {
        let s = |p: &str| String::from_utf16_lossy(&mount_point_arg(Path::new(p)));
        assert_eq!(s(r"\\?\C:\k\v"), "C:\\k\\v\\\0");
        assert_eq!(s(r"C:\k\v\"), "C:\\k\\v\\\0");
    }
}
