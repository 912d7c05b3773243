//! Text: ragged fields, padding, length grouping.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use accel::{
    fields, Accelerator, DataLoader, DataLoaderOptions, Dataset, Dtype, Field, Mask, Padding,
    PaddingSide, Status, Tensor,
};
use common::{next_values, one_accelerator};

/// A corpus of `lengths.len()` samples: sample i has the tokens 100 * i + j for j < lengths[i]
/// (a ragged i64 field) and the label i (an i64 scalar).
fn corpus(lengths: &[i64]) -> Dataset {
    let of_length = Arc::new(lengths.to_vec());
    let of_fill = Arc::clone(&of_length);
    Dataset::from_ragged_fn(
        lengths.len() as i64,
        &[Field::ragged(Dtype::I64, &[]), Field::new(Dtype::I64, &[])],
        move |i, out| {
            assert_eq!(out.len(), 2, "one entry per field");
            out[0] = of_length[i as usize];
            Ok(())
        },
        move |i, f| {
            let n = of_fill[i as usize];
            assert_eq!(f[0].len(), n as usize * 8, "sample {i}: length x one row");
            for (j, dst) in f[0].chunks_exact_mut(8).enumerate() {
                dst.copy_from_slice(&(100 * i + j as i64).to_ne_bytes());
            }
            f[1].copy_from_slice(&i.to_ne_bytes());
            Ok(())
        },
    )
    .unwrap()
}

#[test]
fn ragged_batches_are_padded_to_the_longest_with_masks() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let data = corpus(&[2, 0, 3, 1, 4]);
    assert_eq!(data.field_count().unwrap(), 2);
    assert!(Field::ragged(Dtype::I64, &[4]).is_ragged());
    assert_eq!(Field::ragged(Dtype::F32, &[4]).shape, [Field::RAGGED, 4]);
    for workers in [0, 2] {
        let options = DataLoaderOptions::new().batch_size(3).num_workers(workers);
        let mut loader = DataLoader::with(&acc, &data, options).unwrap();
        assert_eq!(loader.field_count(), 3, "tokens, label, the tokens' mask");
        let b = next_values(&mut loader);
        assert_eq!(b.len(), 3);
        assert_eq!(b[0], (vec![3, 3], vec![0, 1, 0, 0, 0, 0, 200, 201, 202]));
        assert_eq!(b[1], (vec![3], vec![0, 1, 2]));
        assert_eq!(b[2], (vec![3, 3], vec![1, 1, 0, 0, 0, 0, 1, 1, 1]));
        // The short last batch: padded to its own longest.
        let b = next_values(&mut loader);
        assert_eq!(b[0], (vec![2, 4], vec![300, 0, 0, 0, 400, 401, 402, 403]));
        assert_eq!(b[2], (vec![2, 4], vec![1, 0, 0, 0, 1, 1, 1, 1]));
        assert!(loader.next_batch().unwrap().is_none(), "workers {workers}");
    }

    // Left padding with -1 to a multiple of 4, and the lengths rather than the mask: every
    // ragged field through the options, one field through set_field_padding.
    let mut loader = DataLoader::with(&acc, &data, DataLoaderOptions::new().batch_size(3)).unwrap();
    let padding = Padding::new().pad_value(-1.0).pad_to_multiple_of(4);
    loader
        .set_options(DataLoaderOptions::new().padding(padding))
        .unwrap();
    let left = Padding::new()
        .padding_side(PaddingSide::Left)
        .mask(Mask::Lengths);
    loader.set_field_padding(0, left).unwrap();
    let b = next_values(&mut loader);
    assert_eq!(
        b[0],
        (
            vec![3, 4],
            vec![-1, -1, 0, 1, -1, -1, -1, -1, -1, 200, 201, 202]
        )
    );
    assert_eq!(b[2], (vec![3], vec![2, 0, 3]));

    // No mask: one field fewer; and back (the binding follows the library's field count).
    loader
        .set_options(DataLoaderOptions::new().padding(Padding::new().mask(Mask::None)))
        .unwrap();
    assert_eq!(loader.field_count(), 2);
    let b = next_values(&mut loader);
    assert_eq!(b.len(), 2);
    assert_eq!(b[1], (vec![3], vec![0, 1, 2]), "a new epoch after set");
    loader.set_field(0, "mask", Mask::AttentionMask).unwrap();
    assert_eq!(loader.field_count(), 3);
    let b = next_values(&mut loader);
    assert_eq!(b[2], (vec![3, 4], vec![0, 0, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1]));
    // The mask changed behind the binding's back, through the raw handle.
    let key = std::ffi::CString::new("mask").unwrap();
    let none = std::ffi::CString::new("none").unwrap();
    // SAFETY: a live handle and NUL-terminated strings.
    let status =
        unsafe { accel::sys::accel_dataloader_set(loader.as_raw(), key.as_ptr(), none.as_ptr()) };
    assert_eq!(status, accel::sys::ACCEL_OK);
    assert_eq!(next_values(&mut loader).len(), 2);
    let attention = std::ffi::CString::new("attention_mask").unwrap();
    // SAFETY: as above.
    let status = unsafe {
        accel::sys::accel_dataloader_set(loader.as_raw(), key.as_ptr(), attention.as_ptr())
    };
    assert_eq!(status, accel::sys::ACCEL_OK);
    assert_eq!(
        next_values(&mut loader).len(),
        3,
        "more fields than counted"
    );
    assert_eq!(loader.field_count(), 3);
}

