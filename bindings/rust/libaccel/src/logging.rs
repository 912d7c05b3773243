//! The rank-aware logger (Accelerate's `get_logger`): messages of the main process only, of every
//! process, or of every process in rank order, filtered by the accelerator's level, and where
//! they go: the `log` facade (the default), standard error, or a closure of the program's own.

use std::borrow::Cow;
use std::ffi::{c_char, c_void, CStr};
use std::fmt;
use std::str::FromStr;
use std::sync::Mutex;

use libaccel_sys as sys;

use crate::accelerator::Accelerator;
use crate::error::{check, BoxError, Error, Result, Status};
use crate::ffi::{c_string, query};

/// The `log` target of the library's messages.
pub const LOG_TARGET: &str = "libaccel";

/// A message's level: the numbers of Python's `logging` (Accelerate's logger is a
/// `logging.Logger`), one of the named constants or any number from 0 to 1000.
///
/// Converts both ways with [`log::Level`]: `Error`, `Warn`, `Info` and `Debug` are `ERROR`,
/// `WARNING`, `INFO` and `DEBUG`, `Trace` is 5; a level goes to the facade as the named level at
/// or below it (`CRITICAL` as `Error`, 15 as `Debug`), 1 to 9 as `Trace`, `NOTSET` as `Debug`.
///
/// ```
/// use accel::LogLevel;
/// assert!(LogLevel::DEBUG < LogLevel::INFO);
/// assert_eq!(LogLevel::from(log::Level::Warn), LogLevel::WARNING);
/// assert_eq!(log::Level::from(LogLevel::CRITICAL), log::Level::Error);
/// assert_eq!("warning".parse::<LogLevel>().unwrap(), LogLevel::WARNING);
/// assert_eq!(LogLevel::new(15).unwrap().to_string(), "Level 15"); // as Python names it
/// assert_eq!(LogLevel::new(1001), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogLevel(i32);

impl LogLevel {
    /// 0: every message passes a logger at this level.
    pub const NOTSET: LogLevel = LogLevel(sys::ACCEL_LOG_NOTSET);
    /// 10.
    pub const DEBUG: LogLevel = LogLevel(sys::ACCEL_LOG_DEBUG);
    /// 20: the default level.
    pub const INFO: LogLevel = LogLevel(sys::ACCEL_LOG_INFO);
    /// 30.
    pub const WARNING: LogLevel = LogLevel(sys::ACCEL_LOG_WARNING);
    /// 40.
    pub const ERROR: LogLevel = LogLevel(sys::ACCEL_LOG_ERROR);
    /// 50.
    pub const CRITICAL: LogLevel = LogLevel(sys::ACCEL_LOG_CRITICAL);
    /// 1000, the highest level the library takes.
    pub const MAX: LogLevel = LogLevel(1000);

    /// The level numbered `value`; `None` outside 0 to 1000.
    pub const fn new(value: i32) -> Option<LogLevel> {
        if value >= 0 && value <= LogLevel::MAX.0 {
            Some(LogLevel(value))
        } else {
            None
        }
    }

    /// Its number.
    pub const fn value(self) -> i32 {
        self.0
    }

    /// Python's name: `"INFO"`, ..., `"Level 15"` for a number without one.
    pub fn name(self) -> Cow<'static, str> {
        match self {
            LogLevel::NOTSET => "NOTSET".into(),
            LogLevel::DEBUG => "DEBUG".into(),
            LogLevel::INFO => "INFO".into(),
            LogLevel::WARNING => "WARNING".into(),
            LogLevel::ERROR => "ERROR".into(),
            LogLevel::CRITICAL => "CRITICAL".into(),
            LogLevel(n) => format!("Level {n}").into(),
        }
    }
}

