//! Tensors: element types, copies from and to Rust slices, model outputs.

use std::ffi::c_void;
use std::mem::size_of;

use libaccel_sys as sys;

use crate::error::{check, Error, Result, Status};
use crate::ffi::{ensure_supported_library, make, owned_handle, query};

/// An element type (`accel_dtype`).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// 32-bit float (`f32`).
    F32,
    /// 64-bit float (`f64`).
    F64,
    /// IEEE half precision (no Rust type: use [`Tensor::from_bytes`]).
    F16,
    /// bfloat16 (no Rust type: use [`Tensor::from_bytes`]).
    BF16,
    /// `i64`.
    I64,
    /// `i32`.
    I32,
    /// `i16`.
    I16,
    /// `i8`.
    I8,
    /// `u8`.
    U8,
    /// `bool` (one byte, 0 or 1).
    Bool,
}

impl Dtype {
    /// The raw `accel_dtype` value.
    pub fn to_raw(self) -> sys::accel_dtype {
        match self {
            Dtype::F32 => sys::ACCEL_DTYPE_F32,
            Dtype::F64 => sys::ACCEL_DTYPE_F64,
            Dtype::F16 => sys::ACCEL_DTYPE_F16,
            Dtype::BF16 => sys::ACCEL_DTYPE_BF16,
            Dtype::I64 => sys::ACCEL_DTYPE_I64,
            Dtype::I32 => sys::ACCEL_DTYPE_I32,
            Dtype::I16 => sys::ACCEL_DTYPE_I16,
            Dtype::I8 => sys::ACCEL_DTYPE_I8,
            Dtype::U8 => sys::ACCEL_DTYPE_U8,
            Dtype::Bool => sys::ACCEL_DTYPE_BOOL,
        }
    }

    /// The dtype of a raw value, `None` for a value that is not one.
    pub fn from_raw(raw: sys::accel_dtype) -> Option<Dtype> {
        Some(match raw {
            sys::ACCEL_DTYPE_F32 => Dtype::F32,
            sys::ACCEL_DTYPE_F64 => Dtype::F64,
            sys::ACCEL_DTYPE_F16 => Dtype::F16,
            sys::ACCEL_DTYPE_BF16 => Dtype::BF16,
            sys::ACCEL_DTYPE_I64 => Dtype::I64,
            sys::ACCEL_DTYPE_I32 => Dtype::I32,
            sys::ACCEL_DTYPE_I16 => Dtype::I16,
            sys::ACCEL_DTYPE_I8 => Dtype::I8,
            sys::ACCEL_DTYPE_U8 => Dtype::U8,
            sys::ACCEL_DTYPE_BOOL => Dtype::Bool,
            _ => return None,
        })
    }

    /// Size of one element in bytes (as the library counts it).
    pub fn size(self) -> usize {
        // SAFETY: a pure function of its argument.
        unsafe { sys::accel_dtype_size(self.to_raw()) }
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A Rust type that is exactly one tensor element type: `f32`, `f64`, `i64`, `i32`, `i16`, `i8`,
/// `u8` and `bool`. Sealed: the mapping is the crate's.
pub trait Element: sealed::Sealed + Copy + Send + Sync + 'static {
    /// The tensor element type this Rust type is.
    const DTYPE: Dtype;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: Dtype = Dtype::$d;
        }
    )*};
}
element!(f32 => F32, f64 => F64, i64 => I64, i32 => I32, i16 => I16, i8 => I8, u8 => U8, bool => Bool);

/// A Rust number [`Tensor::item`] reads a one-element tensor as: `f64`, `f32`, `i64`, `i32`,
/// `i16`, `i8`, `u8` or `bool`. Sealed.
///
/// As PyTorch's `item()`: `f64` and `f32` read any element type (an integer as the nearest
/// float); the integer types read integer and bool tensors (a floating one is [`Status::Dtype`],
/// as is a value the type cannot hold); `bool` is true for a nonzero value, as `bool(t)` is.
pub trait Scalar: sealed::Sealed + Sized {
    #[doc(hidden)]
    fn read(tensor: &Tensor) -> Result<Self>;
}

impl Scalar for f64 {
    #[inline]
    fn read(tensor: &Tensor) -> Result<f64> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_tensor_item_f64(tensor.as_raw(), out) })
    }
}

