//! Datasets (from tensors, IDX files or a Rust closure) and the sharded, prefetching dataloader.

use std::ffi::c_void;
use std::fmt::Display;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Arc;

use libaccel_sys as sys;

use crate::accelerator::Accelerator;
use crate::callback::FailureSlot;
use crate::error::{check, BoxError, Error, Result, Status};
use crate::ffi::{ensure_supported_library, make, path_string, query, set_option};
use crate::options::{default_is_new, options_type};
use crate::tensor::{Dtype, Tensor};

/// One field of a closure dataset: its element type and per-sample shape (`[]` for a scalar
/// per sample, `[28, 28]` for an image).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Element type of the field.
    pub dtype: Dtype,
    /// Shape of one sample of the field.
    pub shape: Vec<i64>,
}

impl Field {
    /// A field of `dtype` with per-sample `shape`.
    pub fn new(dtype: Dtype, shape: &[i64]) -> Field {
        Field {
            dtype,
            shape: shape.to_vec(),
        }
    }
}

type SampleFn = dyn Fn(i64, &mut [&mut [u8]]) -> std::result::Result<(), BoxError> + Send + Sync;

/// A closure dataset's state, shared by the library (released by its release callback) and by
/// the Rust dataset and dataloaders (for the failure slot).
struct SampleState {
    fill: Box<SampleFn>,
    failure: FailureSlot,
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
    /// let test = libaccel::Dataset::from_idx(&[
    ///     format!("{dir}/t10k-images-idx3-ubyte.gz"),
    ///     format!("{dir}/t10k-labels-idx1-ubyte.gz"),
    /// ])?;
    /// assert_eq!(test.sample_count()?, 10_000);
    /// assert!(libaccel::Dataset::from_idx(&["/no/such/file"]).is_err());
    /// # Ok::<(), libaccel::Error>(())
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
    ///
    /// ```
    /// use libaccel::{Dataset, Dtype, Field};
    /// let squares = Dataset::from_fn(10, &[Field::new(Dtype::I64, &[])], |i, fields| {
    ///     fields[0].copy_from_slice(&(i * i).to_ne_bytes());
    ///     Ok(())
    /// })?;
    /// assert_eq!(squares.sample_count()?, 10);
    /// # Ok::<(), libaccel::Error>(())
    /// ```
    pub fn from_fn<F>(sample_count: i64, fields: &[Field], fill: F) -> Result<Dataset>
    where
        F: Fn(i64, &mut [&mut [u8]]) -> std::result::Result<(), BoxError> + Send + Sync + 'static,
    {
        ensure_supported_library()?;
        let dtypes: Vec<sys::accel_dtype> = fields.iter().map(|f| f.dtype.to_raw()).collect();
        let dim_counts: Vec<usize> = fields.iter().map(|f| f.shape.len()).collect();
        let dims: Vec<i64> = fields
            .iter()
            .flat_map(|f| f.shape.iter().copied())
            .collect();
        let state = Arc::new(SampleState {
            fill: Box::new(fill),
            failure: FailureSlot::default(),
        });
        let user_data = Arc::into_raw(Arc::clone(&state)) as *mut c_void;
        let mut out: *mut sys::accel_dataset = std::ptr::null_mut();
        // SAFETY: the arrays are valid for their lengths; `user_data` is an Arc reference handed
        // to the library, which gives it back through `release_sample_state` exactly once.
        let status = unsafe {
            sys::accel_dataset_from_callback(
                sample_count,
                fields.len(),
                dtypes.as_ptr(),
                dim_counts.as_ptr(),
                if dims.is_empty() {
                    std::ptr::null()
                } else {
                    dims.as_ptr()
                },
                Some(fill_sample),
                user_data,
                Some(release_sample_state),
                &mut out,
            )
        };
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

    /// The number of samples.
    pub fn sample_count(&self) -> Result<i64> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_dataset_sample_count(self.raw.as_ptr(), out) })
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
            (state.fill)(index, &mut fields[..count])
        } else {
            let mut fields: Vec<&mut [u8]> = (0..count).map(field).collect();
            (state.fill)(index, &mut fields)
        }
    })
}

unsafe extern "C" fn release_sample_state(user_data: *mut c_void) {
    // SAFETY: called exactly once with the pointer from Arc::into_raw in `from_fn`.
    drop(unsafe { Arc::from_raw(user_data as *const SampleState) });
}

/// One batch: a tensor per dataset field, in field order.
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
/// `device_placement` (true).
///
/// ```
/// use libaccel::{Accelerator, DataLoader, DataLoaderOptions, Dataset, Tensor};
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
/// # Ok::<(), libaccel::Error>(())
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
    /// A dataloader over `dataset` for this accelerator's process (keeps the dataset alive).
    pub fn new(accelerator: &Accelerator, dataset: &Dataset) -> Result<DataLoader> {
        // SAFETY: live handles, valid out pointer.
        let raw = make(|out| unsafe {
            sys::accel_dataloader_new(accelerator.as_raw(), dataset.as_raw(), out)
        })?;
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

    /// A dataloader over `dataset` with typed options: [`new`](DataLoader::new) then
    /// [`set_options`](DataLoader::set_options).
    pub fn with(
        accelerator: &Accelerator,
        dataset: &Dataset,
        options: DataLoaderOptions,
    ) -> Result<DataLoader> {
        let mut loader = DataLoader::new(accelerator, dataset)?;
        loader.set_options(options)?;
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
        // SAFETY: live handle; the strings live for the call.
        set_option(key, &value, |k, v| unsafe {
            sys::accel_dataloader_set(self.as_raw(), k, v)
        })
    }

    /// The next batch of this epoch, or `None` at its end (the following call starts the next
    /// epoch). A failing sample closure ends the epoch with its error (or resumes its panic).
    pub fn next_batch(&mut self) -> Result<Option<Batch>> {
        let mut fields: Vec<*mut sys::accel_tensor> = vec![std::ptr::null_mut(); self.field_count];
        let mut count = 0usize;
        // SAFETY: `fields` has room for `field_count` handles, the number the dataset has.
        let status = unsafe {
            sys::accel_dataloader_next(self.as_raw(), fields.as_mut_ptr(), fields.len(), &mut count)
        };
        if let Err(e) = check(status) {
            return Err(match &self.callback {
                Some(state) => state.failure.resolve(e),
                None => e,
            });
        }
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

    /// The number of fields per batch.
    pub fn field_count(&self) -> usize {
        self.field_count
    }

    /// The number of batches this process gets in a whole epoch.
    pub fn batch_count(&self) -> Result<i64> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_dataloader_batch_count(self.as_raw(), out) })
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

    /// How many samples of the last global step are real rather than padding; -1 with drop_last.
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
        }
    }
);

default_is_new!(DataLoaderOptions);

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