impl Default for LogLevel {
    /// `INFO`, the library's default.
    fn default() -> LogLevel {
        LogLevel::INFO
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl FromStr for LogLevel {
    type Err = Error;

    /// A name, any case (`"debug"`, `"WARNING"`: as the `log_level` key and
    /// `ACCELERATE_LOG_LEVEL` take them), or a number from 0 to 1000.
    fn from_str(text: &str) -> Result<LogLevel> {
        let named = match text.to_ascii_uppercase().as_str() {
            "NOTSET" => Some(LogLevel::NOTSET),
            "DEBUG" => Some(LogLevel::DEBUG),
            "INFO" => Some(LogLevel::INFO),
            "WARNING" => Some(LogLevel::WARNING),
            "ERROR" => Some(LogLevel::ERROR),
            "CRITICAL" => Some(LogLevel::CRITICAL),
            _ => text.trim().parse().ok().and_then(LogLevel::new),
        };
        named.ok_or_else(|| {
            Error::new(
                Status::InvalidArgument,
                format!(
                    "unknown log level {text:?}: notset, debug, info, warning, error, critical \
                     or a number from 0 to 1000"
                ),
            )
        })
    }
}

impl From<log::Level> for LogLevel {
    fn from(level: log::Level) -> LogLevel {
        match level {
            log::Level::Error => LogLevel::ERROR,
            log::Level::Warn => LogLevel::WARNING,
            log::Level::Info => LogLevel::INFO,
            log::Level::Debug => LogLevel::DEBUG,
            log::Level::Trace => LogLevel(5),
        }
    }
}

impl From<LogLevel> for log::Level {
    fn from(level: LogLevel) -> log::Level {
        match level.0 {
            0 => log::Level::Debug,
            1..=9 => log::Level::Trace,
            10..=19 => log::Level::Debug,
            20..=29 => log::Level::Info,
            30..=39 => log::Level::Warn,
            _ => log::Level::Error,
        }
    }
}

/// One message that passed the level, as a sink gets it (lent for the call).
#[derive(Debug, Clone, Copy)]
pub struct LogRecord<'a> {
    level: LogLevel,
    rank: i32,
    num_processes: i32,
    flags: sys::accel_log_flags,
    message: &'a str,
}

impl<'a> LogRecord<'a> {
    /// The message's level.
    pub fn level(&self) -> LogLevel {
        self.level
    }

    /// The process index of the rank writing it.
    pub fn rank(&self) -> i32 {
        self.rank
    }

    /// The number of processes in the job.
    pub fn num_processes(&self) -> i32 {
        self.num_processes
    }

    /// Whether every process writes it ([`Logger::all_processes`]); otherwise only the main
    /// process does (Accelerate's `main_process_only`).
    pub fn all_processes(&self) -> bool {
        self.flags & sys::ACCEL_LOG_ALL_PROCESSES != 0
    }

    /// Whether the processes write it in rank order ([`Logger::in_order`]).
    pub fn in_order(&self) -> bool {
        self.all_processes() && self.flags & sys::ACCEL_LOG_IN_ORDER != 0
    }

    /// The message.
    pub fn message(&self) -> &'a str {
        self.message
    }
}

impl fmt::Display for LogRecord<'_> {
    /// The library's own line for it (without the newline): `INFO: message`, or
    /// `INFO [rank 1/2]: message` for a message of every process in a job of more than one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.level)?;
        if self.all_processes() && self.num_processes > 1 {
            write!(f, " [rank {}/{}]", self.rank, self.num_processes)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Writes messages through an accelerator (Accelerate's logger), made by
/// [`Accelerator::logger`]: the main process only writes (Accelerate's default,
/// `main_process_only=True`), so a program logs the same line on every rank and sees it once;
/// [`all_processes`](Logger::all_processes) and [`in_order`](Logger::in_order) make the others.
/// Where the lines go is the accelerator's sink ([`Accelerator::set_log_sink`]; by default the
/// `log` facade).
///
/// ```
/// use accel::{Accelerator, LogLevel};
/// let acc = Accelerator::new()?;
/// let log = acc.logger();
/// log.info("once per job")?; // rank 0 writes it
/// log.all_processes().warn("every rank writes this")?;
/// log.in_order().info("every rank, rank 0 first")?; // a collective: every rank calls it
/// acc.set_log_level(LogLevel::WARNING)?;
/// log.info("dropped on every rank")?;
/// # Ok::<(), accel::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Logger<'a> {
    acc: &'a Accelerator,
    flags: sys::accel_log_flags,
}

impl<'a> Logger<'a> {
    /// This logger writing on every process (Accelerate's `main_process_only=False`), each
    /// when it calls.
    pub fn all_processes(self) -> Logger<'a> {
        Logger {
            flags: self.flags | sys::ACCEL_LOG_ALL_PROCESSES,
            ..self
        }
    }

    /// This logger writing on every process in rank order (`main_process_only=False,
    /// in_order=True`): a collective, every rank must make the same calls; rank r writes after
    /// ranks 0 to r-1, with a barrier after each.
    pub fn in_order(self) -> Logger<'a> {
        Logger {
            flags: self.flags | sys::ACCEL_LOG_ALL_PROCESSES | sys::ACCEL_LOG_IN_ORDER,
            ..self
        }
    }

    /// Logs `message` at `level` (a [`LogLevel`] or a [`log::Level`]): dropped on every rank
    /// below the accelerator's level, else written by the processes this logger names to the
    /// accelerator's sink. A sink's failure is a `Callback` error (its error the
    /// [`source`](std::error::Error::source), a panic's message in the text); a call from inside
    /// the sink is a `State` error; a NUL byte in the message is an `InvalidArgument` error.
    pub fn log(&self, level: impl Into<LogLevel>, message: impl AsRef<str>) -> Result<()> {
        let message = c_string(message.as_ref(), "message")?;
        // SAFETY: live handle, NUL-terminated message (borrowed for the call).
        let status = unsafe {
            sys::accel_log_message(
                self.acc.as_raw(),
                level.into().value(),
                self.flags,
                message.as_ptr(),
            )
        };
        check(status).map_err(|e| self.acc.log_failure().resolve_caught(e))
    }

    /// Whether a message at `level` passes the accelerator's level.
    pub fn enabled(&self, level: impl Into<LogLevel>) -> Result<bool> {
        Ok(level.into() >= self.acc.log_level()?)
    }

    /// Logs at `DEBUG`.
    pub fn debug(&self, message: impl AsRef<str>) -> Result<()> {
        self.log(LogLevel::DEBUG, message)
    }

    /// Logs at `INFO`.
    pub fn info(&self, message: impl AsRef<str>) -> Result<()> {
        self.log(LogLevel::INFO, message)
    }

    /// Logs at `WARNING`.
    pub fn warn(&self, message: impl AsRef<str>) -> Result<()> {
        self.log(LogLevel::WARNING, message)
    }

    /// Logs at `ERROR`.
    pub fn error(&self, message: impl AsRef<str>) -> Result<()> {
        self.log(LogLevel::ERROR, message)
    }

    /// Logs at `CRITICAL`.
    pub fn critical(&self, message: impl AsRef<str>) -> Result<()> {
        self.log(LogLevel::CRITICAL, message)
    }
}

