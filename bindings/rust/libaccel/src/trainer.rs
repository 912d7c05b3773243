//! transformers' Trainer over the accelerator (`accel_trainer_*`): the training loop, logging,
//! evaluation, prediction, checkpoints and early stopping, with the program's steps, metrics and
//! callbacks as Rust closures and a trait.
//!
//! The closures and callbacks run on the thread that called [`Trainer::train`],
//! [`evaluate`](Trainer::evaluate) or [`predict`](Trainer::predict), under `catch_unwind`
//! inside `extern "C"` trampolines; what they left behind (their error or panic) is kept in the
//! Trainer's failure slot and comes back when that call returns.

use std::ffi::{c_char, c_void, CStr};
use std::fmt;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

use libaccel_sys as sys;

use crate::accelerator::Accelerator;
use crate::callback::{FailureSlot, Surfaced};
use crate::data::DataLoader;
use crate::error::{check, BoxError, Error, Result, Status};
use crate::ffi::{c_string, ensure_supported_library, make, query, read_text};
use crate::model::Model;
use crate::optim::{Optimizer, Scheduler};
use crate::tensor::Tensor;
use crate::tracking::{Value, Values, ValuesRef};

/// transformers' `TrainerCallback` events, in the order a step raises them.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TrainerEvent {
    /// `on_init_end`: once, before the first `train`, `evaluate` or `predict`.
    InitEnd,
    /// `on_train_begin`.
    TrainBegin,
    /// `on_epoch_begin`.
    EpochBegin,
    /// `on_step_begin`: an optimizer step's accumulation window opens.
    StepBegin,
    /// `on_substep_end`: after each micro-batch of a window but its last.
    SubstepEnd,
    /// `on_pre_optimizer_step`: after clipping, before the optimizer steps.
    PreOptimizerStep,
    /// `on_optimizer_step`.
    OptimizerStep,
    /// `on_step_end`: the step is counted (`global_step` is the new one).
    StepEnd,
    /// `on_log`, with the logs (loss, grad_norm, learning_rate, epoch; or an evaluation's
    /// metrics).
    Log,
    /// `on_evaluate`, with the metrics.
    Evaluate,
    /// `on_save`: a checkpoint was written.
    Save,
    /// `on_epoch_end`.
    EpochEnd,
    /// `on_train_end`.
    TrainEnd,
    /// `on_predict`, with the `test_` metrics.
    Predict,
    /// `on_prediction_step`: after each evaluation or prediction batch.
    PredictionStep,
}

impl TrainerEvent {
    /// Every event, in the header's numbering.
    pub const ALL: [TrainerEvent; 15] = [
        TrainerEvent::InitEnd,
        TrainerEvent::TrainBegin,
        TrainerEvent::EpochBegin,
        TrainerEvent::StepBegin,
        TrainerEvent::SubstepEnd,
        TrainerEvent::PreOptimizerStep,
        TrainerEvent::OptimizerStep,
        TrainerEvent::StepEnd,
        TrainerEvent::Log,
        TrainerEvent::Evaluate,
        TrainerEvent::Save,
        TrainerEvent::EpochEnd,
        TrainerEvent::TrainEnd,
        TrainerEvent::Predict,
        TrainerEvent::PredictionStep,
    ];

    /// The raw `accel_trainer_event` value.
    pub fn to_raw(self) -> sys::accel_trainer_event {
        match self {
            TrainerEvent::InitEnd => sys::ACCEL_TRAINER_ON_INIT_END,
            TrainerEvent::TrainBegin => sys::ACCEL_TRAINER_ON_TRAIN_BEGIN,
            TrainerEvent::EpochBegin => sys::ACCEL_TRAINER_ON_EPOCH_BEGIN,
            TrainerEvent::StepBegin => sys::ACCEL_TRAINER_ON_STEP_BEGIN,
            TrainerEvent::SubstepEnd => sys::ACCEL_TRAINER_ON_SUBSTEP_END,
            TrainerEvent::PreOptimizerStep => sys::ACCEL_TRAINER_ON_PRE_OPTIMIZER_STEP,
            TrainerEvent::OptimizerStep => sys::ACCEL_TRAINER_ON_OPTIMIZER_STEP,
            TrainerEvent::StepEnd => sys::ACCEL_TRAINER_ON_STEP_END,
            TrainerEvent::Log => sys::ACCEL_TRAINER_ON_LOG,
            TrainerEvent::Evaluate => sys::ACCEL_TRAINER_ON_EVALUATE,
            TrainerEvent::Save => sys::ACCEL_TRAINER_ON_SAVE,
            TrainerEvent::EpochEnd => sys::ACCEL_TRAINER_ON_EPOCH_END,
            TrainerEvent::TrainEnd => sys::ACCEL_TRAINER_ON_TRAIN_END,
            TrainerEvent::Predict => sys::ACCEL_TRAINER_ON_PREDICT,
            TrainerEvent::PredictionStep => sys::ACCEL_TRAINER_ON_PREDICTION_STEP,
        }
    }

    /// The event of a raw value, `None` for a value that is not one.
    pub fn from_raw(raw: sys::accel_trainer_event) -> Option<TrainerEvent> {
        TrainerEvent::ALL.into_iter().find(|e| e.to_raw() == raw)
    }

