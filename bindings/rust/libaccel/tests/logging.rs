//! The logger: levels, the library's messages through the `log` facade with their level and rank,
//! ACCELERATE_LOG_LEVEL, a sink of the program's own.
//!
//! The capturing `log` logger is process-wide (installed once): these tests share this test
//! binary with no others.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use accel::{Accelerator, BoxError, Config, Status};
use common::{one_accelerator, temp_dir, tracking_config};

/// One record the `log` facade got: target, level, message and the key-values as text.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    target: String,
    level: log::Level,
    message: String,
    fields: Vec<(String, String)>,
}

/// The process's `log` logger for these tests: keeps every record (the tests that read it hold
/// `one_accelerator`, and only an accelerator's logger writes here).
struct Capture(Mutex<Vec<Seen>>);

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        struct Fields(Vec<(String, String)>);
        impl<'kvs> log::kv::VisitSource<'kvs> for Fields {
            fn visit_pair(
                &mut self,
                key: log::kv::Key<'kvs>,
                value: log::kv::Value<'kvs>,
            ) -> Result<(), log::kv::Error> {
                self.0.push((key.to_string(), value.to_string()));
                Ok(())
            }
        }
        let mut fields = Fields(Vec::new());
        record.key_values().visit(&mut fields).unwrap();
        self.0.lock().unwrap().push(Seen {
            target: record.target().to_string(),
            level: record.level(),
            message: record.args().to_string(),
            fields: fields.0,
        });
    }

    fn flush(&self) {}
}

/// The capturing logger, installed once per test process; empties what it kept.
fn captured() -> Vec<Seen> {
    static CAPTURE: Capture = Capture(Mutex::new(Vec::new()));
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        log::set_logger(&CAPTURE).unwrap();
        log::set_max_level(log::LevelFilter::Trace);
    });
    std::mem::take(&mut *CAPTURE.0.lock().unwrap())
}

fn key_values(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn log_levels_convert_and_parse() {
    use accel::LogLevel;
    assert_eq!(LogLevel::new(0), Some(LogLevel::NOTSET));
    assert_eq!(LogLevel::new(-1), None);
    assert_eq!(LogLevel::new(1001), None);
    for (n, name) in [(0, "NOTSET"), (10, "DEBUG"), (20, "INFO"), (30, "WARNING")] {
        assert_eq!(LogLevel::new(n).unwrap().to_string(), name);
        assert_eq!(name.to_lowercase().parse::<LogLevel>().unwrap().value(), n);
    }
    assert_eq!("critical".parse::<LogLevel>().unwrap(), LogLevel::CRITICAL);
    assert_eq!("25".parse::<LogLevel>().unwrap().to_string(), "Level 25");
    assert_eq!(
        "verbose".parse::<LogLevel>().unwrap_err().status(),
        Status::InvalidArgument
    );
    let to_log = |n| log::Level::from(LogLevel::new(n).unwrap());
    assert_eq!(to_log(0), log::Level::Debug);
    assert_eq!(to_log(5), log::Level::Trace);
    assert_eq!(to_log(10), log::Level::Debug);
    assert_eq!(to_log(15), log::Level::Debug);
    assert_eq!(to_log(20), log::Level::Info);
    assert_eq!(to_log(30), log::Level::Warn);
    assert_eq!(to_log(40), log::Level::Error);
    assert_eq!(to_log(50), log::Level::Error);
    for level in [
        log::Level::Error,
        log::Level::Warn,
        log::Level::Info,
        log::Level::Debug,
        log::Level::Trace,
    ] {
        assert_eq!(log::Level::from(LogLevel::from(level)), level);
    }
}

#[test]
fn logged_messages_reach_the_log_facade_with_their_level_and_rank() {
    use accel::LogLevel;
    let _one = one_accelerator();
    captured();
    let acc = Accelerator::new().unwrap();
    assert_eq!(acc.log_level().unwrap(), LogLevel::INFO);
    let log = acc.logger();
    log.info("hello").unwrap();
    log.debug("below the level").unwrap();
    log.all_processes().warn("from every rank").unwrap();
    log.in_order().error("in rank order").unwrap();
    log.critical("critical").unwrap();
    assert!(log.enabled(log::Level::Info).unwrap() && !log.enabled(LogLevel::DEBUG).unwrap());
    let seen = captured();
    let line = |level, message: &str, main_only: &str, levelno: &str| Seen {
        target: "libaccel".into(),
        level,
        message: message.into(),
        fields: key_values(&[
            ("rank", "0"),
            ("num_processes", "1"),
            ("main_process_only", main_only),
            ("levelno", levelno),
        ]),
    };
    assert_eq!(
        seen,
        [
            line(log::Level::Info, "hello", "true", "20"),
            line(log::Level::Warn, "from every rank", "false", "30"),
            line(log::Level::Error, "in rank order", "false", "40"),
            line(log::Level::Error, "critical", "true", "50"),
        ]
    );

    // The level: set, read back, and from the configuration's log_level.
    acc.set_log_level(log::Level::Trace).unwrap();
    assert_eq!(acc.log_level().unwrap().value(), 5);
    log.debug("now shown").unwrap();
    log.log(LogLevel::new(7).unwrap(), "trace").unwrap();
    log.log(LogLevel::new(3).unwrap(), "below 5").unwrap();
    acc.set_log_level(LogLevel::ERROR).unwrap();
    log.warn("dropped").unwrap();
    log.error("kept").unwrap();
    let levels: Vec<_> = captured()
        .into_iter()
        .map(|s| (s.level, s.message))
        .collect();
    assert_eq!(
        levels,
        [
            (log::Level::Debug, "now shown".to_string()),
            (log::Level::Trace, "trace".to_string()),
            (log::Level::Error, "kept".to_string()),
        ]
    );
    let e = log.info("nul\0byte").unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    drop(acc);
    let mut cfg = Config::new().unwrap();
    cfg.set("log_level", "warning").unwrap();
    let acc = Accelerator::with_config(&cfg).unwrap();
    assert_eq!(acc.log_level().unwrap(), LogLevel::WARNING);
    acc.logger().info("below warning").unwrap();
    assert!(captured().is_empty());
}

/// ACCELERATE_LOG_LEVEL, read when the accelerator is made: checked in a child process (this
/// test alone, the variable set), so that no other test's environment changes.
#[test]
fn the_level_comes_from_accelerate_log_level() {
    use accel::LogLevel;
    if std::env::var_os("ACCELERATE_LOG_LEVEL").is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "the_level_comes_from_accelerate_log_level",
                "--test-threads=1",
            ])
            .env("ACCELERATE_LOG_LEVEL", "Error")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    let _one = one_accelerator();
    captured();
    let acc = Accelerator::new().unwrap();
    assert_eq!(acc.log_level().unwrap(), LogLevel::ERROR);
    acc.logger().warn("dropped").unwrap();
    acc.logger().all_processes().error("kept").unwrap();
    let seen: Vec<_> = captured().into_iter().map(|s| s.message).collect();
    assert_eq!(seen, ["kept"]);
}

