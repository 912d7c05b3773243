//! The learning-rate schedules of [`Scheduler::with`](crate::Scheduler::with), typed: one type per
//! kind `accel_scheduler_new` takes, the options a schedule cannot do without (`total_steps`,
//! `step_size`, `gamma`, `max_lr`) as arguments of `new` and every other option a builder method,
//! so a misspelt or missing option is a compile error. Step counts are single-process optimizer
//! steps (see [`Scheduler`](crate::Scheduler) for how a prepared one steps). A value the library
//! rejects on sight (a negative one) is an `InvalidArgument` error from `with`; one it checks
//! against the others once they are complete (a `step_size` of 0, one_cycle's `pct_start` outside
//! (0, 1)) is that error from the first `step`, as with the string options.
//!
//! ```
//! use accel::layers::Linear;
//! use accel::optimizers::Sgd;
//! use accel::schedules::{self, Anneal, OneCycle, Step};
//! use accel::{Model, Optimizer, Scheduler};
//! let mut model = Model::new()?;
//! model.add("fc", Linear::new(2, 1))?;
//! let opt = Optimizer::with(&model, Sgd::new().lr(1.0))?;
//! let mut warmup = Scheduler::with(&opt, schedules::Linear::new(100).warmup_steps(10))?;
//! assert_eq!(warmup.lr()?, 0.0); // step 0 of the warm-up
//! warmup.step()?;
//! assert_eq!(warmup.lr()?, 0.1);
//! let cycle = OneCycle::new(0.5, 1000).anneal_strategy(Anneal::Linear);
//! assert_eq!(cycle.pairs()[2], ("anneal_strategy", "linear".to_string()));
//! assert!(Scheduler::with(&opt, Step::new(10).gamma(-0.5)).is_err());
//! let mut bad = Scheduler::with(&opt, OneCycle::new(0.5, 1000).pct_start(1.5))?;
//! assert!(bad.step().is_err());
//! # Ok::<(), accel::Error>(())
//! ```

use std::fmt;

use crate::options::{default_is_new, options_type, sealed::Sealed};

/// A schedule kind with its options, for [`Scheduler::with`](crate::Scheduler::with).
/// Implemented by this module's types alone.
pub trait SchedulerOptions: Sealed {
    /// The kind as `accel_scheduler_new` takes it (`"linear"`, ...).
    fn kind(&self) -> &'static str;
    /// The options, as [`Scheduler::set`](crate::Scheduler::set) takes them, in the order they
    /// are set.
    fn options(&self) -> Vec<(&'static str, String)>;
}

macro_rules! schedule {
    ($($name:ident = $kind:literal),* $(,)?) => {
        $(
            impl SchedulerOptions for $name {
                fn kind(&self) -> &'static str {
                    $kind
                }
                fn options(&self) -> Vec<(&'static str, String)> {
                    self.pairs()
                }
            }
        )*
    };
}

/// How [`OneCycle`] anneals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Anneal {
    /// Cosine annealing (the default).
    #[default]
    Cos,
    /// Linear annealing.
    Linear,
}

impl fmt::Display for Anneal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Anneal::Cos => "cos",
            Anneal::Linear => "linear",
        })
    }
}

options_type!(
    /// `constant`: the optimizer's rate, unchanged.
    Constant {
        required {}
        optional {}
    }
);

options_type!(
    /// `constant_with_warmup`: a linear warm-up from 0, then the optimizer's rate.
    ConstantWithWarmup {
        required {}
        optional {
            /// Steps of the warm-up (default 0).
            warmup_steps: i64,
        }
    }
);

options_type!(
    /// `linear`: `new(total_steps)`; a linear warm-up, then a linear decay to 0 at
    /// `total_steps` (Hugging Face's `get_linear_schedule_with_warmup`).
    Linear {
        required { total_steps: i64 }
        optional {
            /// Steps of the warm-up (default 0).
            warmup_steps: i64,
        }
    }
);

options_type!(
    /// `cosine`: `new(total_steps)`; a linear warm-up, then a cosine decay.
    Cosine {
        required { total_steps: i64 }
        optional {
            /// Steps of the warm-up (default 0).
            warmup_steps: i64,
            /// Cosine waves over the decay (default 0.5: from the rate down to 0).
            num_cycles: f64,
        }
    }
);

options_type!(
    /// `cosine_with_restarts`: `new(total_steps)`; a linear warm-up, then cosine decays with
    /// hard restarts.
    CosineWithRestarts {
        required { total_steps: i64 }
        optional {
            /// Steps of the warm-up (default 0).
            warmup_steps: i64,
            /// Hard restarts (default 1).
            num_cycles: f64,
        }
    }
);

options_type!(
    /// `polynomial`: `new(total_steps)`; a linear warm-up, then a polynomial decay to
    /// `lr_end`.
    Polynomial {
        required { total_steps: i64 }
        optional {
            /// Steps of the warm-up (default 0).
            warmup_steps: i64,
            /// The final rate (default 1e-7); at most the optimizer's rate.
            lr_end: f64,
            /// The polynomial's power (default 1).
            power: f64,
        }
    }
);

options_type!(
    /// `step` (torch's StepLR): `new(step_size)`; the rate times `gamma` every `step_size`
    /// steps.
    Step {
        required { step_size: i64 }
        optional {
            /// The factor (default 0.1).
            gamma: f64,
        }
    }
);

options_type!(
    /// `exponential` (torch's ExponentialLR): `new(gamma)`; the rate times `gamma` every step.
    Exponential {
        required { gamma: f64 }
        optional {}
    }
);

options_type!(
    /// `one_cycle` (torch's OneCycleLR): `new(max_lr, total_steps)`, `total_steps` at least 2.
    OneCycle {
        required { max_lr: f64, total_steps: i64 }
        optional {
            /// The share of the cycle spent rising, in (0, 1) (default 0.3).
            pct_start: f64,
            /// How the rate anneals (default [`Anneal::Cos`]).
            anneal_strategy: Anneal,
            /// The starting rate is `max_lr / div_factor` (default 25).
            div_factor: f64,
            /// The final rate is the starting rate / `final_div_factor` (default 1e4).
            final_div_factor: f64,
            /// The momentum at the rate's peak (default 0.85).
            base_momentum: f64,
            /// The momentum at the rate's lowest (default 0.95).
            max_momentum: f64,
            /// Whether momentum cycles inversely to the rate (default true).
            cycle_momentum: bool,
        }
    }
);

default_is_new!(Constant, ConstantWithWarmup);

schedule!(
    Constant = "constant",
    ConstantWithWarmup = "constant_with_warmup",
    Linear = "linear",
    Cosine = "cosine",
    CosineWithRestarts = "cosine_with_restarts",
    Polynomial = "polynomial",
    Step = "step",
    Exponential = "exponential",
    OneCycle = "one_cycle",
);