    /// transformers' method name, e.g. `"on_step_end"` (the library's).
    pub fn name(self) -> &'static str {
        // SAFETY: a pure function of its argument; static storage or NULL.
        let name = unsafe { sys::accel_trainer_event_name(self.to_raw()) };
        if name.is_null() {
            return "on_unknown_event";
        }
        // SAFETY: a NUL-terminated string of static storage.
        unsafe { CStr::from_ptr(name) }
            .to_str()
            .unwrap_or("on_unknown_event")
    }
}

impl fmt::Display for TrainerEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One flag of transformers' `TrainerControl`, which a callback sets to steer the loop.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControlFlag {
    /// `should_training_stop`: training ends after this step (early stopping sets it).
    ShouldTrainingStop,
    /// `should_epoch_stop`: the epoch ends after this step.
    ShouldEpochStop,
    /// `should_save`: a checkpoint is written after this step.
    ShouldSave,
    /// `should_evaluate`: an evaluation runs after this step.
    ShouldEvaluate,
    /// `should_log`: the logs are written after this step.
    ShouldLog,
}

impl ControlFlag {
    /// The flag's name in transformers and in the header, e.g. `"should_training_stop"`.
    pub fn name(self) -> &'static str {
        self.c_name().to_str().expect("ASCII")
    }

    fn c_name(self) -> &'static CStr {
        match self {
            ControlFlag::ShouldTrainingStop => c"should_training_stop",
            ControlFlag::ShouldEpochStop => c"should_epoch_stop",
            ControlFlag::ShouldSave => c"should_save",
            ControlFlag::ShouldEvaluate => c"should_evaluate",
            ControlFlag::ShouldLog => c"should_log",
        }
    }
}

/// Named numbers: an evaluation's metrics (`eval_loss`, `eval_accuracy`, ...), a prediction's
/// (`test_...`), or the logs an `on_log` callback sees; in the library's order (by name).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics {
    entries: Vec<(String, f64)>,
}

impl Metrics {
    /// The value of `key`, or `None` when it is not there.
    pub fn get(&self, key: &str) -> Option<f64> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    /// Every (name, value), in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, f64)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// The names, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(k, _)| k.as_str())
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The library's values, copied (all numbers: the Trainer logs no text).
    fn read(values: &ValuesRef) -> Result<Metrics> {
        let entries = values
            .entries()?
            .into_iter()
            .map(|(key, value)| match value {
                Value::Number(n) => Ok((key, n)),
                Value::Text(_) => Err(Error::new(
                    Status::Internal,
                    format!("the Trainer gave a text for the metric {key:?}"),
                )),
            })
            .collect::<Result<_>>()?;
        Ok(Metrics { entries })
    }
}

impl IntoIterator for Metrics {
    type Item = (String, f64);
    type IntoIter = std::vec::IntoIter<(String, f64)>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

/// What an evaluation step gives for one batch (each `None` when it has none): the loss (one
/// number), and the predictions and labels (first dimension: the batch's samples), which the
/// Trainer gathers across processes for [`Trainer::set_compute_metrics`] and
/// [`Trainer::predict`]. A batch field given back as it is: [`Tensor::shallow_clone`].
#[derive(Debug, Default)]
pub struct EvalOutput {
    /// The batch's loss.
    pub loss: Option<Tensor>,
    /// The batch's predictions.
    pub predictions: Option<Tensor>,
    /// The batch's labels.
    pub labels: Option<Tensor>,
}

/// What [`Trainer::predict`] returns: the predictions and labels of every sample once, in
/// dataset order, on every process (`None` when the steps gave none), and the `test_` metrics.
#[derive(Debug)]
pub struct Prediction {
    /// Every sample's predictions.
    pub predictions: Option<Tensor>,
    /// Every sample's labels.
    pub labels: Option<Tensor>,
    /// `test_loss`, compute_metrics' metrics with the `test_` prefix, and the speed metrics.
    pub metrics: Metrics,
}

/// What a [`TrainerCallback`] is lent at each event: the Trainer's state to read and its
/// control to change. Valid for the call only.
pub struct TrainerContext<'t> {
    raw: NonNull<sys::accel_trainer>,
    _call: PhantomData<&'t mut sys::accel_trainer>,
}

impl TrainerContext<'_> {
    /// The optimizer updates made (`TrainerState.global_step`).
    pub fn global_step(&self) -> Result<u64> {
        global_step(self.raw.as_ptr())
    }

    /// Epochs done, as a fraction (`TrainerState.epoch`).
    pub fn epoch(&self) -> Result<f64> {
        epoch(self.raw.as_ptr())
    }

    /// The state as transformers' `trainer_state.json` text.
    pub fn state_json(&self) -> Result<String> {
        state_json(self.raw.as_ptr())
    }

    /// One flag of the control.
    pub fn control(&self, flag: ControlFlag) -> Result<bool> {
        control(self.raw.as_ptr(), flag)
    }

    /// Sets one flag of the control (what transformers' callbacks do to the `control` they
    /// return).
    pub fn set_control(&mut self, flag: ControlFlag, value: bool) -> Result<()> {
        // SAFETY: the live trainer of the running call; the flag's name is NUL-terminated.
        check(unsafe {
            sys::accel_trainer_set_control(self.raw.as_ptr(), flag.c_name().as_ptr(), value)
        })
    }

    /// `set_control(ControlFlag::ShouldTrainingStop, true)`: training ends after this step.
    pub fn stop_training(&mut self) -> Result<()> {
        self.set_control(ControlFlag::ShouldTrainingStop, true)
    }
}

