//! Helpers every wrapper uses: text in and out, the version check, owned handles.

use std::ffi::{c_char, CString};
use std::path::Path;
use std::sync::OnceLock;

use libaccel_sys as sys;

use crate::error::{check, Error, Result, Status};

/// Checks once per process that the loaded library is a version libaccel-sys declares; every
/// constructor calls it, so a mismatched library is an error before any call could misbehave.
pub(crate) fn ensure_supported_library() -> Result<()> {
    static CHECKED: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    CHECKED
        .get_or_init(sys::check_version)
        .clone()
        .map_err(|why| Error::new(Status::Unsupported, why))
}

/// `text` as a C string; an interior NUL is an `InvalidArgument` naming `what`.
pub(crate) fn c_string(text: &str, what: &str) -> Result<CString> {
    CString::new(text).map_err(|_| {
        Error::new(
            Status::InvalidArgument,
            format!("{what} contains a NUL byte: {text:?}"),
        )
    })
}

/// A path as the C string the library opens (its bytes as they are on Unix).
pub(crate) fn path_string(path: &Path) -> Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        Error::new(
            Status::InvalidArgument,
            format!("path contains a NUL byte: {}", path.display()),
        )
    })
}

/// Calls a `_set(handle, key, value)` function with `value` formatted by Rust (a '.' decimal
/// point whatever the locale), as every option setter of the header takes it.
pub(crate) fn set_option(
    key: &str,
    value: &dyn std::fmt::Display,
    call: impl FnOnce(*const c_char, *const c_char) -> sys::accel_status,
) -> Result<()> {
    let key = c_string(key, "key")?;
    let value = c_string(&value.to_string(), "value")?;
    check(call(key.as_ptr(), value.as_ptr()))
}

/// Reads a text result written with the header's buffer convention: one call into a buffer
/// that usually fits, again with the size the library asked for when it did not.
pub(crate) fn read_text(
    mut call: impl FnMut(*mut c_char, usize, &mut usize) -> sys::accel_status,
) -> Result<String> {
    let mut buf = vec![0u8; 256];
    loop {
        let mut needed = 0usize;
        let status = call(buf.as_mut_ptr().cast(), buf.len(), &mut needed);
        if status == sys::ACCEL_ERR_BUFFER_TOO_SMALL && needed > buf.len() {
            buf.resize(needed, 0);
            continue;
        }
        check(status)?;
        buf.truncate(needed.saturating_sub(1)); // the size counts the terminating NUL
        return Ok(String::from_utf8_lossy(&buf).into_owned());
    }
}

/// Runs a constructor-style call with an `out` pointer and returns the handle it made.
pub(crate) fn make<T>(call: impl FnOnce(*mut *mut T) -> sys::accel_status) -> Result<*mut T> {
    let mut out: *mut T = std::ptr::null_mut();
    check(call(&mut out))?;
    if out.is_null() {
        return Err(Error::new(
            Status::Internal,
            "the library reported success but returned no handle",
        ));
    }
    Ok(out)
}

/// Runs a query with one `out` value.
pub(crate) fn query<T: Default>(call: impl FnOnce(*mut T) -> sys::accel_status) -> Result<T> {
    let mut out = T::default();
    check(call(&mut out))?;
    Ok(out)
}

/// Declares an owning handle type: a non-null pointer freed by `Drop`, `Send + Sync` (the
/// header lets every handle be used from any thread; see each type for what runs at once).
macro_rules! owned_handle {
    ($(#[$doc:meta])* $name:ident, $raw:ty, $free:path) => {
        $(#[$doc])*
        pub struct $name {
            raw: std::ptr::NonNull<$raw>,
        }

        // SAFETY: accel.h "Threads": every function may be called from any thread, calls that
        // must not overlap are serialised inside the library, and free may run on any thread.
        unsafe impl Send for $name {}
        // SAFETY: as above; `&self` methods map to calls the header allows at the same time.
        unsafe impl Sync for $name {}

        impl Drop for $name {
            fn drop(&mut self) {
                // SAFETY: the handle is ours, valid, and no other call on it can be running
                // (drop has the only reference).
                unsafe { $free(self.raw.as_ptr()) }
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({:p})", stringify!($name), self.raw.as_ptr())
            }
        }

        impl $name {
            /// The raw handle, for calls through `libaccel-sys`; still owned by `self`.
            pub fn as_raw(&self) -> *mut $raw {
                self.raw.as_ptr()
            }

            /// Gives up ownership: the caller frees the returned handle.
            pub fn into_raw(self) -> *mut $raw {
                let raw = self.raw.as_ptr();
                std::mem::forget(self);
                raw
            }

            /// Takes ownership of a raw handle.
            ///
            /// # Safety
            /// `raw` must be a live handle of this type that nothing else frees.
            pub unsafe fn from_raw(raw: *mut $raw) -> Option<Self> {
                std::ptr::NonNull::new(raw).map(|raw| $name { raw })
            }
        }
    };
}
pub(crate) use owned_handle;

/// Takes a bytes list the library made (the caller owns it): its entries copied out, in order,
/// and the list freed, whatever happens.
pub(crate) fn take_bytes_list(list: *mut sys::accel_bytes_list) -> Result<Vec<Vec<u8>>> {
    struct Guard(*mut sys::accel_bytes_list);
    impl Drop for Guard {
        fn drop(&mut self) {
            // SAFETY: the list is ours and freed once, here.
            unsafe { sys::accel_bytes_list_free(self.0) }
        }
    }
    let list = Guard(list);
    // SAFETY: live list, valid out pointer.
    let count = query(|out| unsafe { sys::accel_bytes_list_count(list.0, out) })?;
    (0..count)
        .map(|i| {
            let mut data: *const std::ffi::c_void = std::ptr::null();
            let mut size = 0usize;
            // SAFETY: `i` in range; the bytes stay valid until the list is freed.
            check(unsafe { sys::accel_bytes_list_get(list.0, i, &mut data, &mut size) })?;
            // SAFETY: `data` points at `size` bytes (never NULL).
            Ok(unsafe { std::slice::from_raw_parts(data.cast::<u8>(), size) }.to_vec())
        })
        .collect()
}
