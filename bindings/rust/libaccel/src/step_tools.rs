//! The helpers around the training step, as Accelerate's: the local main process first, closures
//! that run on one process, `no_sync`, `find_executable_batch_size` and LocalSGD.

use std::any::Any;
use std::ffi::c_void;
use std::fmt::Display;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

use libaccel_sys as sys;

use crate::accelerator::Accelerator;
use crate::error::{check, BoxError, Error, Result, Status};
use crate::ffi::{make, owned_handle, query, set_option};
use crate::model::Model;

/// The error type of a [`find_executable_batch_size`](Accelerator::find_executable_batch_size)
/// try: it says whether the try ran out of memory (then the search retries smaller), and holds
/// the search's own errors (`From<Error>`).
///
/// Implemented for this crate's [`Error`] (its status is [`Status::OutOfMemory`], as every
/// libaccel call that ran out of memory returns) and for [`BoxError`] (such an [`Error`] itself or
/// anywhere in its chain of sources). An error type of the program's own implements it in one
/// line, typically by asking the `Error` it wraps.
pub trait BatchSizeError: From<Error> {
    /// Whether this error means the try ran out of memory.
    fn is_out_of_memory(&self) -> bool;
}

impl BatchSizeError for Error {
    fn is_out_of_memory(&self) -> bool {
        self.status() == Status::OutOfMemory
    }
}

impl BatchSizeError for BoxError {
    fn is_out_of_memory(&self) -> bool {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(self.as_ref());
        while let Some(e) = cause {
            if e.downcast_ref::<Error>()
                .is_some_and(|e| e.status() == Status::OutOfMemory)
            {
                return true;
            }
            cause = e.source();
        }
        false
    }
}

/// What a search's trampoline leaves for the caller: the value of the try that ran, or what
/// stopped the search (the try's own error, whole, or its panic).
struct Search<F, T, E> {
    f: F,
    value: Option<T>,
    error: Option<E>,
    panic: Option<Box<dyn Any + Send + 'static>>,
}

/// One try, called by the library on the caller's thread; nothing unwinds into C.
unsafe extern "C" fn batch_size_try<F, T, E>(user_data: *mut c_void, size: i64) -> sys::accel_status
where
    F: FnMut(i64) -> std::result::Result<T, E>,
    E: BatchSizeError,
{
    // SAFETY: `user_data` is the Search of the find_executable_batch_size call that is running
    // (on this thread, which nothing else touches while the library calls back).
    let search = unsafe { &mut *user_data.cast::<Search<F, T, E>>() };
    match catch_unwind(AssertUnwindSafe(|| (search.f)(size))) {
        Ok(Ok(value)) => {
            search.value = Some(value);
            sys::ACCEL_OK
        }
        Ok(Err(e)) if e.is_out_of_memory() => sys::ACCEL_ERR_OUT_OF_MEMORY,
        Ok(Err(e)) => {
            search.error = Some(e);
            sys::ACCEL_ERR_CALLBACK
        }
        Err(payload) => {
            search.panic = Some(payload);
            sys::ACCEL_ERR_CALLBACK
        }
    }
}

impl Accelerator {
    /// Runs `f` on each machine's local main process first and on the machine's other
    /// processes once it is done (Accelerate's `local_main_process_first`: a download or a cache
    /// each machine makes once). A collective: every rank calls it. The end runs also when `f`
    /// panics (the panic then resumes).
    pub fn local_main_process_first<R>(&self, f: impl FnOnce() -> R) -> Result<R> {
        self.scoped(
            // SAFETY: live handle.
            |a| unsafe { sys::accel_local_main_process_first_begin(a) },
            // SAFETY: live handle; closes the begin.
            |a| unsafe { sys::accel_local_main_process_first_end(a) },
            f,
        )
    }