impl fmt::Debug for TrainerContext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TrainerContext({:p})", self.raw.as_ptr())
    }
}

/// What a callback returns: `Err` fails the Trainer's call with a `Callback` error naming the
/// event, the error kept as its source.
pub type CallbackResult = std::result::Result<(), BoxError>;

/// A callback of the Trainer (transformers' `TrainerCallback`): one method per event, each a
/// no-op by default, each lent a [`TrainerContext`] to read the state and set the control.
/// [`on_event`](TrainerCallback::on_event) sees every event and calls the others: override it
/// to handle all events in one place.
///
/// A callback runs on the thread that called [`Trainer::train`], [`Trainer::evaluate`] or
/// [`Trainer::predict`], after the callbacks added before it. An `Err` fails that call (a
/// `Callback` error naming the event, the error as its
/// [`source`](std::error::Error::source)); a panic is resumed in the caller.
///
/// ```no_run
/// use accel::{CallbackResult, TrainerCallback, TrainerContext};
///
/// /// Stops training at a given step.
/// struct StopAt(u64);
/// impl TrainerCallback for StopAt {
///     fn on_step_end(&mut self, ctx: &mut TrainerContext<'_>) -> CallbackResult {
///         if ctx.global_step()? >= self.0 {
///             ctx.stop_training()?;
///         }
///         Ok(())
///     }
/// }
/// ```
#[allow(unused_variables)]
pub trait TrainerCallback: Send + 'static {
    /// Every event, with its values (`on_log`'s logs, `on_evaluate`'s and `on_predict`'s
    /// metrics; `None` for the others). By default it calls the event's own method.
    fn on_event(
        &mut self,
        ctx: &mut TrainerContext<'_>,
        event: TrainerEvent,
        values: Option<&Metrics>,
    ) -> CallbackResult {
        let empty = Metrics::default();
        let values = values.unwrap_or(&empty);
        match event {
            TrainerEvent::InitEnd => self.on_init_end(ctx),
            TrainerEvent::TrainBegin => self.on_train_begin(ctx),
            TrainerEvent::EpochBegin => self.on_epoch_begin(ctx),
            TrainerEvent::StepBegin => self.on_step_begin(ctx),
            TrainerEvent::SubstepEnd => self.on_substep_end(ctx),
            TrainerEvent::PreOptimizerStep => self.on_pre_optimizer_step(ctx),
            TrainerEvent::OptimizerStep => self.on_optimizer_step(ctx),
            TrainerEvent::StepEnd => self.on_step_end(ctx),
            TrainerEvent::Log => self.on_log(ctx, values),
            TrainerEvent::Evaluate => self.on_evaluate(ctx, values),
            TrainerEvent::Save => self.on_save(ctx),
            TrainerEvent::EpochEnd => self.on_epoch_end(ctx),
            TrainerEvent::TrainEnd => self.on_train_end(ctx),
            TrainerEvent::Predict => self.on_predict(ctx, values),
            TrainerEvent::PredictionStep => self.on_prediction_step(ctx),
        }
    }

    /// `on_init_end`.
    fn on_init_end(&mut self, ctx: &mut TrainerContext<'_>) -> CallbackResult {
        Ok(())
    }
    /// `on_train_begin`.
    fn on_train_begin(&mut self, ctx: &mut TrainerContext<'_>) -> CallbackResult {
        Ok(())
    }
    /// `on_epoch_begin`.
    fn on_epoch_begin(&mut self, ctx: &mut TrainerContext<'_>) -> CallbackResult {
        Ok(())
    }
    /// `on_step_begin`.
    fn on_step_begin(&mut self, ctx: &mut TrainerContext<'_>) -> CallbackResult {
        Ok(())
    }
    /// `on_substep_end`.
    fn on_substep_end(&mut self, ctx: &mut TrainerContext<'_>) -> CallbackResult {
        Ok(())
    }
    /// `on_pre_optimizer_step`.
    fn on_pre_optimizer_step(&mut self, ctx: &mut TrainerContext<'_>) -> CallbackResult {
        Ok(())
    }
    /// `on_optimizer_step`.
    fn on_optimizer_step(&mut self, ctx: &mut TrainerContext<'_>) -> CallbackResult {
        Ok(())
    }
    /// `on_step_end`.
    fn on_step_end(&mut self, ctx: &mut TrainerContext<'_>) -> CallbackResult {
        Ok(())
    }
    /// `on_log`, with the logs.
    fn on_log(&mut self, ctx: &mut TrainerContext<'_>, logs: &Metrics) -> CallbackResult {
        Ok(())
    }
    /// `on_evaluate`, with the metrics.
    fn on_evaluate(&mut self, ctx: &mut TrainerContext<'_>, metrics: &Metrics) -> CallbackResult {
        Ok(())
    }
    /// `on_save`.
    fn on_save(&mut self, ctx: &mut TrainerContext<'_>) -> CallbackResult {
        Ok(())
    }
    /// `on_epoch_end`.
    fn on_epoch_end(&mut self, ctx: &mut TrainerContext<'_>) -> CallbackResult {
        Ok(())
    }
    /// `on_train_end`.
    fn on_train_end(&mut self, ctx: &mut TrainerContext<'_>) -> CallbackResult {
        Ok(())
    }
    /// `on_predict`, with the `test_` metrics.
    fn on_predict(&mut self, ctx: &mut TrainerContext<'_>, metrics: &Metrics) -> CallbackResult {
        Ok(())
    }
    /// `on_prediction_step`.
    fn on_prediction_step(&mut self, ctx: &mut TrainerContext<'_>) -> CallbackResult {
        Ok(())
    }
}

