//! Raw declarations of libaccel's C interface, `include/accel/accel.h` (ABI 0.2), one for one.
//!
//! Everything here is `unsafe` to call and follows the header's rules (ownership, buffer
//! convention, thread rules); the safe API is the `libaccel` crate. The library is found at build
//! time through `ACCEL_LIB_DIR` or pkg-config (see `build.rs`); [`check_version`] tells at run time
//! whether the library actually loaded is one these declarations match.
#![allow(non_camel_case_types)]

/// The oldest library version these declarations match (0.2.0), as `accel_version_number` counts.
pub const SUPPORTED_VERSION_MIN: u32 = 200;
/// The first library version these declarations no longer match (0.3.0: the ABI changes).
pub const SUPPORTED_VERSION_END: u32 = 300;

/// Checks that the loaded library's version lies in
/// [`SUPPORTED_VERSION_MIN`, `SUPPORTED_VERSION_END`); the error says which was found.
pub fn check_version() -> Result<(), String> {
    // SAFETY: takes no arguments and only reads a constant.
    check_version_number(unsafe { accel_version_number() })
}

/// Whether a library of version number `found` (as `accel_version_number` counts) is one these
/// declarations match; the error names both versions.
pub fn check_version_number(found: u32) -> Result<(), String> {
    if (SUPPORTED_VERSION_MIN..SUPPORTED_VERSION_END).contains(&found) {
        Ok(())
    } else {
        Err(format!(
            "libaccel {}.{}.{} is loaded, but libaccel-sys {} supports [{}.{}.{}, {}.{}.{})",
            found / 10000,
            found / 100 % 100,
            found % 100,
            env!("CARGO_PKG_VERSION"),
            SUPPORTED_VERSION_MIN / 10000,
            SUPPORTED_VERSION_MIN / 100 % 100,
            SUPPORTED_VERSION_MIN % 100,
            SUPPORTED_VERSION_END / 10000,
            SUPPORTED_VERSION_END / 100 % 100,
            SUPPORTED_VERSION_END % 100
        ))
    }
}

// Everything the header declares (constants, handle types, callbacks, functions), generated from
// it by tools/gen_raw.py.
include!("generated.rs");