    /// Whether this is the last process (rank `num_processes - 1`; Accelerate's
    /// `is_last_process`).
    pub fn is_last_process(&self) -> Result<bool> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_is_last_process(self.as_raw(), out) })
    }

    /// Runs `f` on the main process only (Accelerate's `on_main_process`): `Some` of its value
    /// there, `None` elsewhere. Not a collective.
    ///
    /// ```
    /// use accel::Accelerator;
    /// let acc = Accelerator::new()?; // alone: the main, local main and last process
    /// assert_eq!(acc.on_main_process(|| "saved")?, Some("saved"));
    /// assert_eq!(acc.on_last_process(|| 1)?, Some(1));
    /// assert_eq!(acc.on_process(1, || 2)?, None); // there is no rank 1
    /// # Ok::<(), accel::Error>(())
    /// ```
    pub fn on_main_process<R>(&self, f: impl FnOnce() -> R) -> Result<Option<R>> {
        Ok(self.is_main_process()?.then(f))
    }

    /// Runs `f` on each machine's local main process only (Accelerate's
    /// `on_local_main_process`).
    pub fn on_local_main_process<R>(&self, f: impl FnOnce() -> R) -> Result<Option<R>> {
        Ok(self.is_local_main_process()?.then(f))
    }

    /// Runs `f` on the last process only (Accelerate's `on_last_process`).
    pub fn on_last_process<R>(&self, f: impl FnOnce() -> R) -> Result<Option<R>> {
        Ok(self.is_last_process()?.then(f))
    }

    /// Runs `f` on the process of global rank `process_index` only (Accelerate's
    /// `on_process(process_index=...)`).
    pub fn on_process<R>(&self, process_index: i32, f: impl FnOnce() -> R) -> Result<Option<R>> {
        Ok((self.process_index()? == process_index).then(f))
    }

    /// Runs `f` under Accelerate's `no_sync(model)`: the backwards inside keep `model`'s
    /// gradients on this rank (they add up), and the first backward after it reduces them all
    /// (PyTorch DDP's `no_sync`). Optimizers still step when called. Nests. With one process, or
    /// a model that is not prepared, there is nothing to hold back. Not a collective. The end
    /// runs also when `f` panics (the panic then resumes).
    ///
    /// ```no_run
    /// # use accel::*;
    /// # fn f(acc: &Accelerator, model: &Model, opt: &mut Optimizer, batches: &[[Tensor; 2]]) -> Result<()> {
    /// let (last, rest) = batches.split_last().unwrap();
    /// acc.no_sync(model, || -> Result<()> {
    ///     for [x, y] in rest {
    ///         acc.backward(&model.call1("training_step", &[x, y])?)?; // local gradients
    ///     }
    ///     Ok(())
    /// })??;
    /// acc.backward(&model.call1("training_step", &[&last[0], &last[1]])?)?; // reduces them all
    /// opt.step()?;
    /// # Ok(()) }
    /// ```
    pub fn no_sync<R>(&self, model: &Model, f: impl FnOnce() -> R) -> Result<R> {
        let m = model.as_raw();
        self.scoped(
            // SAFETY: live handles.
            |a| unsafe { sys::accel_no_sync_begin(a, m) },
            // SAFETY: live handles; closes the begin.
            |a| unsafe { sys::accel_no_sync_end(a, m) },
            f,
        )
    }

    /// Accelerate's `find_executable_batch_size`: calls `f` with `starting_batch_size` (128 in
    /// Accelerate), and after a try that ran out of memory (an error whose
    /// [`is_out_of_memory`](BatchSizeError::is_out_of_memory) is true: any libaccel call inside
    /// that ran out of memory returns one) again with `int(size * 0.9)`: 128, 115, 103, ... 9, 8,
    /// 7, ... Returns the size whose try ran and that try's value. When no size down to 1 runs, an
    /// [`Status::OutOfMemory`] error "No executable batch size found, reached zero." (also for a
    /// start of 0). Any other error of a try ends the search and comes back as it is (the same
    /// value); a panic resumes after the search.
    ///
    /// In a job of several processes every rank calls it with the same start and all go on with
    /// the same size (a rank that ran out of memory makes every rank retry smaller). A retried
    /// try leaves the prepared models' gradients, dataloaders' positions, the accumulation
    /// counters and the generators as they were before it (accel.h); make the model's
    /// parameters and optimizer state inside `f`, as Accelerate's examples do.
    ///
    /// ```
    /// use accel::{Accelerator, Error, Status};
    /// let acc = Accelerator::new()?;
    /// let (size, steps) = acc.find_executable_batch_size(128, |size| {
    ///     if size > 100 {
    ///         // what a model call that ran out of memory returns
    ///         return Err(Error::new(Status::OutOfMemory, "pretend"));
    ///     }
    ///     Ok(1000 / size)
    /// })?;
    /// assert_eq!((size, steps), (92, 10)); // 128, 115, 103, then 92 ran
    /// # Ok::<(), accel::Error>(())
    /// ```
    pub fn find_executable_batch_size<F, T, E>(
        &self,
        starting_batch_size: i64,
        f: F,
    ) -> std::result::Result<(i64, T), E>
    where
        F: FnMut(i64) -> std::result::Result<T, E>,
        E: BatchSizeError,
    {
        let mut search = Search {
            f,
            value: None,
            error: None,
            panic: None,
        };
        let mut size = 0i64;
        // SAFETY: live handle; the trampoline matches `search`'s type, which outlives the call
        // (the library calls back on this thread, during the call only).
        let status = unsafe {
            sys::accel_find_executable_batch_size(
                self.as_raw(),
                starting_batch_size,
                Some(batch_size_try::<F, T, E>),
                (&mut search as *mut Search<F, T, E>).cast(),
                &mut size,
            )
        };
        if let Some(payload) = search.panic.take() {
            resume_unwind(payload);
        }
        if let Some(e) = search.error.take() {
            return Err(e);
        }
        check(status)?;
        match search.value {
            Some(value) => Ok((size, value)),
            None => Err(Error::new(
                Status::Internal,
                "find_executable_batch_size succeeded without a try that ran",
            )
            .into()),
        }
    }

    /// Accelerate's `with LocalSGD(accelerator, model, local_sgd_steps) as local_sgd:` as a
    /// closure: [`LocalSgd::new`], `f` with it (call [`LocalSgd::step`] after each optimizer
    /// step), then [`LocalSgd::end`], which averages once more when the last step did not. When
    /// `f` fails (or panics) the handle is freed without the end's average, which is no
    /// collective, and its error comes back.
    ///
    /// ```no_run
    /// # use accel::*;
    /// # fn f(acc: &Accelerator, mut model: Model, mut opt: Optimizer, mut loader: DataLoader) -> Result<()> {
    /// acc.prepare((&mut model, &mut opt, &mut loader))?;
    /// acc.local_sgd(&model, 8, |local_sgd| {
    ///     for batch in &mut loader {
    ///         let [x, y] = fields(batch?)?;
    ///         acc.backward(&model.call1("training_step", &[&x, &y])?)?; // local gradients
    ///         opt.step()?;
    ///         opt.zero_grad()?;
    ///         local_sgd.step()?; // every 8th averages the parameters across the ranks
    ///     }
    ///     Ok(())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn local_sgd<R>(
        &self,
        model: &Model,
        local_sgd_steps: i64,
        f: impl FnOnce(&mut LocalSgd) -> Result<R>,
    ) -> Result<R> {
        let mut local_sgd = LocalSgd::new(self, model, local_sgd_steps)?;
        let value = f(&mut local_sgd)?;
        local_sgd.end()?;
        Ok(value)
    }
}

