//! Hugging Face Accelerate for Rust: one training program that runs unchanged on one CPU and on
//! many processes (`accel launch -n N`), with Accelerate's semantics, on libaccel's C interface.
//!
//! ```no_run
//! use accel::layers::Linear;
//! use accel::optimizers::AdamW;
//! use accel::{fields, Accelerator, DataLoader, DataLoaderOptions, Dataset, Model, Optimizer};
//!
//! fn main() -> accel::Result<()> {
//!     let acc = Accelerator::new()?; // reads RANK, WORLD_SIZE, ... as set by `accel launch`
//!     let mut model = Model::new()?;
//!     model.add("fc", Linear::new(784, 10))?;
//!     model.define(
//!         "def training_step(self, x, y):\n\
//!          \x20   return torch.cross_entropy_loss(self.fc.forward(x.float().flatten(1)), y.long())\n",
//!     )?;
//!     let dir = "/usr/share/datasets/fashion-mnist";
//!     let train = Dataset::from_idx(&[
//!         format!("{dir}/train-images-idx3-ubyte.gz"),
//!         format!("{dir}/train-labels-idx1-ubyte.gz"),
//!     ])?;
//!     let mut loader = DataLoader::with(&acc, &train, DataLoaderOptions::new().batch_size(64))?;
//!     let mut opt = Optimizer::with(&model, AdamW::new().lr(1e-3))?;
//!     acc.prepare((&mut model, &mut opt, &mut loader))?;
//!     for batch in &mut loader { // one epoch
//!         let [x, y] = fields(batch?)?;
//!         acc.accumulate()?;
//!         let loss = model.call1("training_step", &[&x, &y])?;
//!         acc.backward(&loss)?; // gradients averaged across processes
//!         opt.step()?;
//!         opt.zero_grad()?;
//!     }
//!     Ok(())
//! }
//! ```
//!
//! Options are typed ([`layers`], [`optimizers`], [`schedules`], [`DataLoaderOptions`]): a
//! misspelt one does not compile. The string forms ([`Model::add_layer`], [`Optimizer::set`],
//! [`DataLoader::set`], ...) take the same keys, checked by the library at run time.
//!
//! Text: a dataset with ragged fields ([`Field::ragged`], [`Dataset::from_ragged_fn`]: each
//! sample its own number of tokens) gives batches padded to their longest sample with an
//! attention mask, as [`Padding`] says (pad value, side, multiple, `max_length` and truncation,
//! mask or lengths), for every ragged field in [`DataLoaderOptions::padding`] or for one
//! ([`DataLoader::set_field_padding`]); [`DataLoaderOptions::group_by_length`] batches samples of
//! similar lengths. A corpus too large to index is a stream, read in order
//! ([`Dataset::from_stream`] with a [`Sample`] per call, [`Dataset::from_stream_iter`] from an
//! iterator per epoch, [`Dataset::from_text_lines`]): its length is unknown (`None` from
//! [`Dataset::sample_count`] and [`DataLoader::batch_count`]) and the main process reads it and
//! sends each process its rows ([`DataLoaderOptions::dispatch_batches`]). For inference, [`Accelerator::split_between_processes`] shares a list (or a
//! tensor's rows) out among the processes, and [`Accelerator::set_trigger`] with
//! [`Accelerator::check_trigger`] stops every rank at the same step.
//!
//! Experiment tracking as Accelerate's: the configuration's `log_with` (`"jsonl"`, `"csv"`,
//! `"tensorboard"`, `"all"`) and `logging_dir` choose the files, [`Accelerator::init_trackers`],
//! [`Accelerator::log`] (of [`Values`]) and [`Accelerator::end_training`] write them on the main
//! process, and a [`Tracker`] of the program's own ([`Accelerator::add_tracker`]) gets the same
//! calls.
//!
//! Logging as Accelerate's `get_logger`: [`Accelerator::logger`] writes on the main process only,
//! [`Logger::all_processes`] on every process, [`Logger::in_order`] on every process in rank
//! order; messages below [`Accelerator::log_level`] (the configuration's `log_level`,
//! `ACCELERATE_LOG_LEVEL`) are dropped. They go to the [`log`] facade, target `"libaccel"`, with
//! the rank as a key-value, so the program's logger and its filters apply
//! ([`Accelerator::log_to_stderr`] and [`Accelerator::set_log_sink`] send them elsewhere).
//!
//! Around the training step, as Accelerate's: [`Accelerator::no_sync`] keeps a model's
//! gradients local for a block, [`LocalSgd`] (or [`Accelerator::local_sgd`]) averages the
//! parameters every few steps instead of the gradients every step,
//! [`Accelerator::find_executable_batch_size`] retries a closure with smaller batch sizes while it
//! runs out of memory, [`Profiler`] records LibTorch's operators by schedule, and
//! [`Accelerator::on_main_process`] and its siblings run a closure on one process.
//!
//! Pretrained weights as transformers' `from_pretrained` loads them: [`Model::load_pretrained`]
//! with [`PretrainedOptions`] (not strict, `base_model_prefix`, `ignore_mismatched_sizes`) reads a
//! safetensors checkpoint and returns a [`LoadReport`] (missing, unexpected and mismatched names,
//! transformers' warnings).
//!
//! The loop itself as transformers' `Trainer`: [`Trainer`] trains, evaluates and predicts over
//! the accelerator with `TrainingArguments`' settings (logging, evaluation and save strategies,
//! checkpoint rotation, the best model, early stopping, exact resume); the model's TorchScript
//! `training_step` and `eval_step` are its steps unless Rust closures replace them
//! ([`Trainer::set_training_step`], [`Trainer::set_eval_step`],
//! [`Trainer::set_compute_metrics`]), and a [`TrainerCallback`] sees transformers' events.
//!
//! Text for pretrained models: [`Tokenizer`] is Hugging Face's BERT WordPiece tokenizer (the ids
//! its `tokenizers` library gives, as for sentence-transformers' all-MiniLM-L6-v2), one text at a
//! time or a padded batch with its attention mask.
//!
//! Every call returns [`Result`]; the [`Error`] carries the library's [`Status`] and message.
//! Every handle type frees itself on drop, and may be dropped in any order (handles keep alive
//! what they need). All types are `Send + Sync`, as the header's thread rules allow (but
//! [`Values`], which the header gives one thread at a time: `Send` only, [`Trainer`], whose calls
//! run the program's closures: `Send` only, and [`TraceWindow`] and [`TrainerContext`], lent to
//! a closure for one call); see each type for which calls the library serialises.
#![warn(missing_docs)]

