//! Checkpoints: `save_model` (safetensors), `save_state`/`load_state`, and the program's own
//! objects registered with closures.

use std::ffi::{c_char, c_void};
use std::path::Path;
use std::sync::{Arc, Mutex};

use libaccel_sys as sys;

use crate::accelerator::{Accelerator, CheckpointState, StateWriter};
use crate::callback::FailureSlot;
use crate::error::{check, BoxError, Result};
use crate::ffi::{c_string, path_string};
use crate::model::Model;

impl Accelerator {
    /// Accelerate's `save_model`: `model`'s parameters and buffers as safetensors in `dir`
    /// (`model.safetensors`, or shards above `max_shard_size`, `"10GB"` when `None`). Only the
    /// main process writes; every process returns once it is written.
    pub fn save_model(
        &self,
        model: &Model,
        dir: impl AsRef<Path>,
        max_shard_size: Option<&str>,
    ) -> Result<()> {
        let dir = path_string(dir.as_ref())?;
        let shard = max_shard_size
            .map(|s| c_string(s, "max_shard_size"))
            .transpose()?;
        let shard_ptr = shard.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
        // SAFETY: live handles, NUL-terminated strings (or NULL for the default shard size).
        check(unsafe {
            sys::accel_save_model(self.as_raw(), model.as_raw(), dir.as_ptr(), shard_ptr)
        })
    }

    /// Accelerate's `save_state` into `dir`: every prepared object, the random states and the
    /// registered objects, with a manifest of sizes and checksums, written aside and renamed into
    /// place when complete. A collective. A registered save closure's error comes back as a
    /// `Callback` error with its message; its panic is resumed here.
    pub fn save_state(&self, dir: impl AsRef<Path>) -> Result<()> {
        self.state_call(sys::accel_save_state, Some(dir.as_ref()))
    }

    /// `save_state` where the configuration's project settings say
    /// (`project_dir/checkpoints/checkpoint_<n>` with `automatic_checkpoint_naming`).
    pub fn save_state_in_project(&self) -> Result<()> {
        self.state_call(sys::accel_save_state, None)
    }

    /// Restores a `save_state` directory (verified first) into the prepared objects and the
    /// registered ones. A collective.
    pub fn load_state(&self, dir: impl AsRef<Path>) -> Result<()> {
        self.state_call(sys::accel_load_state, Some(dir.as_ref()))
    }

    /// Loads the newest checkpoint of the project directory and continues its numbering.
    pub fn load_state_from_project(&self) -> Result<()> {
        self.state_call(sys::accel_load_state, None)
    }

    /// Runs save_state or load_state (`dir` None: the project's automatic choice) and turns a
    /// registered closure's failure back into its error or panic.
    fn state_call(
        &self,
        call: unsafe extern "C" fn(*mut sys::accel_accelerator, *const c_char) -> sys::accel_status,
        dir: Option<&Path>,
    ) -> Result<()> {
        let dir = dir.map(path_string).transpose()?;
        let dir_ptr = dir.as_ref().map_or(std::ptr::null(), |d| d.as_ptr());
        // SAFETY: live handle; the path is NUL-terminated or NULL, which the call accepts.
        let status = unsafe { call(self.as_raw(), dir_ptr) };
        self.with_checkpoint_closures(status)
    }

    /// Saves the program's own state with every checkpoint (Accelerate's
    /// `register_for_checkpointing`): `save` writes the object's bytes on the main process
    /// during [`save_state`](Accelerator::save_state), `load` gets them back on every process
    /// during [`load_state`](Accelerator::load_state). Both run on the thread that called
    /// save/load, and may use the models, optimizers and schedulers. Register the same objects
    /// in the same order before loading. The closures are dropped with the accelerator.
    ///
    /// ```
    /// use std::io::Write;
    /// use std::sync::{Arc, Mutex};
    /// let acc = accel::Accelerator::new()?;
    /// let step = Arc::new(Mutex::new(41u64));
    /// let (saved, loaded) = (step.clone(), step.clone());
    /// acc.register_for_checkpointing(
    ///     move |w| Ok(w.write_all(&saved.lock().unwrap().to_le_bytes())?),
    ///     move |bytes| {
    ///         *loaded.lock().unwrap() = u64::from_le_bytes(bytes.try_into()?);
    ///         Ok(())
    ///     },
    /// )?;
    /// let dir = std::env::temp_dir().join(format!("libaccel-doc-{}", std::process::id()));
    /// acc.save_state(&dir)?;
    /// *step.lock().unwrap() = 0;
    /// acc.load_state(&dir)?;
    /// assert_eq!(*step.lock().unwrap(), 41);
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn register_for_checkpointing<S, L>(&self, save: S, load: L) -> Result<()>
    where
        S: FnMut(&mut StateWriter<'_>) -> std::result::Result<(), BoxError> + Send + 'static,
        L: FnMut(&[u8]) -> std::result::Result<(), BoxError> + Send + 'static,
    {
        let state = Arc::new(CheckpointState {
            save: Mutex::new(Box::new(save)),
            load: Mutex::new(Box::new(load)),
            failure: FailureSlot::default(),
        });
        let user_data = Arc::into_raw(Arc::clone(&state)) as *mut c_void;
        // SAFETY: `user_data` is an Arc reference handed to the library, given back exactly once
        // through `release_checkpoint_state`.
        let status = unsafe {
            sys::accel_register_for_checkpointing(
                self.as_raw(),
                Some(save_object),
                Some(load_object),
                user_data,
                Some(release_checkpoint_state),
            )
        };
        if let Err(e) = check(status) {
            // On failure the library never calls release: take the reference back.
            // SAFETY: from Arc::into_raw above, not released.
            drop(unsafe { Arc::from_raw(user_data as *const CheckpointState) });
            return Err(e);
        }
        self.keep_checkpoint_state(state);
        Ok(())
    }
}

unsafe extern "C" fn save_object(
    writer: *mut sys::accel_state_writer,
    user_data: *mut c_void,
) -> i32 {
    // SAFETY: the library holds the Arc reference until release, after the last call.
    let state = unsafe { &*(user_data as *const CheckpointState) };
    state.failure.run(|| {
        let mut save = state.save.lock().unwrap_or_else(|p| p.into_inner());
        save(&mut StateWriter::new(writer))
    })
}

unsafe extern "C" fn load_object(data: *const c_void, size: usize, user_data: *mut c_void) -> i32 {
    // SAFETY: as in save_object.
    let state = unsafe { &*(user_data as *const CheckpointState) };
    state.failure.run(|| {
        let bytes = if size == 0 || data.is_null() {
            &[][..]
        } else {
            // SAFETY: `data` holds `size` bytes for the duration of the call.
            unsafe { std::slice::from_raw_parts(data.cast::<u8>(), size) }
        };
        let mut load = state.load.lock().unwrap_or_else(|p| p.into_inner());
        load(bytes)
    })
}

unsafe extern "C" fn release_checkpoint_state(user_data: *mut c_void) {
    // SAFETY: called once with the pointer from Arc::into_raw.
    drop(unsafe { Arc::from_raw(user_data as *const CheckpointState) });
}
