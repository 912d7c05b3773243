//! What a user closure called by the library left behind when it failed, carried back to the
//! Rust caller of the library call that ran it, whatever thread the closure ran on.
//!
//! A closure runs under `catch_unwind` inside an `extern "C"` trampoline (a panic must not unwind
//! into C). Its failure is stored in state shared with the Rust objects that make the library
//! call (not thread-local: dataset closures run on the dataloader's worker threads); the call
//! then fails with `ACCEL_ERR_CALLBACK` and the wrapper resumes the panic or returns the error.

use std::any::Any;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::Mutex;

use crate::error::{BoxError, Error, Result, Status};
use crate::step_tools::BatchSizeError;

/// The first failure of a closure since the last time it was taken.
enum Failure {
    Panic(Box<dyn Any + Send + 'static>),
    /// The closure's own error, kept whole: it becomes the source of the call's error.
    Error(BoxError),
    /// An error of the crate's own (a library call the trampoline made for the closure): it
    /// replaces the callback error rather than adding to it, so its status comes back.
    Surfaced(Error),
}

/// An error a trampoline raises itself, returned from the closure given to
/// [`FailureSlot::catch`]: the library call's error comes back with its own status (a stream
/// sample's field of the wrong size is `Shape`, not `Callback`). Private to the crate, so a user
/// closure's errors (even this crate's `Error`s) are always reported as the closure's.
#[derive(Debug)]
pub(crate) struct Surfaced(pub(crate) Error);

impl std::fmt::Display for Surfaced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Surfaced {}

#[derive(Default)]
pub(crate) struct FailureSlot {
    slot: Mutex<Option<Failure>>,
}

impl FailureSlot {
    /// Runs a user closure; 0 when it succeeded, 1 (the callback's failure) after storing why.
    pub(crate) fn run(&self, f: impl FnOnce() -> std::result::Result<(), BoxError>) -> i32 {
        match self.catch(f) {
            Some(()) => 0,
            None => 1,
        }
    }

    /// As [`run`](FailureSlot::run), but an error that is running out of memory (an
    /// [`Status::OutOfMemory`] error anywhere in its chain of sources) is returned as
    /// `ACCEL_ERR_OUT_OF_MEMORY` and not kept: the Trainer's `auto_find_batch_size` tries again
    /// smaller, and a later try that succeeds must not report it.
    pub(crate) fn run_passing_out_of_memory(
        &self,
        f: impl FnOnce() -> std::result::Result<(), BoxError>,
    ) -> i32 {
        let mut out_of_memory = false;
        let code = self.run(|| match f() {
            Err(e) if BatchSizeError::is_out_of_memory(&e) => {
                out_of_memory = true;
                Ok(())
            }
            other => other,
        });
        if out_of_memory {
            libaccel_sys::ACCEL_ERR_OUT_OF_MEMORY
        } else {
            code
        }
    }

    /// Runs a user closure; its value when it succeeded, `None` after storing why it did not.
    pub(crate) fn catch<T>(
        &self,
        f: impl FnOnce() -> std::result::Result<T, BoxError>,
    ) -> Option<T> {
        let failure = match catch_unwind(AssertUnwindSafe(f)) {
            Ok(Ok(value)) => return Some(value),
            Ok(Err(e)) => match e.downcast::<Surfaced>() {
                Ok(own) => Failure::Surfaced(own.0),
                Err(e) => Failure::Error(e),
            },
            Err(payload) => Failure::Panic(payload),
        };
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(failure);
        }
        None
    }

    /// Turns a library error into what the closure did: resumes its panic, or adds its error's
    /// message and keeps the error as the source. Errors of another class pass unchanged.
    pub(crate) fn resolve(&self, error: Error) -> Error {
        if error.status() != Status::Callback {
            return error;
        }
        let taken = self.slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        match taken {
            Some(Failure::Panic(payload)) => resume_unwind(payload),
            Some(Failure::Error(cause)) => error.with_detail(&cause.to_string()).with_source(cause),
            Some(Failure::Surfaced(own)) => own,
            None => error,
        }
    }

    /// As [`resolve`](FailureSlot::resolve), but a panic becomes the error's detail instead of
    /// resuming (a log sink's: a log line must not take the program down).
    pub(crate) fn resolve_caught(&self, error: Error) -> Error {
        if error.status() != Status::Callback {
            return error;
        }
        let taken = self.slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        match taken {
            Some(Failure::Panic(payload)) => {
                let what = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic without a message".to_string());
                error.with_detail(&format!("it panicked: {what}"))
            }
            Some(Failure::Error(cause)) => error.with_detail(&cause.to_string()).with_source(cause),
            Some(Failure::Surfaced(own)) => own,
            None => error,
        }
    }

    /// `result` with the slot emptied whatever the call returned, for calls that run every
    /// callback and report only the first failure (the trackers): a panic resumes; a closure's
    /// error resolves a `Callback` error as [`resolve`](FailureSlot::resolve) does, and is added
    /// to the message of an error of another class (which the library reported first).
    pub(crate) fn settle<T>(&self, result: Result<T>) -> Result<T> {
        let taken = self.slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        let failure = match taken {
            None => return result,
            Some(Failure::Panic(payload)) => resume_unwind(payload),
            Some(failure) => failure,
        };
        // A stored failure always fails the call: `Ok` has nothing to add to.
        result.map_err(|e| match failure {
            Failure::Error(cause) if e.status() == Status::Callback => {
                e.with_detail(&cause.to_string()).with_source(cause)
            }
            Failure::Surfaced(own) if e.status() == Status::Callback => own,
            Failure::Error(cause) => e.with_detail(&format!("a callback failed too: {cause}")),
            Failure::Surfaced(own) => e.with_detail(&format!("a callback failed too: {own}")),
            Failure::Panic(_) => e,
        })
    }
}

/// `result` with a callback failure resolved against each slot in turn.
pub(crate) fn resolve_all<'a, T>(
    result: Result<T>,
    slots: impl IntoIterator<Item = &'a FailureSlot>,
) -> Result<T> {
    result.map_err(|mut e| {
        for slot in slots {
            e = slot.resolve(e);
        }
        e
    })
}
