//! Datasets (from tensors, IDX files, a Rust closure or a stream) and the sharded, prefetching
//! dataloader.

use std::ffi::c_void;
use std::fmt::Display;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, PoisonError};

use libaccel_sys as sys;

use crate::callback::{FailureSlot, Surfaced};
use crate::error::{check, BoxError, Error, Result, Status};
use crate::ffi::{ensure_supported_library, make, path_string, query, set_option};
use crate::options::{default_is_new, options_type};
use crate::tensor::{Dtype, Element, Tensor};

/// One field of a closure dataset: its element type and per-sample shape (`[]` for a scalar
/// per sample, `[28, 28]` for an image). A ragged field ([`Field::ragged`], for
/// [`Dataset::from_ragged_fn`]) has [`Field::RAGGED`] as its first dimension: one that varies from
/// sample to sample (the tokens of a sentence).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Element type of the field.
    pub dtype: Dtype,
    /// Shape of one sample of the field; a ragged field's starts with [`Field::RAGGED`].
    pub shape: Vec<i64>,
}

impl Field {
    /// The first dimension of a ragged field's shape (the header's `ACCEL_RAGGED`, -1): its
    /// length is the sample's, as [`Dataset::from_ragged_fn`]'s length closure reports it.
    pub const RAGGED: i64 = sys::ACCEL_RAGGED;

    /// A field of `dtype` with per-sample `shape`.
    pub fn new(dtype: Dtype, shape: &[i64]) -> Field {
        Field {
            dtype,
            shape: shape.to_vec(),
        }
    }

    /// A ragged field of `dtype`: each sample has its own number of rows, each row of shape
    /// `row_shape` (`[]` for a sequence of scalars such as token ids, `[768]` for a sequence of
    /// vectors). Its shape is `[Field::RAGGED, row_shape...]`.
    pub fn ragged(dtype: Dtype, row_shape: &[i64]) -> Field {
        let mut shape = Vec::with_capacity(row_shape.len() + 1);
        shape.push(Field::RAGGED);
        shape.extend_from_slice(row_shape);
        Field { dtype, shape }
    }

    /// Whether the field's first dimension is ragged.
    pub fn is_ragged(&self) -> bool {
        self.shape.first() == Some(&Field::RAGGED)
    }
}

type SampleFn = dyn Fn(i64, &mut [&mut [u8]]) -> std::result::Result<(), BoxError> + Send + Sync;
type LengthFn = dyn Fn(i64, &mut [i64]) -> std::result::Result<(), BoxError> + Send + Sync;
type StreamFn = dyn FnMut(i64, i64) -> std::result::Result<Option<Sample>, BoxError> + Send;

/// What makes a closure dataset's samples.
enum Source {
    /// By index ([`Dataset::from_fn`], [`Dataset::from_ragged_fn`]), on several threads at once.
    Indexed {
        fill: Box<SampleFn>,
        lengths: Option<Box<LengthFn>>,
    },
    /// In order ([`Dataset::from_stream`]). The library never calls it on two threads at once;
    /// the mutex (never contended) lets the `FnMut` be shared.
    Stream {
        next: Mutex<Box<StreamFn>>,
        dtypes: Vec<Dtype>,
    },
}

/// A closure dataset's state, shared by the library (released by its release callback) and by
/// the Rust dataset and dataloaders (for the failure slot, which all its closures share).
struct SampleState {
    source: Source,
    failure: FailureSlot,
}

/// The header's per-field arrays, as `accel_dataset_from_callback` and its kin take them.
struct RawFields {
    dtypes: Vec<sys::accel_dtype>,
    dim_counts: Vec<usize>,
    dims: Vec<i64>,
}

impl RawFields {
    fn new(fields: &[Field]) -> RawFields {
        RawFields {
            dtypes: fields.iter().map(|f| f.dtype.to_raw()).collect(),
            dim_counts: fields.iter().map(|f| f.shape.len()).collect(),
            dims: fields
                .iter()
                .flat_map(|f| f.shape.iter().copied())
                .collect(),
        }
    }

    /// `dims`, or NULL when no field has a dimension (the header allows it then).
    fn dims_ptr(&self) -> *const i64 {
        if self.dims.is_empty() {
            std::ptr::null()
        } else {
            self.dims.as_ptr()
        }
    }
}

/// One sample of a stream ([`Dataset::from_stream`]): each field's values, set by index.
///
/// A fixed field takes exactly one sample of its shape (`[]`: one value; `[28, 28]`: 784); a
/// ragged field ([`Field::ragged`]) any whole number of rows, its length (0 too). Typed values
/// ([`set`](Sample::set), [`with`](Sample::with)) must be of the field's element type; raw bytes
/// ([`set_bytes`](Sample::set_bytes), for `F16`, `BF16` or data already in bytes) are taken as
/// they are, row-major in the field's dtype. Setting a field again replaces it. The stream
/// checks each sample as it reads it, and fails the batch that needed it: a field left unset is
/// a `Callback` error, values of another element type a `Dtype` error and a size that is not one
/// sample (or not whole rows) a `Shape` error, each naming the sample and field; a field out of
/// range is an `InvalidArgument` error.
///
/// ```
/// use accel::Sample;
/// let tokens = [101i64, 7592, 102];
/// let sample = Sample::new().with(0, &tokens).with(1, &[1i64]);
/// assert_eq!(sample.field_count(), 2);
/// assert_eq!(sample.bytes(1), Some(&1i64.to_ne_bytes()[..]));
/// let mut line = Sample::new();
/// line.set_bytes(0, "hello");
/// assert_eq!(line.bytes(0), Some(&b"hello"[..]));
/// assert_eq!(line.bytes(1), None);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sample {
    fields: Vec<Option<SampleField>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct SampleField {
    /// The element type of typed values; `None` for raw bytes (not checked).
    dtype: Option<Dtype>,
    bytes: Vec<u8>,
}

impl Sample {
    /// A sample with no field set.
    pub fn new() -> Sample {
        Sample::default()
    }

    /// Sets field `field` to a copy of `values` (row-major), which must be of the field's
    /// element type: `&tokens[..]` (`i64`) for a ragged `I64` field, `&[label]` for a scalar.
    pub fn set<T: Element>(&mut self, field: usize, values: &[T]) -> &mut Sample {
        // SAFETY: the bytes of a slice of an Element type (plain data, no padding).
        let bytes = unsafe {
            std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
        };
        self.put(field, Some(T::DTYPE), bytes.to_vec())
    }

    /// [`set`](Sample::set), by value: `Sample::new().with(0, &tokens).with(1, &[label])`.
    #[must_use]
    pub fn with<T: Element>(mut self, field: usize, values: &[T]) -> Sample {
        self.set(field, values);
        self
    }

    /// Sets field `field` to `bytes`, taken as they are: its elements in the field's dtype,
    /// row-major (no element type to check: any dtype, `F16` and `BF16` included).
    pub fn set_bytes(&mut self, field: usize, bytes: impl Into<Vec<u8>>) -> &mut Sample {
        self.put(field, None, bytes.into())
    }

