//! The profiler in one process: windows by schedule and the trace-ready closure, the trace file
//! of output_trace_dir, the summary table, and a failing closure's error from step().

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use accel::{Accelerator, Model, ProfileOptions, Profiler, Status, Tensor};
use common::{linear_model, one_accelerator, temp_dir};

/// One step's work: a forward and a backward, so that LibTorch has operators to record.
fn work(acc: &Accelerator, model: &Model) {
    let x = Tensor::from_slice(&[0.25f32; 32], &[8, 4]).unwrap();
    let y = Tensor::from_slice(&[1.0f32; 8], &[8, 1]).unwrap();
    let loss = model.call1("training_step", &[&x, &y]).unwrap();
    acc.backward(&loss).unwrap();
}

#[test]
fn windows_trace_file_and_table() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let model = linear_model(4, 1);
    let dir = temp_dir("profiler");
    let options = ProfileOptions::new()
        .schedule(1, 1, 2, 2)
        .record_shapes(true)
        .output_trace_dir(&dir);
    let mut prof = Profiler::with(&acc, options).unwrap();
    let ready = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&ready);
    let window_file = dir.join("window.json");
    let in_closure = window_file.clone();
    prof.on_trace_ready(move |window| {
        let n = seen.fetch_add(1, Ordering::SeqCst) + 1;
        assert_eq!(window.window_count()?, n as i64);
        window.export_chrome_trace(&in_closure)?;
        Ok(())
    })
    .unwrap();
    prof.start().unwrap();
    for _ in 0..20 {
        prof.step().unwrap();
        work(&acc, &model);
    }
    prof.stop().unwrap();
    // wait 1, warmup 1, active 2, twice: windows end at steps 4 and 8, and no more.
    assert_eq!(ready.load(Ordering::SeqCst), 2);
    assert_eq!(prof.window_count().unwrap(), 2);

    let trace = std::fs::read_to_string(dir.join("profile_0.json")).unwrap();
    assert!(trace.contains("aten::"), "{trace}");
    assert!(std::fs::read_to_string(&window_file)
        .unwrap()
        .contains("aten::"));
    let table = prof.table(None, None).unwrap();
    assert!(table.contains("Self CPU time total:"), "{table}");
    assert!(table.contains("aten::"), "{table}");
    let short = prof.table(Some("count"), Some(1)).unwrap();
    assert!(short.lines().count() < table.lines().count(), "{short}");
    let e = prof.table(Some("no_such_column"), None).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument, "{e}");
    let mine = dir.join("mine.json");
    prof.export_chrome_trace(&mine).unwrap();
    assert!(std::fs::read_to_string(&mine).unwrap().contains("aten::"));
    std::fs::remove_dir_all(dir).ok();

    // Without a schedule the whole block is one window, complete at stop.
    let mut whole = Profiler::new(&acc).unwrap();
    whole.start().unwrap();
    assert_eq!(whole.start().unwrap_err().status(), Status::State);
    work(&acc, &model);
    whole.stop().unwrap();
    assert_eq!(whole.window_count().unwrap(), 1);
    assert!(whole
        .table(None, None)
        .unwrap()
        .contains("Self CPU time total:"));
    let e = Profiler::new(&acc).unwrap().set("wiat", 1).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument, "{e}");
}

#[derive(Debug)]
struct TraceSinkFull;

impl std::fmt::Display for TraceSinkFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the trace sink is full")
    }
}

impl std::error::Error for TraceSinkFull {}

#[test]
fn a_failing_trace_ready_closure_fails_the_step() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let model = linear_model(4, 1);
    let mut prof = Profiler::with(&acc, ProfileOptions::new().schedule(0, 0, 1, 0)).unwrap();
    prof.on_trace_ready(|_| Err(Box::new(TraceSinkFull)))
        .unwrap();
    prof.start().unwrap();
    work(&acc, &model);
    let e = prof.step().unwrap_err();
    assert_eq!(e.status(), Status::Callback, "{e}");
    assert!(e.message().contains("the trace sink is full"), "{e}");
    let source = std::error::Error::source(&e).expect("the closure's error");
    assert!(source.downcast_ref::<TraceSinkFull>().is_some());

    // (The profiler is left as torch.profiler is when its on_trace_ready raises: the next
    // window was not started. Dropping it is fine.)
    drop(prof);

    // A panic in the closure crosses no C frame: it resumes from the step.
    let mut prof = Profiler::with(&acc, ProfileOptions::new().schedule(0, 0, 1, 0)).unwrap();
    prof.on_trace_ready(|_| panic!("trace-ready panicked"))
        .unwrap();
    prof.start().unwrap();
    work(&acc, &model);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| prof.step()));
    let payload = panicked.unwrap_err();
    assert_eq!(
        payload.downcast_ref::<&str>(),
        Some(&"trace-ready panicked")
    );
    assert_eq!(prof.window_count().unwrap(), 1);
}
