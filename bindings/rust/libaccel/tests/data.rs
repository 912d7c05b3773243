//! Datasets and data loaders: IDX files, options and positions, closures on worker threads and
//! their errors and panics.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use accel::{
    fields, Accelerator, DataLoader, DataLoaderOptions, Dataset, Dtype, Field, Status, Tensor,
};
use common::{one_accelerator, FASHION_MNIST};

#[test]
fn idx_datasets_and_their_errors() {
    let _one = one_accelerator();
    let test = Dataset::from_idx(&[
        format!("{FASHION_MNIST}/t10k-images-idx3-ubyte.gz"),
        format!("{FASHION_MNIST}/t10k-labels-idx1-ubyte.gz"),
    ])
    .unwrap();
    assert_eq!(test.sample_count().unwrap(), Some(10_000));
    assert_eq!(test.field_count().unwrap(), 2);
    let acc = Accelerator::new().unwrap();
    let mut loader = DataLoader::new(&acc, &test).unwrap();
    loader.set("batch_size", 1000).unwrap();
    loader.set("num_workers", 2).unwrap();
    assert_eq!(loader.batch_count().unwrap(), Some(10));
    let batch = loader.next_batch().unwrap().unwrap();
    assert_eq!(batch[0].shape().unwrap(), vec![1000, 28, 28]);
    assert_eq!(batch[0].dtype().unwrap(), Dtype::U8);
    assert!(batch[1].to_vec::<u8>().unwrap().iter().all(|&l| l < 10));
    assert_eq!(loader.position().unwrap(), (0, 1000));
    assert!(!loader.end_of_epoch().unwrap());
    assert_eq!(loader.remainder().unwrap(), 0);
    assert_eq!(loader.iter().count(), 9, "the rest of the epoch");

    let e = Dataset::from_idx(&["/no/such/images.gz"]).unwrap_err();
    assert_eq!(e.status(), Status::Io);
    assert!(e.message().contains("/no/such/images.gz"), "{e}");
    let e = Dataset::from_idx(&[
        format!("{FASHION_MNIST}/t10k-images-idx3-ubyte.gz"),
        format!("{FASHION_MNIST}/train-labels-idx1-ubyte.gz"),
    ])
    .unwrap_err();
    assert_eq!(e.status(), Status::Shape);
    let a = Tensor::from_slice(&[1.0f32; 4], &[4]).unwrap();
    let b = Tensor::from_slice(&[1.0f32; 3], &[3]).unwrap();
    assert_eq!(
        Dataset::from_tensors(&[&a, &b]).unwrap_err().status(),
        Status::Shape
    );
}