    /// [`set_bytes`](Sample::set_bytes), by value.
    #[must_use]
    pub fn with_bytes(mut self, field: usize, bytes: impl Into<Vec<u8>>) -> Sample {
        self.set_bytes(field, bytes);
        self
    }

    /// The bytes of field `field`, `None` while it is not set.
    pub fn bytes(&self, field: usize) -> Option<&[u8]> {
        self.fields
            .get(field)
            .and_then(Option::as_ref)
            .map(|f| f.bytes.as_slice())
    }

    /// One more than the highest field set (0 when none is).
    pub fn field_count(&self) -> usize {
        self.fields.len()
    }

    fn put(&mut self, field: usize, dtype: Option<Dtype>, bytes: Vec<u8>) -> &mut Sample {
        if self.fields.len() <= field {
            self.fields.resize(field + 1, None);
        }
        self.fields[field] = Some(SampleField { dtype, bytes });
        self
    }

    /// Writes the sample's fields through the library, which copies them and checks their
    /// sizes; a library error comes back with its own status.
    fn write(
        &self,
        raw: *mut sys::accel_sample,
        dtypes: &[Dtype],
        position: i64,
    ) -> std::result::Result<(), Surfaced> {
        for (f, value) in self.fields.iter().enumerate() {
            let Some(value) = value else { continue }; // unset: the library names it
            if let (Some(given), Some(&want)) = (value.dtype, dtypes.get(f)) {
                if given != want {
                    return Err(Surfaced(Error::new(
                        Status::Dtype,
                        format!(
                            "sample {position}, field {f}: {given:?} values given, and the \
                             field's dtype is {want:?}"
                        ),
                    )));
                }
            }
            let data = if value.bytes.is_empty() {
                std::ptr::null()
            } else {
                value.bytes.as_ptr().cast::<c_void>()
            };
            // SAFETY: `raw` is the sample the library passed to this very call; `data` holds
            // `len` bytes (or is NULL for none, which the header allows), copied by the call.
            let status = unsafe { sys::accel_sample_set_field(raw, f, data, value.bytes.len()) };
            check(status).map_err(Surfaced)?;
        }
        Ok(())
    }
}

/// A set of samples with one or more fields (images, labels, ...).
///
/// Any calls may run at once from several threads. Dataloaders keep their dataset (and its
/// closure) alive: a dataset may be dropped while they are in use.
pub struct Dataset {
    raw: NonNull<sys::accel_dataset>,
    callback: Option<Arc<SampleState>>,
}

// SAFETY: accel.h "Threads": any calls on datasets at once, free from any thread; the closure
// state is Send + Sync by its bounds.
unsafe impl Send for Dataset {}
// SAFETY: as above.
unsafe impl Sync for Dataset {}

impl Drop for Dataset {
    fn drop(&mut self) {
        // SAFETY: our handle, no other call on it running. The closure state lives on in the
        // library's reference until the last dataloader over the dataset is gone.
        unsafe { sys::accel_dataset_free(self.raw.as_ptr()) }
    }
}

impl std::fmt::Debug for Dataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Dataset({:p})", self.raw.as_ptr())
    }
}

impl Dataset {
    /// A dataset over tensors in memory: field `i` is `tensors[i]`, samples along dimension 0
    /// (the first dimensions must agree). The dataset keeps its own references.
    pub fn from_tensors(tensors: &[&Tensor]) -> Result<Dataset> {
        ensure_supported_library()?;
        let raws: Vec<*const sys::accel_tensor> =
            tensors.iter().map(|t| t.as_raw() as *const _).collect();
        // SAFETY: `raws` holds live tensor handles.
        let raw =
            make(|out| unsafe { sys::accel_dataset_from_tensors(raws.as_ptr(), raws.len(), out) })?;
        Ok(Dataset::own(raw, None))
    }