type TrainingStepFn = dyn FnMut(&Model, &[&Tensor]) -> std::result::Result<Tensor, BoxError> + Send;
type EvalStepFn = dyn FnMut(&Model, &[&Tensor]) -> std::result::Result<EvalOutput, BoxError> + Send;
type MetricsFn =
    dyn FnMut(&Tensor, &Tensor) -> std::result::Result<Vec<(String, f64)>, BoxError> + Send;

/// What the library holds for one closure or callback (freed by its release callback): the
/// program's object, the model the steps are lent, and the Trainer's failure slot.
struct Registered<F: ?Sized> {
    f: Mutex<Box<F>>,
    model: *mut sys::accel_model,
    failure: Arc<FailureSlot>,
}

impl<F: ?Sized> Registered<F> {
    /// The program's object; a call made while it runs (which the Trainer never makes) is an
    /// error rather than a second `&mut`.
    fn lock(&self) -> std::result::Result<MutexGuard<'_, Box<F>>, BoxError> {
        match self.f.try_lock() {
            Ok(guard) => Ok(guard),
            // An earlier call panicked: the panic went back to its caller; the object stays usable.
            Err(TryLockError::Poisoned(p)) => Ok(p.into_inner()),
            Err(TryLockError::WouldBlock) => {
                Err("the Trainer called a closure while it ran".into())
            }
        }
    }
}

/// The registration behind a trampoline's `user_data`.
///
/// # Safety
/// `user_data` is a pointer `Trainer::register` handed over, not yet released.
unsafe fn registered<'r, F: ?Sized>(user_data: *mut c_void) -> &'r Registered<F> {
    // SAFETY: the library holds the box until release, after the last call.
    unsafe { &*(user_data as *const Registered<F>) }
}

/// Tensors the library lends for a call, as the crate's type, never freed here.
struct Lent(Vec<ManuallyDrop<Tensor>>);

impl Lent {
    /// # Safety
    /// `raw` holds `count` live handles (or `count` is 0), valid for the call.
    unsafe fn new(
        raw: *const *const sys::accel_tensor,
        count: usize,
    ) -> std::result::Result<Lent, BoxError> {
        if raw.is_null() || count == 0 {
            return Ok(Lent(Vec::new()));
        }
        // SAFETY: `count` pointers at `raw`, per the caller.
        let raws = unsafe { std::slice::from_raw_parts(raw, count) };
        raws.iter()
            .enumerate()
            // SAFETY: live handles for the call; ManuallyDrop keeps them from being freed.
            .map(|(i, &t)| {
                unsafe { lend(t) }.ok_or_else(|| format!("batch field {i} is NULL").into())
            })
            .collect::<std::result::Result<_, BoxError>>()
            .map(Lent)
    }

    fn refs(&self) -> Vec<&Tensor> {
        self.0.iter().map(|t| &**t).collect()
    }
}

/// One tensor the library lends, never freed here.
///
/// # Safety
/// `raw` is NULL or a live handle for as long as the result is used.
unsafe fn lend(raw: *const sys::accel_tensor) -> Option<ManuallyDrop<Tensor>> {
    // SAFETY: per the caller; the handle is read, never freed (ManuallyDrop).
    unsafe { Tensor::from_raw(raw as *mut sys::accel_tensor) }.map(ManuallyDrop::new)
}

/// The Trainer's model, lent to a step as the crate's type, never freed here.
///
/// # Safety
/// `raw` is the model handle of the Trainer that is running, alive while it runs.
unsafe fn lend_model(
    raw: *mut sys::accel_model,
) -> std::result::Result<ManuallyDrop<Model>, BoxError> {
    // SAFETY: per the caller.
    unsafe { Model::from_raw(raw) }
        .map(ManuallyDrop::new)
        .ok_or_else(|| "the Trainer has no model".into())
}

unsafe extern "C" fn training_step(
    batch: *const *const sys::accel_tensor,
    count: usize,
    out_loss: *mut *mut sys::accel_tensor,
    user_data: *mut c_void,
) -> i32 {
    // SAFETY: called by the library with our user_data.
    let state = unsafe { registered::<TrainingStepFn>(user_data) };
    state.failure.run_passing_out_of_memory(|| {
        // SAFETY: the batch's handles and the Trainer's model live for the call.
        let batch = unsafe { Lent::new(batch, count) }?;
        let model = unsafe { lend_model(state.model) }?;
        let loss = (state.lock()?)(&model, &batch.refs())?;
        // SAFETY: a valid out pointer; the library takes the handle and frees it.
        unsafe { *out_loss = loss.into_raw() };
        Ok(())
    })
}

