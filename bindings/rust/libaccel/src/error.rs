//! Errors: the library's status as an enum and its message, copied at once on the calling thread.

use std::ffi::CStr;
use std::fmt;

use libaccel_sys as sys;

/// The class of an error: the header's `ACCEL_ERR_*` values.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// A required argument was missing or out of range.
    InvalidArgument,
    /// A handle of another kind was passed.
    WrongHandle,
    /// A configuration key is unknown or its value invalid.
    Config,
    /// Understood but not supported by this build (or this library version by this crate).
    Unsupported,
    /// A file could not be read or written, or is corrupt.
    Io,
    /// Tensor shapes disagree.
    Shape,
    /// A dtype is not acceptable, or dtypes disagree across ranks.
    Dtype,
    /// The processes could not meet.
    Rendezvous,
    /// A collective did not complete in time.
    Timeout,
    /// A peer process died or closed its connection.
    PeerFailed,
    /// The call is not valid in the current state (a closed dataloader, say).
    State,
    /// An output buffer was too small (the crate sizes its buffers; seen only through `sys`).
    BufferTooSmall,
    /// A callback (a dataset closure, a checkpoint closure) failed.
    Callback,
    /// Memory could not be allocated.
    OutOfMemory,
    /// LibTorch reported an error that fits no other class.
    Torch,
    /// A bug in libaccel.
    Internal,
    /// A status this crate does not know (a newer library).
    Other(i32),
}

impl Status {
    /// The status for a raw `accel_status` value; `None` for `ACCEL_OK`.
    pub fn from_raw(raw: sys::accel_status) -> Option<Status> {
        Some(match raw {
            sys::ACCEL_OK => return None,
            sys::ACCEL_ERR_INVALID_ARGUMENT => Status::InvalidArgument,
            sys::ACCEL_ERR_WRONG_HANDLE => Status::WrongHandle,
            sys::ACCEL_ERR_CONFIG => Status::Config,
            sys::ACCEL_ERR_UNSUPPORTED => Status::Unsupported,
            sys::ACCEL_ERR_IO => Status::Io,
            sys::ACCEL_ERR_SHAPE => Status::Shape,
            sys::ACCEL_ERR_DTYPE => Status::Dtype,
            sys::ACCEL_ERR_RENDEZVOUS => Status::Rendezvous,
            sys::ACCEL_ERR_TIMEOUT => Status::Timeout,
            sys::ACCEL_ERR_PEER_FAILED => Status::PeerFailed,
            sys::ACCEL_ERR_STATE => Status::State,
            sys::ACCEL_ERR_BUFFER_TOO_SMALL => Status::BufferTooSmall,
            sys::ACCEL_ERR_CALLBACK => Status::Callback,
            sys::ACCEL_ERR_OUT_OF_MEMORY => Status::OutOfMemory,
            sys::ACCEL_ERR_TORCH => Status::Torch,
            sys::ACCEL_ERR_INTERNAL => Status::Internal,
            other => Status::Other(other),
        })
    }

    /// The raw `accel_status` value.
    pub fn to_raw(self) -> sys::accel_status {
        match self {
            Status::InvalidArgument => sys::ACCEL_ERR_INVALID_ARGUMENT,
            Status::WrongHandle => sys::ACCEL_ERR_WRONG_HANDLE,
            Status::Config => sys::ACCEL_ERR_CONFIG,
            Status::Unsupported => sys::ACCEL_ERR_UNSUPPORTED,
            Status::Io => sys::ACCEL_ERR_IO,
            Status::Shape => sys::ACCEL_ERR_SHAPE,
            Status::Dtype => sys::ACCEL_ERR_DTYPE,
            Status::Rendezvous => sys::ACCEL_ERR_RENDEZVOUS,
            Status::Timeout => sys::ACCEL_ERR_TIMEOUT,
            Status::PeerFailed => sys::ACCEL_ERR_PEER_FAILED,
            Status::State => sys::ACCEL_ERR_STATE,
            Status::BufferTooSmall => sys::ACCEL_ERR_BUFFER_TOO_SMALL,
            Status::Callback => sys::ACCEL_ERR_CALLBACK,
            Status::OutOfMemory => sys::ACCEL_ERR_OUT_OF_MEMORY,
            Status::Torch => sys::ACCEL_ERR_TORCH,
            Status::Internal => sys::ACCEL_ERR_INTERNAL,
            Status::Other(raw) => raw,
        }
    }

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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    status: Status,
    message: String,
}

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
        }
    }

    pub(crate) fn with_detail(mut self, detail: &str) -> Error {
        if !detail.is_empty() {
            self.message = format!("{}: {detail}", self.message);
        }
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status, self.message)
    }
}

impl std::error::Error for Error {}

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