    /// A dataset from IDX files (the MNIST family, plain or gzip), one field per file.
    ///
    /// ```
    /// let dir = "/usr/share/datasets/fashion-mnist";
    /// let test = accel::Dataset::from_idx(&[
    ///     format!("{dir}/t10k-images-idx3-ubyte.gz"),
    ///     format!("{dir}/t10k-labels-idx1-ubyte.gz"),
    /// ])?;
    /// assert_eq!(test.sample_count()?, Some(10_000));
    /// assert!(accel::Dataset::from_idx(&["/no/such/file"]).is_err());
    /// # Ok::<(), accel::Error>(())
    /// ```
    pub fn from_idx<P: AsRef<Path>>(paths: &[P]) -> Result<Dataset> {
        ensure_supported_library()?;
        let owned = paths
            .iter()
            .map(|p| path_string(p.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        let ptrs: Vec<*const std::ffi::c_char> = owned.iter().map(|p| p.as_ptr()).collect();
        // SAFETY: `ptrs` holds NUL-terminated paths that outlive the call.
        let raw =
            make(|out| unsafe { sys::accel_dataset_from_idx(ptrs.as_ptr(), ptrs.len(), out) })?;
        Ok(Dataset::own(raw, None))
    }

    /// A dataset of `sample_count` samples that `fill` produces: it gets the sample's index and
    /// one byte buffer per field, exactly the size of one sample of that field (its elements in
    /// the field's dtype, row-major), and fills them.
    ///
    /// With `num_workers` > 0 the dataloader calls `fill` on its worker threads, several at once.
    /// When `fill` returns an error or panics, the dataloader call that needed the sample (the
    /// caller of [`DataLoader::next_batch`] or of the iterator) gets the error as a `Callback`
    /// error, or the panic resumed on its own thread; the next call starts the epoch again.
    /// A ragged field is a `Shape` error: [`from_ragged_fn`](Dataset::from_ragged_fn) takes them.
    ///
    /// ```
    /// use accel::{Dataset, Dtype, Field};
    /// let squares = Dataset::from_fn(10, &[Field::new(Dtype::I64, &[])], |i, fields| {
    ///     fields[0].copy_from_slice(&(i * i).to_ne_bytes());
    ///     Ok(())
    /// })?;
    /// assert_eq!(squares.sample_count()?, Some(10));
    /// # Ok::<(), accel::Error>(())
    /// ```
    pub fn from_fn<F>(sample_count: i64, fields: &[Field], fill: F) -> Result<Dataset>
    where
        F: Fn(i64, &mut [&mut [u8]]) -> std::result::Result<(), BoxError> + Send + Sync + 'static,
    {
        ensure_supported_library()?;
        if let Some(f) = fields.iter().position(Field::is_ragged) {
            return Err(Error::new(
                Status::Shape,
                format!(
                    "field {f} is ragged (its first dimension is Field::RAGGED): \
                     Dataset::from_ragged_fn makes datasets with ragged fields"
                ),
            ));
        }
        Dataset::from_closures(sample_count, fields, None, Box::new(fill))
    }

    /// A dataset of `sample_count` samples whose fields may be ragged ([`Field::ragged`]): text,
    /// where each sample has its own number of tokens. `lengths` gets a sample's index and one
    /// entry per field, and writes the length (number of rows, at least 0) of each ragged field
    /// (the entries of fixed fields are ignored); then `fill` gets that sample's buffers as
    /// [`from_fn`](Dataset::from_fn)'s does, a ragged field's holding exactly its length x the
    /// bytes of one row.
    ///
    /// A batch pads each ragged field to its longest sample (`[batch, longest, row_shape...]`)
    /// and adds, after the dataset's fields, one field per ragged field: an attention mask
    /// (`i64 [batch, longest]`: 1 on a sample's rows, 0 on padding), or the lengths
    /// (`i64 [batch]`) or nothing, as the dataloader's [`Padding`] says; it also chooses the pad
    /// value, the side, a multiple to round up to, and a maximum length.
    ///
    /// Both closures run where `fill` runs for [`from_fn`](Dataset::from_fn) (worker threads,
    /// several at once), `lengths` before `fill` for the same sample, and with
    /// [`DataLoaderOptions::group_by_length`] once for every sample before the first epoch. An
    /// error or a panic of either comes back from the dataloader call that needed the sample as
    /// for [`from_fn`](Dataset::from_fn); a negative length is a `Shape` error naming the sample.
    ///
    /// ```
    /// use accel::{fields, Accelerator, DataLoader, DataLoaderOptions, Dataset, Dtype, Field};
    /// // Sample i: the tokens 10 * i .. 10 * i + i + 1 (i + 1 of them).
    /// let tokens = |i: i64| (0..=i).map(move |j| 10 * i + j);
    /// let text = Dataset::from_ragged_fn(
    ///     3,
    ///     &[Field::ragged(Dtype::I64, &[])],
    ///     |i, lengths| {
    ///         lengths[0] = i + 1;
    ///         Ok(())
    ///     },
    ///     move |i, buffers| {
    ///         for (dst, t) in buffers[0].chunks_exact_mut(8).zip(tokens(i)) {
    ///             dst.copy_from_slice(&t.to_ne_bytes());
    ///         }
    ///         Ok(())
    ///     },
    /// )?;
    /// let acc = Accelerator::new()?;
    /// let mut loader = DataLoader::with(&acc, &text, DataLoaderOptions::new().batch_size(3))?;
    /// let [ids, mask] = fields(loader.next_batch()?.unwrap())?;
    /// assert_eq!(ids.shape()?, [3, 3]);
    /// assert_eq!(ids.to_vec::<i64>()?, [0, 0, 0, 10, 11, 0, 20, 21, 22]);
    /// assert_eq!(mask.to_vec::<i64>()?, [1, 0, 0, 1, 1, 0, 1, 1, 1]);
    /// # Ok::<(), accel::Error>(())
    /// ```
    pub fn from_ragged_fn<L, F>(
        sample_count: i64,
        fields: &[Field],
        lengths: L,
        fill: F,
    ) -> Result<Dataset>
    where
        L: Fn(i64, &mut [i64]) -> std::result::Result<(), BoxError> + Send + Sync + 'static,
        F: Fn(i64, &mut [&mut [u8]]) -> std::result::Result<(), BoxError> + Send + Sync + 'static,
    {
        ensure_supported_library()?;
        Dataset::from_closures(
            sample_count,
            fields,
            Some(Box::new(lengths)),
            Box::new(fill),
        )
    }

    /// A stream: a dataset with no known length, read in order (PyTorch's `IterableDataset`),
    /// whose samples `next` makes. It gets the epoch and the sample's position (0, 1, 2, ... in
    /// order) and returns `Ok(Some(sample))`, or `Ok(None)` at the end of the stream. Position 0
    /// means "from the beginning again": each epoch starts there, and so does a dataloader that
    /// resumes ([`DataLoader::set_position`], or the call after a failure), reading the samples
    /// before its position again and dropping them. Fields are declared as for
    /// [`from_ragged_fn`](Dataset::from_ragged_fn) (a ragged field's length is the number of
    /// rows its [`Sample`] holds); batches are padded and masked the same way.
    ///
    /// `next` is never called on two threads at once, and always in order: with `num_workers` 0
    /// in the call that needs the sample, otherwise on the dataloader's reading thread, which
    /// reads up to `num_workers` x `prefetch_factor` global batches ahead. With
    /// [`DataLoaderOptions::dispatch_batches`] (the default for a stream) it runs on the main
    /// process only, which sends every process its rows.
    ///
    /// An error or a panic of `next`, or a sample the stream refuses (see [`Sample`]), comes back
    /// from the dataloader call that needed the sample (an error as a `Callback` error with its
    /// message, a refused sample with its own status, a panic resumed), and the dataloader's
    /// [`position`](DataLoader::position) stays after the batches already returned: the next
    /// call reads the stream again from position 0 up to there and goes on with the batch that
    /// failed. [`sample_count`](Dataset::sample_count) and [`DataLoader::batch_count`] are
    /// `None`; `group_by_length` is an `Unsupported` error.
    ///
    /// ```
    /// use accel::{fields, Accelerator, DataLoader, DataLoaderOptions, Dataset, Dtype, Field};
    /// use accel::Sample;
    /// // Sample i: the tokens 10 * i .. 10 * i + i + 1, and the label i; four of them.
    /// let text = Dataset::from_stream(
    ///     &[Field::ragged(Dtype::I64, &[]), Field::new(Dtype::I64, &[])],
    ///     |_epoch, i| {
    ///         if i == 4 {
    ///             return Ok(None);
    ///         }
    ///         let tokens: Vec<i64> = (0..=i).map(|j| 10 * i + j).collect();
    ///         Ok(Some(Sample::new().with(0, &tokens).with(1, &[i])))
    ///     },
    /// )?;
    /// assert_eq!(text.sample_count()?, None);
    /// let acc = Accelerator::new()?;
    /// let mut loader = DataLoader::with(&acc, &text, DataLoaderOptions::new().batch_size(3))?;
    /// assert_eq!(loader.batch_count()?, None);
    /// let [ids, labels, mask] = fields(loader.next_batch()?.unwrap())?;
    /// assert_eq!(ids.to_vec::<i64>()?, [0, 0, 0, 10, 11, 0, 20, 21, 22]);
    /// assert_eq!(labels.to_vec::<i64>()?, [0, 1, 2]);
    /// assert_eq!(mask.to_vec::<i64>()?, [1, 0, 0, 1, 1, 0, 1, 1, 1]);
    /// # Ok::<(), accel::Error>(())
    /// ```
    pub fn from_stream<F>(fields: &[Field], next: F) -> Result<Dataset>
    where
        F: FnMut(i64, i64) -> std::result::Result<Option<Sample>, BoxError> + Send + 'static,
    {
        ensure_supported_library()?;
        let raw_fields = RawFields::new(fields);
        let source = Source::Stream {
            next: Mutex::new(Box::new(next)),
            dtypes: fields.iter().map(|f| f.dtype).collect(),
        };
        // SAFETY: the arrays are valid for their lengths; `user_data` is as `with_state` says.
        Dataset::with_state(source, |user_data, out| unsafe {
            sys::accel_dataset_from_stream(
                fields.len(),
                raw_fields.dtypes.as_ptr(),
                raw_fields.dim_counts.as_ptr(),
                raw_fields.dims_ptr(),
                Some(next_stream_sample),
                user_data,
                Some(release_sample_state),
                out,
            )
        })
    }

    /// A stream ([`from_stream`](Dataset::from_stream)) from an iterator per epoch: `open` gets
    /// the epoch and returns the epoch's samples, which the stream reads in order until the
    /// iterator ends (a file opened again, a query run again). An `Err` from `open` or from the
    /// iterator fails the batch that needed the sample, as `from_stream`'s closure's does. A
    /// stream that starts again (a new epoch, a resume, the call after a failure) calls `open`
    /// again and skips the samples before its position.
    ///
    /// ```
    /// use accel::{Dataset, Dtype, Field, Sample};
    /// let words = ["a", "stream", "of", "words"];
    /// let data = Dataset::from_stream_iter(&[Field::ragged(Dtype::U8, &[])], move |_epoch| {
    ///     Ok(words.map(|w| Ok(Sample::new().with(0, w.as_bytes()))))
    /// })?;
    /// assert_eq!(data.field_count()?, 1);
    /// # Ok::<(), accel::Error>(())
    /// ```
    pub fn from_stream_iter<F, I>(fields: &[Field], mut open: F) -> Result<Dataset>
    where
        F: FnMut(i64) -> std::result::Result<I, BoxError> + Send + 'static,
        I: IntoIterator<Item = std::result::Result<Sample, BoxError>>,
        I::IntoIter: Send + 'static,
    {
        // The epoch and the position its iterator is at.
        let mut current: Option<(i64, i64, I::IntoIter)> = None;
        Dataset::from_stream(fields, move |epoch, position| {
            let at = matches!(&current, Some((e, p, _)) if *e == epoch && *p == position);
            if !at || position == 0 {
                current = None; // the old one first: it may hold what `open` opens again
                let mut samples = open(epoch)?.into_iter();
                for _ in 0..position {
                    if samples.next().transpose()?.is_none() {
                        return Ok(None);
                    }
                }
                current = Some((epoch, position, samples));
            }
            let Some((_, at, samples)) = current.as_mut() else {
                return Ok(None); // set just above
            };
            match samples.next() {
                Some(Ok(sample)) => {
                    *at += 1;
                    Ok(Some(sample))
                }
                Some(Err(e)) => {
                    current = None;
                    Err(e)
                }
                None => Ok(None),
            }
        })
    }

    /// A stream of the lines of a text file, read lazily and again from the start each epoch:
    /// one sample per line, a single ragged `U8` field holding the line's bytes without its
    /// newline (nor a carriage return before it). A file that cannot be opened is an `Io` error
    /// naming it.
    ///
    /// ```
    /// let e = accel::Dataset::from_text_lines("/no/such/corpus.txt").unwrap_err();
    /// assert_eq!(e.status(), accel::Status::Io);
    /// ```
    pub fn from_text_lines<P: AsRef<Path>>(path: P) -> Result<Dataset> {
        ensure_supported_library()?;
        let path = path_string(path.as_ref())?;
        // SAFETY: a NUL-terminated path that outlives the call.
        let raw = make(|out| unsafe { sys::accel_dataset_from_text_lines(path.as_ptr(), out) })?;
        Ok(Dataset::own(raw, None))
    }

    /// A closure dataset: through `accel_dataset_from_ragged_callback` when there is a length
    /// closure, else `accel_dataset_from_callback`.
    fn from_closures(
        sample_count: i64,
        fields: &[Field],
        lengths: Option<Box<LengthFn>>,
        fill: Box<SampleFn>,
    ) -> Result<Dataset> {
        let raw_fields = RawFields::new(fields);
        let ragged = lengths.is_some();
        let source = Source::Indexed { fill, lengths };
        // SAFETY: the arrays are valid for their lengths; `user_data` is as `with_state` says.
        // The length trampoline is registered only with a length closure in the state.
        Dataset::with_state(source, |user_data, out| unsafe {
            if ragged {
                sys::accel_dataset_from_ragged_callback(
                    sample_count,
                    fields.len(),
                    raw_fields.dtypes.as_ptr(),
                    raw_fields.dim_counts.as_ptr(),
                    raw_fields.dims_ptr(),
                    Some(sample_lengths),
                    Some(fill_sample),
                    user_data,
                    Some(release_sample_state),
                    out,
                )
            } else {
                sys::accel_dataset_from_callback(
                    sample_count,
                    fields.len(),
                    raw_fields.dtypes.as_ptr(),
                    raw_fields.dim_counts.as_ptr(),
                    raw_fields.dims_ptr(),
                    Some(fill_sample),
                    user_data,
                    Some(release_sample_state),
                    out,
                )
            }
        })
    }

    /// A dataset whose closures live in a `SampleState` made of `source`: `create` gets the
    /// state's `user_data` (an Arc reference handed to the library, which gives it back through
    /// `release_sample_state` exactly once) and the `out` pointer.
    fn with_state(
        source: Source,
        create: impl FnOnce(*mut c_void, *mut *mut sys::accel_dataset) -> sys::accel_status,
    ) -> Result<Dataset> {
        let state = Arc::new(SampleState {
            source,
            failure: FailureSlot::default(),
        });
        let user_data = Arc::into_raw(Arc::clone(&state)) as *mut c_void;
        let mut out: *mut sys::accel_dataset = std::ptr::null_mut();
        let status = create(user_data, &mut out);
        if out.is_null() && status == sys::ACCEL_OK {
            // Success always makes a handle; were it missing, the library would own the
            // reference (and release it), so it is not taken back here.
            return Err(Error::new(Status::Internal, "the library made no dataset"));
        }
        if let Err(e) = check(status) {
            // On failure the library never calls release: take the reference back.
            // SAFETY: the pointer came from Arc::into_raw above and was not released.
            drop(unsafe { Arc::from_raw(user_data as *const SampleState) });
            return Err(e);
        }
        Ok(Dataset::own(out, Some(state)))
    }

    fn own(raw: *mut sys::accel_dataset, callback: Option<Arc<SampleState>>) -> Dataset {
        Dataset {
            raw: NonNull::new(raw).expect("non-null"),
            callback,
        }
    }

    /// The number of samples; `None` for a stream ([`from_stream`](Dataset::from_stream),
    /// [`from_text_lines`](Dataset::from_text_lines)), whose length is unknown.
    pub fn sample_count(&self) -> Result<Option<i64>> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_dataset_sample_count(self.raw.as_ptr(), out) }).map(known)
    }

    /// The number of fields per sample.
    pub fn field_count(&self) -> Result<usize> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_dataset_field_count(self.raw.as_ptr(), out) })
    }

    /// The raw handle, for calls through `libaccel-sys`; still owned by `self`.
    pub fn as_raw(&self) -> *mut sys::accel_dataset {
        self.raw.as_ptr()
    }
}

