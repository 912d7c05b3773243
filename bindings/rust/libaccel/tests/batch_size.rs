//! find_executable_batch_size in one process: Accelerate's sizes after out-of-memory tries, a
//! try's own error back unchanged, a panic resumed, and the end of the search.

mod common;

use std::fmt;

use accel::{Accelerator, BatchSizeError, BoxError, Error, Status, Tensor};
use common::{linear_model, one_accelerator};

/// What a model call that ran out of memory returns.
fn out_of_memory() -> Error {
    Error::new(Status::OutOfMemory, "fake: CUDA out of memory")
}

#[test]
fn out_of_memory_tries_accelerates_sizes() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let mut tried = Vec::new();
    let (size, value) = acc
        .find_executable_batch_size(128, |size| {
            tried.push(size);
            if size > 8 {
                return Err(out_of_memory());
            }
            Ok(format!("ran at {size}"))
        })
        .unwrap();
    assert_eq!((size, value.as_str()), (8, "ran at 8"));
    let accelerate = [
        128, 115, 103, 92, 82, 73, 65, 58, 52, 46, 41, 36, 32, 28, 25, 22, 19, 17, 15, 13, 11, 9, 8,
    ];
    assert_eq!(tried, accelerate);

    // A real out-of-memory error from inside the try would be a libaccel call's; a model call
    // that runs is fine in a try, and the first size that runs is the answer.
    let model = linear_model(4, 1);
    let (size, rows) = acc
        .find_executable_batch_size(16, |size| {
            let x = Tensor::from_slice(&vec![0.5f32; 4 * size as usize], &[size, 4])?;
            let out = model.call1("forward", &[&x])?;
            if size > 12 {
                return Err(out_of_memory());
            }
            out.shape().map(|s| s[0])
        })
        .unwrap();
    assert_eq!(
        (size, rows),
        (12, 12),
        "16, then int(16 * 0.9) = 14, then 12"
    );
}

/// An error type of a program's own, which wraps the crate's.
#[derive(Debug, PartialEq)]
enum MyError {
    Accel(Error),
    Diverged { at: i64 },
}

impl fmt::Display for MyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MyError::Accel(e) => e.fmt(f),
            MyError::Diverged { at } => write!(f, "the loss diverged at batch size {at}"),
        }
    }
}

impl std::error::Error for MyError {}

impl From<Error> for MyError {
    fn from(e: Error) -> MyError {
        MyError::Accel(e)
    }
}

impl BatchSizeError for MyError {
    fn is_out_of_memory(&self) -> bool {
        matches!(self, MyError::Accel(e) if e.is_out_of_memory())
    }
}

#[test]
fn another_error_comes_back_unchanged() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();

    // The crate's own error, of another status: the very error, not a Callback one.
    let shape = Error::new(Status::Shape, "expected [64, 784], got [64, 785]");
    let mut tried = Vec::new();
    let e = acc
        .find_executable_batch_size(64, |size| -> accel::Result<()> {
            tried.push(size);
            if size == 64 {
                return Err(out_of_memory());
            }
            Err(shape.clone())
        })
        .unwrap_err();
    assert_eq!(e, shape);
    assert_eq!(tried, [64, 57], "the search stops at the first other error");

    // The program's own error type: out of memory through the crate's error, then its own.
    let e = acc
        .find_executable_batch_size(10, |size| -> Result<(), MyError> {
            if size == 10 {
                return Err(out_of_memory().into());
            }
            Err(MyError::Diverged { at: size })
        })
        .unwrap_err();
    assert_eq!(e, MyError::Diverged { at: 9 });

    // A boxed error: out of memory anywhere in its chain; any other comes back as the same box.
    #[derive(Debug)]
    struct Wrapped(Error);
    impl fmt::Display for Wrapped {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "the forward failed")
        }
    }
    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
    let mut tried = Vec::new();
    let e: BoxError = acc
        .find_executable_batch_size(4, |size| -> Result<(), BoxError> {
            tried.push(size);
            match size {
                4 => Err(out_of_memory().into()),
                3 => Err(Box::new(Wrapped(out_of_memory()))),
                _ => Err("my own message".into()),
            }
        })
        .unwrap_err();
    assert_eq!(tried, [4, 3, 2]);
    assert_eq!(e.to_string(), "my own message");
    assert!(e.downcast_ref::<Error>().is_none());

    // A panic resumes after the search, which the next search shows is over.
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        acc.find_executable_batch_size(8, |_| -> accel::Result<()> { panic!("boom") })
    }))
    .unwrap_err();
    assert_eq!(panicked.downcast_ref::<&str>(), Some(&"boom"));
    assert_eq!(
        acc.find_executable_batch_size(8, Ok::<i64, Error>).unwrap(),
        (8, 8)
    );
}

#[test]
fn no_size_runs() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let message = "No executable batch size found, reached zero.";
    let mut calls = 0;
    let e = acc
        .find_executable_batch_size(0, |_| -> accel::Result<()> {
            calls += 1;
            Ok(())
        })
        .unwrap_err();
    assert_eq!(e.status(), Status::OutOfMemory, "{e}");
    assert!(e.message().contains(message), "{e}");
    assert_eq!(calls, 0, "a start of 0 tries nothing");

    // Out of memory down to 1: the same error, after 1 was tried.
    let mut tried = Vec::new();
    let e = acc
        .find_executable_batch_size(3, |size| -> accel::Result<()> {
            tried.push(size);
            Err(out_of_memory())
        })
        .unwrap_err();
    assert_eq!(tried, [3, 2, 1]);
    assert_eq!(e.status(), Status::OutOfMemory);
    assert!(e.message().contains(message), "{e}");
}
