//! The optimizers of [`Optimizer::with`](crate::Optimizer::with), typed: one type per kind
//! `accel_optimizer_new` takes, each option of `accel_optimizer_set` a builder method, so a
//! misspelt option, or one the kind does not have, is a compile error. An option left out keeps
//! PyTorch's default (given on each method); a value the library rejects (negative, a beta of 1
//! or more, sgd's nesterov without momentum) is an `InvalidArgument` error from `with`.
//!
//! ```
//! use accel::layers::Linear;
//! use accel::optimizers::{AdamW, Sgd};
//! use accel::{Model, Optimizer};
//! let mut model = Model::new()?;
//! model.add("fc", Linear::new(2, 1))?;
//! let adamw = Optimizer::with(&model, AdamW::new().lr(3e-4).weight_decay(0.05))?;
//! assert_eq!(adamw.lr()?, 3e-4);
//! let nesterov = Sgd::new().lr(0.1).momentum(0.9).nesterov(true);
//! assert_eq!(nesterov.pairs()[2], ("nesterov", "true".to_string()));
//! Optimizer::with(&model, nesterov)?;
//! assert!(Optimizer::with(&model, Sgd::new().nesterov(true)).is_err()); // no momentum
//! # Ok::<(), accel::Error>(())
//! ```

use crate::options::{default_is_new, options_type, sealed::Sealed};

/// An optimizer kind with its options, for [`Optimizer::with`](crate::Optimizer::with).
/// Implemented by this module's types alone.
pub trait OptimizerOptions: Sealed {
    /// The kind as `accel_optimizer_new` takes it (`"adamw"`, ...).
    fn kind(&self) -> &'static str;
    /// The options given, as [`Optimizer::set`](crate::Optimizer::set) takes them, in the order
    /// they are set.
    fn options(&self) -> Vec<(&'static str, String)>;
}

macro_rules! optimizer {
    ($($name:ident = $kind:literal),* $(,)?) => {
        $(
            impl OptimizerOptions for $name {
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

options_type!(
    /// `sgd` (torch.optim.SGD).
    Sgd {
        required {}
        optional {
            /// The learning rate (default 1e-3).
            lr: f64,
            /// Momentum factor (default 0).
            momentum: f64,
            /// Dampening for momentum (default 0).
            dampening: f64,
            /// L2 penalty (default 0).
            weight_decay: f64,
            /// Nesterov momentum (default false); needs momentum > 0 and dampening 0. Set last,
            /// after the options it is checked against.
            nesterov: bool,
        }
    }
);

options_type!(
    /// `adam` (torch.optim.Adam).
    Adam {
        required {}
        optional {
            /// The learning rate (default 1e-3).
            lr: f64,
            /// The first moment's decay (default 0.9).
            beta1: f64,
            /// The second moment's decay (default 0.999).
            beta2: f64,
            /// Added to the denominator (default 1e-8).
            eps: f64,
            /// L2 penalty (default 0).
            weight_decay: f64,
            /// The AMSGrad variant (default false).
            amsgrad: bool,
        }
    }
);

options_type!(
    /// `adamw` (torch.optim.AdamW).
    AdamW {
        required {}
        optional {
            /// The learning rate (default 1e-3).
            lr: f64,
            /// The first moment's decay (default 0.9).
            beta1: f64,
            /// The second moment's decay (default 0.999).
            beta2: f64,
            /// Added to the denominator (default 1e-8).
            eps: f64,
            /// Decoupled weight decay (default 1e-2).
            weight_decay: f64,
            /// The AMSGrad variant (default false).
            amsgrad: bool,
        }
    }
);

options_type!(
    /// `rmsprop` (torch.optim.RMSprop).
    RmsProp {
        required {}
        optional {
            /// The learning rate (default 1e-2).
            lr: f64,
            /// Smoothing constant (default 0.99).
            alpha: f64,
            /// Added to the denominator (default 1e-8).
            eps: f64,
            /// L2 penalty (default 0).
            weight_decay: f64,
            /// Momentum factor (default 0).
            momentum: f64,
            /// Normalise by the centred second moment (default false).
            centered: bool,
        }
    }
);

options_type!(
    /// `adagrad` (torch.optim.Adagrad).
    Adagrad {
        required {}
        optional {
            /// The learning rate (default 1e-2).
            lr: f64,
            /// Learning-rate decay (default 0).
            lr_decay: f64,
            /// L2 penalty (default 0).
            weight_decay: f64,
            /// The accumulators' starting value (default 0).
            initial_accumulator_value: f64,
            /// Added to the denominator (default 1e-10).
            eps: f64,
        }
    }
);

default_is_new!(Sgd, Adam, AdamW, RmsProp, Adagrad);

optimizer!(
    Sgd = "sgd",
    Adam = "adam",
    AdamW = "adamw",
    RmsProp = "rmsprop",
    Adagrad = "adagrad",
);
