//! The examples' `log` logger: one line on standard error per record, as libaccel's own writer
//! (and so the C examples) write them: `INFO: message`, and `INFO [rank 1/2]: message` for a
//! message of every process in a job of more than one (from the record's key-values). A real
//! program would use env_logger, tracing or its own; the level filter is the accelerator's
//! (`ACCELERATE_LOG_LEVEL`).

use std::io::Write;

use accel::LogLevel;
use log::kv::Key;

struct StderrLog;

impl log::Log for StderrLog {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        let kv = |key: &str| record.key_values().get(Key::from_str(key));
        // libaccel's level by its Python name (CRITICAL, which the facade calls Error), or the
        // facade's for records of other crates.
        let mut line = match kv("levelno").and_then(|v| v.to_i64()) {
            Some(n) => LogLevel::new(n as i32).unwrap_or_default().to_string(),
            None => record.level().to_string(),
        };
        let rank = kv("rank").and_then(|v| v.to_i64());
        let processes = kv("num_processes").and_then(|v| v.to_i64()).unwrap_or(1);
        let main_only = kv("main_process_only").and_then(|v| v.to_bool());
        if let (Some(rank), Some(false)) = (rank, main_only) {
            if processes > 1 {
                line.push_str(&format!(" [rank {rank}/{processes}]"));
            }
        }
        line.push_str(&format!(": {}\n", record.args()));
        // One write: the ranks' lines on a shared stream do not interleave mid-line.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {}
}

/// Makes the examples' logger the process's, passing every level (the accelerator filters).
pub fn init() {
    static LOGGER: StderrLog = StderrLog;
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(log::LevelFilter::Trace);
    }
}