unsafe extern "C" fn eval_step(
    batch: *const *const sys::accel_tensor,
    count: usize,
    out_loss: *mut *mut sys::accel_tensor,
    out_predictions: *mut *mut sys::accel_tensor,
    out_labels: *mut *mut sys::accel_tensor,
    user_data: *mut c_void,
) -> i32 {
    // SAFETY: called by the library with our user_data.
    let state = unsafe { registered::<EvalStepFn>(user_data) };
    state.failure.run_passing_out_of_memory(|| {
        // SAFETY: the batch's handles and the Trainer's model live for the call.
        let batch = unsafe { Lent::new(batch, count) }?;
        let model = unsafe { lend_model(state.model) }?;
        let out = (state.lock()?)(&model, &batch.refs())?;
        // The library takes and frees each handle given (NULL: none).
        let give = |t: Option<Tensor>| t.map_or(std::ptr::null_mut(), Tensor::into_raw);
        // SAFETY: valid out pointers.
        unsafe {
            *out_loss = give(out.loss);
            *out_predictions = give(out.predictions);
            *out_labels = give(out.labels);
        }
        Ok(())
    })
}

unsafe extern "C" fn compute_metrics(
    predictions: *const sys::accel_tensor,
    labels: *const sys::accel_tensor,
    metrics: *mut sys::accel_values,
    user_data: *mut c_void,
) -> i32 {
    // SAFETY: called by the library with our user_data.
    let state = unsafe { registered::<MetricsFn>(user_data) };
    state.failure.run_passing_out_of_memory(|| {
        // SAFETY: the gathered tensors live for the call.
        let (Some(p), Some(l)) = (unsafe { lend(predictions) }, unsafe { lend(labels) }) else {
            return Err("the Trainer gave no predictions or labels".into());
        };
        let computed = (state.lock()?)(&p, &l)?;
        for (key, value) in computed {
            let c_key = c_string(&key, "metric name").map_err(Surfaced)?;
            // SAFETY: the library's values for the call, a NUL-terminated key.
            check(unsafe { sys::accel_values_set_number(metrics, c_key.as_ptr(), value) })
                .map_err(Surfaced)?;
        }
        Ok(())
    })
}

unsafe extern "C" fn on_event(
    trainer: *mut sys::accel_trainer,
    event: sys::accel_trainer_event,
    values: *const sys::accel_values,
    user_data: *mut c_void,
) -> i32 {
    // An event newer than this crate has no method to go to.
    let Some(event) = TrainerEvent::from_raw(event) else {
        return 0;
    };
    // SAFETY: called by the library with our user_data.
    let state = unsafe { registered::<dyn TrainerCallback>(user_data) };
    state.failure.run_passing_out_of_memory(|| {
        // SAFETY: NULL or the library's values, unchanged during the call.
        let values = match unsafe { ValuesRef::from_ptr(values) } {
            Some(v) => Some(Metrics::read(v).map_err(Surfaced)?),
            None => None,
        };
        let mut ctx = TrainerContext {
            raw: NonNull::new(trainer).ok_or("the library gave no trainer")?,
            _call: PhantomData,
        };
        state.lock()?.on_event(&mut ctx, event, values.as_ref())
    })
}

unsafe extern "C" fn release<F: ?Sized>(user_data: *mut c_void) {
    // SAFETY: called once with the pointer from Box::into_raw in `Trainer::register`. Dropping
    // the program's closure must not unwind into C.
    let state = unsafe { Box::from_raw(user_data as *mut Registered<F>) };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(state)));
}

fn global_step(raw: *mut sys::accel_trainer) -> Result<u64> {
    // SAFETY: a live trainer, valid out pointer.
    let step: i64 = query(|out| unsafe { sys::accel_trainer_global_step(raw, out) })?;
    u64::try_from(step).map_err(|_| Error::new(Status::Internal, format!("global_step {step}")))
}

fn epoch(raw: *mut sys::accel_trainer) -> Result<f64> {
    // SAFETY: a live trainer, valid out pointer.
    query(|out| unsafe { sys::accel_trainer_epoch(raw, out) })
}

fn state_json(raw: *mut sys::accel_trainer) -> Result<String> {
    // SAFETY: a live trainer; buffer from read_text.
    read_text(|buf: *mut c_char, cap, size| unsafe {
        sys::accel_trainer_state_json(raw, buf, cap, size)
    })
}

fn control(raw: *mut sys::accel_trainer, flag: ControlFlag) -> Result<bool> {
    // SAFETY: a live trainer, a NUL-terminated flag, valid out pointer.
    query(|out| unsafe { sys::accel_trainer_control(raw, flag.c_name().as_ptr(), out) })
}

