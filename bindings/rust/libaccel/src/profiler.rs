//! Accelerate's `accelerator.profile(ProfileKwargs(...))` on LibTorch's profiler.

use std::ffi::c_void;
use std::fmt::Display;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Mutex;

use libaccel_sys as sys;

use crate::accelerator::Accelerator;
use crate::callback::FailureSlot;
use crate::error::{check, BoxError, Result};
use crate::ffi::{c_string, make, path_string, query, read_text, set_option};

/// What the profiler records (its `activities` option).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Activities {
    /// CPU operators (the default).
    Cpu,
    /// CUDA kernels.
    Cuda,
    /// Both.
    CpuAndCuda,
}

impl Activities {
    fn as_str(self) -> &'static str {
        match self {
            Activities::Cpu => "cpu",
            Activities::Cuda => "cuda",
            Activities::CpuAndCuda => "cpu,cuda",
        }
    }
}

/// The options of a [`Profiler`] (Accelerate's `ProfileKwargs`), typed; what is left out keeps the
/// library's default.
///
/// ```
/// use accel::ProfileOptions;
/// let options = ProfileOptions::new().schedule(1, 1, 2, 2).record_shapes(true);
/// assert_eq!(options.pairs()[0], ("wait", "1".to_string()));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProfileOptions {
    activities: Option<Activities>,
    schedule: Option<[u32; 4]>,
    skip_first: Option<u32>,
    record_shapes: Option<bool>,
    profile_memory: Option<bool>,
    with_stack: Option<bool>,
    with_flops: Option<bool>,
    with_modules: Option<bool>,
    output_trace_dir: Option<PathBuf>,
}

impl ProfileOptions {
    /// Every option at the library's default: CPU activities, no schedule (the whole profiled
    /// block is one window), nothing extra recorded, no trace files.
    pub fn new() -> ProfileOptions {
        ProfileOptions::default()
    }

    /// What is recorded (default [`Activities::Cpu`]).
    #[must_use]
    pub fn activities(mut self, activities: Activities) -> Self {
        self.activities = Some(activities);
        self
    }

    /// torch.profiler's `schedule(wait, warmup, active, repeat)`: each window skips `wait`
    /// steps, warms up for `warmup`, records `active`; `repeat` windows (0: as many as the steps
    /// allow).
    #[must_use]
    pub fn schedule(mut self, wait: u32, warmup: u32, active: u32, repeat: u32) -> Self {
        self.schedule = Some([wait, warmup, active, repeat]);
        self
    }

    /// Steps skipped before the schedule's first window (default 0; gives a schedule).
    #[must_use]
    pub fn skip_first(mut self, steps: u32) -> Self {
        self.skip_first = Some(steps);
        self
    }

    /// Records the operators' input shapes (default false).
    #[must_use]
    pub fn record_shapes(mut self, on: bool) -> Self {
        self.record_shapes = Some(on);
        self
    }

    /// Records memory allocations (default false).
    #[must_use]
    pub fn profile_memory(mut self, on: bool) -> Self {
        self.profile_memory = Some(on);
        self
    }

    /// Records call stacks (default false).
    #[must_use]
    pub fn with_stack(mut self, on: bool) -> Self {
        self.with_stack = Some(on);
        self
    }

    /// Estimates FLOPs of matrix products and convolutions (default false).
    #[must_use]
    pub fn with_flops(mut self, on: bool) -> Self {
        self.with_flops = Some(on);
        self
    }

    /// Records the module hierarchy (default false).
    #[must_use]
    pub fn with_modules(mut self, on: bool) -> Self {
        self.with_modules = Some(on);
        self
    }