/// A count the library reports as -1 when it is unknown (a stream's).
fn known(count: i64) -> Option<i64> {
    (count >= 0).then_some(count)
}

/// The library's sample callback: fills one sample through the user's closure.
unsafe extern "C" fn fill_sample(
    index: i64,
    buffers: *const *mut c_void,
    sizes: *const usize,
    count: usize,
    user_data: *mut c_void,
) -> i32 {
    // SAFETY: `user_data` is the Arc reference the library holds until it calls release, which
    // happens only after the last call of this callback has returned.
    let state = unsafe { &*(user_data as *const SampleState) };
    let Source::Indexed { fill, .. } = &state.source else {
        return 1; // registered only for an indexed source: not reached
    };
    state.failure.run(|| {
        // SAFETY: the library passes `count` buffers of `sizes[f]` bytes each, valid and not
        // aliased for the duration of the call.
        let field = |f: usize| -> &mut [u8] {
            let (ptr, len) = unsafe { (*buffers.add(f), *sizes.add(f)) };
            if len == 0 || ptr.is_null() {
                &mut []
            } else {
                unsafe { std::slice::from_raw_parts_mut(ptr.cast::<u8>(), len) }
            }
        };
        // Most datasets have few fields: no allocation per sample for up to eight.
        const INLINE: usize = 8;
        if count <= INLINE {
            let mut fields: [&mut [u8]; INLINE] = Default::default();
            for (f, slot) in fields.iter_mut().enumerate().take(count) {
                *slot = field(f);
            }
            fill(index, &mut fields[..count])
        } else {
            let mut fields: Vec<&mut [u8]> = (0..count).map(field).collect();
            fill(index, &mut fields)
        }
    })
}

