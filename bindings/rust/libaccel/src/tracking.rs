//! Experiment tracking (Accelerate's `log_with`, `init_trackers`, `log`, `end_training`): the
//! values to log (`accel_values`), the run's trackers, and trackers of the program's own.

use std::ffi::{c_char, c_void, CStr};
use std::fmt;
use std::marker::{PhantomData, PhantomPinned};
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use libaccel_sys as sys;

use crate::accelerator::Accelerator;
use crate::callback::{FailureSlot, Surfaced};
use crate::error::{check, BoxError, Error, Result, Status};
use crate::ffi::{c_string, ensure_supported_library, make, query};

/// One logged value: a number or a text.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A number (NaN and the infinities included).
    Number(f64),
    /// A text.
    Text(String),
}

impl Value {
    /// The number, or `None` for a text.
    pub fn as_number(&self) -> Option<f64> {
        match self {
            Value::Number(n) => Some(*n),
            Value::Text(_) => None,
        }
    }

    /// The text, or `None` for a number.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Value::Number(_) => None,
            Value::Text(t) => Some(t),
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Number(n) => n.fmt(f),
            Value::Text(t) => t.fmt(f),
        }
    }
}

// Numbers that f64 holds exactly; a wider integer is the caller's `as f64`, its rounding in
// sight.
macro_rules! number_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Value {
            fn from(n: $t) -> Value {
                Value::Number(f64::from(n))
            }
        }
    )*};
}
number_from!(f64, f32, i32, u32, i16, u16, i8, u8);

impl From<&str> for Value {
    fn from(t: &str) -> Value {
        Value::Text(t.to_owned())
    }
}

impl From<String> for Value {
    fn from(t: String) -> Value {
        Value::Text(t)
    }
}

/// Named values read in place: what [`Values`] dereferences to, and what a [`Tracker`] is lent
/// during a call (the library's object, borrowed: valid for the call only, never freed here).
///
/// Entries come in the order their keys were first set.
// An opaque stand-in for the C object, only ever behind a reference made from its pointer (as
// `CStr` for a C string). Neither Send nor Sync: the header lets one thread at a time use it.
pub struct ValuesRef {
    _opaque: [u8; 0],
    _one_thread: PhantomData<(*mut u8, PhantomPinned)>,
}

impl ValuesRef {
    /// The values at `raw`, borrowed for `'a`.
    ///
    /// # Safety
    /// `raw` must be a live `accel_values` that nothing changes or frees during `'a`.
    pub unsafe fn from_ptr<'a>(raw: *const sys::accel_values) -> Option<&'a ValuesRef> {
        // SAFETY: non-null (checked), and a zero-sized type has nothing to read or align.
        NonNull::new(raw as *mut ValuesRef).map(|p| unsafe { &*p.as_ptr() })
    }

    /// The raw handle, for calls through `libaccel-sys`; still owned by its owner.
    pub fn as_raw(&self) -> *const sys::accel_values {
        (self as *const ValuesRef).cast()
    }

    /// Number of keys set.
    pub fn len(&self) -> Result<usize> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_values_count(self.as_raw(), out) })
    }

    /// Whether no key is set.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// The entry at `index` (in the order first set): its key and value. An index out of range
    /// is an `InvalidArgument` error.
    pub fn entry(&self, index: usize) -> Result<(String, Value)> {
        let mut key: *const c_char = std::ptr::null();
        let mut is_text = 0i32;
        let mut number = 0f64;
        let mut text: *const c_char = std::ptr::null();
        // SAFETY: live handle, valid out pointers.
        check(unsafe {
            sys::accel_values_get(
                self.as_raw(),
                index,
                &mut key,
                &mut is_text,
                &mut number,
                &mut text,
            )
        })?;
        let owned = |s: *const c_char, what: &str| {
            if s.is_null() {
                return Err(Error::new(
                    Status::Internal,
                    format!("the library gave no {what} for value {index}"),
                ));
            }
            // SAFETY: NUL-terminated, valid until the object changes (it cannot while borrowed);
            // copied here.
            Ok(unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
        };
        let key = owned(key, "key")?;
        let value = if is_text != 0 {
            Value::Text(owned(text, "text")?)
        } else {
            Value::Number(number)
        };
        Ok((key, value))
    }

    /// Every entry, in the order first set.
    pub fn entries(&self) -> Result<Vec<(String, Value)>> {
        (0..self.len()?).map(|i| self.entry(i)).collect()
    }

    /// The value of `key`, or `None` when it is not set.
    pub fn get(&self, key: &str) -> Result<Option<Value>> {
        for i in 0..self.len()? {
            let (k, v) = self.entry(i)?;
            if k == key {
                return Ok(Some(v));
            }
        }
        Ok(None)
    }
}

