//! Which process runs what, in one process: is_last_process, the on_* closures and
//! local_main_process_first (two processes: tests/multiprocess_steps.rs).

mod common;

use accel::Accelerator;
use common::one_accelerator;

#[test]
fn alone_every_helper_runs_here() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    assert!(acc.is_last_process().unwrap());
    assert!(acc.is_main_process().unwrap());

    let mut ran = Vec::new();
    assert_eq!(acc.on_main_process(|| ran.push("main")).unwrap(), Some(()));
    acc.on_local_main_process(|| ran.push("local main"))
        .unwrap()
        .unwrap();
    assert_eq!(acc.on_last_process(|| 7).unwrap(), Some(7));
    assert_eq!(acc.on_process(0, || "rank 0").unwrap(), Some("rank 0"));
    assert_eq!(acc.on_process(1, || ran.push("rank 1")).unwrap(), None);
    assert_eq!(acc.on_process(-1, || ran.push("rank -1")).unwrap(), None);
    assert_eq!(ran, ["main", "local main"]);

    let order = std::sync::Mutex::new(Vec::new());
    let value = acc
        .local_main_process_first(|| {
            order.lock().unwrap().push("first");
            42
        })
        .unwrap();
    assert_eq!(value, 42);
    let nested = acc
        .main_process_first(|| acc.local_main_process_first(|| "nested"))
        .unwrap()
        .unwrap();
    assert_eq!(nested, "nested");

    // The end runs when the block panics, and the panic comes back.
    for _ in 0..2 {
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            acc.local_main_process_first(|| panic!("while downloading"))
        }))
        .unwrap_err();
        assert_eq!(panicked.downcast_ref::<&str>(), Some(&"while downloading"));
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            acc.main_process_first(|| panic!("while downloading"))
        }));
        assert!(panicked.is_err());
    }
    let result: accel::Result<accel::Result<()>> = acc.local_main_process_first(|| {
        Err(accel::Error::new(accel::Status::Io, "the block's error"))
    });
    assert_eq!(result.unwrap().unwrap_err().message(), "the block's error");
    assert_eq!(acc.local_main_process_first(|| 1).unwrap(), 1);
}