/// The library's length callback: a sample's ragged lengths through the user's closure.
unsafe extern "C" fn sample_lengths(
    index: i64,
    lengths: *mut i64,
    count: usize,
    user_data: *mut c_void,
) -> i32 {
    // SAFETY: as in `fill_sample`: the Arc reference outlives every call of the callbacks.
    let state = unsafe { &*(user_data as *const SampleState) };
    let Source::Indexed {
        lengths: Some(closure),
        ..
    } = &state.source
    else {
        return 1; // registered only with a length closure: not reached
    };
    state.failure.run(|| {
        let lengths: &mut [i64] = if count == 0 || lengths.is_null() {
            &mut []
        } else {
            // SAFETY: the library passes `count` entries, valid and not aliased for the call.
            unsafe { std::slice::from_raw_parts_mut(lengths, count) }
        };
        closure(index, lengths)
    })
}

/// What the stream trampoline returns: the header's 0 (a sample), 1 (the end), or a failure.
const STREAM_SAMPLE: i32 = 0;
const STREAM_END: i32 = 1;
const STREAM_FAILED: i32 = -1;

/// The library's stream callback: the next sample through the user's closure, written field by
/// field.
unsafe extern "C" fn next_stream_sample(
    epoch: i64,
    position: i64,
    sample: *mut sys::accel_sample,
    user_data: *mut c_void,
) -> i32 {
    // SAFETY: as in `fill_sample`: the Arc reference outlives every call of the callback.
    let state = unsafe { &*(user_data as *const SampleState) };
    let Source::Stream { next, dtypes } = &state.source else {
        return STREAM_FAILED; // registered only for a stream source: not reached
    };
    state
        .failure
        .catch(|| {
            // A panic earlier left the mutex poisoned; the library starts the stream again at
            // position 0 after a failure, which the closure is told.
            let produced = next.lock().unwrap_or_else(PoisonError::into_inner)(epoch, position)?;
            let Some(produced) = produced else {
                return Ok(STREAM_END);
            };
            produced.write(sample, dtypes, position)?;
            Ok(STREAM_SAMPLE)
        })
        .unwrap_or(STREAM_FAILED)
}

unsafe extern "C" fn release_sample_state(user_data: *mut c_void) {
    // SAFETY: called exactly once with the pointer from Arc::into_raw in `from_closures`.
    drop(unsafe { Arc::from_raw(user_data as *const SampleState) });
}

/// One batch: a tensor per dataset field, in field order, then the mask (or lengths) of each
/// ragged field, in field order (see [`Dataset::from_ragged_fn`] and [`Padding`]).
pub type Batch = Vec<Tensor>;

/// Gives this process its shard of every global batch, exactly as Accelerate's prepared
/// DataLoader, prefetched by `num_workers` threads.
///
/// Iterating gives one epoch: `for batch in &mut loader` (or [`iter`](DataLoader::iter)) yields
/// the batches of the epoch in progress, or of the next one when none is, and ends with `None` at
/// its end, as a Rust iterator ends (it stays ended: [`Batches`] is fused); the next `for` starts
/// the next epoch. A loop left early (`break`, `take`) leaves the epoch in progress, and the next
/// iteration continues it. [`next_batch`](DataLoader::next_batch) takes one batch at a time
/// (`Ok(None)` at the end of an epoch; the call after that starts the next one).
/// Calls on one dataloader are serialised by the library; dropping it stops its workers (waiting
/// only for sample closures already running) and [`close`](DataLoader::close) does so while
/// keeping the handle.
///
/// Options, between epochs, typed with [`DataLoaderOptions`] ([`with`](DataLoader::with),
/// [`set_options`](DataLoader::set_options)) or by name ([`set`](DataLoader::set)):
/// `batch_size` (1), `shuffle` (false), `seed` (0), `drop_last` (false), `num_workers` (0),
/// `prefetch_factor` (2), `split_batches`, `even_batches` (the accelerator's),
/// `device_placement` (true), `group_by_length` (false), `dispatch_batches` (`auto`: true over
/// a stream, see [`DataLoaderOptions::dispatch_batches`]), `shard` (true); for a dataset with
/// ragged fields the
/// padding options of [`Padding`], for every ragged field at once or for one
/// ([`set_field_padding`](DataLoader::set_field_padding), [`set_field`](DataLoader::set_field)).
///
/// ```
/// use accel::{Accelerator, DataLoader, DataLoaderOptions, Dataset, Tensor};
/// let acc = Accelerator::new()?; // alone: one process
/// let x = Tensor::from_slice(&(0..10i64).collect::<Vec<_>>(), &[10])?;
/// let data = Dataset::from_tensors(&[&x])?;
/// let mut loader = DataLoader::with(&acc, &data, DataLoaderOptions::new().batch_size(4))?;
/// let mut sizes = Vec::new();
/// for batch in &mut loader {
///     sizes.push(batch?[0].element_count()?);
/// }
/// assert_eq!(sizes, [4, 4, 2]); // one epoch, then the loop ends
/// assert_eq!(loader.epoch()?, 1);
/// let mut epoch = loader.iter();
/// assert_eq!(epoch.size_hint(), (0, Some(3)));
/// assert_eq!(epoch.by_ref().count(), 3); // the next epoch, whole
/// assert!(epoch.next().is_none()); // and it stays ended
/// # Ok::<(), accel::Error>(())
/// ```
pub struct DataLoader {
    raw: NonNull<sys::accel_dataloader>,
    field_count: usize,
    callback: Option<Arc<SampleState>>,
}

