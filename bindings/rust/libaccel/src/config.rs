//! Settings by key, in Accelerate's YAML vocabulary (`accel_config`).

use std::fmt::Display;
use std::path::Path;

use libaccel_sys as sys;

use crate::error::{check, Result};
use crate::ffi::{
    c_string, ensure_supported_library, make, owned_handle, path_string, read_text, set_option,
};

owned_handle!(
    /// A set of settings for [`Accelerator::with_config`](crate::Accelerator::with_config).
    ///
    /// Keys and values are those of Accelerate's YAML configuration plus libaccel's own (see
    /// `accel.h`); every value is validated when set. Precedence: [`Config::set`] over
    /// environment variables over the loaded file over defaults.
    ///
    /// Any calls may run at the same time from several threads (writes are serialised inside).
    ///
    /// ```
    /// let mut config = accel::Config::new()?;
    /// config.set("gradient_accumulation_steps", 4)?;
    /// assert_eq!(config.get("gradient_accumulation_steps")?, "4");
    /// assert!(config.set("no_such_key", 1).is_err());
    /// # Ok::<(), accel::Error>(())
    /// ```
    Config,
    sys::accel_config,
    sys::accel_config_free
);

impl Config {
    /// An empty configuration: every key at its default.
    pub fn new() -> Result<Config> {
        ensure_supported_library()?;
        // SAFETY: `out` is a valid pointer to a handle slot.
        let raw = make(|out| unsafe { sys::accel_config_new(out) })?;
        // SAFETY: a new handle nothing else owns.
        Ok(unsafe { Config::from_raw(raw) }.expect("non-null"))
    }

    /// Sets `key` to `value`, written as it would be in the YAML file (`"bf16"`, `2`, `true`,
    /// `0.5`; numbers are formatted by Rust, with a '.' whatever the locale). An unknown key or a
    /// bad value fails and changes nothing.
    pub fn set(&mut self, key: &str, value: impl Display) -> Result<()> {
        // SAFETY: live handle; the strings live for the call.
        set_option(key, &value, |k, v| unsafe {
            sys::accel_config_set(self.as_raw(), k, v)
        })
    }

    /// Loads an Accelerate YAML (or JSON) file into the file layer, replacing any loaded before.
    pub fn load_file(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let path = path_string(path.as_ref())?;
        // SAFETY: live handle and NUL-terminated path.
        check(unsafe { sys::accel_config_load_file(self.as_raw(), path.as_ptr()) })
    }

    /// Loads Accelerate's default file ($HF_HOME/accelerate/default_config.yaml, ...) when there
    /// is one; nothing when there is none.
    pub fn load_default_file(&mut self) -> Result<()> {
        // SAFETY: live handle; NULL asks for the default location.
        check(unsafe { sys::accel_config_load_file(self.as_raw(), std::ptr::null()) })
    }

    /// The resolved value of `key` (setter > environment > file > default), as text.
    pub fn get(&self, key: &str) -> Result<String> {
        let key = c_string(key, "key")?;
        // SAFETY: live handle; the buffer and its capacity come from read_text.
        read_text(|buf, cap, size| unsafe {
            sys::accel_config_get(self.as_raw(), key.as_ptr(), buf, cap, size)
        })
    }

    /// The effective configuration as YAML, each key with the source of its value.
    pub fn dump(&self) -> Result<String> {
        // SAFETY: as in `get`.
        read_text(|buf, cap, size| unsafe { sys::accel_config_dump(self.as_raw(), buf, cap, size) })
    }
}
