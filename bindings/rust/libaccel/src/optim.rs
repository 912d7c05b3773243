//! Optimizers and learning-rate schedulers.

use std::fmt::Display;

use libaccel_sys as sys;

use crate::error::{check, Result};
use crate::ffi::{c_string, make, owned_handle, query, set_option};
use crate::model::Model;
use crate::optimizers::OptimizerOptions;
use crate::schedules::SchedulerOptions;

owned_handle!(
    /// An optimizer over a model's parameters: `sgd`, `adam`, `adamw`, `rmsprop` or `adagrad`,
    /// with PyTorch's defaults. Keeps its model alive. Once prepared, [`step`](Optimizer::step)
    /// and [`zero_grad`](Optimizer::zero_grad) do nothing on accumulation micro-steps.
    Optimizer,
    sys::accel_optimizer,
    sys::accel_optimizer_free
);

impl Optimizer {
    /// An optimizer of `kind` over `model`'s parameters.
    pub fn new(model: &Model, kind: &str) -> Result<Optimizer> {
        let kind = c_string(kind, "kind")?;
        // SAFETY: live handle, NUL-terminated kind, valid out pointer.
        let raw =
            make(|out| unsafe { sys::accel_optimizer_new(model.as_raw(), kind.as_ptr(), out) })?;
        // SAFETY: a new handle nothing else owns.
        Ok(unsafe { Optimizer::from_raw(raw) }.expect("non-null"))
    }

    /// An optimizer over `model`'s parameters with typed options ([`optimizers`](crate::optimizers)),
    /// e.g. `Optimizer::with(&model, AdamW::new().lr(1e-3))`: [`new`](Optimizer::new) and a
    /// [`set`](Optimizer::set) per option given, in that type's order.
    pub fn with(model: &Model, options: impl OptimizerOptions) -> Result<Optimizer> {
        let mut optimizer = Optimizer::new(model, options.kind())?;
        for (key, value) in options.options() {
            optimizer.set(key, value)?;
        }
        Ok(optimizer)
    }

    /// Sets an option (`lr`, `momentum`, `weight_decay`, `beta1`, ...: see `accel.h`, or the typed
    /// [`optimizers`](crate::optimizers)).
    pub fn set(&mut self, key: &str, value: impl Display) -> Result<()> {
        // SAFETY: live handle; the strings live for the call.
        set_option(key, &value, |k, v| unsafe {
            sys::accel_optimizer_set(self.as_raw(), k, v)
        })
    }

    /// One optimizer step (see the type's documentation for prepared optimizers).
    pub fn step(&mut self) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::accel_optimizer_step(self.as_raw()) })
    }

    /// Sets the gradients to none; once prepared on several processes, the gradients that live in
    /// the communication buckets are zeroed in place instead (see `accel_optimizer_zero_grad`).
    pub fn zero_grad(&mut self) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::accel_optimizer_zero_grad(self.as_raw()) })
    }

    /// The current learning rate.
    pub fn lr(&self) -> Result<f64> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_optimizer_lr(self.as_raw(), out) })
    }

    /// Sets the learning rate.
    pub fn set_lr(&mut self, lr: f64) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::accel_optimizer_set_lr(self.as_raw(), lr) })
    }

    /// Whether the last prepared step was skipped because an fp16 gradient was inf/nan.
    pub fn step_was_skipped(&self) -> Result<bool> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_optimizer_step_was_skipped(self.as_raw(), out) })
    }
}

owned_handle!(
    /// A learning-rate schedule driving an optimizer: `constant`, `constant_with_warmup`,
    /// `linear`, `cosine`, `cosine_with_restarts`, `polynomial`, `step`, `exponential`,
    /// `one_cycle`, with PyTorch's and Hugging Face's formulas. Once prepared it steps as
    /// Accelerate's (num_processes times per real optimizer step; see `accel.h`).
    ///
    /// ```
    /// use libaccel::{Model, Optimizer, Scheduler};
    /// let mut model = Model::new()?;
    /// model.add_layer("fc", "linear", "in_features=2 out_features=1")?;
    /// let mut sgd = Optimizer::new(&model, "sgd")?; // the string API, beside the typed one
    /// sgd.set("lr", 1.0)?;
    /// let mut halving = Scheduler::new(&sgd, "step")?;
    /// halving.set("step_size", 1)?;
    /// halving.set("gamma", 0.5)?;
    /// assert!(halving.set("gama", 0.5).is_err()); // a typo is found at run time here
    /// halving.step()?;
    /// assert_eq!(halving.lr()?, 0.5);
    /// # Ok::<(), libaccel::Error>(())
    /// ```
    Scheduler,
    sys::accel_scheduler,
    sys::accel_scheduler_free
);

impl Scheduler {
    /// A schedule of `kind` over `optimizer` (its base rate is the optimizer's rate now).
    pub fn new(optimizer: &Optimizer, kind: &str) -> Result<Scheduler> {
        let kind = c_string(kind, "kind")?;
        // SAFETY: live handle, NUL-terminated kind, valid out pointer.
        let raw = make(|out| unsafe {
            sys::accel_scheduler_new(optimizer.as_raw(), kind.as_ptr(), out)
        })?;
        // SAFETY: a new handle nothing else owns.
        Ok(unsafe { Scheduler::from_raw(raw) }.expect("non-null"))
    }

    /// A schedule over `optimizer` with typed options ([`schedules`](crate::schedules)), e.g.
    /// `Scheduler::with(&opt, schedules::Linear::new(1000).warmup_steps(100))`:
    /// [`new`](Scheduler::new) and a [`set`](Scheduler::set) per option.
    pub fn with(optimizer: &Optimizer, options: impl SchedulerOptions) -> Result<Scheduler> {
        let mut scheduler = Scheduler::new(optimizer, options.kind())?;
        for (key, value) in options.options() {
            scheduler.set(key, value)?;
        }
        Ok(scheduler)
    }

    /// Sets an option (`warmup_steps`, `total_steps`, `gamma`, ...: see `accel.h`, or the typed
    /// [`schedules`](crate::schedules)) before the first step.
    pub fn set(&mut self, key: &str, value: impl Display) -> Result<()> {
        // SAFETY: live handle; the strings live for the call.
        set_option(key, &value, |k, v| unsafe {
            sys::accel_scheduler_set(self.as_raw(), k, v)
        })
    }

    /// Steps the schedule.
    pub fn step(&mut self) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::accel_scheduler_step(self.as_raw()) })
    }

    /// The learning rate the schedule has set.
    pub fn lr(&self) -> Result<f64> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_scheduler_lr(self.as_raw(), out) })
    }
}
