//! What the integration tests share: one accelerator per process at a time, the data, tools.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

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