/// A sink's closure, as the library holds it.
type SinkFn = dyn FnMut(&LogRecord<'_>) -> std::result::Result<(), BoxError> + Send;

/// What the library holds for the installed sink (freed by its release callback).
struct SinkState {
    sink: Mutex<Box<SinkFn>>,
    num_processes: i32,
    failure: std::sync::Arc<crate::callback::FailureSlot>,
}

/// The default sink: the record to the `log` facade, target [`LOG_TARGET`], with the key-values
/// `rank`, `num_processes`, `main_process_only` and `levelno` (the library's level number).
fn to_facade(record: &LogRecord<'_>) -> std::result::Result<(), BoxError> {
    let level = log::Level::from(record.level);
    // The facade's filters, as its macros apply them: the compile-time one and the program's.
    if level > log::STATIC_MAX_LEVEL || level > log::max_level() {
        return Ok(());
    }
    let logger = log::logger();
    let metadata = log::Metadata::builder()
        .level(level)
        .target(LOG_TARGET)
        .build();
    if !logger.enabled(&metadata) {
        return Ok(());
    }
    let fields: [(&str, log::kv::Value<'_>); 4] = [
        ("rank", record.rank.into()),
        ("num_processes", record.num_processes.into()),
        ("main_process_only", (!record.all_processes()).into()),
        ("levelno", record.level.value().into()),
    ];
    logger.log(
        &log::Record::builder()
            .metadata(metadata)
            .args(format_args!("{}", record.message))
            .module_path_static(Some(module_path!()))
            .key_values(&fields)
            .build(),
    );
    Ok(())
}

impl Accelerator {
    /// The accelerator's logger (Accelerate's `get_logger`), writing on the main process only;
    /// [`Logger::all_processes`] and [`Logger::in_order`] make the others.
    pub fn logger(&self) -> Logger<'_> {
        Logger {
            acc: self,
            flags: 0,
        }
    }

    /// The accelerator's level: messages below it are dropped. It starts from the
    /// configuration's `log_level` (`ACCELERATE_LOG_LEVEL`, `ACCEL_LOG_LEVEL`; default `INFO`).
    pub fn log_level(&self) -> Result<LogLevel> {
        // SAFETY: live handle, valid out pointer.
        let raw = query(|out| unsafe { sys::accel_get_log_level(self.as_raw(), out) })?;
        LogLevel::new(raw)
            .ok_or_else(|| Error::new(Status::Internal, format!("the library has log level {raw}")))
    }

    /// Sets the accelerator's level (a [`LogLevel`] or a [`log::Level`]); set it alike on every
    /// rank (it is this process's).
    pub fn set_log_level(&self, level: impl Into<LogLevel>) -> Result<()> {
        // SAFETY: live handle.
        check(unsafe { sys::accel_set_log_level(self.as_raw(), level.into().value()) })
    }

    /// Sends the messages to `sink` instead: called for each message that passes the level on
    /// each process that writes it, one call at a time, on the thread that logged it. An error
    /// or a panic fails that logging call with a `Callback` error (a panic does not resume: a
    /// log line must not take the training down). The sink may call this accelerator's queries
    /// ([`process_index`](Accelerator::process_index), [`log_level`](Accelerator::log_level),
    /// ...) and nothing else of its training family: logging or setting the sink from inside is
    /// a `State` error, and a training call (on the accelerator, its models, optimizers or
    /// loaders) would wait forever for a message logged in rank order. The sink replaced is
    /// dropped.
    ///
    /// ```
    /// use accel::{Accelerator, LogRecord};
    /// use std::sync::mpsc;
    /// let acc = Accelerator::new()?;
    /// let (tx, rx) = mpsc::channel();
    /// acc.set_log_sink(move |record: &LogRecord<'_>| Ok(tx.send(record.to_string())?))?;
    /// acc.logger().info("hello")?;
    /// assert_eq!(rx.recv().unwrap(), "INFO: hello");
    /// # Ok::<(), accel::Error>(())
    /// ```
    pub fn set_log_sink<F>(&self, sink: F) -> Result<()>
    where
        F: FnMut(&LogRecord<'_>) -> std::result::Result<(), BoxError> + Send + 'static,
    {
        self.install_sink(Box::new(sink))
    }

    /// Sends the messages to the `log` facade (what a new accelerator does): target
    /// [`LOG_TARGET`] (`"libaccel"`), the level as [`log::Level`] converts it, and the
    /// key-values `rank`, `num_processes`, `main_process_only` (bool) and `levelno` (the level's
    /// number, e.g. 50 for `CRITICAL`, which the facade calls `Error`). The program's logger
    /// (env_logger, tracing-log, its own) writes them, with its own filter; without one they go
    /// nowhere. The logger is a sink as [`set_log_sink`](Accelerator::set_log_sink)'s, with its
    /// rules.
    pub fn log_to_facade(&self) -> Result<()> {
        self.install_sink(Box::new(to_facade))
    }

    /// Sends the messages to the library's own writer: one line on standard error each, as
    /// [`LogRecord`]'s `Display` writes it.
    pub fn log_to_stderr(&self) -> Result<()> {
        // SAFETY: live handle; NULL restores the library's sink (nothing to release).
        check(unsafe { sys::accel_set_log_sink(self.as_raw(), None, std::ptr::null_mut(), None) })
    }

    fn install_sink(&self, sink: Box<SinkFn>) -> Result<()> {
        let state = Box::new(SinkState {
            sink: Mutex::new(sink),
            num_processes: self.num_processes()?,
            failure: std::sync::Arc::clone(self.log_failure()),
        });
        let user_data = Box::into_raw(state) as *mut c_void;
        // SAFETY: live handle; `user_data` is handed to the library, which gives it back once
        // through `release_sink` (never on failure).
        let status = unsafe {
            sys::accel_set_log_sink(self.as_raw(), Some(log_sink), user_data, Some(release_sink))
        };
        if let Err(e) = check(status) {
            // On failure the library never calls release: take the state back.
            // SAFETY: from Box::into_raw above, not released.
            drop(unsafe { Box::from_raw(user_data as *mut SinkState) });
            return Err(e);
        }
        Ok(())
    }
}

unsafe extern "C" fn log_sink(
    level: sys::accel_log_level,
    rank: i32,
    flags: sys::accel_log_flags,
    message: *const c_char,
    user_data: *mut c_void,
) -> i32 {
    // SAFETY: the pointer install_sink handed over; the library holds it until release, after
    // the last call.
    let state = unsafe { &*(user_data as *const SinkState) };
    state.failure.run(|| {
        let text = if message.is_null() {
            Cow::Borrowed("")
        } else {
            // SAFETY: NUL-terminated, valid for the call.
            unsafe { CStr::from_ptr(message) }.to_string_lossy()
        };
        let record = LogRecord {
            // Any number the library passed (0 to 1000 by its checks); kept as it is.
            level: LogLevel(level),
            rank,
            num_processes: state.num_processes,
            flags,
            message: &text,
        };
        let mut sink = state.sink.lock().unwrap_or_else(|p| p.into_inner());
        (sink)(&record)
    })
}

unsafe extern "C" fn release_sink(user_data: *mut c_void) {
    // SAFETY: called once with the pointer from Box::into_raw in `install_sink`. Dropping the
    // program's closure must not unwind into C.
    let state = unsafe { Box::from_raw(user_data as *mut SinkState) };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(state)));
}