    /// At [`stop`](Profiler::stop) every rank writes its last complete window here as
    /// `profile_<rank>.json` (Chrome trace; default none).
    #[must_use]
    pub fn output_trace_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.output_trace_dir = Some(dir.as_ref().to_path_buf());
        self
    }

    /// The options given as [`Profiler::set`] takes them, `(key, value)`, in the order they are
    /// sent (`output_trace_dir` last, as the path's text).
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = Vec::new();
        if let Some(a) = self.activities {
            pairs.push(("activities", a.as_str().to_string()));
        }
        if let Some(s) = self.schedule {
            for (key, value) in ["wait", "warmup", "active", "repeat"].into_iter().zip(s) {
                pairs.push((key, value.to_string()));
            }
        }
        if let Some(n) = self.skip_first {
            pairs.push(("skip_first", n.to_string()));
        }
        let flags = [
            ("record_shapes", self.record_shapes),
            ("profile_memory", self.profile_memory),
            ("with_stack", self.with_stack),
            ("with_flops", self.with_flops),
            ("with_modules", self.with_modules),
        ];
        for (key, value) in flags {
            if let Some(on) = value {
                pairs.push((key, on.to_string()));
            }
        }
        if let Some(dir) = &self.output_trace_dir {
            pairs.push(("output_trace_dir", dir.display().to_string()));
        }
        pairs
    }
}

type TraceReadyFn = dyn FnMut(&TraceWindow<'_>) -> std::result::Result<(), BoxError> + Send;

/// The trace-ready closure and where its failure goes; boxed, at a fixed address the library
/// holds until the profiler is freed.
struct TraceReady {
    f: Mutex<Box<TraceReadyFn>>,
    failure: FailureSlot,
}

unsafe extern "C" fn trace_ready(
    user_data: *mut c_void,
    profiler: *mut sys::accel_profiler,
) -> sys::accel_status {
    // SAFETY: the TraceReady the Profiler owns; it outlives the handle that calls back.
    let state = unsafe { &*(user_data as *const TraceReady) };
    let window = TraceWindow {
        raw: profiler,
        _call: PhantomData,
    };
    match state.failure.run(|| {
        let mut f = state.f.lock().unwrap_or_else(|p| p.into_inner());
        f(&window)
    }) {
        0 => sys::ACCEL_OK,
        _ => sys::ACCEL_ERR_CALLBACK,
    }
}

/// Accelerate's `accelerator.profile(ProfileKwargs(...))` on LibTorch's profiler: set the
/// options, [`start`](Profiler::start), [`step`](Profiler::step) at the start of each step (as
/// `prof.step()`), [`stop`](Profiler::stop) at the end; then read the last complete window
/// ([`table`](Profiler::table), [`export_chrome_trace`](Profiler::export_chrome_trace)).
///
/// LibTorch records the operators of the thread that started it (and of the intra-op threads it
/// hands work to): start, step and stop from one thread (`State` otherwise). With an
/// `output_trace_dir`, stop writes every rank's `profile_<rank>.json` there and waits for the
/// other ranks (a collective). A [`on_trace_ready`](Profiler::on_trace_ready) closure runs each
/// time a window is complete; when it fails, the step or stop that completed the window returns
/// a `Callback` error with its error as the source (a panic resumes there). Dropped while running,
/// it stops without writing anything.
///
/// ```
/// use accel::{layers::Linear, Accelerator, Model, ProfileOptions, Profiler, Tensor};
/// let acc = Accelerator::new()?;
/// let mut model = Model::new()?;
/// model.add("fc", Linear::new(4, 2))?;
/// model.define("def forward(self, x):\n    return self.fc.forward(x)\n")?;
/// let x = Tensor::from_slice(&[0.5f32; 8], &[2, 4])?;
/// // Each window: 1 step skipped, 1 warming up, 2 recorded; one window.
/// let mut prof = Profiler::with(&acc, ProfileOptions::new().schedule(1, 1, 2, 1))?;
/// prof.on_trace_ready(|window| {
///     let table = window.table(Some("self_cpu_time_total"), Some(10))?;
///     assert!(table.contains("aten::"), "{table}");
///     Ok(())
/// })?;
/// prof.start()?;
/// for _ in 0..6 {
///     prof.step()?; // the 4th completes the window: the closure runs
///     model.call("forward", &[&x])?;
/// }
/// prof.stop()?;
/// assert_eq!(prof.window_count()?, 1);
/// assert!(prof.table(None, None)?.contains("Self CPU time total:"));
/// # Ok::<(), accel::Error>(())
/// ```
pub struct Profiler {
    raw: NonNull<sys::accel_profiler>,
    /// Declared after `raw` and dropped after the handle is freed (`Drop` frees it first).
    ready: Option<Box<TraceReady>>,
}

// SAFETY: accel.h lets every handle move between threads and be freed on any; the library checks
// that start, step and stop come from one thread. The calls that change the profiler take
// `&mut self`; those on `&self` only read its last window.
unsafe impl Send for Profiler {}
// SAFETY: as above.
unsafe impl Sync for Profiler {}

impl Drop for Profiler {
    fn drop(&mut self) {
        // SAFETY: our handle; no call on it can be running. `ready` is dropped after this.
        unsafe { sys::accel_profiler_free(self.raw.as_ptr()) }
    }
}

impl std::fmt::Debug for Profiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Profiler({:p})", self.raw.as_ptr())
    }
}