impl fmt::Debug for ValuesRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.entries() {
            Ok(entries) => f.debug_map().entries(entries).finish(),
            Err(e) => write!(f, "Values({:p}: {e})", self.as_raw()),
        }
    }
}

/// Named values to log with [`Accelerator::log`], or a run's hyperparameters for
/// [`Accelerator::init_trackers`]: numbers and texts, in the order their keys were first set
/// (setting a key again replaces its value in place). Reading goes through [`ValuesRef`], which
/// it dereferences to.
///
/// `Send` but not `Sync`: the library lets one thread at a time use a set of values.
///
/// ```
/// use accel::{Value, Values};
/// let mut values = Values::new()?.number("loss", 0.5)?.text("phase", "warm-up")?;
/// values.set("epoch", 1)?;
/// values.set("loss", 0.25)?; // replaced, keeps its place
/// assert_eq!(values.len()?, 3);
/// assert_eq!(values.entry(0)?, ("loss".to_string(), Value::Number(0.25)));
/// assert_eq!(values.get("phase")?, Some(Value::Text("warm-up".into())));
/// let same = Values::from_pairs([("lr", 1e-3), ("momentum", 0.9)])?;
/// assert_eq!(same.get("lr")?.and_then(|v| v.as_number()), Some(1e-3));
/// # Ok::<(), accel::Error>(())
/// ```
pub struct Values {
    raw: NonNull<sys::accel_values>,
}

// SAFETY: the object is used by one thread at a time (the header's rule for accel_values): a
// `Values` moves between threads but is not shared (not Sync), and free may run on any thread.
unsafe impl Send for Values {}

impl Drop for Values {
    fn drop(&mut self) {
        // SAFETY: our handle; drop has the only reference, so no call on it is running.
        unsafe { sys::accel_values_free(self.raw.as_ptr()) }
    }
}

impl Deref for Values {
    type Target = ValuesRef;

    fn deref(&self) -> &ValuesRef {
        // SAFETY: live handle, changed only through `&mut self`, so not while this borrow lasts.
        unsafe { ValuesRef::from_ptr(self.raw.as_ptr()) }.expect("non-null")
    }
}

impl fmt::Debug for Values {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl Values {
    /// An empty set of values.
    pub fn new() -> Result<Values> {
        ensure_supported_library()?;
        // SAFETY: valid out pointer.
        let raw = make(|out| unsafe { sys::accel_values_new(out) })?;
        Ok(Values {
            raw: NonNull::new(raw).expect("non-null"),
        })
    }

    /// The values of `pairs`, set in order (a key given twice keeps its first place and its last
    /// value).
    pub fn from_pairs<K, V>(pairs: impl IntoIterator<Item = (K, V)>) -> Result<Values>
    where
        K: AsRef<str>,
        V: Into<Value>,
    {
        let mut values = Values::new()?;
        for (key, value) in pairs {
            values.set(key.as_ref(), value)?;
        }
        Ok(values)
    }

    /// The raw handle, for calls through `libaccel-sys` that change it; still owned by `self`
    /// (reading calls take [`ValuesRef::as_raw`]).
    pub fn as_raw_mut(&mut self) -> *mut sys::accel_values {
        self.raw.as_ptr()
    }

