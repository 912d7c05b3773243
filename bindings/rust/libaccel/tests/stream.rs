//! Streams: datasets of unknown length, read in order.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use accel::{
    fields, Accelerator, DataLoader, DataLoaderOptions, Dataset, Dtype, Field, Padding, Sample,
    Status, Tensor,
};
use common::{next_values, one_accelerator, temp_dir};

/// Every call of a stream's closure: (epoch, position).
type Calls = Arc<Mutex<Vec<(i64, i64)>>>;

/// A stream of `lengths.len()` samples as `corpus` has them (tokens 100 * i + j, label i), that
/// records its calls.
fn stream_corpus(lengths: &[i64]) -> (Dataset, Calls) {
    let lengths = lengths.to_vec();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&calls);
    let data = Dataset::from_stream(
        &[Field::ragged(Dtype::I64, &[]), Field::new(Dtype::I64, &[])],
        move |epoch, i| {
            log.lock().unwrap().push((epoch, i));
            let Some(&n) = lengths.get(i as usize) else {
                return Ok(None);
            };
            let tokens: Vec<i64> = (0..n).map(|j| 100 * i + j).collect();
            Ok(Some(Sample::new().with(0, &tokens).with(1, &[i])))
        },
    )
    .unwrap();
    (data, calls)
}

/// The labels (field 1) of a batch.
fn labels_of(batch: accel::Batch) -> Vec<i64> {
    batch[1].to_vec::<i64>().unwrap()
}

#[test]
fn a_stream_pads_ragged_fields_and_starts_each_epoch_at_position_zero() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let (data, calls) = stream_corpus(&[2, 0, 3, 1, 4]);
    assert_eq!(
        data.sample_count().unwrap(),
        None,
        "a stream's length is unknown"
    );
    assert_eq!(data.field_count().unwrap(), 2);
    for workers in [0, 2] {
        let options = DataLoaderOptions::new().batch_size(3).num_workers(workers);
        let mut loader = DataLoader::with(&acc, &data, options).unwrap();
        assert_eq!(loader.batch_count().unwrap(), None);
        assert_eq!(loader.iter().size_hint(), (0, None));
        assert_eq!(loader.field_count(), 3, "tokens, label, the tokens' mask");
        calls.lock().unwrap().clear();
        for epoch in 0..2 {
            let b = next_values(&mut loader);
            assert_eq!(b[0], (vec![3, 3], vec![0, 1, 0, 0, 0, 0, 200, 201, 202]));
            assert_eq!(b[1], (vec![3], vec![0, 1, 2]));
            assert_eq!(b[2], (vec![3, 3], vec![1, 1, 0, 0, 0, 0, 1, 1, 1]));
            // The short last batch: padded to its own longest.
            let b = next_values(&mut loader);
            assert_eq!(b[0], (vec![2, 4], vec![300, 0, 0, 0, 400, 401, 402, 403]));
            assert_eq!(b[1], (vec![2], vec![3, 4]));
            assert_eq!(b[2], (vec![2, 4], vec![1, 0, 0, 0, 1, 1, 1, 1]));
            assert!(loader.end_of_epoch().unwrap());
            assert_eq!(loader.remainder().unwrap(), 2, "known at the last batch");
            assert!(
                loader.next_batch().unwrap().is_none(),
                "the end of the stream"
            );
            assert_eq!(loader.epoch().unwrap(), epoch + 1);
        }
        // Each epoch read from position 0 to the end (position 5 said there was no more).
        let want: Vec<(i64, i64)> = (0..2).flat_map(|e| (0..6).map(move |i| (e, i))).collect();
        assert_eq!(*calls.lock().unwrap(), want, "workers {workers}");
    }

    // Resuming at a saved cursor reads the stream again from position 0 and drops what is before.
    let mut loader = DataLoader::with(&acc, &data, DataLoaderOptions::new().batch_size(2)).unwrap();
    loader.set_position(0, 2).unwrap();
    calls.lock().unwrap().clear();
    assert_eq!(labels_of(loader.next_batch().unwrap().unwrap()), [2, 3]);
    assert_eq!(calls.lock().unwrap()[..4], [(0, 0), (0, 1), (0, 2), (0, 3)]);
    assert_eq!(loader.position().unwrap(), (0, 4));

    // An empty stream: an epoch with no batch.
    let empty = Dataset::from_stream(&[Field::new(Dtype::U8, &[])], |_, _| Ok(None)).unwrap();
    let mut loader = DataLoader::new(&acc, &empty).unwrap();
    assert!(loader.next_batch().unwrap().is_none());
    assert_eq!(loader.iter().count(), 0);
}