/// Hugging Face transformers' `Trainer` over the accelerator: the training loop a program would
/// otherwise write (accumulation, clipping, optimizer and scheduler steps), logging, evaluation,
/// prediction, checkpoints with rotation and the best model, early stopping and exact resume,
/// with transformers' callback events. Settings are `TrainingArguments`' names as
/// `"key=value,..."` text (`num_train_epochs`, `max_steps`, `logging_steps`, `eval_strategy`,
/// `save_steps`, `save_total_limit`, `output_dir`, ...: docs/trainer.md lists them).
///
/// By default a step calls the model's TorchScript methods: `training_step(batch fields...)`
/// returning the loss, and `eval_step(batch fields...)` returning `(loss, predictions)`, the
/// labels being the batch's last field. [`set_training_step`](Trainer::set_training_step),
/// [`set_eval_step`](Trainer::set_eval_step) and
/// [`set_compute_metrics`](Trainer::set_compute_metrics) put Rust closures there, and
/// [`add_callback`](Trainer::add_callback) adds a [`TrainerCallback`].
///
/// The Trainer borrows its accelerator and objects for its lifetime `'a` (one Trainer per
/// accelerator at a time); dropping it frees it and drops its closures and callbacks. Every
/// process makes the same calls: training, evaluation, prediction and checkpoints are
/// collectives. `Send`, not `Sync`.
///
/// ```no_run
/// use accel::{Accelerator, DataLoader, Model, Optimizer, Trainer};
/// # fn f(acc: &Accelerator, model: &mut Model, opt: &mut Optimizer, train: &mut DataLoader,
/// #      eval: &DataLoader) -> Result<(), Box<dyn std::error::Error>> {
/// let mut trainer = Trainer::new(
///     acc, model, opt, None, train, Some(eval),
///     "num_train_epochs=3,logging_steps=10,eval_strategy=epoch,output_dir=run",
/// )?;
/// trainer.set_compute_metrics(|predictions, labels| {
///     let (p, l) = (predictions.to_vec::<i64>()?, labels.to_vec::<i64>()?);
///     let right = p.iter().zip(&l).filter(|(a, b)| a == b).count();
///     Ok([("accuracy", right as f64 / l.len() as f64)])
/// })?;
/// trainer.train()?;
/// let metrics = trainer.evaluate()?;
/// println!("accuracy {:?}", metrics.get("eval_accuracy"));
/// # Ok(()) }
/// ```
///
/// A Trainer cannot outlive its accelerator (nor its objects):
///
/// ```compile_fail,E0505
/// # use accel::{Accelerator, DataLoader, Model, Optimizer, Trainer};
/// # fn f(mut model: Model, mut opt: Optimizer, mut train: DataLoader) -> accel::Result<()> {
/// let acc = Accelerator::new()?;
/// let mut trainer = Trainer::new(&acc, &mut model, &mut opt, None, &mut train, None, "")?;
/// drop(acc); // `acc` is borrowed by the Trainer
/// trainer.train()?;
/// # Ok(()) }
/// ```
pub struct Trainer<'a> {
    raw: NonNull<sys::accel_trainer>,
    failure: Arc<FailureSlot>,
    accelerator: &'a Accelerator,
    model: &'a Model,
    train: &'a DataLoader,
    eval: Option<&'a DataLoader>,
    _exclusive: PhantomData<(&'a mut Model, &'a mut Optimizer, &'a mut Scheduler)>,
}

// SAFETY: the library lets a Trainer be used from any thread (one call at a time, which `&mut
// self` ensures for the calls that run closures); the closures and callbacks are `Send`.
unsafe impl Send for Trainer<'_> {}

impl Drop for Trainer<'_> {
    fn drop(&mut self) {
        // SAFETY: our handle; drop has the only reference, so no call on it is running. The
        // library releases the closures and callbacks here.
        unsafe { sys::accel_trainer_free(self.raw.as_ptr()) }
    }
}

impl fmt::Debug for Trainer<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Trainer({:p})", self.raw.as_ptr())
    }
}