impl Scalar for f32 {
    #[inline]
    fn read(tensor: &Tensor) -> Result<f32> {
        // The nearest f32 (exact for an f32 tensor, whose value an f64 holds exactly).
        f64::read(tensor).map(|v| v as f32)
    }
}

impl Scalar for i64 {
    #[inline]
    fn read(tensor: &Tensor) -> Result<i64> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_tensor_item_i64(tensor.as_raw(), out) })
    }
}

impl Scalar for bool {
    #[inline]
    fn read(tensor: &Tensor) -> Result<bool> {
        // Every nonzero integer stays nonzero as an f64, and NaN is true as in PyTorch.
        f64::read(tensor).map(|v| v != 0.0)
    }
}

// The narrower integers: the i64 value, refused when it does not fit.
macro_rules! narrow_scalar {
    ($($t:ty),*) => {$(
        impl Scalar for $t {
            #[inline]
            fn read(tensor: &Tensor) -> Result<$t> {
                let value = i64::read(tensor)?;
                <$t>::try_from(value).map_err(|_| {
                    Error::new(
                        Status::Dtype,
                        format!("the value {value} does not fit in {}", stringify!($t)),
                    )
                })
            }
        }
    )*};
}
narrow_scalar!(i32, i16, i8, u8);

// `f64::try_from(&loss)?`: the conversion of std's habit, for each Scalar type.
macro_rules! try_from_tensor {
    ($($t:ty),*) => {$(
        impl TryFrom<&Tensor> for $t {
            type Error = Error;
            /// [`Tensor::item`] as a conversion.
            fn try_from(tensor: &Tensor) -> Result<$t> {
                tensor.item()
            }
        }
    )*};
}
try_from_tensor!(f64, f32, i64, i32, i16, i8, u8, bool);

owned_handle!(
    /// A tensor (a LibTorch tensor underneath, CPU or device).
    ///
    /// Made by copying a slice, returned by models, collectives and dataloaders; read back by
    /// copying into a `Vec` or slice. Row-major: the last dimension varies fastest. No function
    /// changes a tensor after it is made, so any calls may run at once from several threads.
    ///
    /// ```
    /// use accel::Tensor;
    /// let t = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
    /// assert_eq!(t.shape()?, vec![2, 3]);
    /// assert_eq!(t.to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    /// assert!(t.to_vec::<i64>().is_err()); // the element type must match
    /// # Ok::<(), accel::Error>(())
    /// ```
    Tensor,
    sys::accel_tensor,
    sys::accel_tensor_free
);