#[test]
fn a_failing_stream_closure_keeps_the_position_and_the_next_call_gives_the_failed_batch() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let failed = Arc::new(AtomicBool::new(false));
    let panicked = Arc::new(AtomicBool::new(false));
    let (fail_once, panic_once) = (Arc::clone(&failed), Arc::clone(&panicked));
    let data = Dataset::from_stream(&[Field::new(Dtype::I64, &[])], move |_, i| {
        if i == 5 && !fail_once.swap(true, Ordering::SeqCst) {
            return Err(format!("sample {i} is unreadable").into());
        }
        if i == 7 && !panic_once.swap(true, Ordering::SeqCst) {
            panic!("sample {i} exploded");
        }
        Ok((i < 10).then(|| Sample::new().with(0, &[i])))
    })
    .unwrap();
    let first = |b: accel::Batch| b[0].to_vec::<i64>().unwrap();
    for workers in [0, 2] {
        failed.store(false, Ordering::SeqCst);
        panicked.store(false, Ordering::SeqCst);
        let options = DataLoaderOptions::new().batch_size(2).num_workers(workers);
        let mut loader = DataLoader::with(&acc, &data, options).unwrap();
        let results: Vec<_> = loader.iter().collect();
        assert_eq!(
            results.len(),
            3,
            "workers {workers}: two batches, then the error"
        );
        let e = results[2].as_ref().unwrap_err();
        assert_eq!(e.status(), Status::Callback, "{e}");
        assert!(e.message().contains("sample 5 is unreadable"), "{e}");
        assert_eq!(loader.position().unwrap(), (0, 4), "the batches returned");
        // The next call reads the stream again up to there and gives the batch that failed.
        assert_eq!(first(loader.next_batch().unwrap().unwrap()), [4, 5]);
        let panic = catch_unwind(AssertUnwindSafe(|| loader.next_batch())).unwrap_err();
        let text = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert_eq!(text, "sample 7 exploded", "workers {workers}");
        assert_eq!(loader.position().unwrap(), (0, 6));
        let rest: Vec<_> = loader.iter().map(|b| first(b.unwrap())).collect();
        assert_eq!(rest, [vec![6, 7], vec![8, 9]], "workers {workers}");
        assert_eq!(loader.epoch().unwrap(), 1);
    }

    // From an iterator per epoch: an Err item fails the same way, and `open` runs again.
    let opened = Arc::new(AtomicUsize::new(0));
    let opens = Arc::clone(&opened);
    let fail_once = Arc::new(AtomicBool::new(false));
    let data = Dataset::from_stream_iter(&[Field::new(Dtype::I32, &[2])], move |epoch| {
        opens.fetch_add(1, Ordering::SeqCst);
        let fail = Arc::clone(&fail_once);
        Ok((0..5i32).map(move |i| {
            if i == 3 && !fail.swap(true, Ordering::SeqCst) {
                return Err("row 3 is missing".into());
            }
            Ok(Sample::new().with(0, &[i, epoch as i32]))
        }))
    })
    .unwrap();
    let mut loader = DataLoader::with(&acc, &data, DataLoaderOptions::new().batch_size(2)).unwrap();
    let rows = |b: accel::Batch| b[0].to_vec::<i32>().unwrap();
    assert_eq!(rows(loader.next_batch().unwrap().unwrap()), [0, 0, 1, 0]);
    let e = loader.next_batch().unwrap_err();
    assert_eq!(e.status(), Status::Callback);
    assert!(e.message().contains("row 3 is missing"), "{e}");
    assert_eq!(rows(loader.next_batch().unwrap().unwrap()), [2, 0, 3, 0]);
    assert_eq!(rows(loader.next_batch().unwrap().unwrap()), [4, 0]);
    assert!(loader.next_batch().unwrap().is_none());
    assert_eq!(
        opened.load(Ordering::SeqCst),
        2,
        "opened again after the failure"
    );
    assert_eq!(
        rows(loader.next_batch().unwrap().unwrap()),
        [0, 1, 1, 1],
        "epoch 1"
    );
    assert_eq!(opened.load(Ordering::SeqCst), 3);
}