// SAFETY: accel.h "Threads": a dataloader serialises its calls with a lock of its own, and may
// be freed from any thread.
unsafe impl Send for DataLoader {}
// SAFETY: as above.
unsafe impl Sync for DataLoader {}

impl Drop for DataLoader {
    fn drop(&mut self) {
        // SAFETY: our handle; no call on it can be running (drop has the only reference). Waits
        // for sample callbacks already running, at most one per worker.
        unsafe { sys::accel_dataloader_free(self.raw.as_ptr()) }
    }
}

impl std::fmt::Debug for DataLoader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DataLoader({:p})", self.raw.as_ptr())
    }
}

impl DataLoader {
    /// A dataloader over `dataset` for the process of the accelerator `accelerator`, a live
    /// handle: [`DataLoader::new`] (in accelerator.rs, so that this module never names the
    /// Accelerator and the modules depend one way).
    pub(crate) fn for_accelerator(
        accelerator: *mut sys::accel_accelerator,
        dataset: &Dataset,
    ) -> Result<DataLoader> {
        // SAFETY: live handles, valid out pointer.
        let raw =
            make(|out| unsafe { sys::accel_dataloader_new(accelerator, dataset.as_raw(), out) })?;
        let mut loader = DataLoader {
            raw: NonNull::new(raw).expect("non-null"),
            field_count: 0,
            callback: dataset.callback.clone(),
        };
        // SAFETY: live handle, valid out pointer.
        loader.field_count =
            query(|out| unsafe { sys::accel_dataloader_field_count(loader.raw.as_ptr(), out) })?;
        Ok(loader)
    }

    /// Sets the options given in `options` (the others stay as they are); ends an iteration in
    /// progress. The library checks the batch size against `split_batches` at each set, so a
    /// `split_batches(false)` goes first and a `split_batches(true)` after the batch size: any
    /// combination valid in the end is accepted. The first value the library rejects is the
    /// error, and the options before it stay set.
    pub fn set_options(&mut self, options: DataLoaderOptions) -> Result<()> {
        let mut pairs = options.pairs();
        if let Some(at) = pairs
            .iter()
            .position(|(key, value)| *key == "split_batches" && value == "false")
        {
            let unsplit = pairs.remove(at);
            pairs.insert(0, unsplit);
        }
        for (key, value) in pairs {
            self.set(key, value)?;
        }
        Ok(())
    }

    /// Sets an option (see the type's documentation); ends an iteration in progress.
    pub fn set(&mut self, key: &str, value: impl Display) -> Result<()> {
        let raw = self.as_raw();
        // SAFETY: live handle; the strings live for the call.
        let result = set_option(key, &value, |k, v| unsafe {
            sys::accel_dataloader_set(raw, k, v)
        });
        self.refresh_field_count();
        result
    }

    /// Sets the padding options given in `padding` (the others stay as they are) for the ragged
    /// field `field` alone (an index among the dataset's fields); ends an iteration in progress.
    /// [`DataLoaderOptions::padding`] sets them for every ragged field. A field out of range or
    /// not ragged is an `InvalidArgument` error; so is a value the library rejects, and the
    /// options before it stay set.
    ///
    /// ```
    /// use accel::{Accelerator, DataLoader, Dataset, Dtype, Field, Mask, Padding, PaddingSide};
    /// let text = Dataset::from_ragged_fn(
    ///     4,
    ///     &[Field::ragged(Dtype::I32, &[]), Field::new(Dtype::I64, &[])],
    ///     |i, lengths| {
    ///         lengths[0] = i; // field 1 is fixed: its entry is ignored
    ///         Ok(())
    ///     },
    ///     |_, buffers| {
    ///         buffers[0].fill(1);
    ///         buffers[1].fill(0);
    ///         Ok(())
    ///     },
    /// )?;
    /// let acc = Accelerator::new()?;
    /// let mut loader = DataLoader::new(&acc, &text)?;
    /// let left = Padding::new().padding_side(PaddingSide::Left).mask(Mask::Lengths);
    /// loader.set_field_padding(0, left)?;
    /// assert!(loader.set_field_padding(1, left).is_err()); // field 1 is not ragged
    /// # Ok::<(), accel::Error>(())
    /// ```
    pub fn set_field_padding(&mut self, field: usize, padding: Padding) -> Result<()> {
        for (key, value) in padding.pairs() {
            self.set_field(field, key, value)?;
        }
        Ok(())
    }

    /// Sets a padding option by name (see [`Padding`]: `pad_value`, `padding_side`,
    /// `pad_to_multiple_of`, `max_length`, `truncation`, `mask`) for the ragged field `field`
    /// alone; ends an iteration in progress.
    pub fn set_field(&mut self, field: usize, key: &str, value: impl Display) -> Result<()> {
        let raw = self.as_raw();
        // SAFETY: live handle; the strings live for the call.
        let result = set_option(key, &value, |k, v| unsafe {
            sys::accel_dataloader_set_field(raw, field, k, v)
        });
        self.refresh_field_count();
        result
    }

    /// The next batch of this epoch, or `None` at its end (the following call starts the next
    /// epoch). A failing sample closure ends the epoch with its error (or resumes its panic);
    /// over a stream the position stays after the batches already returned, and the next call
    /// gives the batch that failed ([`Dataset::from_stream`]). With `dispatch_batches` every
    /// process calls it together.
    pub fn next_batch(&mut self) -> Result<Option<Batch>> {
        let mut fields: Vec<*mut sys::accel_tensor> = vec![std::ptr::null_mut(); self.field_count];
        let mut count = 0usize;
        let status = loop {
            // SAFETY: `fields` has room for `fields.len()` handles.
            let status = unsafe {
                sys::accel_dataloader_next(
                    self.as_raw(),
                    fields.as_mut_ptr(),
                    fields.len(),
                    &mut count,
                )
            };
            // More fields than counted (a mask option changed through the raw handle): the
            // library refused before taking a batch, and said how many.
            if status == sys::ACCEL_ERR_BUFFER_TOO_SMALL && count > fields.len() {
                fields.resize(count, std::ptr::null_mut());
                self.field_count = count;
                continue;
            }
            break status;
        };
        self.resolve(check(status))?;
        if count == 0 {
            return Ok(None);
        }
        // SAFETY: each is a new handle we own (taken even when one is missing, so none leaks).
        let batch: Vec<Option<Tensor>> = fields[..count]
            .iter()
            .map(|&raw| unsafe { Tensor::from_raw(raw) })
            .collect();
        batch
            .into_iter()
            .collect::<Option<Batch>>()
            .map(Some)
            .ok_or_else(|| {
                Error::new(
                    Status::Internal,
                    "the library returned a batch without a field",
                )
            })
    }