impl Profiler {
    /// A profiler for `accelerator`'s process, every option at its default.
    pub fn new(accelerator: &Accelerator) -> Result<Profiler> {
        // SAFETY: live handle, valid out pointer.
        let raw = make(|out| unsafe { sys::accel_profiler_new(accelerator.as_raw(), out) })?;
        Ok(Profiler {
            raw: NonNull::new(raw).expect("non-null"),
            ready: None,
        })
    }

    /// A profiler with typed options: [`new`](Profiler::new) and a [`set`](Profiler::set) per
    /// option given.
    pub fn with(accelerator: &Accelerator, options: ProfileOptions) -> Result<Profiler> {
        let mut profiler = Profiler::new(accelerator)?;
        for (key, value) in options.pairs() {
            if key == "output_trace_dir" {
                continue; // as the path's bytes, below
            }
            profiler.set(key, value)?;
        }
        if let Some(dir) = &options.output_trace_dir {
            let (key, dir) = (c_string("output_trace_dir", "key")?, path_string(dir)?);
            // SAFETY: live handle, NUL-terminated strings.
            check(unsafe {
                sys::accel_profiler_set(profiler.as_raw(), key.as_ptr(), dir.as_ptr())
            })?;
        }
        Ok(profiler)
    }

    /// The raw handle, for calls through `libaccel-sys`; still owned by `self`.
    pub fn as_raw(&self) -> *mut sys::accel_profiler {
        self.raw.as_ptr()
    }

    /// Sets an option before [`start`](Profiler::start) (`activities`, `wait`, `warmup`,
    /// `active`, `repeat`, `skip_first`, `record_shapes`, `profile_memory`, `with_stack`,
    /// `with_flops`, `with_modules`, `output_trace_dir`: [`ProfileOptions`] types them).
    pub fn set(&mut self, key: &str, value: impl Display) -> Result<()> {
        // SAFETY: live handle; the strings live for the call.
        set_option(key, &value, |k, v| unsafe {
            sys::accel_profiler_set(self.as_raw(), k, v)
        })
    }

