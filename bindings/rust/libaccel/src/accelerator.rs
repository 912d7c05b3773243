//! The accelerator: this process's place among the ranks, collectives and the training verbs.

use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use libaccel_sys as sys;

use crate::callback::{resolve_all, FailureSlot};
use crate::config::Config;
use crate::data::{DataLoader, DataLoaderOptions, Dataset};
use crate::error::{check, Error, Result, Status};
use crate::ffi::{c_string, ensure_supported_library, make, query, read_text, take_bytes_list};
use crate::model::Model;
use crate::optim::{Optimizer, Scheduler};
use crate::tensor::Tensor;

/// How the job is distributed (Accelerate's `DistributedType`).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DistributedType {
    /// One process.
    No,
    /// Several processes on CPUs (Gloo).
    MultiCpu,
    /// Several processes on CUDA devices.
    MultiGpu,
    /// DeepSpeed's configuration chose sharded data parallelism (a ZeRO stage).
    DeepSpeed,
    /// FSDP's configuration chose sharded data parallelism.
    Fsdp,
}

/// A mixed precision mode.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Precision {
    /// fp32 throughout.
    No,
    /// fp16 autocast with loss scaling.
    Fp16,
    /// bf16 autocast.
    Bf16,
}

/// The reduction of [`Accelerator::reduce`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// Element-wise sum.
    Sum,
    /// Sum divided by the number of processes (floating point only).
    Mean,
    /// Element-wise maximum.
    Max,
    /// Element-wise minimum.
    Min,
}

/// An object [`Accelerator::prepare`] takes: [`Model`], [`Optimizer`], [`Scheduler`] or
/// [`DataLoader`]. Sealed.
pub trait Prepare: sealed::Sealed {
    #[doc(hidden)]
    fn raw_handle(&self) -> *mut std::ffi::c_void;
}

/// What [`Accelerator::prepare`] takes: the objects it changes, mutably borrowed. A tuple of up
/// to six (`(&mut model, &mut opt, &mut loader)`), one object (`&mut loader`), or a slice whose
/// length is known only at run time (`&mut [&mut dyn Prepare]`). Sealed.
#[diagnostic::on_unimplemented(
    message = "`prepare` takes the objects it changes mutably borrowed, as a tuple: \
               `acc.prepare((&mut model, &mut opt, &mut loader))`",
    label = "not `&mut` objects",
    note = "0.2's `acc.prepare(&[&model, &opt])` is `acc.prepare((&mut model, &mut opt))` since 0.3"
)]
pub trait PrepareAll: sealed::SealedAll {
    #[doc(hidden)]
    fn raw_handles(&mut self) -> Vec<*mut std::ffi::c_void>;
}

mod sealed {
    pub trait Sealed {}
    pub trait SealedAll {}
}

impl<T: Prepare> sealed::SealedAll for &mut T {}
impl<T: Prepare> PrepareAll for &mut T {
    fn raw_handles(&mut self) -> Vec<*mut std::ffi::c_void> {
        vec![self.raw_handle()]
    }
}

impl sealed::SealedAll for &mut [&mut dyn Prepare] {}
impl PrepareAll for &mut [&mut dyn Prepare] {
    fn raw_handles(&mut self) -> Vec<*mut std::ffi::c_void> {
        self.iter().map(|o| o.raw_handle()).collect()
    }
}

// Tuples of `&mut` objects, each its own type: the form a program writes.
macro_rules! prepare_tuples {
    ($(($($t:ident),+)),+ $(,)?) => {$(
        impl<$($t: Prepare + ?Sized),+> sealed::SealedAll for ($(&mut $t,)+) {}
        impl<$($t: Prepare + ?Sized),+> PrepareAll for ($(&mut $t,)+) {
            #[allow(non_snake_case)] // the tuple's fields, named by their types
            fn raw_handles(&mut self) -> Vec<*mut std::ffi::c_void> {
                let ($($t,)+) = self;
                vec![$($t.raw_handle()),+]
            }
        }
    )+};
}
prepare_tuples!(
    (A),
    (A, B),
    (A, B, C),
    (A, B, C, D),
    (A, B, C, D, E),
    (A, B, C, D, E, F),
);

