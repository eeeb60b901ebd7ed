//! This process's threads on Windows (on Linux, `procs::fds_and_threads` reads `/proc/self`).

#![allow(unsafe_code)] // FFI: a ToolHelp snapshot of the system's threads

use windows_sys::Win32::Foundation::{CloseHandle, INVALID_HANDLE_VALUE};
use windows_sys::Win32::System::Diagnostics::ToolHelp::{
    CreateToolhelp32Snapshot, Thread32First, Thread32Next, TH32CS_SNAPTHREAD, THREADENTRY32,
};
use windows_sys::Win32::System::Threading::GetCurrentProcessId;

/// How many threads this process has (a snapshot of every thread, counting those it owns).
pub fn threads() -> usize {
    // SAFETY: a snapshot handle closed below; THREADENTRY32 is plain data with its size set, as
    // Thread32First requires.
    unsafe {
        let snap = CreateToolhelp32Snapshot(TH32CS_SNAPTHREAD, 0);
        assert!(snap != INVALID_HANDLE_VALUE, "CreateToolhelp32Snapshot failed");
        let me = GetCurrentProcessId();
        let mut entry: THREADENTRY32 = std::mem::zeroed();
        entry.dwSize = std::mem::size_of::<THREADENTRY32>() as u32;
        let mut n = 0;
        let mut more = Thread32First(snap, &mut entry) != 0;
        while more {
            if entry.th32OwnerProcessID == me {
                n += 1;
            }
            more = Thread32Next(snap, &mut entry) != 0;
        }
        CloseHandle(snap);
        n
    }
}
