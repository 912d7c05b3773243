//! Finds libaccel for linking: `ACCEL_LIB_DIR` (a directory holding libaccel.so) first, else
//! pkg-config's `accel` package (searched along `PKG_CONFIG_PATH`). The directory found is passed on
//! to dependent crates as `DEP_ACCEL_LIBDIR`, so they can give their programs an rpath.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The library versions this crate's declarations match: [0.2.0, 0.3.0).
const MIN: (u32, u32, u32) = (0, 2, 0);
const END: (u32, u32, u32) = (0, 3, 0);

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=ACCEL_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_LIBDIR");
    // docs.rs builds documentation without the native library.
    if env::var_os("DOCS_RS").is_some() {
        return;
    }
    let dir = match env::var_os("ACCEL_LIB_DIR") {
        Some(dir) if !dir.is_empty() => from_override(PathBuf::from(dir)),
        _ => from_pkg_config().unwrap_or_else(|why| fail(&why)),
    };
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=dylib=accel");
    println!("cargo:libdir={}", dir.display());
}

fn from_override(dir: PathBuf) -> PathBuf {
    if !dir.join("libaccel.so").exists() {
        fail(&format!(
            "ACCEL_LIB_DIR is {} but there is no libaccel.so in it",
            dir.display()
        ));
    }
    dir
}

fn from_pkg_config() -> Result<PathBuf, String> {
    let version = pkg_config(&["--modversion", "accel"])?;
    let parsed = parse_version(&version).ok_or_else(|| {
        format!("pkg-config gives accel version '{version}', not major.minor.patch")
    })?;
    if parsed < MIN || parsed >= END {
        return Err(format!(
            "pkg-config finds libaccel {version}; this crate needs >= {}.{}.{} and < {}.{}.{}",
            MIN.0, MIN.1, MIN.2, END.0, END.1, END.2
        ));
    }
    let libdir = pkg_config(&["--variable=libdir", "accel"])?;
    if libdir.is_empty() || !Path::new(&libdir).join("libaccel.so").exists() {
        return Err(format!(
            "pkg-config's accel package names libdir '{libdir}', which holds no libaccel.so"
        ));
    }
    Ok(PathBuf::from(libdir))
}

fn pkg_config(args: &[&str]) -> Result<String, String> {
    let program = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string());
    let out = Command::new(&program)
        .args(args)
        .output()
        .map_err(|e| format!("could not run {program}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{program} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let mut parts = text.split('.').map(|p| p.parse::<u32>().ok());
    let major = parts.next()??;
    let minor = parts.next()??;
    let patch = parts.next().unwrap_or(Some(0))?;
    Some((major, minor, patch))
}

fn fail(why: &str) -> ! {
    eprintln!(
        "\nlibaccel-sys: cannot find libaccel.\n  {why}\n\n\
         Set one of:\n  \
         ACCEL_LIB_DIR=/dir/with/libaccel.so      (a build tree's lib/ or an install's lib/)\n  \
         PKG_CONFIG_PATH=<prefix>/lib/pkgconfig    (where accel.pc was installed)\n"
    );
    std::process::exit(1);
}