#[test]
fn text_lines_are_a_stream_of_ragged_bytes() {
    let _one = one_accelerator();
    let dir = temp_dir("text-lines");
    let path = dir.join("corpus.txt");
    std::fs::write(&path, "hello\nworld\r\n\nend").unwrap();
    let text = Dataset::from_text_lines(&path).unwrap();
    assert_eq!(text.sample_count().unwrap(), None);
    assert_eq!(text.field_count().unwrap(), 1);
    let acc = Accelerator::new().unwrap();
    let options = DataLoaderOptions::new()
        .batch_size(2)
        .padding(Padding::new().pad_value(b'.' as f64));
    let mut loader = DataLoader::with(&acc, &text, options).unwrap();
    for _ in 0..2 {
        let mut lines = Vec::new();
        for batch in &mut loader {
            let [bytes, mask] = fields(batch.unwrap()).unwrap();
            assert_eq!(bytes.dtype().unwrap(), Dtype::U8);
            let width = bytes.shape().unwrap()[1] as usize;
            let (bytes, mask) = (bytes.to_vec::<u8>().unwrap(), mask.to_vec::<i64>().unwrap());
            for (row, m) in bytes.chunks(width).zip(mask.chunks(width)) {
                let n = m.iter().sum::<i64>() as usize;
                assert!(row[n..].iter().all(|&b| b == b'.'), "{row:?}");
                lines.push(String::from_utf8(row.to_vec()).unwrap());
            }
        }
        assert_eq!(lines, ["hello", "world", "...", "end"], "every epoch");
    }
    let missing = dir.join("missing.txt");
    let e = Dataset::from_text_lines(&missing).unwrap_err();
    assert_eq!(e.status(), Status::Io);
    assert!(e.message().contains("missing.txt"), "{e}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn stream_samples_and_options_are_checked() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let spec = [Field::ragged(Dtype::F32, &[2]), Field::new(Dtype::I64, &[])];
    fn good() -> Sample {
        Sample::new().with(0, &[1.0f32, 2.0]).with(1, &[7i64])
    }
    let bad = |at: i64, sample: fn() -> Sample| {
        let data = Dataset::from_stream(&spec, move |_, i| {
            Ok((i < 4).then(|| if i == at { sample() } else { good() }))
        })
        .unwrap();
        let mut loader =
            DataLoader::with(&acc, &data, DataLoaderOptions::new().batch_size(2)).unwrap();
        let e = loader.iter().find_map(Result::err).expect("an error");
        (e.status(), e.message().to_string())
    };
    assert_eq!(good().bytes(1), Some(&7i64.to_ne_bytes()[..]));
    // A fixed field takes exactly one sample.
    let (status, message) = bad(2, || Sample::new().with(0, &[0f32; 2]).with(1, &[1i64, 2]));
    assert_eq!(status, Status::Shape, "{message}");
    assert!(
        message.contains("sample 2, field 1: 16 bytes given"),
        "{message}"
    );
    // A ragged field takes whole rows (of 2 floats here).
    let (status, message) = bad(3, || Sample::new().with(0, &[0f32; 3]).with(1, &[1i64]));
    assert_eq!(status, Status::Shape, "{message}");
    assert!(message.contains("sample 3, field 0: 12 bytes given, not a whole number of rows"));
    // Typed values of another element type; raw bytes are taken as they are.
    let (status, message) = bad(1, || Sample::new().with(0, &[0f32; 2]).with(1, &[1i32, 0]));
    assert_eq!(status, Status::Dtype, "{message}");
    assert!(
        message.contains("sample 1, field 1: I32 values given"),
        "{message}"
    );
    // A field left unset, and one out of range.
    let (status, message) = bad(0, || Sample::new().with(0, &[0f32; 2]));
    assert_eq!(status, Status::Callback, "{message}");
    assert!(message.contains("without writing field 1"), "{message}");
    let (status, message) = bad(0, || good().with(2, &[0u8]));
    assert_eq!(status, Status::InvalidArgument, "{message}");
    assert!(message.contains("field 2 is out of range"), "{message}");
    // An empty ragged field and raw bytes are fine.
    let data = Dataset::from_stream(&spec, |_, i| {
        Ok((i < 2).then(|| {
            Sample::new()
                .with(0, &[0f32; 0])
                .with_bytes(1, i.to_ne_bytes())
        }))
    })
    .unwrap();
    let mut loader = DataLoader::with(&acc, &data, DataLoaderOptions::new().batch_size(2)).unwrap();
    let [rows, labels, mask] = fields(loader.next_batch().unwrap().unwrap()).unwrap();
    assert_eq!(rows.shape().unwrap(), [2, 0, 2]);
    assert_eq!(labels.to_vec::<i64>().unwrap(), [0, 1]);
    assert_eq!(mask.shape().unwrap(), [2, 0]);

    // Options: dispatch_batches, and no length grouping over a stream.
    let options = DataLoaderOptions::new().dispatch_batches(false);
    assert_eq!(options.pairs(), [("dispatch_batches", "false".to_string())]);
    loader
        .set_options(options.dispatch_batches(true).batch_size(1))
        .unwrap();
    assert_eq!(loader.iter().count(), 2);
    let e = loader
        .set_options(DataLoaderOptions::new().group_by_length(true))
        .unwrap_err();
    assert_eq!(e.status(), Status::Unsupported, "{e}");
    let x = Tensor::from_slice(&[1i64, 2, 3], &[3]).unwrap();
    let sized = Dataset::from_tensors(&[&x]).unwrap();
    let mut loader = DataLoader::new(&acc, &sized).unwrap();
    loader
        .set_options(DataLoaderOptions::new().dispatch_batches(false))
        .unwrap();
    let e = loader
        .set_options(DataLoaderOptions::new().dispatch_batches(true))
        .unwrap_err();
    assert_eq!(e.status(), Status::Unsupported, "{e}");
}
