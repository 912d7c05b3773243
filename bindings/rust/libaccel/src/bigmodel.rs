//! Big-model inference on the CPU (accel.h, "Big-model inference"): Accelerate's
//! infer_auto_device_map over a model, and dispatch_model with disk offload.
use std::path::Path;

use libaccel_sys as sys;

use crate::error::{check, Result};
use crate::ffi::{c_string, make, path_string, take_bytes_list};
use crate::model::Model;

impl Model {
    /// Accelerate's `infer_auto_device_map` for this model: `"module=cpu"` / `"module=disk"`
    /// lines in Accelerate's order (the root is named `""`). `options`: `max_memory=cpu:200MB,disk`
    /// (required), `no_split_module_classes=A,B`, `fallback_allocation`. A map that needs disk
    /// when `max_memory` names none is [`Status::OutOfMemory`](crate::Status::OutOfMemory).
    pub fn infer_device_map(&self, options: &str) -> Result<Vec<String>> {
        let options = c_string(options, "options")?;
        // SAFETY: live handle, NUL-terminated options, valid out pointer.
        let list = make(|out| unsafe {
            sys::accel_infer_device_map(self.as_raw(), options.as_ptr(), out)
        })?;
        Ok(take_bytes_list(list)?
            .into_iter()
            .map(|line| String::from_utf8_lossy(&line).into_owned())
            .collect())
    }

    /// Accelerate's `dispatch_model` with disk offload: loads the `cpu` modules' tensors from
    /// `checkpoint` once; the `disk` ones are read from the file just before each forward of their
    /// module and dropped after it. `device_map`: [`infer_device_map`](Model::infer_device_map)'s
    /// lines (joined by newlines or spaces), or its options. Inference only: the model then
    /// refuses optimizers and `prepare`.
    pub fn dispatch(&mut self, checkpoint: impl AsRef<Path>, device_map: &str) -> Result<()> {
        let checkpoint = path_string(checkpoint.as_ref())?;
        let device_map = c_string(device_map, "device_map")?;
        // SAFETY: live handle, NUL-terminated strings.
        check(unsafe {
            sys::accel_dispatch_model(self.as_raw(), checkpoint.as_ptr(), device_map.as_ptr())
        })
    }
}
