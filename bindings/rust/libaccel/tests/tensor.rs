//! Tensors: every element type copied both ways, bad input as `Err`.

mod common;

use std::sync::Arc;

use accel::{Dtype, Status, Tensor};

fn round_trip<T: accel::Element + PartialEq + std::fmt::Debug>(values: &[T]) {
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
    assert_eq!(s.item::<i64>().unwrap(), 7);
    assert_eq!(s.item::<f64>().unwrap(), 7.0);
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
    assert_eq!(t.item::<f64>().unwrap_err().status(), Status::Shape);
    let scalar = Tensor::scalar(1.5f32).unwrap();
    assert_eq!(scalar.item::<i64>().unwrap_err().status(), Status::Dtype);
    let too_many = vec![1i64; 17];
    assert!(Tensor::from_slice(&[1u8], &too_many).is_err());
}

/// item::<T>() reads each Scalar type as PyTorch's item() does, and TryFrom<&Tensor> is the same
/// call; what a type cannot hold is a Dtype error, not a wrapped value.
#[test]
fn item_reads_each_scalar_type() {
    let loss = Tensor::scalar(0.25f32).unwrap();
    assert_eq!(loss.item::<f64>().unwrap(), 0.25);
    assert_eq!(loss.item::<f32>().unwrap(), 0.25f32);
    assert!(loss.item::<bool>().unwrap());
    assert_eq!(f32::try_from(&loss).unwrap(), 0.25f32);
    let count = Tensor::scalar(300i64).unwrap();
    assert_eq!(count.item::<i64>().unwrap(), 300);
    assert_eq!(count.item::<i32>().unwrap(), 300);
    assert_eq!(count.item::<i16>().unwrap(), 300);
    assert_eq!(count.item::<f64>().unwrap(), 300.0);
    assert_eq!(i64::try_from(&count).unwrap(), 300);
    assert_eq!(f64::try_from(&count).unwrap(), 300.0);
    let e = count.item::<u8>().unwrap_err();
    assert_eq!(e.status(), Status::Dtype);
    assert!(e.message().contains("300 does not fit in u8"), "{e}");
    assert_eq!(count.item::<i8>().unwrap_err().status(), Status::Dtype);
    let big = Tensor::scalar(i64::from(i32::MAX) + 1).unwrap();
    assert_eq!(big.item::<i32>().unwrap_err().status(), Status::Dtype);
    assert_eq!(Tensor::scalar(-3i32).unwrap().item::<i8>().unwrap(), -3);
    assert!(!Tensor::scalar(false).unwrap().item::<bool>().unwrap());
    assert!(Tensor::scalar(true).unwrap().item::<bool>().unwrap());
    assert_eq!(Tensor::scalar(true).unwrap().item::<i64>().unwrap(), 1);
    assert!(!Tensor::scalar(0i64).unwrap().item::<bool>().unwrap());
    assert_eq!(
        Tensor::scalar(2.5f64).unwrap().item::<f32>().unwrap(),
        2.5f32
    );
    assert_eq!(i32::try_from(&loss).unwrap_err().status(), Status::Dtype);
    let two = Tensor::from_slice(&[1i64, 2], &[2]).unwrap();
    assert_eq!(two.item::<bool>().unwrap_err().status(), Status::Shape);
    assert_eq!(i64::try_from(&two).unwrap_err().status(), Status::Shape);
}
