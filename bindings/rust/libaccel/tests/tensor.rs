//! Tensors: every element type copied both ways, bad input as `Err`.

mod common;

use std::sync::Arc;

use libaccel::{Dtype, Status, Tensor};

fn round_trip<T: libaccel::Element + PartialEq + std::fmt::Debug>(values: &[T]) {
    let t = Tensor::from_slice(values, &[2, values.len() as i64 / 2]).unwrap();
    assert_eq!(t.dtype().unwrap(), T::DTYPE);
    assert_eq!(t.to_vec::<T>().unwrap(), values);
    let mut out = values.to_vec();
    t.copy_to(&mut out).unwrap();
    assert_eq!(out, values);
}

#[test]
fn tensors_copy_every_element_type() {
    round_trip(&[1.5f32, -2.0, 3.25, 4.0]);
    round_trip(&[1.5f64, -2.0]);
    round_trip(&[i64::MIN, 0, 7, i64::MAX]);
    round_trip(&[i32::MIN, i32::MAX]);
    round_trip(&[-3i16, 9]);
    round_trip(&[-3i8, 9]);
    round_trip(&[0u8, 255]);
    round_trip(&[true, false, false, true]);
    let half = Tensor::from_bytes(&[0x00, 0x3c, 0x00, 0xc0], Dtype::F16, &[2]).unwrap();
    assert_eq!(half.dtype().unwrap(), Dtype::F16);
    assert_eq!(half.to_bytes().unwrap(), vec![0x00, 0x3c, 0x00, 0xc0]);
    assert_eq!(Dtype::BF16.size(), 2);
    assert_eq!(Dtype::I64.size(), 8);

    let t = Tensor::from_slice(&[0.5f32; 24], &[2, 3, 4]).unwrap();
    assert_eq!(t.shape().unwrap(), vec![2, 3, 4]);
    assert_eq!(t.dim_count().unwrap(), 3);
    assert_eq!(t.element_count().unwrap(), 24);
    assert_eq!(t.data_size().unwrap(), 96);
    let s = Tensor::scalar(7i64).unwrap();
    assert_eq!(s.shape().unwrap(), Vec::<i64>::new());
    assert_eq!(s.item_i64().unwrap(), 7);
    assert_eq!(s.item_f64().unwrap(), 7.0);
    // Shared between threads: tensors are Send + Sync.
    let shared = Arc::new(t);
    let other = Arc::clone(&shared);
    let n = std::thread::spawn(move || other.element_count().unwrap())
        .join()
        .unwrap();
    assert_eq!(n, 24);
}

#[test]
fn bad_tensor_input_is_an_error() {
    let e = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[2, 2]).unwrap_err();
    assert!(
        matches!(e.status(), Status::InvalidArgument | Status::Shape),
        "{e}"
    );
    assert!(!e.message().is_empty());
    let e = Tensor::from_slice(&[1.0f32], &[-1]).unwrap_err();
    assert!(!e.message().is_empty());
    let t = Tensor::from_slice(&[1.0f32, 2.0], &[2]).unwrap();
    assert_eq!(t.to_vec::<i64>().unwrap_err().status(), Status::Dtype);
    assert_eq!(
        t.copy_to(&mut [0f32; 3]).unwrap_err().status(),
        Status::Shape
    );
    assert_eq!(t.item_f64().unwrap_err().status(), Status::Shape);
    let scalar = Tensor::scalar(1.5f32).unwrap();
    assert_eq!(scalar.item_i64().unwrap_err().status(), Status::Dtype);
    let too_many = vec![1i64; 17];
    assert!(Tensor::from_slice(&[1u8], &too_many).is_err());
}