    /// Gives up ownership: the caller frees the returned handle.
    pub fn into_raw(self) -> *mut sys::accel_values {
        let raw = self.raw.as_ptr();
        std::mem::forget(self);
        raw
    }

    /// Takes ownership of a raw handle.
    ///
    /// # Safety
    /// `raw` must be a live `accel_values` that nothing else uses or frees.
    pub unsafe fn from_raw(raw: *mut sys::accel_values) -> Option<Values> {
        NonNull::new(raw).map(|raw| Values { raw })
    }

    /// Sets `key` (non-empty) to a number or a text, replacing a value it had and keeping its
    /// place. An empty key, or a NUL byte in the key or text, is an `InvalidArgument` error.
    pub fn set(&mut self, key: &str, value: impl Into<Value>) -> Result<()> {
        let c_key = c_string(key, "key")?;
        let raw = self.as_raw_mut();
        match value.into() {
            // SAFETY: live handle, NUL-terminated key.
            Value::Number(n) => {
                check(unsafe { sys::accel_values_set_number(raw, c_key.as_ptr(), n) })
            }
            Value::Text(t) => {
                let text = c_string(&t, "text")?;
                // SAFETY: live handle, NUL-terminated key and text (copied by the library).
                check(unsafe { sys::accel_values_set_text(raw, c_key.as_ptr(), text.as_ptr()) })
            }
        }
    }

    /// `self` with `key` set to `number`, for building values in one expression.
    pub fn number(mut self, key: &str, number: f64) -> Result<Values> {
        self.set(key, number)?;
        Ok(self)
    }

    /// `self` with `key` set to `text`, for building values in one expression.
    pub fn text(mut self, key: &str, text: &str) -> Result<Values> {
        self.set(key, text)?;
        Ok(self)
    }
}

/// A tracker of the program's own (a W&B, MLflow or database client), added with
/// [`Accelerator::add_tracker`]: the library calls it beside the trackers of `log_with`, on the
/// main process only, on the thread that called [`init_trackers`](Accelerator::init_trackers),
/// [`log`](Accelerator::log) or [`end_training`](Accelerator::end_training) (or that dropped
/// the accelerator, which ends a started run). It must not call those four, nor
/// [`add_tracker`](Accelerator::add_tracker), itself (they fail with a `State` error).
///
/// An error (or a panic) fails that call with a `Callback` error naming the tracker: the
/// error's message is added to it and the error is its
/// [`source`](std::error::Error::source); a panic resumes in the caller. The other trackers
/// still get the values. Failures while the accelerator is dropped (errors and panics) are
/// dropped too: call `end_training` to see `finish`'s.
///
/// `Send + 'static`: the library keeps it until the accelerator is dropped, and calls it from
/// whichever thread makes these calls.
pub trait Tracker: Send + 'static {
    /// A run starts: its project name and hyperparameters (empty when none were given).
    fn start(&mut self, project: &str, config: &ValuesRef) -> std::result::Result<(), BoxError> {
        let _ = (project, config);
        Ok(())
    }

    /// Values logged at `step` (`None`: no step given). `values` is lent for the call.
    fn log(&mut self, values: &ValuesRef, step: Option<u64>) -> std::result::Result<(), BoxError>;

    /// The run ends.
    fn finish(&mut self) -> std::result::Result<(), BoxError> {
        Ok(())
    }
}

/// What the library holds for one added tracker (freed by its release callback): the tracker and
/// the accelerator's tracker failure slot.
struct TrackerState {
    tracker: Mutex<Box<dyn Tracker>>,
    failure: Arc<FailureSlot>,
}

impl TrackerState {
    /// Runs `f` on the tracker: 0, or 1 after storing its error or panic.
    fn run(&self, f: impl FnOnce(&mut dyn Tracker) -> std::result::Result<(), BoxError>) -> i32 {
        self.failure.run(|| {
            let mut tracker = self.tracker.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut **tracker)
        })
    }
}

