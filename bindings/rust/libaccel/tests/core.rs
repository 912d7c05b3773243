//! The library itself in one process: its version, configurations, errors.

mod common;

use accel::{Config, Status};

#[test]
fn the_loaded_library_is_the_supported_version() {
    let n = accel::version_number();
    assert!((accel::sys::SUPPORTED_VERSION_MIN..accel::sys::SUPPORTED_VERSION_END).contains(&n));
    assert_eq!(
        accel::version(),
        format!("{}.{}.{}", n / 10000, n / 100 % 100, n % 100)
    );
    accel::sys::check_version().unwrap();
    accel::sys::check_version_number(299).unwrap();
    let newer = accel::sys::check_version_number(300).unwrap_err();
    assert!(
        newer.contains("libaccel 0.3.0 is loaded") && newer.contains("[0.2.0, 0.3.0)"),
        "{newer}"
    );
    assert!(accel::sys::check_version_number(199).is_err());
    assert!(accel::sys::check_version_number(10000).is_err());
}

#[test]
fn config_validates_and_reports_sources() {
    let mut cfg = Config::new().unwrap();
    cfg.set("mixed_precision", "bf16").unwrap();
    cfg.set("rendezvous_timeout", 2.5).unwrap();
    assert_eq!(cfg.get("mixed_precision").unwrap(), "bf16");
    assert!(cfg.dump().unwrap().contains("mixed_precision: bf16"));
    let e = cfg.set("mixed_precisoin", "bf16").unwrap_err();
    assert_eq!(e.status(), Status::Config);
    assert!(e.message().contains("mixed_precisoin"), "{e}");
    let e = cfg.set("num_processes", "two").unwrap_err();
    assert_eq!(e.status(), Status::Config);
    assert!(e.to_string().starts_with("ACCEL_ERR_CONFIG: "), "{e}");
    let e = cfg.set("mixed_precision", "b\0f16").unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    let e = cfg.load_file("/no/such/config.yaml").unwrap_err();
    assert_eq!(e.status(), Status::Io);
    assert!(e.message().contains("/no/such/config.yaml"), "{e}");
    assert_eq!(
        cfg.get("mixed_precision").unwrap(),
        "bf16",
        "a failed call changes nothing"
    );
    // Long text goes through the buffer convention's second call.
    let yaml = cfg.dump().unwrap();
    assert!(yaml.len() > 256, "{yaml}");
}

#[test]
fn errors_show_status_and_message() {
    let e = accel::Error::new(Status::Io, "gone");
    assert_eq!(e.to_string(), "ACCEL_ERR_IO: gone");
    assert_eq!(Status::Timeout.name(), "ACCEL_ERR_TIMEOUT");
    assert_eq!(Status::from_raw(0), None);
    assert_eq!(Status::from_raw(99), Some(Status::Other(99)));
    assert_eq!(Status::Callback.to_raw(), accel::sys::ACCEL_ERR_CALLBACK);
    let _ = Config::new().unwrap().set("nope", 1);
    let last = accel::last_error().unwrap();
    assert_eq!(last.status(), Status::Config);
    let io: std::io::Error = e.into();
    assert!(io.to_string().contains("gone"));
}