    /// The number of fields per batch: the dataset's, then one per ragged field unless the
    /// padding's mask is [`Mask::None`].
    pub fn field_count(&self) -> usize {
        self.field_count
    }

    /// A failing call's error with what a dataset closure that failed in it left behind.
    pub(crate) fn resolve<T>(&self, result: Result<T>) -> Result<T> {
        match &self.callback {
            Some(state) => result.map_err(|e| state.failure.resolve(e)),
            None => result,
        }
    }

    /// Reads the number of fields per batch again (the mask options change it).
    fn refresh_field_count(&mut self) {
        let raw = self.as_raw();
        // SAFETY: live handle, valid out pointer.
        if let Ok(n) = query(|out| unsafe { sys::accel_dataloader_field_count(raw, out) }) {
            self.field_count = n;
        }
    }

    /// The number of batches this process gets in a whole epoch; `None` over a stream
    /// ([`Dataset::from_stream`]), whose length is unknown.
    pub fn batch_count(&self) -> Result<Option<i64>> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_dataloader_batch_count(self.as_raw(), out) }).map(known)
    }

    /// Sets the epoch the next iteration uses (its shuffle); ends an iteration in progress.
    pub fn set_epoch(&mut self, epoch: i64) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::accel_dataloader_set_epoch(self.as_raw(), epoch) })
    }

    /// The current epoch.
    pub fn epoch(&self) -> Result<i64> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_dataloader_epoch(self.as_raw(), out) })
    }

    /// Whether the last batch of the epoch is in use (Accelerate's `end_of_dataloader`).
    pub fn end_of_epoch(&self) -> Result<bool> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_dataloader_end_of_epoch(self.as_raw(), out) })
    }

    /// How many samples of the last global step are real rather than padding: a map-style
    /// dataset's samples mod the global batch size (-1 with drop_last); a stream's -1 until its
    /// last global batch is in use, then that batch's real samples (accel.h).
    pub fn remainder(&self) -> Result<i64> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_dataloader_remainder(self.as_raw(), out) })
    }

    /// The next iteration skips this process's first `n` batches (a mid-epoch resume).
    pub fn skip_first_batches(&mut self, n: i64) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::accel_dataloader_skip_first_batches(self.as_raw(), n) })
    }

    /// The global sample cursor: `(epoch, samples consumed by all processes in it)`.
    pub fn position(&self) -> Result<(i64, i64)> {
        let (mut epoch, mut samples) = (0i64, 0i64);
        // SAFETY: live handle, valid out pointers.
        check(unsafe { sys::accel_dataloader_position(self.as_raw(), &mut epoch, &mut samples) })?;
        Ok((epoch, samples))
    }

    /// Continues at a saved cursor: the next iteration starts `samples` into `epoch`.
    pub fn set_position(&mut self, epoch: i64, samples: i64) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::accel_dataloader_set_position(self.as_raw(), epoch, samples) })
    }

    /// Stops the workers and releases the dataset; later calls fail with a `State` error.
    /// Waits only for sample closures already running. Idempotent.
    pub fn close(&mut self) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::accel_dataloader_close(self.as_raw()) })
    }

    /// The raw handle, for calls through `libaccel-sys`; still owned by `self`.
    pub fn as_raw(&self) -> *mut sys::accel_dataloader {
        self.raw.as_ptr()
    }
}

impl DataLoader {
    /// The batches of one epoch: the rest of the epoch in progress, or the next whole epoch
    /// (see the type's documentation). `for batch in &mut loader` calls it.
    pub fn iter(&mut self) -> Batches<'_> {
        // An upper bound only: a resumed or interrupted epoch has fewer batches left.
        let upper = self
            .batch_count()
            .ok()
            .flatten()
            .and_then(|n| usize::try_from(n).ok());
        Batches {
            loader: self,
            state: BatchesState::Starting,
            upper,
        }
    }
}

impl<'a> IntoIterator for &'a mut DataLoader {
    type Item = Result<Batch>;
    type IntoIter = Batches<'a>;

    fn into_iter(self) -> Batches<'a> {
        self.iter()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BatchesState {
    Starting,
    Running,
    Ended,
}

/// The batches of one epoch of a [`DataLoader`] ([`DataLoader::iter`], `for batch in &mut
/// loader`). It ends with `None` at the end of the epoch, and after an error it has yielded (a
/// failing sample closure's, say: the library then starts that epoch again at the next
/// iteration); once ended it stays ended.
///
/// Its [`size_hint`](Iterator::size_hint) has the epoch's batch count as upper bound, not an exact
/// length: an epoch resumed mid-way ([`DataLoader::skip_first_batches`],
/// [`DataLoader::set_position`], a loop left early) or ended by an error yields fewer.
#[derive(Debug)]
pub struct Batches<'a> {
    loader: &'a mut DataLoader,
    state: BatchesState,
    upper: Option<usize>,
}

impl Iterator for Batches<'_> {
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Result<Batch>> {
        match self.state {
            BatchesState::Ended => return None,
            BatchesState::Starting => {
                self.state = BatchesState::Running;
                // The previous iteration took the epoch's last batch but stopped before asking
                // for more (`take(batch_count)`): the library ends that epoch on the next call,
                // which is this one's business rather than an empty epoch for the caller. Asked
                // only now, so end_of_epoch stays true while that last batch is in use.
                if let Ok(true) = self.loader.end_of_epoch() {
                    if let Err(e) = self.loader.next_batch() {
                        self.state = BatchesState::Ended;
                        return Some(Err(e));
                    }
                }
            }
            BatchesState::Running => {}
        }
        let item = self.loader.next_batch().transpose();
        match &item {
            Some(Ok(_)) => self.upper = self.upper.map(|n| n.saturating_sub(1)),
            _ => self.state = BatchesState::Ended,
        }
        item
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self.state {
            BatchesState::Ended => (0, Some(0)),
            _ => (0, self.upper),
        }
    }
}

impl std::iter::FusedIterator for Batches<'_> {}

