//! Errors: the library's status as an enum and its message, copied at once on the calling thread.

use std::ffi::CStr;
use std::fmt;
use std::sync::Arc;

use libaccel_sys as sys;

// The Status enum, from_raw and to_raw: generated from accel.h by tools/gen_raw.py.
include!("status_generated.rs");

impl Status {
    /// The library's constant name for the status, e.g. `"ACCEL_ERR_CONFIG"`.
    pub fn name(self) -> &'static str {
        // SAFETY: accel_status_name returns static storage, never NULL, for any value.
        unsafe { CStr::from_ptr(sys::accel_status_name(self.to_raw())) }
            .to_str()
            .unwrap_or("ACCEL_ERR_?")
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A failed call: its [`Status`] and the library's message (owned: copied when the call failed).
///
/// When a closure or trait object of the program failed inside the call (a `Callback` error),
/// the message ends with the closure's error's message, and the error itself is the
/// [`source`](std::error::Error::source), for `downcast_ref` to the program's own type.
/// Equality compares the status and the message.
#[derive(Debug, Clone)]
pub struct Error {
    status: Status,
    message: String,
    source: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>,
}

impl PartialEq for Error {
    fn eq(&self, other: &Error) -> bool {
        self.status == other.status && self.message == other.message
    }
}

impl Eq for Error {}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The error type a user closure returns (a dataset's sample function, a checkpoint callback).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

impl Error {
    /// An error made by this crate (its message says what the safe API refused).
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error {
            status,
            message: message.into(),
            source: None,
        }
    }

    /// The class of the error.
    pub fn status(&self) -> Status {
        self.status
    }

    /// The message: the library's, or this crate's for what it checks itself.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The error of a call that just returned `raw` on this thread; reads the thread's message
    /// at once, before any other call can replace it.
    pub(crate) fn from_last(raw: sys::accel_status) -> Error {
        let status = Status::from_raw(raw).unwrap_or(Status::Internal);
        Error {
            status,
            message: last_message(),
            source: None,
        }
    }

    pub(crate) fn with_detail(mut self, detail: &str) -> Error {
        if !detail.is_empty() {
            self.message = format!("{}: {detail}", self.message);
        }
        self
    }

    /// This error with `source` as its cause (a user closure's error, kept whole).
    pub(crate) fn with_source(mut self, source: BoxError) -> Error {
        self.source = Some(Arc::from(source));
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status, self.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> std::io::Error {
        let kind = match e.status {
            Status::Io => std::io::ErrorKind::Other,
            Status::InvalidArgument => std::io::ErrorKind::InvalidInput,
            Status::Timeout => std::io::ErrorKind::TimedOut,
            _ => std::io::ErrorKind::Other,
        };
        std::io::Error::new(kind, e)
    }
}

fn last_message() -> String {
    // SAFETY: never NULL; borrowed until the next failing call on this thread, copied here.
    unsafe { CStr::from_ptr(sys::accel_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

/// The last failure recorded on this thread, if any: how to learn why a `Drop` (which returns
/// nothing, like the header's free functions) refused a handle.
pub fn last_error() -> Option<Error> {
    // SAFETY: plain reads of this thread's error record.
    let raw = unsafe { sys::accel_last_error_status() };
    Status::from_raw(raw).map(|status| Error {
        status,
        message: last_message(),
        source: None,
    })
}

/// `Ok(())` for `ACCEL_OK`, else the error with the message of this thread's failed call.
#[inline]
pub(crate) fn check(raw: sys::accel_status) -> Result<()> {
    if raw == sys::ACCEL_OK {
        Ok(())
    } else {
        Err(Error::from_last(raw))
    }
}
