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
    /// [`optimizers`](crate::optimizers)): parameter group 0's, and the default that groups made
    /// later start from ([`set_group`](Optimizer::set_group) sets another group's).
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

    /// The current learning rate (parameter group 0's: [`group_lr`](Optimizer::group_lr) for
    /// the others).
    pub fn lr(&self) -> Result<f64> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_optimizer_lr(self.as_raw(), out) })
    }

    /// Sets the learning rate, as [`set`](Optimizer::set) sets `lr` (group 0's and the default).
    pub fn set_lr(&mut self, lr: f64) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::accel_optimizer_set_lr(self.as_raw(), lr) })
    }

    /// Whether the last prepared step was skipped because an fp16 gradient was inf/nan.
    pub fn step_was_skipped(&self) -> Result<bool> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_optimizer_step_was_skipped(self.as_raw(), out) })
    }

    /// Makes a parameter group (PyTorch's `param_groups`) of the parameters `names` (as
    /// [`Model::tensor_names`] lists them) and returns its index (1, 2, ...). Group 0 holds every
    /// parameter no other group names, with the options [`set`](Optimizer::set) sets; a new
    /// group starts from those options as they are now, and
    /// [`set_group`](Optimizer::set_group) changes its own. `InvalidArgument` for a name that is
    /// not a parameter, is given twice or is in another group already, and for no names; `State`
    /// once the optimizer is prepared, has stepped, or has a scheduler (make the groups first).
    ///
    /// ```
    /// use accel::{layers::Linear, optimizers::AdamW, Model, Optimizer};
    /// let mut model = Model::new()?;
    /// model.add("fc", Linear::new(4, 2))?;
    /// let mut opt = Optimizer::with(&model, AdamW::new().lr(1e-3).weight_decay(0.01))?;
    /// let no_decay = opt.add_group(&["fc.bias"])?; // the classic: no weight decay on biases
    /// opt.set_group(no_decay, "weight_decay", 0.0)?;
    /// assert_eq!(opt.group_count()?, 2);
    /// assert_eq!(opt.group_lr(no_decay)?, 1e-3);
    /// # Ok::<(), accel::Error>(())
    /// ```
    pub fn add_group<S: AsRef<str>>(&mut self, names: &[S]) -> Result<usize> {
        let names = names
            .iter()
            .map(|n| c_string(n.as_ref(), "name"))
            .collect::<Result<Vec<_>>>()?;
        let ptrs: Vec<*const std::ffi::c_char> = names.iter().map(|n| n.as_ptr()).collect();
        // SAFETY: live handle; `ptrs` holds `ptrs.len()` NUL-terminated strings that live for
        // the call; valid out pointer.
        query(|out| unsafe {
            sys::accel_optimizer_add_group(self.as_raw(), ptrs.as_ptr(), ptrs.len(), out)
        })
    }

    /// The number of parameter groups: 1 (group 0) plus one per
    /// [`add_group`](Optimizer::add_group).
    pub fn group_count(&self) -> Result<usize> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_optimizer_group_count(self.as_raw(), out) })
    }

    /// Sets an option of parameter group `group`, with the keys of [`set`](Optimizer::set)
    /// (`lr`, `weight_decay`, `momentum`, ...); takes effect at the next step. Group 0's here
    /// leaves the defaults new groups start from alone. A group that does not exist is
    /// `InvalidArgument`.
    pub fn set_group(&mut self, group: usize, key: &str, value: impl Display) -> Result<()> {
        // SAFETY: live handle; the strings live for the call.
        set_option(key, &value, |k, v| unsafe {
            sys::accel_optimizer_set_group(self.as_raw(), group, k, v)
        })
    }

    /// The current learning rate of parameter group `group` ([`lr`](Optimizer::lr) is group
    /// 0's; a scheduler sets every group's).
    pub fn group_lr(&self, group: usize) -> Result<f64> {
        // SAFETY: live handle, valid out pointer.
        query(|out| unsafe { sys::accel_optimizer_group_lr(self.as_raw(), group, out) })
    }
}

owned_handle!(
    /// A learning-rate schedule driving an optimizer: `constant`, `constant_with_warmup`,
    /// `linear`, `cosine`, `cosine_with_restarts`, `polynomial`, `step`, `exponential`,
    /// `one_cycle`, with PyTorch's and Hugging Face's formulas. Once prepared it steps as
    /// Accelerate's (num_processes times per real optimizer step; see `accel.h`).
    ///
    /// ```
    /// use accel::{Model, Optimizer, Scheduler};
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
    /// # Ok::<(), accel::Error>(())
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