macro_rules! preparable {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl Prepare for $t {
            fn raw_handle(&self) -> *mut std::ffi::c_void {
                self.as_raw().cast()
            }
        }
    )*};
}
preparable!(Model, Optimizer, Scheduler, DataLoader);

/// The runtime of this process (Accelerate's `Accelerator`): its rank among the processes
/// started by `accel launch` (or torchrun), the device, the process group, and the training
/// verbs.
///
/// Made from the environment (`RANK`, `WORLD_SIZE`, ...); alone it is a world of one. One may
/// exist per process at a time. The accelerator and every model, optimizer and scheduler
/// prepared with it form one training family whose calls the library serialises, so `&self`
/// methods may be called from several threads; collectives run in the order their calls reach
/// the library, which must be the same on every rank (make them from one thread).
///
/// ```
/// use accel::{Accelerator, Reduction, Tensor};
/// let acc = Accelerator::new()?;
/// let mine = Tensor::from_slice(&[acc.process_index()? as f32], &[1])?;
/// let all = acc.gather(&mine)?; // every rank's row, in rank order
/// assert_eq!(all.element_count()?, acc.num_processes()? as i64);
/// let sum = acc.reduce(&mine, Reduction::Sum)?;
/// # drop(sum);
/// # Ok::<(), accel::Error>(())
/// ```
pub struct Accelerator {
    raw: NonNull<sys::accel_accelerator>,
    /// Failure slots of the checkpoint closures (the library owns the closures themselves).
    checkpoint_failures: Mutex<Vec<Arc<CheckpointState>>>,
    /// Where the added trackers' failures go, shared by all (the library owns the trackers and
    /// reports the first failure of a call).
    tracker_failure: Arc<FailureSlot>,
    /// Where the log sink's failure goes (the library owns the sink).
    log_failure: Arc<FailureSlot>,
    /// The seed of the last `set_seed`, the process index added when device-specific.
    seeded: Mutex<Option<u64>>,
}

// SAFETY: accel.h "Threads": the training family's calls are serialised by the library; the
// queries never block; free may run on any thread.
unsafe impl Send for Accelerator {}
// SAFETY: as above.
unsafe impl Sync for Accelerator {}

impl Drop for Accelerator {
    fn drop(&mut self) {
        // SAFETY: our handle; no call on it can be running. Does not wait for other ranks.
        unsafe { sys::accel_accelerator_free(self.raw.as_ptr()) }
    }
}

impl std::fmt::Debug for Accelerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Accelerator({:p})", self.raw.as_ptr())
    }
}

pub(crate) type SaveFn =
    dyn FnMut(&mut StateWriter<'_>) -> std::result::Result<(), crate::BoxError> + Send;
pub(crate) type LoadFn = dyn FnMut(&[u8]) -> std::result::Result<(), crate::BoxError> + Send;

/// One registered checkpoint object: its closures and where their failure goes.
pub(crate) struct CheckpointState {
    pub(crate) save: Mutex<Box<SaveFn>>,
    pub(crate) load: Mutex<Box<LoadFn>>,
    pub(crate) failure: FailureSlot,
}

/// Where a checkpoint save closure writes its object's bytes (see
/// [`Accelerator::register_for_checkpointing`]). Also a [`std::io::Write`].
pub struct StateWriter<'a> {
    raw: *mut sys::accel_state_writer,
    _call: std::marker::PhantomData<&'a mut ()>,
}

impl StateWriter<'_> {
    pub(crate) fn new(raw: *mut sys::accel_state_writer) -> Self {
        StateWriter {
            raw,
            _call: std::marker::PhantomData,
        }
    }

    /// Appends `data` to the object being saved.
    pub fn write_bytes(&mut self, data: &[u8]) -> Result<()> {
        // SAFETY: the writer is valid for the save callback that lent it (the lifetime of self).
        check(unsafe { sys::accel_state_writer_write(self.raw, data.as_ptr().cast(), data.len()) })
    }
}

