//! The layer catalogue of [`Model::add`](crate::Model::add), typed: one type per kind
//! `accel_model_add_layer` takes, its required sizes as arguments of `new` and every other option
//! a builder method, so a misspelt option is a compile error. Each is initialised as the matching
//! torch.nn layer; a value the library rejects (channels that do not divide by `groups`,
//! say) is an error from `add`.
//!
//! ```
//! use accel::layers::{Conv2d, Linear};
//! use accel::{Model, Tensor};
//! let mut model = Model::new()?;
//! model.add("conv", Conv2d::new(1, 4, 3).padding(1))?;
//! model.add("fc", Linear::new(4 * 5 * 5, 2).bias(false))?;
//! model.define(
//!     "def forward(self, x):\n    return self.fc.forward(torch.flatten(self.conv.forward(x), 1))\n",
//! )?;
//! assert_eq!(model.tensor_names()?, ["conv.weight", "conv.bias", "fc.weight"]);
//! let x = Tensor::from_slice(&[0.5f32; 25], &[1, 1, 5, 5])?;
//! assert_eq!(model.call1("forward", &[&x])?.shape()?, [1, 2]);
//! assert!(model.add("bad", Conv2d::new(3, 4, 3).groups(2)).is_err()); // 3 channels, 2 groups
//! # Ok::<(), accel::Error>(())
//! ```

use crate::options::{options_type, sealed::Sealed};

/// A layer of the library's catalogue, for [`Model::add`](crate::Model::add). Implemented by
/// this module's types alone.
pub trait Layer: Sealed {
    /// The kind as `accel_model_add_layer` takes it (`"linear"`, ...).
    fn kind(&self) -> &'static str;
    /// The options as the spec text of [`Model::add_layer`](crate::Model::add_layer)
    /// (`"in_features=784 out_features=10"`).
    fn spec(&self) -> String;
}

macro_rules! layer {
    ($($name:ident = $kind:literal),* $(,)?) => {
        $(
            impl Layer for $name {
                fn kind(&self) -> &'static str {
                    $kind
                }
                fn spec(&self) -> String {
                    let pairs: Vec<String> =
                        self.pairs().into_iter().map(|(k, v)| format!("{k}={v}")).collect();
                    pairs.join(" ")
                }
            }
        )*
    };
}

options_type!(
    /// `linear` (torch.nn.Linear): `new(in_features, out_features)`; parameters `weight`
    /// `[out, in]` and `bias` `[out]`.
    Linear {
        required { in_features: i64, out_features: i64 }
        optional {
            /// Whether the layer has a bias (default true).
            bias: bool,
        }
    }
);

options_type!(
    /// `conv2d` (torch.nn.Conv2d, square kernels): `new(in_channels, out_channels,
    /// kernel_size)`; parameters `weight` `[out, in / groups, k, k]` and `bias` `[out]`.
    Conv2d {
        required { in_channels: i64, out_channels: i64, kernel_size: i64 }
        optional {
            /// The stride in both dimensions (default 1).
            stride: i64,
            /// Zero padding on every side (default 0).
            padding: i64,
            /// The kernel's dilation (default 1).
            dilation: i64,
            /// Groups of channels convolved apart; both channel counts must divide by it
            /// (default 1).
            groups: i64,
            /// Whether the layer has a bias (default true).
            bias: bool,
        }
    }
);

options_type!(
    /// `batch_norm2d` (torch.nn.BatchNorm2d): `new(num_features)`; parameters `weight` and
    /// `bias`, running statistics as buffers.
    BatchNorm2d {
        required { num_features: i64 }
        optional {
            /// Added to the variance (default 1e-5).
            eps: f64,
            /// The running statistics' update factor (default 0.1).
            momentum: f64,
        }
    }
);

options_type!(
    /// `layer_norm` (torch.nn.LayerNorm over the last dimension): `new(normalized_shape)`, the
    /// size of that dimension; parameters `weight` and `bias`.
    LayerNorm {
        required { normalized_shape: i64 }
        optional {
            /// Added to the variance (default 1e-5).
            eps: f64,
        }
    }
);

options_type!(
    /// `embedding` (torch.nn.Embedding): `new(num_embeddings, embedding_dim)`; parameter
    /// `weight`, drawn from N(0, 1).
    Embedding {
        required { num_embeddings: i64, embedding_dim: i64 }
        optional {}
    }
);

layer!(
    Linear = "linear",
    Conv2d = "conv2d",
    BatchNorm2d = "batch_norm2d",
    LayerNorm = "layer_norm",
    Embedding = "embedding",
);
