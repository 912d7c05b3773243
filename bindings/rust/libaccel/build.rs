//! Gives this crate's own tests, examples and doctests an rpath to the libaccel that libaccel-sys
//! linked (`DEP_ACCEL_LIBDIR`), so they run without LD_LIBRARY_PATH. Programs of other crates do
//! not inherit it: see docs/rust.md for how to run them.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_ACCEL_LIBDIR");
    if let Ok(dir) = std::env::var("DEP_ACCEL_LIBDIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