    /// Accelerate's `on_trace_ready`: `f` runs each time a window is complete, during the
    /// [`step`](Profiler::step) or [`stop`](Profiler::stop) that completed it, with the window to
    /// read. Replaces the closure set before.
    pub fn on_trace_ready(
        &mut self,
        f: impl FnMut(&TraceWindow<'_>) -> std::result::Result<(), BoxError> + Send + 'static,
    ) -> Result<()> {
        let ready = Box::new(TraceReady {
            f: Mutex::new(Box::new(f)),
            failure: FailureSlot::default(),
        });
        let data = (&*ready as *const TraceReady).cast_mut().cast::<c_void>();
        // SAFETY: live handle; `ready` is kept (at the same address) until the handle is freed or
        // another closure replaces it, after the library holds the new one.
        check(unsafe {
            sys::accel_profiler_set_on_trace_ready(self.as_raw(), Some(trace_ready), data)
        })?;
        self.ready = Some(ready);
        Ok(())
    }

    /// Starts recording: step 0 of the schedule. `State` when started before, or when
    /// LibTorch's profiler is already on in this thread.
    pub fn start(&mut self) -> Result<()> {
        // SAFETY: live handle.
        let status = unsafe { sys::accel_profiler_start(self.as_raw()) };
        self.settle(status)
    }

    /// The next step begins (`prof.step()`); may complete a window (and run the trace-ready
    /// closure).
    pub fn step(&mut self) -> Result<()> {
        // SAFETY: live handle.
        let status = unsafe { sys::accel_profiler_step(self.as_raw()) };
        self.settle(status)
    }

    /// The end of the profiled block: the trace files with an `output_trace_dir` (a collective
    /// then), and the main process logs the window's summary at info level. Stopping a profiler
    /// that is not running does nothing.
    pub fn stop(&mut self) -> Result<()> {
        // SAFETY: live handle.
        let status = unsafe { sys::accel_profiler_stop(self.as_raw()) };
        self.settle(status)
    }

    /// The last complete window's summary table (torch's `key_averages().table()`), see
    /// [`TraceWindow::table`].
    pub fn table(&self, sort_by: Option<&str>, row_limit: Option<usize>) -> Result<String> {
        table(self.as_raw(), sort_by, row_limit)
    }

    /// Writes the last complete window to `path` as Chrome-trace JSON (made atomically).
    pub fn export_chrome_trace(&self, path: impl AsRef<Path>) -> Result<()> {
        export_chrome_trace(self.as_raw(), path.as_ref())
    }

    /// How many windows were complete so far.
    pub fn window_count(&self) -> Result<i64> {
        window_count(self.as_raw())
    }

    /// The call's result, with the trace-ready closure's failure (error or panic) taken back.
    fn settle(&self, status: sys::accel_status) -> Result<()> {
        match &self.ready {
            Some(ready) => ready.failure.settle(check(status)),
            None => check(status),
        }
    }
}

/// The profiler as a trace-ready closure sees it: the window just completed, to read.
pub struct TraceWindow<'a> {
    raw: *mut sys::accel_profiler,
    _call: PhantomData<&'a ()>,
}

impl TraceWindow<'_> {
    /// The window's summary table (torch's `key_averages().table()`): a row per operator with
    /// self and total CPU time and calls, sorted by `sort_by` (`cpu_time_total`,
    /// `self_cpu_time_total`, `count`, `name`; `None`: `cpu_time_total`), at most `row_limit`
    /// rows (`None`: all), ending with `Self CPU time total: ...`.
    pub fn table(&self, sort_by: Option<&str>, row_limit: Option<usize>) -> Result<String> {
        table(self.raw, sort_by, row_limit)
    }

    /// Writes the window to `path` as Chrome-trace JSON (made atomically).
    pub fn export_chrome_trace(&self, path: impl AsRef<Path>) -> Result<()> {
        export_chrome_trace(self.raw, path.as_ref())
    }

    /// How many windows are complete, this one included.
    pub fn window_count(&self) -> Result<i64> {
        window_count(self.raw)
    }
}

fn table(
    raw: *const sys::accel_profiler,
    sort_by: Option<&str>,
    row_limit: Option<usize>,
) -> Result<String> {
    let sort_by = sort_by.map(|s| c_string(s, "sort_by")).transpose()?;
    let sort_ptr = sort_by.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
    let limit = row_limit.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
    // SAFETY: live handle (the profiler's, or the one lent to the closure); buffer from read_text.
    read_text(|buf, cap, size| unsafe {
        sys::accel_profiler_table(raw, sort_ptr, limit, buf, cap, size)
    })
}

fn export_chrome_trace(raw: *const sys::accel_profiler, path: &Path) -> Result<()> {
    let path = path_string(path)?;
    // SAFETY: live handle, NUL-terminated path.
    check(unsafe { sys::accel_profiler_export_chrome_trace(raw, path.as_ptr()) })
}

fn window_count(raw: *const sys::accel_profiler) -> Result<i64> {
    // SAFETY: live handle, valid out pointer.
    query(|out| unsafe { sys::accel_profiler_window_count(raw, out) })
}