impl std::io::Write for StateWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write_bytes(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Accelerator {
    /// The accelerator of this process, configured by defaults, environment variables and the
    /// file `ACCEL_CONFIG_FILE` names (which `accel launch` sets). Its messages
    /// ([`logger`](Accelerator::logger)) go to the `log` facade.
    pub fn new() -> Result<Accelerator> {
        Accelerator::init(std::ptr::null())
    }

    /// The accelerator of this process with `config` (copied; it may be dropped afterwards).
    pub fn with_config(config: &Config) -> Result<Accelerator> {
        Accelerator::init(config.as_raw())
    }

    fn init(config: *const sys::accel_config) -> Result<Accelerator> {
        ensure_supported_library()?;
        // SAFETY: `config` is NULL or a live handle; valid out pointer.
        let raw = make(|out| unsafe { sys::accel_init(config, out) })?;
        let acc = Accelerator {
            raw: NonNull::new(raw).expect("non-null"),
            checkpoint_failures: Mutex::new(Vec::new()),
            tracker_failure: Arc::new(FailureSlot::default()),
            log_failure: Arc::new(FailureSlot::default()),
            seeded: Mutex::new(None),
        };
        // The library's messages go to the program's logger (the `log` facade).
        acc.log_to_facade()?;
        Ok(acc)
    }

    /// The raw handle, for calls through `libaccel-sys`; still owned by `self`.
    pub fn as_raw(&self) -> *mut sys::accel_accelerator {
        self.raw.as_ptr()
    }

    /// Global rank of this process.
    pub fn process_index(&self) -> Result<i32> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_process_index(self.as_raw(), out) })
    }

    /// Rank of this process on its machine.
    pub fn local_process_index(&self) -> Result<i32> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_local_process_index(self.as_raw(), out) })
    }

    /// Number of processes in the job.
    pub fn num_processes(&self) -> Result<i32> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_num_processes(self.as_raw(), out) })
    }

    /// Whether this is the main process (global rank 0).
    pub fn is_main_process(&self) -> Result<bool> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_is_main_process(self.as_raw(), out) })
    }

    /// Whether this is the main process of its machine.
    pub fn is_local_main_process(&self) -> Result<bool> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_is_local_main_process(self.as_raw(), out) })
    }

    /// The device this process computes on (`"cpu"`, `"cuda:1"`).
    pub fn device(&self) -> Result<String> {
        // SAFETY: live handle; buffer from read_text.
        read_text(|buf, cap, size| unsafe { sys::accel_device(self.as_raw(), buf, cap, size) })
    }

    /// How the job is distributed.
    pub fn distributed_type(&self) -> Result<DistributedType> {
        // SAFETY: live handle, valid out pointer.
        let raw = query(|out| unsafe { sys::accel_distributed_type(self.as_raw(), out) })?;
        match raw {
            sys::ACCEL_DISTRIBUTED_NO => Ok(DistributedType::No),
            sys::ACCEL_DISTRIBUTED_MULTI_CPU => Ok(DistributedType::MultiCpu),
            sys::ACCEL_DISTRIBUTED_MULTI_GPU => Ok(DistributedType::MultiGpu),
            sys::ACCEL_DISTRIBUTED_DEEPSPEED => Ok(DistributedType::DeepSpeed),
            sys::ACCEL_DISTRIBUTED_FSDP => Ok(DistributedType::Fsdp),
            other => Err(Error::new(
                Status::Internal,
                format!("unknown distributed type {other}"),
            )),
        }
    }

    /// The mixed precision mode in force.
    pub fn mixed_precision(&self) -> Result<Precision> {
        // SAFETY: live handle, valid out pointer.
        let raw = query(|out| unsafe { sys::accel_mixed_precision(self.as_raw(), out) })?;
        match raw {
            sys::ACCEL_PRECISION_NO => Ok(Precision::No),
            sys::ACCEL_PRECISION_FP16 => Ok(Precision::Fp16),
            sys::ACCEL_PRECISION_BF16 => Ok(Precision::Bf16),
            other => Err(Error::new(
                Status::Internal,
                format!("unknown precision {other}"),
            )),
        }
    }

    /// The configuration in force, as YAML with each setting's source.
    pub fn effective_config(&self) -> Result<String> {
        // SAFETY: live handle; buffer from read_text.
        read_text(|buf, cap, size| unsafe {
            sys::accel_effective_config(self.as_raw(), buf, cap, size)
        })
    }

    /// Blocks until every rank has called it.
    pub fn wait_for_everyone(&self) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::accel_wait_for_everyone(self.as_raw()) })
    }

    /// Interrupts (`true`) or stops interrupting (`false`) every call of this process that waits
    /// on other processes or on a dataloader's workers: while set, such a call returns an
    /// `Error` of `Status::Cancelled` within about 50 ms (accel.h, `accel_set_interrupted`).
    /// Callable from any thread while another one waits in a call (a signal watcher's, a
    /// deadline's); a collective it ends leaves the process group unusable, a dataloader loses
    /// no batch.
    pub fn set_interrupted(&self, interrupted: bool) -> Result<()> {
        // SAFETY: live handle; the library takes no lock of the accelerator's for this call.
        check(unsafe { sys::accel_set_interrupted(self.as_raw(), i32::from(interrupted)) })
    }

    /// Prints `message` and a newline on the local main process only.
    pub fn print(&self, message: &str) -> Result<()> {
        let message = c_string(message, "message")?;
        // SAFETY: live handle, NUL-terminated message.
        check(unsafe { sys::accel_print(self.as_raw(), message.as_ptr()) })
    }

    /// Runs `f` on the main process first and on the others once it is done (Accelerate's
    /// `main_process_first`); a collective: every rank calls it. The end runs also when `f`
    /// panics (the panic then resumes), so the other ranks are not left waiting for it.
    pub fn main_process_first<R>(&self, f: impl FnOnce() -> R) -> Result<R> {
        self.scoped(
            // SAFETY: live handle.
            |a| unsafe { sys::accel_main_process_first_begin(a) },
            // SAFETY: live handle; closes the begin.
            |a| unsafe { sys::accel_main_process_first_end(a) },
            f,
        )
    }

    /// `begin`, `f`, `end` (a begin/end pair of the header around a block): the end runs
    /// whatever `f` does, and a panic of `f` resumes after it; a failed end is the error.
    pub(crate) fn scoped<R>(
        &self,
        begin: impl FnOnce(*mut sys::accel_accelerator) -> sys::accel_status,
        end: impl FnOnce(*mut sys::accel_accelerator) -> sys::accel_status,
        f: impl FnOnce() -> R,
    ) -> Result<R> {
        check(begin(self.as_raw()))?;
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let ended = check(end(self.as_raw()));
        match ran {
            Err(payload) => std::panic::resume_unwind(payload),
            Ok(value) => ended.map(|()| value),
        }
    }

    /// Seeds LibTorch's generators and libaccel's own; `device_specific` adds the rank.
    /// Rust has no generator of its own to seed beside them (Accelerate seeds Python's `random`
    /// and numpy): seed yours from [`seed`](Accelerator::seed).
    pub fn set_seed(&self, seed: u64, device_specific: bool) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::accel_set_seed(self.as_raw(), seed, device_specific) })?;
        let rank = if device_specific {
            u64::try_from(self.process_index()?).unwrap_or(0)
        } else {
            0
        };
        *self.seeded.lock().unwrap_or_else(|e| e.into_inner()) = Some(seed.wrapping_add(rank));
        Ok(())
    }

    /// The seed the last [`set_seed`](Accelerator::set_seed) gave this process (the process
    /// index added when device-specific), for the program's own generators, the same on every
    /// rank otherwise: `StdRng::seed_from_u64(acc.seed().unwrap())` with the `rand` crate.
    /// `None` before any `set_seed`.
    pub fn seed(&self) -> Option<u64> {
        *self.seeded.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn tensor_op(
        &self,
        call: impl FnOnce(*mut *mut sys::accel_tensor) -> sys::accel_status,
    ) -> Result<Tensor> {
        let raw = make(call)?;
        // SAFETY: a new handle nothing else owns.
        Ok(unsafe { Tensor::from_raw(raw) }.expect("non-null"))
    }

    /// Every rank's tensor concatenated along dimension 0, in rank order, on every rank.
    pub fn gather(&self, tensor: &Tensor) -> Result<Tensor> {
        // SAFETY: live handles, valid out pointer.
        self.tensor_op(|out| unsafe { sys::accel_gather(self.as_raw(), tensor.as_raw(), out) })
    }

    /// Pads `tensor` along `dim` to the largest size any rank has there.
    pub fn pad_across_processes(
        &self,
        tensor: &Tensor,
        dim: i64,
        pad_value: f64,
        pad_first: bool,
    ) -> Result<Tensor> {
        // SAFETY: live handles, valid out pointer.
        self.tensor_op(|out| unsafe {
            sys::accel_pad_across_processes(
                self.as_raw(),
                tensor.as_raw(),
                dim,
                pad_value,
                pad_first,
                out,
            )
        })
    }

    /// The element-wise reduction of every rank's tensor, on every rank.
    pub fn reduce(&self, tensor: &Tensor, reduction: Reduction) -> Result<Tensor> {
        let op = match reduction {
            Reduction::Sum => sys::ACCEL_REDUCE_SUM,
            Reduction::Mean => sys::ACCEL_REDUCE_MEAN,
            Reduction::Max => sys::ACCEL_REDUCE_MAX,
            Reduction::Min => sys::ACCEL_REDUCE_MIN,
        };
        // SAFETY: live handles, valid out pointer.
        self.tensor_op(|out| unsafe { sys::accel_reduce(self.as_raw(), tensor.as_raw(), op, out) })
    }

    /// Rank `from_process`'s tensor on every rank; `tensor` is read there only (`None`
    /// elsewhere is fine).
    pub fn broadcast(&self, tensor: Option<&Tensor>, from_process: i32) -> Result<Tensor> {
        let raw = tensor.map_or(std::ptr::null(), |t| t.as_raw() as *const _);
        // SAFETY: live handle, `raw` NULL or live, valid out pointer.
        self.tensor_op(|out| unsafe { sys::accel_broadcast(self.as_raw(), raw, from_process, out) })
    }

    /// Every rank's bytes (any length), in rank order (Accelerate's `gather_object`).
    pub fn gather_object(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        // SAFETY: `data` valid for its length; valid out pointer.
        let list = make(|out| unsafe {
            sys::accel_gather_object(self.as_raw(), data.as_ptr().cast(), data.len(), out)
        })?;
        take_bytes_list(list)
    }

    /// Gathers like [`gather`](Accelerator::gather) and drops the samples duplicated to even
    /// out the last batch, so a metric counts every sample once.
    pub fn gather_for_metrics(&self, tensor: &Tensor) -> Result<Tensor> {
        // SAFETY: live handles, valid out pointer.
        self.tensor_op(|out| unsafe {
            sys::accel_gather_for_metrics(self.as_raw(), tensor.as_raw(), out)
        })
    }

    /// Accelerate's `split_between_processes` for a list (prompts, file names): the items this
    /// process takes, in order, as Accelerate 1.15 splits them. Process r of P takes a contiguous
    /// slice, the first `len % P` processes one item more; a process past the end takes none.
    /// With `apply_padding` (and P > 1) the list's last item is repeated until every process
    /// holds `len.div_ceil(P)` items (none added when P divides `len`), for a
    /// [`gather`](Accelerator::gather) afterwards (drop the repeats from its result). Alone:
    /// every item, unpadded. An empty list gives every process nothing. Not a collective.
    ///
    /// ```
    /// use accel::Accelerator;
    /// let acc = Accelerator::new()?; // alone: one process
    /// let prompts = ["a cat", "a dog", "a fish"];
    /// assert_eq!(acc.split_between_processes(&prompts, true)?, prompts);
    /// // With 2 processes: rank 0 gets ["a cat", "a dog"], rank 1 ["a fish", "a fish"].
    /// # Ok::<(), accel::Error>(())
    /// ```
    pub fn split_between_processes<T: Clone>(
        &self,
        items: &[T],
        apply_padding: bool,
    ) -> Result<Vec<T>> {
        self.split_indices_between_processes(items.len(), apply_padding)?
            .into_iter()
            .map(|i| {
                items.get(i).cloned().ok_or_else(|| {
                    Error::new(
                        Status::Internal,
                        format!("the library split {} items with index {i}", items.len()),
                    )
                })
            })
            .collect()
    }

    /// Accelerate's `split_between_processes` for a dictionary of lists: every value split
    /// alike, into any map type (`BTreeMap`, `HashMap`). Values of different lengths are an
    /// `InvalidArgument` error, as Accelerate raises `ValueError`.
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use accel::Accelerator;
    /// let acc = Accelerator::new()?; // alone: one process
    /// let columns = BTreeMap::from([("id", vec![1, 2, 3]), ("len", vec![5, 6, 7])]);
    /// let mine: BTreeMap<_, _> = acc.split_map_between_processes(&columns, false)?;
    /// assert_eq!(mine, columns);
    /// # Ok::<(), accel::Error>(())
    /// ```
    pub fn split_map_between_processes<'a, K, T, I, M>(
        &self,
        map: I,
        apply_padding: bool,
    ) -> Result<M>
    where
        I: IntoIterator<Item = (&'a K, &'a Vec<T>)>,
        K: Clone + 'a,
        T: Clone + 'a,
        M: FromIterator<(K, Vec<T>)>,
    {
        let entries: Vec<(&K, &Vec<T>)> = map.into_iter().collect();
        if let Some(((_, first), rest)) = entries.split_first() {
            if let Some((_, other)) = rest.iter().find(|(_, v)| v.len() != first.len()) {
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!(
                        "split_between_processes: all values in the dictionary must have the same \
                         length ({} and {})",
                        first.len(),
                        other.len()
                    ),
                ));
            }
        }
        let Some((_, first)) = entries.first() else {
            return Ok(M::from_iter(std::iter::empty()));
        };
        let indices = self.split_indices_between_processes(first.len(), apply_padding)?;
        Ok(entries
            .into_iter()
            .map(|(k, v)| (k.clone(), indices.iter().map(|&i| v[i].clone()).collect()))
            .collect())
    }

    /// The indexes into a list of `count` items that
    /// [`split_between_processes`](Accelerator::split_between_processes) gives this process,
    /// for lists that are not slices (lines of a file, a range).
    pub fn split_indices_between_processes(
        &self,
        count: usize,
        apply_padding: bool,
    ) -> Result<Vec<usize>> {
        let count = i64::try_from(count).map_err(|_| {
            Error::new(
                Status::InvalidArgument,
                format!("{count} items are more than the library counts"),
            )
        })?;
        let mut indices: Vec<i64> = Vec::new();
        loop {
            let mut needed = 0usize;
            let buf = if indices.is_empty() {
                std::ptr::null_mut()
            } else {
                indices.as_mut_ptr()
            };
            // SAFETY: live handle; `buf` is NULL or holds `indices.len()` entries.
            let status = unsafe {
                sys::accel_split_between_processes(
                    self.as_raw(),
                    count,
                    apply_padding,
                    buf,
                    indices.len(),
                    &mut needed,
                )
            };
            if status == sys::ACCEL_ERR_BUFFER_TOO_SMALL && needed > indices.len() {
                indices.resize(needed, 0);
                continue;
            }
            check(status)?;
            indices.truncate(needed);
            return indices
                .into_iter()
                .map(|i| {
                    usize::try_from(i).map_err(|_| {
                        Error::new(
                            Status::Internal,
                            format!("the library split with index {i}"),
                        )
                    })
                })
                .collect();
        }
    }

    /// Accelerate's `split_between_processes` for a tensor: this process's rows (dimension 0),
    /// split as [`split_between_processes`](Accelerator::split_between_processes) splits a
    /// list. With `apply_padding` every process gets `rows.div_ceil(P)` rows, the padding rows
    /// copies of the last row. Not a collective: every rank splits by the shape
    /// alone, so the ranks' tensors must have the same number of rows. A scalar is a `Shape`
    /// error.
    pub fn split_tensor_between_processes(
        &self,
        tensor: &Tensor,
        apply_padding: bool,
    ) -> Result<Tensor> {
        // SAFETY: live handles, valid out pointer.
        self.tensor_op(|out| unsafe {
            sys::accel_split_tensor_between_processes(
                self.as_raw(),
                tensor.as_raw(),
                apply_padding,
                out,
            )
        })
    }

    /// Accelerate's `set_trigger`: raises this process's stop flag (an early stop, a NaN loss)
    /// for the next [`check_trigger`](Accelerator::check_trigger). Local: it communicates
    /// nothing and takes no lock, so any thread may call it, also while this process is inside
    /// a collective.
    pub fn set_trigger(&self) -> Result<()> {
        // SAFETY: live handle; the header allows this call from any thread at any time.
        check(unsafe { sys::accel_set_trigger(self.as_raw()) })
    }

    /// Accelerate's `check_trigger`, a collective: true on every rank when any rank raised its
    /// flag since the last check, and every flag is lowered again. Call it at the same point of
    /// the loop on every rank, so that all stop at the same step.
    ///
    /// ```
    /// use accel::Accelerator;
    /// let acc = Accelerator::new()?;
    /// assert!(!acc.check_trigger()?);
    /// acc.set_trigger()?; // e.g. the loss is NaN on this rank
    /// assert!(acc.check_trigger()?); // every rank sees it, and stops at the same step
    /// assert!(!acc.check_trigger()?); // lowered again
    /// # Ok::<(), accel::Error>(())
    /// ```
    pub fn check_trigger(&self) -> Result<bool> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_check_trigger(self.as_raw(), out) })
    }

    /// Accelerate's `join_uneven_inputs`: runs `f` (the training loop) for ranks whose numbers
    /// of batches differ. A rank that runs out of batches returns from `f` and keeps answering
    /// the others' gradient synchronisation with zero gradients (the average still divides by
    /// the number of processes) until every rank has returned; then every rank takes the
    /// parameters of the rank that made the most steps.
    ///
    /// `even_batches`: `None` leaves the prepared dataloaders as they are, `Some(b)` sets theirs
    /// (not a stream's) for the duration of `f`. Join is on only with several processes and
    /// even_batches false; otherwise this only sets and restores the option. Only the gradient
    /// synchronisation is answered: other collectives inside `f` (gather, reduce,
    /// [`check_trigger`](Accelerator::check_trigger)) must not be called by one rank after
    /// another has returned. Several prepared models, or a model with buffers (batch norm), are
    /// [`Status::Unsupported`] with join on; a join inside another is [`Status::State`].
    ///
    /// The end is a collective and runs whatever `f` does: when `f` fails its error comes back
    /// (the end's, if it fails too, added to its message); when `f` panics the panic resumes
    /// after the end. For an error type of your own, return it inside: `f` returning
    /// `Ok(my_loop(acc))` gives `Ok(Err(e))`.
    ///
    /// ```no_run
    /// # use accel::*;
    /// # fn f(acc: &Accelerator, mut model: Model, mut opt: Optimizer, mut loader: DataLoader) -> Result<()> {
    /// acc.prepare((&mut model, &mut opt, &mut loader))?;
    /// let steps = acc.join_uneven_inputs(Some(false), |acc| {
    ///     let mut steps = 0;
    ///     for batch in &mut loader {
    ///         let [x, y] = fields(batch?)?;
    ///         let loss = model.call1("training_step", &[&x, &y])?;
    ///         acc.backward(&loss)?;
    ///         opt.step()?;
    ///         opt.zero_grad()?;
    ///         steps += 1;
    ///     }
    ///     Ok(steps)
    /// })?; // the parameters now agree on every rank, whatever its number of steps
    /// # Ok(()) }
    /// ```
    pub fn join_uneven_inputs<T>(
        &self,
        even_batches: Option<bool>,
        f: impl FnOnce(&Accelerator) -> Result<T>,
    ) -> Result<T> {
        let even = even_batches.map_or(-1, i32::from);
        // SAFETY: live handle.
        check(unsafe { sys::accel_join_uneven_inputs_begin(self.as_raw(), even) })?;
        // The end answers the other ranks: it runs also when `f` panics, and the panic resumes.
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(self)));
        // SAFETY: live handle; begin succeeded.
        let ended = check(unsafe { sys::accel_join_uneven_inputs_end(self.as_raw()) });
        match (ran, ended) {
            (Err(payload), _) => std::panic::resume_unwind(payload),
            (Ok(Err(e)), Err(end)) => {
                Err(e.with_detail(&format!("and join_uneven_inputs' end failed too: {end}")))
            }
            (Ok(Err(e)), Ok(())) => Err(e),
            (Ok(Ok(_)), Err(end)) => Err(end),
            (Ok(Ok(value)), Ok(())) => Ok(value),
        }
    }

    /// Accelerate's `prepare`: models to the device with data-parallel gradient
    /// synchronisation, optimizers bound to the placed parameters, schedulers with Accelerate's
    /// stepping rules, dataloaders sharded. Every object is checked before any is prepared.
    ///
    /// The objects change, so they are lent mutably ([`PrepareAll`]): a tuple of up to six, one
    /// object, or `&mut [&mut dyn Prepare]` for a number known at run time.
    ///
    /// ```no_run
    /// # use accel::*;
    /// # fn f(acc: &Accelerator, mut model: Model, mut opt: Optimizer, mut sched: Scheduler,
    /// #      mut loader: DataLoader) -> Result<()> {
    /// acc.prepare((&mut model, &mut opt, &mut sched, &mut loader))?;
    /// # Ok(()) }
    /// ```
    pub fn prepare(&self, mut objects: impl PrepareAll) -> Result<()> {
        self.prepare_raw(&objects.raw_handles())
    }

    /// 0.2's [`prepare`](Accelerator::prepare), which took shared references to objects it
    /// changes. Kept for 0.3 only.
    #[deprecated(
        since = "0.3.0",
        note = "use prepare((&mut model, &mut opt, ...)): prepare changes the objects"
    )]
    pub fn prepare_shared(&self, objects: &[&dyn Prepare]) -> Result<()> {
        let raws: Vec<*mut std::ffi::c_void> = objects.iter().map(|o| o.raw_handle()).collect();
        self.prepare_raw(&raws)
    }

    fn prepare_raw(&self, raws: &[*mut std::ffi::c_void]) -> Result<()> {
        // SAFETY: live handles of the kinds the call takes.
        check(unsafe { sys::accel_prepare(self.as_raw(), raws.as_ptr(), raws.len()) })
    }

    /// Opens a micro-step (Accelerate's `accumulate()`): call once per batch, before forward.
    pub fn accumulate(&self) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::accel_accumulate(self.as_raw()) })
    }

    /// Whether the current micro-step synchronises gradients.
    pub fn sync_gradients(&self) -> Result<bool> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_sync_gradients(self.as_raw(), out) })
    }

    /// Backward of a one-element loss, gradients averaged across processes.
    pub fn backward(&self, loss: &Tensor) -> Result<()> {
        // SAFETY: live handles.
        check(unsafe { sys::accel_backward(self.as_raw(), loss.as_raw()) })
    }

    /// Clips the gradient norm of `model` to `max_norm`; returns the norm before clipping.
    pub fn clip_grad_norm(&self, model: &Model, max_norm: f64, norm_type: f64) -> Result<f64> {
        // SAFETY: live handles, valid out pointer.
        query(|out| unsafe {
            sys::accel_clip_grad_norm(self.as_raw(), model.as_raw(), max_norm, norm_type, out)
        })
    }

    /// Clamps every gradient element of `model` to `[-clip_value, clip_value]`.
    pub fn clip_grad_value(&self, model: &Model, clip_value: f64) -> Result<()> {
        // SAFETY: live handles.
        check(unsafe { sys::accel_clip_grad_value(self.as_raw(), model.as_raw(), clip_value) })
    }

    /// Runs a checkpoint call and turns a closure's failure back into its error or panic.
    pub(crate) fn with_checkpoint_closures(&self, status: sys::accel_status) -> Result<()> {
        let states = self
            .checkpoint_failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        resolve_all(check(status), states.iter().map(|s| &s.failure))
    }

    /// The slot every added tracker stores its failure in.
    pub(crate) fn tracker_failure(&self) -> &Arc<FailureSlot> {
        &self.tracker_failure
    }

    /// The slot the log sink stores its failure in.
    pub(crate) fn log_failure(&self) -> &Arc<FailureSlot> {
        &self.log_failure
    }

    pub(crate) fn keep_checkpoint_state(&self, state: Arc<CheckpointState>) {
        self.checkpoint_failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(state);
    }
}

// DataLoader's constructors are here, not in data.rs: they take an Accelerator, and data.rs never
// names it, so that accelerator.rs depends on data.rs and not the other way round.
impl DataLoader {
    /// A dataloader over `dataset` for this accelerator's process (keeps the dataset alive).
    pub fn new(accelerator: &Accelerator, dataset: &Dataset) -> Result<DataLoader> {
        DataLoader::for_accelerator(accelerator.as_raw(), dataset)
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
}
