//! VARIANTs and SAFEARRAYs: WMI property values read into [`Value`]s, and method arguments
//! written from them in the type each parameter declares.

use super::hresult::hr_text;
use crate::windows::wmi::Value;
use std::ffi::c_void;
use std::mem::ManuallyDrop;
use windows::core::{BSTR, PCWSTR};
use windows::Win32::Foundation::{SysAllocStringLen, VARIANT_BOOL, VARIANT_FALSE, VARIANT_TRUE};
use windows::Win32::System::Com::SAFEARRAY;
use windows::Win32::System::Ole::{
    SafeArrayAccessData, SafeArrayCreateVector, SafeArrayGetDim, SafeArrayGetLBound, SafeArrayGetUBound,
    SafeArrayPutElement, SafeArrayUnaccessData,
};
use windows::Win32::System::Variant::{
    VariantClear, VARENUM, VARIANT, VT_ARRAY, VT_BOOL, VT_BSTR, VT_EMPTY, VT_I1, VT_I2, VT_I4, VT_I8, VT_INT, VT_NULL,
    VT_TYPEMASK, VT_UI1, VT_UI2, VT_UI4, VT_UI8, VT_UINT,
};
use windows::Win32::System::Wmi::IWbemClassObject;

/// WMI's CIM type numbers (wbemcli.h CIMTYPE_ENUMERATION) that change how a value is read or
/// written: uint32 travels as VT_I4, so its sign bit is a value bit.
pub(super) const CIM_UINT32: i32 = 19;
pub(super) const CIM_TYPE_MASK: i32 = 0xFF;

/// NUL-terminated UTF-16 for PCWSTR parameters.
pub(super) fn wide(s: &str) -> Vec<u16> {
    s.encode_utf16().chain(Some(0)).collect()
}

/// A BSTR's text up to its first NUL: Wine counts padding NULs into some lengths (`__PATH`),
/// and no string WMI stores holds one.
pub(super) fn bstr_string(b: &BSTR) -> String {
    let units: &[u16] = b;
    let end = units.iter().position(|&u| u == 0).unwrap_or(units.len());
    String::from_utf16_lossy(&units[..end])
}

// ---------------------------------------------------------------------------------------------
// VARIANTs and SAFEARRAYs.

/// An owned VARIANT, cleared (freeing any BSTR or SAFEARRAY in it) on drop.
pub(super) struct Variant(pub(super) VARIANT);

impl Variant {
    pub(super) fn empty() -> Self {
        Variant(VARIANT::default())
    }

    pub(super) fn vt(&self) -> VARENUM {
        // SAFETY: `vt` is the tag every VARIANT has, whichever member is live.
        unsafe { self.0.Anonymous.Anonymous.vt }
    }

    /// Sets the tag of an empty VARIANT and lets `fill` write the matching member.
    pub(super) fn tagged(vt: VARENUM, fill: impl FnOnce(&mut windows::Win32::System::Variant::VARIANT_0_0_0)) -> Self {
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

    pub(super) fn null() -> Self {
        Variant::tagged(VT_NULL, |_| {})
    }

    pub(super) fn bool(b: bool) -> Self {
        let val: VARIANT_BOOL = if b { VARIANT_TRUE } else { VARIANT_FALSE };
        Variant::tagged(VT_BOOL, |u| u.boolVal = val)
    }

    pub(super) fn i4(n: i32) -> Self {
        Variant::tagged(VT_I4, |u| u.lVal = n)
    }

    pub(super) fn bstr(s: BSTR) -> Self {
        Variant::tagged(VT_BSTR, |u| u.bstrVal = ManuallyDrop::new(s))
    }

    /// Takes ownership of `array`, whose elements are of type `elem`.
    pub(super) fn array(elem: VARENUM, array: *mut SAFEARRAY) -> Self {
        Variant::tagged(VARENUM(VT_ARRAY.0 | elem.0), |u| u.parray = array)
    }

    /// Overwrites the characters of a held BSTR before it is freed (for secrets).
    pub(super) fn wipe_bstr(&mut self) {
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
pub(super) fn int_of(
    vt: VARENUM,
    raw: &windows::Win32::System::Variant::VARIANT_0_0_0,
    unsigned32: bool,
) -> Option<i64> {
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
pub(super) struct Unsupported(pub(super) u16);

/// Converts `v` (of CIM type `cim`, when known) into a [`Value`].
pub(super) fn to_value(v: &Variant, cim: i32) -> std::result::Result<Value, Unsupported> {
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
pub(super) fn array_value(psa: *mut SAFEARRAY, elem: VARENUM, unsigned32: bool) -> Option<Value> {
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
pub(super) fn vector(elem: VARENUM, len: usize) -> std::result::Result<Variant, &'static str> {
    let n = u32::try_from(len).map_err(|_| "too many elements")?;
    // SAFETY: FFI allocation; a null result is checked.
    let psa = unsafe { SafeArrayCreateVector(elem, 0, n) };
    if psa.is_null() {
        return Err("SafeArrayCreateVector failed");
    }
    Ok(Variant::array(elem, psa))
}

pub(super) fn put_element(v: &Variant, index: usize, item: *const c_void) -> std::result::Result<(), &'static str> {
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
pub(super) fn alloc_bstr(units: &[u16]) -> std::result::Result<BSTR, &'static str> {
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
pub(super) fn arg_variant(value: &Value, cim: i32) -> std::result::Result<Variant, &'static str> {
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

/// Reads property `name` of `obj`: its value and CIM type.
pub(super) fn get(obj: &IWbemClassObject, name: &str) -> windows::core::Result<(Variant, i32)> {
    let mut v = Variant::empty();
    let mut cim = 0i32;
    let w = wide(name);
    // SAFETY: FFI on a live object; `w` is NUL-terminated and outlives the call; the VARIANT
    // is empty and becomes owned by `v`.
    unsafe { obj.Get(PCWSTR(w.as_ptr()), 0, &mut v.0, Some(&mut cim), None) }?;
    Ok((v, cim))
}