impl Tensor {
    /// A tensor of `shape` holding a copy of `data` (row-major). The element count must equal the
    /// product of `shape` (`Shape` error otherwise); an empty shape makes a scalar.
    pub fn from_slice<T: Element>(data: &[T], shape: &[i64]) -> Result<Tensor> {
        // SAFETY: the bytes of a slice of an Element type (plain data, no padding).
        let bytes = unsafe {
            std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data))
        };
        Tensor::from_bytes(bytes, T::DTYPE, shape)
    }

    /// A one-element tensor with no dimensions.
    pub fn scalar<T: Element>(value: T) -> Result<Tensor> {
        Tensor::from_slice(&[value], &[])
    }

    /// A tensor of `dtype` and `shape` from raw bytes (for `F16`/`BF16`, or data already in
    /// bytes). `data.len()` must be the element count times `dtype.size()`.
    pub fn from_bytes(data: &[u8], dtype: Dtype, shape: &[i64]) -> Result<Tensor> {
        ensure_supported_library()?;
        let shape_ptr = if shape.is_empty() {
            std::ptr::null()
        } else {
            shape.as_ptr()
        };
        // SAFETY: `data` and `shape` are valid for their lengths; the library copies both.
        let raw = make(|out| unsafe {
            sys::accel_tensor_from_data(
                data.as_ptr().cast(),
                data.len(),
                dtype.to_raw(),
                shape_ptr,
                shape.len(),
                out,
            )
        })?;
        // SAFETY: a new handle nothing else owns.
        Ok(unsafe { Tensor::from_raw(raw) }.expect("non-null"))
    }

    /// A copy of the elements, row-major. `T` must be the tensor's element type (`Dtype` error
    /// otherwise). One copy, straight into the vector.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.expect_dtype(T::DTYPE)?;
        let size = self.data_size()?;
        let count = size / size_of::<T>();
        let mut out: Vec<T> = Vec::with_capacity(count);
        let written = self.copy_raw(out.as_mut_ptr().cast(), count * size_of::<T>())?;
        // SAFETY: the library wrote `written` bytes of T elements into the spare capacity.
        unsafe { out.set_len(written / size_of::<T>()) };
        Ok(out)
    }

    /// Copies the elements into `out`, whose length must be the element count.
    pub fn copy_to<T: Element>(&self, out: &mut [T]) -> Result<()> {
        self.expect_dtype(T::DTYPE)?;
        let need = self.data_size()?;
        if need != std::mem::size_of_val(out) {
            return Err(Error::new(
                Status::Shape,
                format!(
                    "the tensor has {} elements, the slice {}",
                    need / size_of::<T>(),
                    out.len()
                ),
            ));
        }
        self.copy_raw(out.as_mut_ptr().cast(), need).map(|_| ())
    }

    /// A copy of the elements as bytes, in the tensor's own dtype.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let size = self.data_size()?;
        let mut out: Vec<u8> = Vec::with_capacity(size);
        let written = self.copy_raw(out.as_mut_ptr().cast(), size)?;
        // SAFETY: the library wrote `written` bytes into the spare capacity.
        unsafe { out.set_len(written) };
        Ok(out)
    }

    fn copy_raw(&self, buf: *mut c_void, capacity: usize) -> Result<usize> {
        let mut written = 0usize;
        // SAFETY: `buf` has room for `capacity` bytes.
        check(unsafe { sys::accel_tensor_to_data(self.as_raw(), buf, capacity, &mut written) })?;
        Ok(written)
    }

    fn expect_dtype(&self, wanted: Dtype) -> Result<()> {
        let dtype = self.dtype()?;
        if dtype == wanted {
            Ok(())
        } else {
            Err(Error::new(
                Status::Dtype,
                format!("the tensor's elements are {dtype:?}, not {wanted:?}"),
            ))
        }
    }

    /// The shape (empty for a scalar).
    pub fn shape(&self) -> Result<Vec<i64>> {
        let mut shape = [0i64; sys::ACCEL_MAX_DIMS];
        let mut count = 0usize;
        // SAFETY: `shape` holds ACCEL_MAX_DIMS elements, the most a tensor may have.
        check(unsafe {
            sys::accel_tensor_shape(self.as_raw(), shape.as_mut_ptr(), shape.len(), &mut count)
        })?;
        Ok(shape[..count].to_vec())
    }

    // The one-number queries are #[inline]: across crates a call would otherwise cost almost as
    // much again as the C call (examples/calls_bench.rs, query_ns).

    /// The number of dimensions (0 for a scalar).
    #[inline]
    pub fn dim_count(&self) -> Result<usize> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_tensor_dim_count(self.as_raw(), out) })
    }

    /// The element type. A LibTorch type with no [`Dtype`] is a `Dtype` error.
    pub fn dtype(&self) -> Result<Dtype> {
        // SAFETY: live handle, valid out pointer.
        let raw = query(|out| unsafe { sys::accel_tensor_dtype(self.as_raw(), out) })?;
        Dtype::from_raw(raw)
            .ok_or_else(|| Error::new(Status::Dtype, format!("unknown dtype value {raw}")))
    }

    /// The number of elements.
    #[inline]
    pub fn element_count(&self) -> Result<i64> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_tensor_element_count(self.as_raw(), out) })
    }

    /// The size of the elements in bytes.
    #[inline]
    pub fn data_size(&self) -> Result<usize> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_tensor_data_size(self.as_raw(), out) })
    }

    /// The value of a one-element tensor as `T` (PyTorch's `item()`): `loss.item::<f64>()`, or
    /// `let correct: i64 = hits.item()?`. What each [`Scalar`] type reads is said there; more
    /// than one element is [`Status::Shape`]. `T::try_from(&tensor)` is the same call.
    ///
    /// ```
    /// use accel::Tensor;
    /// let loss = Tensor::scalar(0.25f32)?;
    /// assert_eq!(loss.item::<f64>()?, 0.25);
    /// let count = Tensor::scalar(7i64)?;
    /// let n: i32 = count.item()?;
    /// assert_eq!(n, 7);
    /// assert!(loss.item::<i64>().is_err()); // a float is not read as an integer
    /// assert_eq!(f64::try_from(&count)?, 7.0);
    /// # Ok::<(), accel::Error>(())
    /// ```
    #[inline]
    pub fn item<T: Scalar>(&self) -> Result<T> {
        T::read(self)
    }

    /// The value of a one-element tensor as `f64` (a loss, say).
    #[deprecated(since = "0.3.0", note = "use item::<f64>()")]
    #[inline]
    pub fn item_f64(&self) -> Result<f64> {
        self.item()
    }

    /// The value of a one-element integer or bool tensor as `i64`.
    #[deprecated(since = "0.3.0", note = "use item::<i64>()")]
    #[inline]
    pub fn item_i64(&self) -> Result<i64> {
        self.item()
    }

    /// Wraps an existing LibTorch tensor without copying (tch-rs's `Tensor::as_ptr` gives one).
    ///
    /// # Safety
    /// `torch_tensor` must point to a live `at::Tensor` of the very LibTorch build libaccel links.
    pub unsafe fn from_torch_ptr(torch_tensor: *mut c_void) -> Result<Tensor> {
        ensure_supported_library()?;
        let raw = make(|out| sys::accel_tensor_wrap_torch(torch_tensor, out))?;
        Ok(Tensor::from_raw(raw).expect("non-null"))
    }

    /// A second handle on the same tensor, without copying (tch-rs's `shallow_clone`): the same
    /// storage, shape and autograd history. For giving a tensor lent for a call (a Trainer step's
    /// batch field) back as an owned one.
    ///
    /// ```
    /// use accel::Tensor;
    /// let t = Tensor::from_slice(&[1i64, 2, 3], &[3])?;
    /// let u = t.shallow_clone()?;
    /// drop(t);
    /// assert_eq!(u.to_vec::<i64>()?, vec![1, 2, 3]);
    /// # Ok::<(), accel::Error>(())
    /// ```
    pub fn shallow_clone(&self) -> Result<Tensor> {
        // SAFETY: the `at::Tensor` inside a live handle of this very library.
        unsafe { Tensor::from_torch_ptr(self.as_torch_ptr()?) }
    }

    /// Sets whether autograd records operations on this tensor (PyTorch's `requires_grad_`), so
    /// that a tensor made from data can be lent to a model as a parameter. An autograd leaf only.
    pub fn set_requires_grad(&mut self, requires_grad: bool) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::accel_tensor_set_requires_grad(self.as_raw(), requires_grad) })
    }

    /// The `at::Tensor*` inside, valid while `self` lives. Using it is the caller's business (and
    /// `unsafe`): changing the tensor through it bypasses the thread rules above.
    pub fn as_torch_ptr(&self) -> Result<*mut c_void> {
        let mut out: *mut c_void = std::ptr::null_mut();
        // SAFETY: live handle, valid out pointer.
        check(unsafe { sys::accel_tensor_borrow_torch(self.as_raw(), &mut out) })?;
        Ok(out)
    }
}

/// Takes every entry out of a library-owned tensor list (the outputs of a model call) and frees
/// the list.
pub(crate) fn take_list(list: *mut sys::accel_tensor_list) -> Result<Vec<Tensor>> {
    struct Guard(*mut sys::accel_tensor_list);
    impl Drop for Guard {
        fn drop(&mut self) {
            // SAFETY: the list is ours; the tensors taken from it stay valid.
            unsafe { sys::accel_tensor_list_free(self.0) }
        }
    }
    let guard = Guard(list);
    // SAFETY: a live list, valid out pointers.
    let count = query(|out| unsafe { sys::accel_tensor_list_count(guard.0, out) })?;
    (0..count)
        .map(|i| {
            // SAFETY: `i` is in range; each call makes a new handle we own.
            let raw = make(|out| unsafe { sys::accel_tensor_list_get(guard.0, i, out) })?;
            // SAFETY: a new handle nothing else owns.
            Ok(unsafe { Tensor::from_raw(raw) }.expect("non-null"))
        })
        .collect()
}
