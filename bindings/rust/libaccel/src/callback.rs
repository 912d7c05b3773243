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

/// The first failure of a closure since the last time it was taken.
enum Failure {
    Panic(Box<dyn Any + Send + 'static>),
    Error(String),
}

#[derive(Default)]
pub(crate) struct FailureSlot {
    slot: Mutex<Option<Failure>>,
}

impl FailureSlot {
    /// Runs a user closure; 0 when it succeeded, 1 (the callback's failure) after storing why.
    pub(crate) fn run(&self, f: impl FnOnce() -> std::result::Result<(), BoxError>) -> i32 {
        let failure = match catch_unwind(AssertUnwindSafe(f)) {
            Ok(Ok(())) => return 0,
            Ok(Err(e)) => Failure::Error(e.to_string()),
            Err(payload) => Failure::Panic(payload),
        };
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(failure);
        }
        1
    }

    /// Turns a library error into what the closure did: resumes its panic, or adds its error's
    /// message. Errors of another class pass unchanged.
    pub(crate) fn resolve(&self, error: Error) -> Error {
        if error.status() != Status::Callback {
            return error;
        }
        let taken = self.slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        match taken {
            Some(Failure::Panic(payload)) => resume_unwind(payload),
            Some(Failure::Error(message)) => error.with_detail(&message),
            None => error,
        }
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