#[test]
fn dataloader_options_positions_and_close() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let x = Tensor::from_slice(&(0..10i64).collect::<Vec<_>>(), &[10]).unwrap();
    let data = Dataset::from_tensors(&[&x]).unwrap();
    let mut loader = DataLoader::new(&acc, &data).unwrap();
    drop(data); // the dataloader keeps it alive
    loader.set("batch_size", 4).unwrap();
    let e = loader.set("batch_size", 0).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    let e = loader.set("shuffel", true).unwrap_err();
    assert!(e.message().contains("shuffel"), "{e}");
    let first = |b: accel::Result<accel::Batch>| b.unwrap()[0].to_vec::<i64>().unwrap()[0];
    let mut epoch = loader.iter();
    assert_eq!(epoch.size_hint(), (0, Some(3)));
    assert_eq!(epoch.next().map(first), Some(0));
    assert_eq!(epoch.size_hint(), (0, Some(2)));
    assert_eq!(epoch.by_ref().map(first).collect::<Vec<_>>(), [4, 8]);
    assert!(epoch.next().is_none(), "an ended epoch stays ended");
    assert_eq!(epoch.size_hint(), (0, Some(0)));
    assert_eq!(loader.epoch().unwrap(), 1);
    // A loop left early leaves the epoch in progress; the next iteration continues it.
    assert_eq!(loader.iter().next().map(first), Some(0));
    assert_eq!(loader.iter().map(first).collect::<Vec<_>>(), [4, 8]);
    assert_eq!(loader.epoch().unwrap(), 2);
    // An epoch whose last batch was taken (take(batch_count)) ends before the next begins.
    assert_eq!(
        loader.iter().take(3).map(first).collect::<Vec<_>>(),
        [0, 4, 8]
    );
    assert!(loader.end_of_epoch().unwrap());
    assert_eq!(loader.iter().map(first).collect::<Vec<_>>(), [0, 4, 8]);
    assert_eq!(loader.epoch().unwrap(), 4);
    // Typed options: the same keys, checked by the compiler.
    loader
        .set_options(DataLoaderOptions::new().batch_size(5).drop_last(true))
        .unwrap();
    assert_eq!(loader.iter().map(first).collect::<Vec<_>>(), [0, 5]);
    let e = loader
        .set_options(DataLoaderOptions::new().batch_size(0))
        .unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    loader.set("batch_size", 4).unwrap();
    loader.set("drop_last", false).unwrap();
    loader.skip_first_batches(1).unwrap();
    assert_eq!(
        loader.next_batch().unwrap().unwrap()[0]
            .to_vec::<i64>()
            .unwrap(),
        vec![4, 5, 6, 7]
    );
    loader.set_position(0, 8).unwrap();
    assert_eq!(
        loader.next_batch().unwrap().unwrap()[0]
            .to_vec::<i64>()
            .unwrap(),
        vec![8, 9]
    );
    assert!(loader.end_of_epoch().unwrap());
    loader.close().unwrap();
    loader.close().unwrap(); // idempotent
    let e = loader.next_batch().unwrap_err();
    assert_eq!(e.status(), Status::State, "{e}");
    assert!(!e.message().is_empty());
    assert_eq!(
        loader.set("batch_size", 2).unwrap_err().status(),
        Status::State
    );
    assert!(fields::<3>(vec![x]).is_err());
}

fn squares(count: i64) -> impl Fn(i64, &mut [&mut [u8]]) -> Result<(), accel::BoxError> {
    move |i, f| {
        assert!(i < count);
        f[0].copy_from_slice(&(i * i).to_ne_bytes());
        f[1].copy_from_slice(
            &[i as f32, -(i as f32)]
                .iter()
                .flat_map(|v| v.to_ne_bytes())
                .collect::<Vec<_>>(),
        );
        Ok(())
    }
}

#[test]
fn closure_datasets_fill_samples_on_workers() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let spec = [Field::new(Dtype::I64, &[]), Field::new(Dtype::F32, &[2])];
    let data = Dataset::from_fn(100, &spec, squares(100)).unwrap();
    for workers in [0, 3] {
        let mut loader = DataLoader::new(&acc, &data).unwrap();
        loader.set("batch_size", 8).unwrap();
        loader.set("num_workers", workers).unwrap();
        let mut seen = Vec::new();
        for batch in &mut loader {
            let [sq, pair] = fields(batch.unwrap()).unwrap();
            let sq = sq.to_vec::<i64>().unwrap();
            assert_eq!(pair.shape().unwrap(), vec![sq.len() as i64, 2]);
            let pair = pair.to_vec::<f32>().unwrap();
            for (k, s) in sq.iter().enumerate() {
                let i = pair[2 * k] as i64;
                assert_eq!(*s, i * i);
                assert_eq!(pair[2 * k + 1], -(i as f32));
                seen.push(i);
            }
        }
        assert_eq!(seen, (0..100).collect::<Vec<_>>(), "workers {workers}");
    }
}

#[test]
fn a_closure_error_comes_back_from_next() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let data = Dataset::from_fn(50, &[Field::new(Dtype::U8, &[])], |i, f| {
        if i == 17 {
            return Err(format!("sample {i} is unreadable").into());
        }
        f[0][0] = i as u8;
        Ok(())
    })
    .unwrap();
    for workers in [0, 2] {
        let mut loader = DataLoader::new(&acc, &data).unwrap();
        loader.set("batch_size", 5).unwrap();
        loader.set("num_workers", workers).unwrap();
        let results: Vec<_> = loader.iter().collect();
        let e = results.last().unwrap().as_ref().unwrap_err();
        assert_eq!(e.status(), Status::Callback);
        assert!(e.message().contains("sample 17 is unreadable"), "{e}");
        assert_eq!(
            results.iter().filter(|r| r.is_ok()).count(),
            3,
            "batches before 15..20"
        );
        // The next iteration starts the epoch again.
        assert!(loader.next_batch().unwrap().is_some());
    }
}