#[test]
fn padding_options_and_ragged_declarations_are_checked() {
    let every_padding_option = Padding::new()
        .pad_value(0.5)
        .padding_side(PaddingSide::Right)
        .pad_to_multiple_of(8)
        .max_length(Some(16))
        .truncation(true)
        .mask(Mask::Lengths);
    assert_eq!(
        every_padding_option.pairs(),
        [
            ("pad_value", "0.5".to_string()),
            ("padding_side", "right".to_string()),
            ("pad_to_multiple_of", "8".to_string()),
            ("max_length", "16".to_string()),
            ("truncation", "true".to_string()),
            ("mask", "lengths".to_string()),
        ]
    );
    let options = DataLoaderOptions::new()
        .batch_size(2)
        .group_by_length(true)
        .padding(every_padding_option);
    assert_eq!(
        options.pairs().len(),
        8,
        "the padding's pairs after the others"
    );
    assert_eq!(options.pairs()[1], ("group_by_length", "true".to_string()));
    assert_eq!(Mask::default(), Mask::AttentionMask);
    assert_eq!(PaddingSide::default().to_string(), "right");

    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let data = corpus(&[1, 2]);
    let mut loader = DataLoader::with(&acc, &data, options).unwrap();
    assert_eq!(loader.field_count(), 3, "tokens, label, lengths");
    let e = loader.set_field_padding(1, Padding::new().pad_value(0.0));
    let e = e.unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("field 1 is not ragged"), "{e}");
    let e = loader.set_field(2, "pad_value", 0).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("out of range"), "{e}");
    let e = loader.set("padding_side", "centre").unwrap_err();
    assert!(e.message().contains("allowed: right, left"), "{e}");
    for bad in [
        Padding::new().pad_to_multiple_of(0),
        Padding::new().max_length(Some(0)),
        Padding::new().pad_value(f64::NAN),
    ] {
        let e = loader.set_field_padding(0, bad).unwrap_err();
        assert_eq!(e.status(), Status::InvalidArgument, "{bad:?}");
    }
    let e = loader.set_field(0, "pad_valu", 0).unwrap_err();
    assert!(e.message().contains("pad_valu"), "{e}");

    // Padding and grouping need a ragged field.
    let x = Tensor::from_slice(&[1i64, 2, 3], &[3]).unwrap();
    let fixed = Dataset::from_tensors(&[&x]).unwrap();
    let mut loader = DataLoader::new(&acc, &fixed).unwrap();
    for options in [
        DataLoaderOptions::new().group_by_length(true),
        DataLoaderOptions::new().padding(Padding::new().max_length(Some(4))),
    ] {
        let e = loader.set_options(options).unwrap_err();
        assert_eq!(e.status(), Status::InvalidArgument, "{options:?}");
        assert!(e.message().contains("this dataset has none"), "{e}");
    }
    // Ragged fields only through from_ragged_fn, and only their first dimension.
    let ragged = [Field::ragged(Dtype::I64, &[])];
    let e = Dataset::from_fn(2, &ragged, |_, _| Ok(())).unwrap_err();
    assert_eq!(e.status(), Status::Shape);
    assert!(e.message().contains("from_ragged_fn"), "{e}");
    let second = [Field::new(Dtype::I64, &[2, Field::RAGGED])];
    let e = Dataset::from_ragged_fn(2, &second, |_, _| Ok(()), |_, _| Ok(())).unwrap_err();
    assert_eq!(e.status(), Status::Shape, "{e}");
    // Without a ragged field it is a dataset as from_fn makes.
    let plain = Dataset::from_ragged_fn(
        3,
        &[Field::new(Dtype::U8, &[])],
        |_, _| unreachable!("no ragged field: no lengths"),
        |i, f| {
            f[0][0] = i as u8;
            Ok(())
        },
    )
    .unwrap();
    let mut loader =
        DataLoader::with(&acc, &plain, DataLoaderOptions::new().batch_size(3)).unwrap();
    let [only] = fields(loader.next_batch().unwrap().unwrap()).unwrap();
    assert_eq!(only.to_vec::<u8>().unwrap(), [0, 1, 2]);
}