options_type!(
    /// A dataloader's options, typed, for [`DataLoader::with`] and [`DataLoader::set_options`]:
    /// each a builder method, the ones left out unchanged (at first, the defaults given).
    /// A value the library rejects (a batch size of 0, `split_batches` with a batch size that
    /// does not divide by the number of processes) is an `InvalidArgument` error.
    DataLoaderOptions {
        required {}
        optional {
            /// Samples per batch on this process, or in all with `split_batches` (default 1).
            batch_size: i64,
            /// Draw a new permutation each epoch, from `seed` and the epoch (default false).
            shuffle: bool,
            /// The shuffle's seed, the same on every process (default 0; at most `i64::MAX`,
            /// larger is an `InvalidArgument` error).
            seed: u64,
            /// Drop an incomplete last round (default false).
            drop_last: bool,
            /// Threads making batches ahead (default 0: made in the call that asks).
            num_workers: usize,
            /// Batches in flight per worker (default 2).
            prefetch_factor: usize,
            /// Cut each batch of `batch_size` into one slice per process (default the
            /// accelerator's configuration: false).
            split_batches: bool,
            /// Complete the last round from the epoch's start so every process gets as many
            /// batches (default the accelerator's configuration: true).
            even_batches: bool,
            /// Batches on the accelerator's device (default true).
            device_placement: bool,
            /// The Hugging Face Trainer's length grouping, for a dataset with a ragged field
            /// (default false): the epoch's order (shuffled or not) is cut into megabatches of
            /// global batches, each sorted by the first ragged field's length, longest first,
            /// the longest batch first of all. Every sample still comes once per epoch, and
            /// 1 process x 64 sees the same global batches as 2 x 32. Without a ragged field it
            /// is an `InvalidArgument` error.
            group_by_length: bool,
            /// Over a stream ([`Dataset::from_stream`]; default true there, Accelerate's
            /// default): the main process reads each global batch and sends every process its
            /// rows, and every process must ask for each batch together (the call is a
            /// collective). False: every process reads the whole stream and keeps its own rows
            /// (Accelerate's `IterableDatasetShard`). The same batches either way. Over a
            /// dataset of known length, sharded by index on every process, true is an
            /// `Unsupported` error.
            dispatch_batches: bool,
            /// Share the batches between the processes (default true). False: this process
            /// reads every batch itself, as an unprepared PyTorch DataLoader does, for data
            /// already divided with [`Accelerator::split_between_processes`](crate::Accelerator::split_between_processes).
            shard: bool,
        }
        nested {
            /// The padding of every ragged field (each option given; the others unchanged).
            /// Without a ragged field it is an `InvalidArgument` error.
            /// [`DataLoader::set_field_padding`] sets them for one field.
            padding: Padding,
        }
    }
);

default_is_new!(DataLoaderOptions);

/// Where a ragged field's padding goes ([`Padding::padding_side`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PaddingSide {
    /// After the sample's rows (the default).
    #[default]
    Right,
    /// Before the sample's rows.
    Left,
}

impl std::fmt::Display for PaddingSide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PaddingSide::Right => "right",
            PaddingSide::Left => "left",
        })
    }
}

/// The field a batch adds after the dataset's for each ragged field ([`Padding::mask`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mask {
    /// `i64 [batch, padded length]`: 1 on a sample's rows, 0 on padding (the default; Hugging
    /// Face's `attention_mask`).
    #[default]
    AttentionMask,
    /// `i64 [batch]`: each sample's length after truncation.
    Lengths,
    /// No field.
    None,
}

impl std::fmt::Display for Mask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mask::AttentionMask => "attention_mask",
            Mask::Lengths => "lengths",
            Mask::None => "none",
        })
    }
}

/// How a batch pads a ragged field ([`Field::ragged`]), typed, for
/// [`DataLoaderOptions::padding`] (every ragged field) and [`DataLoader::set_field_padding`]
/// (one): each a builder method, the ones left out unchanged (at first, the defaults given).
/// A value the library rejects (a multiple or a maximum length below 1, a pad value that is not
/// finite) is an `InvalidArgument` error naming the option and the allowed values.
///
/// A batch pads each ragged field to its longest sample after truncation, rounded up to
/// `pad_to_multiple_of`.
///
/// ```
/// use accel::{Mask, Padding, PaddingSide};
/// let padding = Padding::new()
///     .pad_value(-1.0)
///     .padding_side(PaddingSide::Left)
///     .max_length(Some(512))
///     .truncation(true)
///     .mask(Mask::Lengths);
/// assert_eq!(padding.pairs()[2], ("max_length", "512".to_string()));
/// assert_eq!(Padding::new().max_length(None).pairs(), [("max_length", "none".to_string())]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Padding {
    pad_value: Option<f64>,
    padding_side: Option<PaddingSide>,
    pad_to_multiple_of: Option<i64>,
    max_length: Option<Option<i64>>,
    truncation: Option<bool>,
    mask: Option<Mask>,
}

impl Padding {
    /// No padding option given: every one as it is (at first, the library's defaults).
    pub fn new() -> Padding {
        Padding::default()
    }

    /// The value of the padding rows' elements (default 0), converted to the field's dtype.
    #[must_use]
    pub fn pad_value(mut self, pad_value: f64) -> Padding {
        self.pad_value = Some(pad_value);
        self
    }

    /// Where the padding goes (default [`PaddingSide::Right`]).
    #[must_use]
    pub fn padding_side(mut self, padding_side: PaddingSide) -> Padding {
        self.padding_side = Some(padding_side);
        self
    }

    /// The padded length is rounded up to a multiple of this (default 1; at least 1).
    #[must_use]
    pub fn pad_to_multiple_of(mut self, pad_to_multiple_of: i64) -> Padding {
        self.pad_to_multiple_of = Some(pad_to_multiple_of);
        self
    }

    /// The longest a sample of the field may be (default `None`: no limit; a limit is at
    /// least 1). A longer sample fails its batch with a `Shape` error naming the sample and
    /// field, unless [`truncation`](Padding::truncation) keeps its first `max_length` rows.
    #[must_use]
    pub fn max_length(mut self, max_length: Option<i64>) -> Padding {
        self.max_length = Some(max_length);
        self
    }

    /// Keep the first `max_length` rows of a longer sample rather than fail (default false).
    #[must_use]
    pub fn truncation(mut self, truncation: bool) -> Padding {
        self.truncation = Some(truncation);
        self
    }

    /// The field added after the dataset's (default [`Mask::AttentionMask`]).
    #[must_use]
    pub fn mask(mut self, mask: Mask) -> Padding {
        self.mask = Some(mask);
        self
    }

    /// The options as the string API takes them, `(key, value)`: each one given, in the order
    /// above.
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = Vec::new();
        if let Some(v) = self.pad_value {
            pairs.push(("pad_value", v.to_string()));
        }
        if let Some(v) = self.padding_side {
            pairs.push(("padding_side", v.to_string()));
        }
        if let Some(v) = self.pad_to_multiple_of {
            pairs.push(("pad_to_multiple_of", v.to_string()));
        }
        if let Some(v) = self.max_length {
            pairs.push((
                "max_length",
                v.map_or("none".to_string(), |n| n.to_string()),
            ));
        }
        if let Some(v) = self.truncation {
            pairs.push(("truncation", v.to_string()));
        }
        if let Some(v) = self.mask {
            pairs.push(("mask", v.to_string()));
        }
        pairs
    }
}

/// Checks that a batch has `n` fields and returns them by value, e.g. `let [x, y] = ...`.
pub fn fields<const N: usize>(batch: Batch) -> Result<[Tensor; N]> {
    let len = batch.len();
    batch.try_into().map_err(|_| {
        Error::new(
            Status::InvalidArgument,
            format!("the batch has {len} fields, not {N}"),
        )
    })
}