#[test]
fn a_closure_panic_on_a_worker_thread_is_resumed_in_next() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let data = Dataset::from_fn(64, &[Field::new(Dtype::I32, &[3])], |i, f| {
        if i == 40 {
            panic!("sample {i} exploded");
        }
        f[0].copy_from_slice(
            &[i as i32; 3]
                .iter()
                .flat_map(|v| v.to_ne_bytes())
                .collect::<Vec<_>>(),
        );
        Ok(())
    })
    .unwrap();
    for workers in [2, 0] {
        let mut loader = DataLoader::new(&acc, &data).unwrap();
        loader.set("batch_size", 8).unwrap();
        loader.set("num_workers", workers).unwrap();
        let mut good = 0;
        let panic = catch_unwind(AssertUnwindSafe(|| {
            for batch in &mut loader {
                batch.unwrap();
                good += 1;
            }
        }))
        .unwrap_err();
        let text = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert_eq!(text, "sample 40 exploded", "workers {workers}");
        assert_eq!(good, 5, "batches 0..5 came before the one with sample 40");
        // The loader is still usable: the next call starts the epoch again.
        loader.set_epoch(1).unwrap();
        assert!(loader.next_batch().unwrap().is_some());
    }
}

#[test]
fn dropping_a_dataloader_while_workers_run_stops_the_closure() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    struct Released(Arc<AtomicBool>);
    impl Drop for Released {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let released = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let guard = Released(Arc::clone(&released));
    let counter = Arc::clone(&calls);
    let data = Dataset::from_fn(100_000, &[Field::new(Dtype::F64, &[16])], move |_, f| {
        let _keep = &guard; // the closure owns the guard: dropped when the library releases it
        counter.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(2));
        f[0].fill(0);
        Ok(())
    })
    .unwrap();
    let mut loader = DataLoader::new(&acc, &data).unwrap();
    loader.set("batch_size", 4).unwrap();
    loader.set("num_workers", 4).unwrap();
    loader.set("prefetch_factor", 8).unwrap();
    assert!(loader.next_batch().unwrap().is_some());
    drop(data);
    assert!(
        !released.load(Ordering::SeqCst),
        "the dataloader still uses the closure"
    );
    let freeing = std::time::Instant::now();
    drop(loader); // workers are inside the closure right now
    assert!(
        freeing.elapsed() < Duration::from_secs(2),
        "drop waits only for running samples"
    );
    assert!(
        released.load(Ordering::SeqCst),
        "the closure is released with the last user"
    );
    let after = calls.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        after,
        "never called after drop"
    );
}

#[test]
fn an_interruption_ends_a_wait_for_the_workers_and_loses_no_batch() {
    let _one = one_accelerator();
    let acc = Arc::new(Accelerator::new().unwrap());
    // Sample i is the byte i; sample 0 takes a second on the worker.
    let data = Dataset::from_fn(4, &[Field::new(Dtype::U8, &[])], |i, f| {
        if i == 0 {
            std::thread::sleep(Duration::from_secs(1));
        }
        f[0][0] = i as u8;
        Ok(())
    })
    .unwrap();
    let mut loader = DataLoader::with(
        &acc,
        &data,
        DataLoaderOptions::new().batch_size(1).num_workers(1),
    )
    .unwrap();
    let watcher = {
        let acc = Arc::clone(&acc);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            acc.set_interrupted(true).unwrap();
        })
    };
    let start = std::time::Instant::now();
    let e = loader.next_batch().unwrap_err();
    watcher.join().unwrap();
    assert_eq!(e.status(), Status::Cancelled, "{e}");
    assert!(
        start.elapsed() < Duration::from_millis(900),
        "{:?}",
        start.elapsed()
    );
    acc.set_interrupted(false).unwrap();
    for want in [0u8, 1] {
        let [x] = fields(loader.next_batch().unwrap().unwrap()).unwrap();
        assert_eq!(x.to_vec::<u8>().unwrap(), vec![want]);
    }
}