#[test]
fn above_max_length_is_a_shape_error_naming_the_sample_unless_truncated() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let data = corpus(&[2, 5, 1]);
    let options = DataLoaderOptions::new()
        .batch_size(1)
        .padding(Padding::new().max_length(Some(3)));
    let mut loader = DataLoader::with(&acc, &data, options).unwrap();
    let epoch: Vec<_> = loader.iter().collect();
    assert_eq!(epoch.len(), 2, "the iterator ends at the error");
    let first = epoch[0].as_ref().unwrap();
    assert_eq!(first[0].to_vec::<i64>().unwrap(), [0, 1]);
    let e = epoch[1].as_ref().unwrap_err();
    assert_eq!(e.status(), Status::Shape);
    assert!(
        e.message()
            .contains("sample 1, field 0 has length 5, above max_length 3"),
        "{e}"
    );
    // Nothing lost: the epoch starts again from its first sample.
    assert_eq!(next_values(&mut loader)[0].1, [0, 1]);

    let truncate = DataLoaderOptions::new()
        .batch_size(3)
        .padding(Padding::new().truncation(true));
    loader.set_options(truncate).unwrap();
    let b = next_values(&mut loader);
    assert_eq!(b[0], (vec![3, 3], vec![0, 1, 0, 100, 101, 102, 200, 0, 0]));
    assert_eq!(b[2], (vec![3, 3], vec![1, 1, 0, 1, 1, 1, 1, 0, 0]));
    let left = Padding::new().padding_side(PaddingSide::Left);
    loader.set_field_padding(0, left).unwrap();
    let b = next_values(&mut loader);
    assert_eq!(b[0].1, [0, 0, 1, 100, 101, 102, 0, 0, 200]);
    // No limit again: the longest sample whole.
    let unlimited = Padding::new().max_length(None);
    loader.set_field_padding(0, unlimited).unwrap();
    let b = next_values(&mut loader);
    assert_eq!(b[0].0, [3, 5]);
    assert_eq!(b[2].1, [0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1]);
}