owned_handle!(
    /// Accelerate's LocalSGD: from [`new`](LocalSgd::new) to [`end`](LocalSgd::end), the model's
    /// gradients stay on each rank (no all-reduce per backward), and every
    /// `local_sgd_steps`-th [`step`](LocalSgd::step) averages its parameters across the ranks
    /// instead. The model must be prepared in a job of several processes; with one process it
    /// only counts steps. Dropped without `end`, it ends `no_sync` without averaging (no
    /// collective). [`Accelerator::local_sgd`] is the closure form.
    ///
    /// ```no_run
    /// # use accel::*;
    /// # fn f(acc: &Accelerator, model: &Model) -> Result<()> {
    /// let mut local_sgd = LocalSgd::new(acc, model, 4)?;
    /// local_sgd.set("outer_optimizer", "nesterov")?; // DiLoCo's outer step, beyond Accelerate
    /// for _ in 0..10 {
    ///     // forward, backward, optimizer step ...
    ///     local_sgd.step()?; // steps 4 and 8 average
    /// }
    /// local_sgd.end()?; // averages the last 2 steps' change
    /// assert_eq!(local_sgd.average_count()?, 3);
    /// # Ok(()) }
    /// ```
    LocalSgd,
    sys::accel_local_sgd,
    sys::accel_local_sgd_free
);

impl LocalSgd {
    /// Starts LocalSGD over `model` (prepared with `accelerator`), averaging every
    /// `local_sgd_steps` steps (at least 1, else `InvalidArgument`). Under ZeRO it is
    /// `Unsupported`, as Accelerate refuses DeepSpeed and FSDP. Keeps what it needs alive.
    pub fn new(accelerator: &Accelerator, model: &Model, local_sgd_steps: i64) -> Result<LocalSgd> {
        // SAFETY: live handles, valid out pointer.
        let raw = make(|out| unsafe {
            sys::accel_local_sgd_begin(accelerator.as_raw(), model.as_raw(), local_sgd_steps, out)
        })?;
        // SAFETY: a new handle nothing else owns.
        Ok(unsafe { LocalSgd::from_raw(raw) }.expect("non-null"))
    }

    /// Sets an option before the first step: `outer_optimizer` (`none`: Accelerate's plain
    /// average; `nesterov`: DiLoCo's outer step), `outer_lr` (0.7), `outer_momentum` (0.9).
    pub fn set(&mut self, key: &str, value: impl Display) -> Result<()> {
        // SAFETY: live handle; the strings live for the call.
        set_option(key, &value, |k, v| unsafe {
            sys::accel_local_sgd_set(self.as_raw(), k, v)
        })
    }

    /// Counts an optimizer step; every `local_sgd_steps`-th averages the parameters (a
    /// collective: every rank calls it alike).
    pub fn step(&mut self) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::accel_local_sgd_step(self.as_raw()) })
    }

    /// Averages once more unless the last step just did (n steps average
    /// `ceil(n / local_sgd_steps)` times) and ends `no_sync`: a collective when it averages. A
    /// second end does nothing.
    pub fn end(&mut self) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::accel_local_sgd_end(self.as_raw()) })
    }

    /// How many times the parameters were averaged so far.
    pub fn average_count(&self) -> Result<i64> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_local_sgd_average_count(self.as_raw(), out) })
    }
}