impl<'a> Trainer<'a> {
    /// A Trainer of `model` with `optimizer`, `scheduler` (`None`: a constant learning rate),
    /// the `train` dataloader and `eval` (`None`: no evaluation) on `accelerator`, with
    /// `settings` (`TrainingArguments`' names, `"key=value,..."`; `""` for the defaults).
    /// Objects not yet prepared are prepared here, as [`Accelerator::prepare`] would.
    ///
    /// The evaluation dataloader is borrowed shared, so that it can also go to
    /// [`predict`](Trainer::predict). An unknown or invalid setting is an `InvalidArgument`
    /// error naming it (and the known keys); a second Trainer on the same accelerator is a
    /// `State` error; `gradient_accumulation_steps` differing from the accelerator's is an
    /// `InvalidArgument` error.
    pub fn new(
        accelerator: &'a Accelerator,
        model: &'a mut Model,
        optimizer: &'a mut Optimizer,
        scheduler: Option<&'a mut Scheduler>,
        train: &'a mut DataLoader,
        eval: Option<&'a DataLoader>,
        settings: &str,
    ) -> Result<Trainer<'a>> {
        ensure_supported_library()?;
        let settings = c_string(settings, "settings")?;
        let scheduler = scheduler.map_or(std::ptr::null_mut(), |s| s.as_raw());
        let eval_raw = eval.map_or(std::ptr::null_mut(), |l| l.as_raw());
        // SAFETY: live handles (the optional ones NULL or live), a NUL-terminated settings text,
        // valid out pointer.
        let raw = make(|out| unsafe {
            sys::accel_trainer_new(
                accelerator.as_raw(),
                model.as_raw(),
                optimizer.as_raw(),
                scheduler,
                train.as_raw(),
                eval_raw,
                settings.as_ptr(),
                out,
            )
        });
        let raw = raw.map_err(|e| resolve_loaders(e, [&*train].into_iter().chain(eval)))?;
        Ok(Trainer {
            raw: NonNull::new(raw).expect("non-null"),
            failure: Arc::new(FailureSlot::default()),
            accelerator,
            model,
            train,
            eval,
            _exclusive: PhantomData,
        })
    }

    /// The raw handle, for calls through `libaccel-sys`; still owned by `self`.
    pub fn as_raw(&self) -> *mut sys::accel_trainer {
        self.raw.as_ptr()
    }

    /// The model the Trainer trains.
    pub fn model(&self) -> &Model {
        self.model
    }

    /// Hands `f` to the library through `call` (user data, release); takes it back when the
    /// registration fails (the library then never releases it).
    fn register<F: ?Sized>(
        &mut self,
        f: Box<F>,
        call: impl FnOnce(
            *mut sys::accel_trainer,
            *mut c_void,
            sys::accel_release_fn,
        ) -> sys::accel_status,
    ) -> Result<()> {
        let state = Box::new(Registered {
            f: Mutex::new(f),
            model: self.model.as_raw(),
            failure: Arc::clone(&self.failure),
        });
        let user_data = Box::into_raw(state) as *mut c_void;
        let status = call(self.raw.as_ptr(), user_data, Some(release::<F>));
        if let Err(e) = check(status) {
            // SAFETY: from Box::into_raw above, not released (the registration failed).
            drop(unsafe { Box::from_raw(user_data as *mut Registered<F>) });
            return Err(e);
        }
        Ok(())
    }

    /// Replaces the training step: `step` gets the model and one micro-batch's fields (lent for
    /// the call) and returns the loss, a one-element tensor with its graph (transformers'
    /// `compute_loss(model, inputs)`). The Trainer does the rest (backward, accumulation,
    /// clipping, optimizer and scheduler), so a step that calls the model's `training_step`
    /// gives exactly the default's parameters. An `Err` fails [`train`](Trainer::train) with a
    /// `Callback` error, the error as its source; a panic is resumed in `train`'s caller.
    ///
    /// ```no_run
    /// # fn f(trainer: &mut accel::Trainer<'_>) -> accel::Result<()> {
    /// trainer.set_training_step(|model, batch| Ok(model.call1("training_step", batch)?))?;
    /// # Ok(()) }
    /// ```
    pub fn set_training_step<F>(&mut self, step: F) -> Result<()>
    where
        F: FnMut(&Model, &[&Tensor]) -> std::result::Result<Tensor, BoxError> + Send + 'static,
    {
        let step: Box<TrainingStepFn> = Box::new(step);
        self.register(step, |raw, user_data, release| {
            // SAFETY: live trainer; `user_data` is released by the library through `release`.
            unsafe {
                sys::accel_trainer_set_training_step(raw, Some(training_step), user_data, release)
            }
        })
    }

    /// Replaces the evaluation step, run under no-grad with the model in eval mode: `step` gets
    /// the model and one batch's fields (lent for the call) and returns an [`EvalOutput`] (a
    /// batch field given back as it is: [`Tensor::shallow_clone`]). Errors and panics as for
    /// [`set_training_step`](Trainer::set_training_step), in the evaluation's call.
    pub fn set_eval_step<F>(&mut self, step: F) -> Result<()>
    where
        F: FnMut(&Model, &[&Tensor]) -> std::result::Result<EvalOutput, BoxError> + Send + 'static,
    {
        let step: Box<EvalStepFn> = Box::new(step);
        self.register(step, |raw, user_data, release| {
            // SAFETY: live trainer; `user_data` is released by the library through `release`.
            unsafe { sys::accel_trainer_set_eval_step(raw, Some(eval_step), user_data, release) }
        })
    }

    /// Sets transformers' `compute_metrics`: called on every process with the predictions and
    /// labels of every sample once, in dataset order, it returns named numbers (a `Vec`, an
    /// array, a map of `(name, value)`), each logged with the `eval_` (or `test_`) prefix unless
    /// it has it. Without it an evaluation gives its loss alone; it is called only when the
    /// steps give both predictions and labels.
    pub fn set_compute_metrics<F, M, K>(&mut self, mut f: F) -> Result<()>
    where
        F: FnMut(&Tensor, &Tensor) -> std::result::Result<M, BoxError> + Send + 'static,
        M: IntoIterator<Item = (K, f64)>,
        K: Into<String>,
    {
        let f: Box<MetricsFn> = Box::new(move |p: &Tensor, l: &Tensor| {
            Ok(f(p, l)?.into_iter().map(|(k, v)| (k.into(), v)).collect())
        });
        self.register(f, |raw, user_data, release| {
            // SAFETY: live trainer; `user_data` is released by the library through `release`.
            unsafe {
                sys::accel_trainer_set_compute_metrics(
                    raw,
                    Some(compute_metrics),
                    user_data,
                    release,
                )
            }
        })
    }

    /// Adds a callback, called after the earlier ones at every event. `on_init_end` reaches the
    /// callbacks added before the first [`train`](Trainer::train),
    /// [`evaluate`](Trainer::evaluate) or [`predict`](Trainer::predict), once. The callback is
    /// dropped with the Trainer.
    pub fn add_callback(&mut self, callback: impl TrainerCallback) -> Result<()> {
        let callback: Box<dyn TrainerCallback> = Box::new(callback);
        self.register(callback, |raw, user_data, release| {
            // SAFETY: live trainer; `user_data` is released by the library through `release`.
            unsafe { sys::accel_trainer_add_callback(raw, Some(on_event), user_data, release) }
        })
    }

    /// A Trainer call's result with what a closure or callback (the Trainer's, the dataloaders'
    /// datasets', the accelerator's trackers' and checkpoint objects') left behind: its error
    /// as the source, or its panic resumed here.
    fn settle(&self, status: sys::accel_status, extra: Option<&DataLoader>) -> Result<()> {
        let loaders = [self.train].into_iter().chain(self.eval).chain(extra);
        let result = self
            .accelerator
            .with_checkpoint_closures(status)
            .map_err(|e| self.accelerator.tracker_failure().resolve(e))
            .map_err(|e| resolve_loaders(e, loaders));
        self.failure.settle(result)
    }

    /// transformers' `Trainer.train`: from the start, or with `resume_from_checkpoint` from that
    /// checkpoint. A failure leaves the objects where the failing step left them (the last
    /// checkpoint is intact); a closure's or callback's error is a `Callback` error naming where
    /// it failed, with the closure's error as its source; a panic resumes here.
    pub fn train(&mut self) -> Result<()> {
        // SAFETY: live trainer.
        let status = unsafe { sys::accel_trainer_train(self.raw.as_ptr()) };
        self.settle(status, None)
    }

    /// transformers' `Trainer.evaluate` over the evaluation dataloader: `eval_loss` (the mean
    /// over samples of the steps' losses) and compute_metrics' metrics, logged (`log_history`,
    /// trackers) and given to `on_evaluate`. Without an evaluation dataloader it is an
    /// `InvalidArgument` error.
    pub fn evaluate(&mut self) -> Result<Metrics> {
        let mut out: *mut sys::accel_values = std::ptr::null_mut();
        // SAFETY: live trainer, valid out pointer.
        let status = unsafe { sys::accel_trainer_evaluate(self.raw.as_ptr(), &mut out) };
        // SAFETY: NULL or a set of values the call made for us, ours to free.
        let values = unsafe { Values::from_raw(out) };
        self.settle(status, None)?;
        values.map_or_else(|| Ok(Metrics::default()), |v| Metrics::read(&v))
    }

    /// transformers' `Trainer.predict` over `loader` (prepared on the accelerator; the
    /// evaluation dataloader may be given): the predictions and labels of every sample once, in
    /// dataset order, on every process, and the `test_` metrics.
    pub fn predict(&mut self, loader: &DataLoader) -> Result<Prediction> {
        let mut predictions: *mut sys::accel_tensor = std::ptr::null_mut();
        let mut labels: *mut sys::accel_tensor = std::ptr::null_mut();
        let mut metrics: *mut sys::accel_values = std::ptr::null_mut();
        // SAFETY: live handles, valid out pointers.
        let status = unsafe {
            sys::accel_trainer_predict(
                self.raw.as_ptr(),
                loader.as_raw(),
                &mut predictions,
                &mut labels,
                &mut metrics,
            )
        };
        // SAFETY: each NULL or a handle the call made for us, ours to free.
        let (predictions, labels, metrics) = unsafe {
            (
                Tensor::from_raw(predictions),
                Tensor::from_raw(labels),
                Values::from_raw(metrics),
            )
        };
        self.settle(status, Some(loader))?;
        Ok(Prediction {
            predictions,
            labels,
            metrics: metrics.map_or_else(|| Ok(Metrics::default()), |v| Metrics::read(&v))?,
        })
    }

    /// The state as transformers' `trainer_state.json` text (`global_step`, `epoch`,
    /// `log_history`, `best_metric`, `best_model_checkpoint`, ...), as each checkpoint holds it.
    pub fn state_json(&self) -> Result<String> {
        state_json(self.raw.as_ptr())
    }

    /// The optimizer updates made (`TrainerState.global_step`).
    pub fn global_step(&self) -> Result<u64> {
        global_step(self.raw.as_ptr())
    }

    /// Epochs done, as a fraction (`TrainerState.epoch`; 0 before training).
    pub fn epoch(&self) -> Result<f64> {
        epoch(self.raw.as_ptr())
    }

    /// One flag of the control (`TrainerControl`), as the last event left it.
    pub fn control(&self, flag: ControlFlag) -> Result<bool> {
        control(self.raw.as_ptr(), flag)
    }
}

/// `error` with what the dataset closures of `loaders` left behind.
fn resolve_loaders<'l>(error: Error, loaders: impl IntoIterator<Item = &'l DataLoader>) -> Error {
    loaders
        .into_iter()
        .fold(error, |e, loader| loader.resolve::<()>(Err(e)).unwrap_err())
}
