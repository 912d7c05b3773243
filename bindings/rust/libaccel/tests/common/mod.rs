//! What the integration tests share: one accelerator per process at a time, the data, tools.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use accel::{Config, DataLoader, Model};

pub mod launch;

/// Only one accelerator may exist in a process: tests that make one hold this lock.
pub fn one_accelerator() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Debian's dataset-fashion-mnist (installed by tools/setup.sh).
pub const FASHION_MNIST: &str = "/usr/share/datasets/fashion-mnist";

/// The repository's root (bindings/rust/libaccel/../../..).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

/// A fresh directory for one test.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("libaccel-rs-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A model of one linear layer "fc" with the methods `forward`, `training_step` (MSE) and `both`.
pub fn linear_model(inputs: usize, outputs: usize) -> Model {
    let mut model = Model::new().unwrap();
    model
        .add_layer(
            "fc",
            "linear",
            &format!("in_features={inputs} out_features={outputs}"),
        )
        .unwrap();
    model
        .define(
            "def forward(self, x):\n    return self.fc.forward(x)\n\n\
             def training_step(self, x, y):\n    \
             return torch.mse_loss(self.forward(x), y)\n\n\
             def both(self, x):\n    return (self.forward(x), x)\n",
        )
        .unwrap();
    model
}

/// A batch as (shape, i64 values) per field.
pub fn shapes_and_values(batch: accel::Batch) -> Vec<(Vec<i64>, Vec<i64>)> {
    batch
        .iter()
        .map(|t| (t.shape().unwrap(), t.to_vec::<i64>().unwrap()))
        .collect()
}

/// The next batch of a loader as (shape, i64 values) per field.
pub fn next_values(loader: &mut DataLoader) -> Vec<(Vec<i64>, Vec<i64>)> {
    shapes_and_values(loader.next_batch().unwrap().expect("a batch"))
}

/// A config whose runs write `log_with` under `dir`.
pub fn tracking_config(log_with: &str, dir: &std::path::Path) -> Config {
    let mut cfg = Config::new().unwrap();
    cfg.set("log_with", log_with).unwrap();
    cfg.set("logging_dir", dir.display()).unwrap();
    cfg
}