#[test]
fn length_closure_failures_come_back_from_next() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let spec = [Field::ragged(Dtype::F32, &[2])];
    let fill = |_: i64, f: &mut [&mut [u8]]| -> Result<(), accel::BoxError> {
        f[0].fill(0);
        Ok(())
    };
    let failing = Dataset::from_ragged_fn(
        20,
        &spec,
        |i, l| {
            if i == 13 {
                return Err(format!("sample {i} has no tokenizer").into());
            }
            l[0] = i % 3;
            Ok(())
        },
        fill,
    )
    .unwrap();
    let panicking = Dataset::from_ragged_fn(
        20,
        &spec,
        |i, l| {
            if i == 9 {
                panic!("length of {i} exploded");
            }
            l[0] = 1;
            Ok(())
        },
        fill,
    )
    .unwrap();
    let negative = Dataset::from_ragged_fn(
        20,
        &spec,
        |i, l| {
            l[0] = if i == 4 { -4 } else { 2 };
            Ok(())
        },
        fill,
    )
    .unwrap();
    for workers in [0, 2] {
        let options = DataLoaderOptions::new().batch_size(5).num_workers(workers);
        let mut loader = DataLoader::with(&acc, &failing, options).unwrap();
        let results: Vec<_> = loader.iter().collect();
        let e = results.last().unwrap().as_ref().unwrap_err();
        assert_eq!(e.status(), Status::Callback);
        assert!(e.message().contains("sample 13 has no tokenizer"), "{e}");
        assert_eq!(
            results.len(),
            3,
            "batches 0..5 and 5..10, then 10..15 fails"
        );
        let b = loader.next_batch().unwrap().unwrap();
        assert_eq!(b[0].shape().unwrap(), [5, 2, 2], "the epoch starts again");

        let mut loader = DataLoader::with(&acc, &panicking, options).unwrap();
        let mut good = 0;
        let panic = catch_unwind(AssertUnwindSafe(|| {
            for batch in &mut loader {
                batch.unwrap();
                good += 1;
            }
        }))
        .unwrap_err();
        let text = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert_eq!(text, "length of 9 exploded", "workers {workers}");
        assert_eq!(good, 1);

        let mut loader = DataLoader::with(&acc, &negative, options).unwrap();
        let e = loader.next_batch().unwrap_err();
        assert_eq!(e.status(), Status::Shape);
        assert!(
            e.message()
                .contains("sample 4, field 0: the length callback reported -4"),
            "{e}"
        );
    }
    // Grouping asks every length before the first batch: the failure comes back from there.
    let options = DataLoaderOptions::new().batch_size(5).group_by_length(true);
    let mut loader = DataLoader::with(&acc, &failing, options).unwrap();
    let e = loader.next_batch().unwrap_err();
    assert_eq!(e.status(), Status::Callback);
    assert!(e.message().contains("sample 13 has no tokenizer"), "{e}");
}

#[test]
fn group_by_length_gives_every_sample_once_longest_batch_first() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let lengths: Vec<i64> = (0..64).map(|i| (i * 37) % 23).collect();
    let data = corpus(&lengths);
    let options = DataLoaderOptions::new()
        .batch_size(4)
        .shuffle(true)
        .seed(5)
        .num_workers(2)
        .group_by_length(true)
        .padding(Padding::new().mask(Mask::None));
    let mut loader = DataLoader::with(&acc, &data, options).unwrap();
    let real: i64 = lengths.iter().sum();
    for epoch in 0..2 {
        let (mut seen, mut padded_tokens, mut first_width) = (Vec::new(), 0, None);
        for batch in &mut loader {
            let [tokens, labels] = fields(batch.unwrap()).unwrap();
            let shape = tokens.shape().unwrap();
            first_width.get_or_insert(shape[1]);
            padded_tokens += shape[0] * shape[1];
            seen.extend(labels.to_vec::<i64>().unwrap());
        }
        assert_eq!(
            first_width,
            Some(22),
            "epoch {epoch}: the longest batch first"
        );
        seen.sort_unstable();
        assert_eq!(seen, (0..64).collect::<Vec<_>>(), "epoch {epoch}");
        // Megabatches sorted by length pad far less than a random order would.
        assert!(
            padded_tokens < real + real / 4,
            "epoch {epoch}: padded {padded_tokens} for {real}"
        );
    }
}