impl Accelerator {
    /// Starts the run's trackers (Accelerate's `init_trackers`): the files of the `log_with`
    /// configuration key (`"jsonl"`, `"csv"`, `"tensorboard"`, `"all"`) under
    /// `logging_dir/project` (`logging_dir` defaulting to `project_dir`), with `config` (the
    /// hyperparameters) recorded in each, and every [`Tracker`] added. `project` is one path
    /// component. Nothing is left half-started: on failure the trackers already started are
    /// finished. Once per run (a second call before [`end_training`](Accelerator::end_training)
    /// is a `State` error). Only the main process writes; the others check and return `Ok`, so
    /// the program runs unchanged on any number of processes. Not a collective.
    ///
    /// ```
    /// use accel::{Accelerator, Config, Values};
    /// let dir = std::env::temp_dir().join(format!("libaccel-doc-track-{}", std::process::id()));
    /// let mut config = Config::new()?;
    /// config.set("log_with", "jsonl")?;
    /// config.set("logging_dir", dir.display())?;
    /// let acc = Accelerator::with_config(&config)?;
    /// acc.init_trackers("run1", Some(&Values::from_pairs([("lr", 1e-3)])?))?;
    /// for step in 0..3u64 {
    ///     acc.log(&Values::new()?.number("loss", 1.0 / (step + 1) as f64)?, Some(step))?;
    /// }
    /// acc.end_training()?;
    /// let lines = std::fs::read_to_string(dir.join("run1/metrics.jsonl")).unwrap();
    /// assert_eq!(lines.lines().count(), 3);
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), accel::Error>(())
    /// ```
    pub fn init_trackers(&self, project: &str, config: Option<&Values>) -> Result<()> {
        let project = c_string(project, "project")?;
        let config = config.map_or(std::ptr::null(), |c| c.as_raw());
        // SAFETY: live handle, NUL-terminated name, `config` NULL or a live set of values that
        // cannot change during the call (borrowed).
        let status = unsafe { sys::accel_init_trackers(self.as_raw(), project.as_ptr(), config) };
        self.tracker_failure().settle(check(status))
    }

    /// Logs `values` at `step` (`None`: no step, Accelerate's `step=None`) to every tracker
    /// (Accelerate's `log`): each file gets it in one write before this returns. Every tracker
    /// gets the values even when one fails; the first failure comes back (an `Io` error naming
    /// the file, a `Callback` error naming a [`Tracker`]). Before
    /// [`init_trackers`](Accelerator::init_trackers) or after
    /// [`end_training`](Accelerator::end_training) it is a `State` error.
    pub fn log(&self, values: &Values, step: Option<u64>) -> Result<()> {
        let step = match step {
            None => -1,
            Some(s) => i64::try_from(s).map_err(|_| {
                Error::new(
                    Status::InvalidArgument,
                    format!("step {s} is more than the library counts"),
                )
            })?,
        };
        // SAFETY: live handles; the values cannot change during the call (borrowed).
        let status = unsafe { sys::accel_log(self.as_raw(), values.as_raw(), step) };
        self.tracker_failure().settle(check(status))
    }

    /// Finishes every tracker (Accelerate's `end_training`): files closed, each [`Tracker`]'s
    /// `finish` called. Without a started run it does nothing. Trackers may be started again
    /// afterwards (a new run). Dropping the accelerator ends a started run too, without a way to
    /// report a failure: call this to see one.
    pub fn end_training(&self) -> Result<()> {
        // SAFETY: live handle.
        let status = unsafe { sys::accel_end_training(self.as_raw()) };
        self.tracker_failure().settle(check(status))
    }

    /// Adds a tracker of the program's own, named `name` (non-empty, unique, not one of
    /// `log_with`'s names), to this accelerator's runs: before
    /// [`init_trackers`](Accelerator::init_trackers) (a `State` error while a run is started).
    /// Add it on every process (only the main one calls it), so the program stays the same on
    /// each. The tracker is dropped with the accelerator.
    ///
    /// ```
    /// use accel::{Accelerator, BoxError, Tracker, Values, ValuesRef};
    /// use std::sync::mpsc;
    ///
    /// struct Forward(mpsc::Sender<(Option<u64>, f64)>);
    /// impl Tracker for Forward {
    ///     fn log(&mut self, values: &ValuesRef, step: Option<u64>) -> Result<(), BoxError> {
    ///         let loss = values.get("loss")?.and_then(|v| v.as_number()).ok_or("no loss")?;
    ///         Ok(self.0.send((step, loss))?)
    ///     }
    /// }
    ///
    /// let acc = Accelerator::new()?;
    /// let (tx, rx) = mpsc::channel();
    /// acc.add_tracker("forward", Forward(tx))?;
    /// acc.init_trackers("demo", None)?;
    /// acc.log(&Values::new()?.number("loss", 0.5)?, Some(7))?;
    /// acc.end_training()?;
    /// assert_eq!(rx.recv()?, (Some(7), 0.5));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn add_tracker(&self, name: &str, tracker: impl Tracker) -> Result<()> {
        let name = c_string(name, "name")?;
        let state = Box::new(TrackerState {
            tracker: Mutex::new(Box::new(tracker)),
            failure: Arc::clone(self.tracker_failure()),
        });
        let user_data = Box::into_raw(state) as *mut c_void;
        // SAFETY: live handle, NUL-terminated name; `user_data` is handed to the library, which
        // gives it back exactly once through `release_tracker` (never on failure).
        let status = unsafe {
            sys::accel_add_tracker(
                self.as_raw(),
                name.as_ptr(),
                Some(tracker_start),
                Some(tracker_log),
                Some(tracker_finish),
                user_data,
                Some(release_tracker),
            )
        };
        if let Err(e) = check(status) {
            // On failure the library never calls release: take the tracker back.
            // SAFETY: from Box::into_raw above, not released.
            drop(unsafe { Box::from_raw(user_data as *mut TrackerState) });
            return Err(e);
        }
        Ok(())
    }
}