mod accelerator;
mod bigmodel;
mod callback;
mod checkpoint;
mod config;
mod data;
mod error;
mod ffi;
pub mod layers;
mod logging;
mod model;
mod optim;
pub mod optimizers;
mod options;
mod pretrained;
mod profiler;
pub mod schedules;
mod step_tools;
#[cfg(feature = "tch")]
mod tch_interop;
mod tensor;
mod tokenizer;
mod tracking;
mod trainer;

pub use accelerator::{
    Accelerator, DistributedType, Precision, Prepare, PrepareAll, Reduction, StateWriter,
};
pub use config::Config;
pub use data::{
    fields, Batch, Batches, DataLoader, DataLoaderOptions, Dataset, Field, Mask, Padding,
    PaddingSide, Sample,
};
pub use error::{last_error, BoxError, Error, Result, Status};
pub use libaccel_sys as sys;
/// The `log` facade this crate sends the library's messages to ([`Accelerator::log_to_facade`]).
pub use log;
pub use logging::{LogLevel, LogRecord, Logger, LOG_TARGET};
pub use model::{load_checkpoint_in_model, Model};
pub use optim::{Optimizer, Scheduler};
pub use pretrained::{LoadReport, PretrainedOptions};
pub use profiler::{Activities, ProfileOptions, Profiler, TraceWindow};
pub use step_tools::{BatchSizeError, LocalSgd};
/// tch-rs at the very release the `tch` feature pins (0.24.0, for LibTorch 2.11.0): a program
/// writes `accel::tch::Tensor` and never guesses the pin (a second tch in its own Cargo.toml
/// must be `=0.24.0`, or its types are not these).
#[cfg(feature = "tch")]
pub use tch;
#[cfg(feature = "tch")]
pub use tch_interop::{check_tch, TCH_TORCH_VERSION};
pub use tensor::{Dtype, Element, Scalar, Tensor};
pub use tokenizer::Tokenizer;
pub use tracking::{Tracker, Value, Values, ValuesRef};
pub use trainer::{
    CallbackResult, ControlFlag, EvalOutput, Metrics, Prediction, Trainer, TrainerCallback,
    TrainerContext, TrainerEvent,
};

/// The version of the library actually loaded, e.g. `"0.2.4"`.
pub fn version() -> &'static str {
    // SAFETY: static storage, never NULL.
    unsafe { std::ffi::CStr::from_ptr(sys::accel_version()) }
        .to_str()
        .unwrap_or("?")
}

/// The loaded library's version as one number: major * 10000 + minor * 100 + patch.
pub fn version_number() -> u32 {
    // SAFETY: reads a constant.
    unsafe { sys::accel_version_number() }
}

// The header's thread rules, asserted: every handle may move between and be shared by threads.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Config>();
    send_sync::<Tensor>();
    send_sync::<Accelerator>();
    send_sync::<Dataset>();
    send_sync::<DataLoader>();
    send_sync::<Model>();
    send_sync::<Optimizer>();
    send_sync::<Scheduler>();
    send_sync::<LocalSgd>();
    send_sync::<Profiler>();
    send_sync::<Tokenizer>();
    send_sync::<Error>();
    send_sync::<Logger<'static>>();
    // Values: one thread at a time (accel.h), so it moves between threads but is not shared.
    const fn send<T: Send>() {}
    send::<Values>();
    // Trainer: its calls run the program's closures, one call at a time (`&mut self`).
    send::<Trainer<'static>>();
};

/// Checks that a program's own LibTorch (tch-rs's) is the very build libaccel runs on, before
/// any tensor crosses with [`Tensor::from_torch_ptr`]: `version` as that LibTorch says
/// (`"2.11.0"`), `cxx11_abi` its `_GLIBCXX_USE_CXX11_ABI` (`None` when unknown), `cpu_allocator`
/// the address of `c10::GetCPUAllocator` as the program sees it (null when unknown). A mismatch
/// is [`Status::Unsupported`] naming both builds.
// The pointer is only compared with libaccel's own, never read.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn check_torch(
    version: &str,
    cxx11_abi: Option<bool>,
    cpu_allocator: *const std::ffi::c_void,
) -> Result<()> {
    ffi::ensure_supported_library()?;
    let version = ffi::c_string(version, "version")?;
    let abi = cxx11_abi.map_or(-1, i32::from);
    // SAFETY: NUL-terminated string; the pointer is only compared, never dereferenced.
    error::check(unsafe { sys::accel_torch_check(version.as_ptr(), abi, cpu_allocator) })
}