/// A warning the library raises itself (a tracker's file found torn and repaired) reaches the
/// `log` facade as the program's own messages do: target libaccel, at Warn.
#[test]
fn a_warning_of_the_library_reaches_the_log_facade() {
    let _one = one_accelerator();
    let dir = temp_dir("torn-warning");
    std::fs::create_dir_all(dir.join("run")).unwrap();
    std::fs::write(dir.join("run/metrics.jsonl"), "{\"st").unwrap();
    let acc = Accelerator::with_config(&tracking_config("jsonl", &dir)).unwrap();
    captured();
    acc.init_trackers("run", None).unwrap();
    acc.end_training().unwrap();
    let seen: Vec<_> = captured()
        .into_iter()
        .filter(|s| s.message.contains("metrics.jsonl.torn-1"))
        .collect();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].level, log::Level::Warn);
    assert_eq!(seen[0].target, "libaccel");
    assert_eq!(
        std::fs::read_to_string(dir.join("run/metrics.jsonl.torn-1")).unwrap(),
        "{\"st"
    );
}

#[test]
fn a_sink_of_the_program_gets_each_record_and_its_failures_are_errors() {
    let _one = one_accelerator();
    captured();
    let acc = Arc::new(Accelerator::new().unwrap());
    let lines = Arc::new(Mutex::new(Vec::new()));
    let into = Arc::clone(&lines);
    acc.set_log_sink(move |record: &accel::LogRecord<'_>| {
        assert_eq!((record.rank(), record.num_processes()), (0, 1));
        into.lock().unwrap().push(format!(
            "{record} all={} in_order={}",
            record.all_processes(),
            record.in_order()
        ));
        Ok(())
    })
    .unwrap();
    acc.logger().info("one").unwrap();
    acc.logger().in_order().warn("two").unwrap();
    assert_eq!(
        *lines.lock().unwrap(),
        [
            "INFO: one all=false in_order=false",
            "WARNING: two all=true in_order=true"
        ]
    );
    assert!(captured().is_empty(), "the facade no longer gets them");

    // A failing sink: the call's Callback error carries its error; the next call works.
    #[derive(Debug)]
    struct DiskFull;
    impl std::fmt::Display for DiskFull {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("disk full")
        }
    }
    impl std::error::Error for DiskFull {}
    let calls = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&calls);
    acc.set_log_sink(move |record: &accel::LogRecord<'_>| {
        count.fetch_add(1, Ordering::SeqCst);
        match record.message() {
            "fail" => Err(Box::new(DiskFull) as BoxError),
            "panic" => panic!("the sink panicked on purpose"),
            _ => Ok(()),
        }
    })
    .unwrap();
    let e = acc.logger().info("fail").unwrap_err();
    assert_eq!(e.status(), Status::Callback);
    assert!(e.message().contains("disk full"), "{e}");
    let source = std::error::Error::source(&e).unwrap();
    assert!(source.downcast_ref::<DiskFull>().is_some());
    // A panic is an error too (it does not resume), in order as well.
    let e = acc.logger().in_order().error("panic").unwrap_err();
    assert_eq!(e.status(), Status::Callback);
    assert!(e.message().contains("the sink panicked on purpose"), "{e}");
    acc.logger().info("fine").unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 3);

    // Logging from inside the sink is a State error (the sink sees it), not a deadlock.
    let inner = Arc::new(Mutex::new(None));
    let (weak, status) = (Arc::downgrade(&acc), Arc::clone(&inner));
    acc.set_log_sink(move |_: &accel::LogRecord<'_>| {
        let acc = weak.upgrade().ok_or("no accelerator")?;
        let again = acc.logger().info("again").unwrap_err();
        let replace = acc.log_to_stderr().unwrap_err();
        *status.lock().unwrap() = Some((again.status(), replace.status(), acc.log_level()?));
        Ok(())
    })
    .unwrap();
    acc.logger().info("outer").unwrap();
    assert_eq!(
        *inner.lock().unwrap(),
        Some((Status::State, Status::State, accel::LogLevel::INFO))
    );

    // Standard error (the library's own line), then the facade again.
    acc.log_to_stderr().unwrap();
    acc.logger().info("to stderr").unwrap();
    assert!(captured().is_empty());
    acc.log_to_facade().unwrap();
    acc.logger().info("back").unwrap();
    assert_eq!(captured().len(), 1);
}