/// The tracker state behind `user_data`.
///
/// # Safety
/// `user_data` is the pointer `add_tracker` handed over, not yet released.
unsafe fn state<'a>(user_data: *mut c_void) -> &'a TrackerState {
    // SAFETY: the library holds the box until release, after the last call.
    unsafe { &*(user_data as *const TrackerState) }
}

unsafe extern "C" fn tracker_start(
    project: *const c_char,
    config: *const sys::accel_values,
    user_data: *mut c_void,
) -> i32 {
    // SAFETY: called by the library with our user_data.
    let state = unsafe { state(user_data) };
    state.run(|tracker| {
        // SAFETY: a NUL-terminated name, valid for the call (it came from a Rust &str).
        let project = unsafe { CStr::from_ptr(project) }.to_string_lossy();
        // SAFETY: NULL or the library's values, unchanged during the call. No configuration is
        // an empty one for the tracker, whichever of the two the library passes.
        let empty;
        let config = match unsafe { ValuesRef::from_ptr(config) } {
            Some(config) => config,
            None => {
                empty = Values::new().map_err(Surfaced)?;
                &*empty
            }
        };
        tracker.start(&project, config)
    })
}

unsafe extern "C" fn tracker_log(
    values: *const sys::accel_values,
    step: i64,
    user_data: *mut c_void,
) -> i32 {
    // SAFETY: called by the library with our user_data.
    let state = unsafe { state(user_data) };
    state.run(|tracker| {
        // SAFETY: the library's values, unchanged during the call.
        let values = unsafe { ValuesRef::from_ptr(values) }.ok_or("the library gave no values")?;
        tracker.log(values, u64::try_from(step).ok())
    })
}

unsafe extern "C" fn tracker_finish(user_data: *mut c_void) -> i32 {
    // SAFETY: called by the library with our user_data.
    let state = unsafe { state(user_data) };
    state.run(|tracker| tracker.finish())
}

unsafe extern "C" fn release_tracker(user_data: *mut c_void) {
    // SAFETY: called once with the pointer from Box::into_raw in `add_tracker`. Dropping the
    // program's tracker must not unwind into C.
    let state = unsafe { Box::from_raw(user_data as *mut TrackerState) };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(state)));
}
