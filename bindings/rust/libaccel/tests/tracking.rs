//! Experiment tracking: values, the JSON-lines tracker, trackers of the program's own and their
//! failures, misuse.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use accel::{Accelerator, BoxError, Config, Status, Tracker, Value, Values, ValuesRef};
use common::{one_accelerator, temp_dir, tracking_config};

#[test]
fn values_keep_numbers_and_texts_in_the_order_first_set() {
    let mut v = Values::new().unwrap();
    assert!(v.is_empty().unwrap());
    v.set("loss", 0.5).unwrap();
    v.set("note", "warm-up").unwrap();
    v.set("epoch", 3).unwrap();
    v.set("loss", 0.25).unwrap(); // replaced in place
    v.set("epoch", "three").unwrap(); // a number becomes a text, in place
    v.set("gap", f64::NAN).unwrap();
    assert_eq!(v.len().unwrap(), 4);
    let entries = v.entries().unwrap();
    let keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["loss", "note", "epoch", "gap"]);
    assert_eq!(entries[0].1, Value::Number(0.25));
    assert_eq!(entries[1].1, Value::Text("warm-up".into()));
    assert_eq!(entries[2].1.as_text(), Some("three"));
    assert!(entries[3].1.as_number().unwrap().is_nan());
    assert_eq!(v.entry(1).unwrap(), entries[1]);
    assert_eq!(v.get("note").unwrap(), Some(Value::Text("warm-up".into())));
    assert_eq!(v.get("missing").unwrap(), None);
    assert_eq!(
        format!("{:?}", Values::new().unwrap().number("a", 1.5).unwrap()),
        r#"{"a": Number(1.5)}"#
    );

    // Bad input is an error and changes nothing.
    for e in [
        v.set("", 1).unwrap_err(),
        v.set("a\0b", 1).unwrap_err(),
        v.set("text", "a\0b").unwrap_err(),
        v.entry(4).unwrap_err(),
    ] {
        assert_eq!(e.status(), Status::InvalidArgument, "{e}");
    }
    assert_eq!(v.len().unwrap(), 4);

    // Built in one expression, from pairs (a key given twice keeps its first place), and moved
    // to another thread (Send).
    let built = Values::new()
        .unwrap()
        .number("lr", 1e-3)
        .unwrap()
        .text("optimizer", "adamw")
        .unwrap();
    let pairs = Values::from_pairs([("lr", Value::from(1e-3)), ("optimizer", "sgd".into())])
        .unwrap()
        .text("optimizer", "adamw")
        .unwrap();
    let pairs = std::thread::spawn(move || pairs.entries().unwrap())
        .join()
        .unwrap();
    assert_eq!(built.entries().unwrap(), pairs);
    let e = Values::from_pairs([("x", 1.0), ("", 2.0)]).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument, "{e}");
}

fn jsonl_lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn a_run_writes_metrics_jsonl_with_the_values_and_steps() {
    let _one = one_accelerator();
    let dir = temp_dir("jsonl-run");
    let acc = Accelerator::with_config(&tracking_config("jsonl", &dir)).unwrap();
    let hparams =
        Values::from_pairs([("lr", Value::from(0.5)), ("optimizer", "adamw".into())]).unwrap();
    acc.init_trackers("run", Some(&hparams)).unwrap();
    let metrics = dir.join("run/metrics.jsonl");
    acc.log(
        &Values::from_pairs([("loss", 0.75), ("accuracy", 0.5)]).unwrap(),
        Some(0),
    )
    .unwrap();
    acc.log(
        &Values::new().unwrap().text("note", "say \"hi\"").unwrap(),
        None,
    )
    .unwrap();
    acc.log(&Values::from_pairs([("loss", 0.25)]).unwrap(), Some(2))
        .unwrap();
    // Each log is on disk when it returns, before end_training.
    let lines = jsonl_lines(&metrics);
    assert_eq!(lines.len(), 3, "{lines:?}");
    let expected = [
        (
            r#"{"step": 0, "wall_time": "#,
            r#", "values": {"loss": 0.75, "accuracy": 0.5}}"#,
        ),
        (
            r#"{"step": null, "wall_time": "#,
            r#", "values": {"note": "say \"hi\""}}"#,
        ),
        (
            r#"{"step": 2, "wall_time": "#,
            r#", "values": {"loss": 0.25}}"#,
        ),
    ];
    for (line, (start, end)) in lines.iter().zip(expected) {
        assert!(line.starts_with(start) && line.ends_with(end), "{line}");
        let wall_time: f64 = line[start.len()..line.len() - end.len()].parse().unwrap();
        assert!(wall_time > 1.6e9, "{line}");
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("run/hparams.json")).unwrap(),
        "{\"lr\": 0.5, \"optimizer\": \"adamw\"}\n"
    );
    acc.end_training().unwrap();
    acc.end_training().unwrap(); // nothing started: nothing to do
    let e = acc
        .log(&Values::from_pairs([("loss", 1.0)]).unwrap(), Some(3))
        .unwrap_err();
    assert_eq!(e.status(), Status::State, "{e}");

    // A new run in the same directory appends.
    acc.init_trackers("run", None).unwrap();
    acc.log(&Values::from_pairs([("loss", 0.125)]).unwrap(), Some(3))
        .unwrap();
    acc.end_training().unwrap();
    let lines = jsonl_lines(&metrics);
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert!(
        lines[3].ends_with(r#""values": {"loss": 0.125}}"#),
        "{}",
        lines[3]
    );
    drop(acc);
    std::fs::remove_dir_all(dir).ok();
}

/// A tracker that writes down every call it gets, and when it is dropped.
struct Recorder {
    events: Arc<Mutex<Vec<String>>>,
}

impl Tracker for Recorder {
    fn start(&mut self, project: &str, config: &ValuesRef) -> Result<(), BoxError> {
        let config = config.entries()?;
        self.events
            .lock()
            .unwrap()
            .push(format!("start {project} {config:?}"));
        Ok(())
    }

    fn log(&mut self, values: &ValuesRef, step: Option<u64>) -> Result<(), BoxError> {
        let entries = values.entries()?;
        self.events
            .lock()
            .unwrap()
            .push(format!("log {step:?} {entries:?}"));
        Ok(())
    }

    fn finish(&mut self) -> Result<(), BoxError> {
        self.events.lock().unwrap().push("finish".into());
        Ok(())
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.events.lock().unwrap().push("dropped".into());
    }
}

#[test]
fn a_custom_tracker_gets_start_log_and_finish_in_order() {
    let _one = one_accelerator();
    let events = Arc::new(Mutex::new(Vec::new()));
    let recorder = || Recorder {
        events: Arc::clone(&events),
    };
    let acc = Accelerator::new().unwrap(); // no log_with: the custom tracker alone
    acc.add_tracker("recorder", recorder()).unwrap();
    // Refused trackers are dropped at once (the library never releases them).
    for (name, status) in [
        ("recorder", Status::InvalidArgument), // taken
        ("jsonl", Status::InvalidArgument),    // one of log_with's
        ("", Status::InvalidArgument),
    ] {
        let e = acc.add_tracker(name, recorder()).unwrap_err();
        assert_eq!(e.status(), status, "{name:?}: {e}");
    }
    assert_eq!(*events.lock().unwrap(), ["dropped"; 3]);
    events.lock().unwrap().clear();

    let hparams = Values::from_pairs([("lr", 0.5)]).unwrap();
    acc.init_trackers("proj", Some(&hparams)).unwrap();
    let e = acc.add_tracker("late", recorder()).unwrap_err();
    assert_eq!(e.status(), Status::State, "{e}");
    assert_eq!(events.lock().unwrap().pop().as_deref(), Some("dropped"));
    acc.log(
        &Values::new()
            .unwrap()
            .number("loss", 0.75)
            .unwrap()
            .text("phase", "a")
            .unwrap(),
        Some(1),
    )
    .unwrap();
    acc.log(&Values::from_pairs([("loss", 0.5)]).unwrap(), None)
        .unwrap();
    acc.end_training().unwrap();
    acc.init_trackers("again", None).unwrap();
    acc.log(&Values::from_pairs([("loss", 0.25)]).unwrap(), Some(7))
        .unwrap();
    drop(acc); // ends the started run, then releases the tracker
    assert_eq!(
        *events.lock().unwrap(),
        [
            r#"start proj [("lr", Number(0.5))]"#,
            r#"log Some(1) [("loss", Number(0.75)), ("phase", Text("a"))]"#,
            r#"log None [("loss", Number(0.5))]"#,
            "finish",
            "start again []",
            r#"log Some(7) [("loss", Number(0.25))]"#,
            "finish",
            "dropped",
        ]
    );
}

/// The error a tracker returns, to find again as the source of the call's error.
#[derive(Debug, PartialEq)]
struct Refused(u64);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the server refused step {}", self.0)
    }
}

impl std::error::Error for Refused {}

/// Fails its log at step 1, panics at step 3, and fails its start or finish on request.
struct Picky {
    fail_start: bool,
    fail_finish: bool,
}

impl Tracker for Picky {
    fn start(&mut self, _: &str, _: &ValuesRef) -> Result<(), BoxError> {
        if self.fail_start {
            return Err("no connection".into());
        }
        Ok(())
    }

    fn log(&mut self, _: &ValuesRef, step: Option<u64>) -> Result<(), BoxError> {
        match step {
            Some(1) => Err(Box::new(Refused(1))),
            Some(3) => panic!("the tracker exploded"),
            _ => Ok(()),
        }
    }

    fn finish(&mut self) -> Result<(), BoxError> {
        if self.fail_finish {
            return Err("could not flush".into());
        }
        Ok(())
    }
}

#[test]
fn a_failing_tracker_fails_the_call_and_the_files_still_get_the_values() {
    let _one = one_accelerator();
    let dir = temp_dir("failing-tracker");
    let picky = |fail_start, fail_finish| Picky {
        fail_start,
        fail_finish,
    };
    {
        let acc = Accelerator::with_config(&tracking_config("jsonl", &dir)).unwrap();
        acc.add_tracker("picky", picky(false, true)).unwrap();
        acc.init_trackers("run", None).unwrap();
        let loss = Values::from_pairs([("loss", 0.5)]).unwrap();
        acc.log(&loss, Some(0)).unwrap();
        let e = acc.log(&loss, Some(1)).unwrap_err();
        assert_eq!(e.status(), Status::Callback, "{e}");
        assert!(
            e.message().contains("picky") && e.message().contains("the server refused step 1"),
            "{e}"
        );
        let source = std::error::Error::source(&e).expect("the tracker's error");
        assert_eq!(source.downcast_ref::<Refused>(), Some(&Refused(1)));
        acc.log(&loss, Some(2)).unwrap(); // nothing left over from step 1
        let panic = catch_unwind(AssertUnwindSafe(|| acc.log(&loss, Some(3)))).unwrap_err();
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"the tracker exploded"));
        acc.log(&loss, Some(4)).unwrap();
        let lines = jsonl_lines(&dir.join("run/metrics.jsonl"));
        let steps: Vec<&str> = lines.iter().map(|l| &l[..12]).collect();
        assert_eq!(
            steps,
            [
                r#"{"step": 0, "#,
                r#"{"step": 1, "#,
                r#"{"step": 2, "#,
                r#"{"step": 3, "#,
                r#"{"step": 4, "#
            ],
            "every log reached the file"
        );
        let e = acc.end_training().unwrap_err();
        assert_eq!(e.status(), Status::Callback, "{e}");
        assert!(e.message().contains("could not flush"), "{e}");
        assert_eq!(
            std::error::Error::source(&e).map(|s| s.to_string()),
            Some("could not flush".to_string())
        );
        // The run ended all the same.
        let e = acc.log(&loss, Some(5)).unwrap_err();
        assert_eq!(e.status(), Status::State, "{e}");
    }
    {
        let acc = Accelerator::with_config(&tracking_config("jsonl", &dir)).unwrap();
        acc.add_tracker("offline", picky(true, false)).unwrap();
        let e = acc.init_trackers("run2", None).unwrap_err();
        assert_eq!(e.status(), Status::Callback, "{e}");
        assert!(
            e.message().contains("offline") && e.message().contains("no connection"),
            "{e}"
        );
        // Nothing is half-started.
        let e = acc
            .log(&Values::from_pairs([("loss", 0.5)]).unwrap(), Some(0))
            .unwrap_err();
        assert_eq!(e.status(), Status::State, "{e}");
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn tracker_misuse_is_a_config_or_state_error() {
    let _one = one_accelerator();
    let mut cfg = Config::new().unwrap();
    let e = cfg.set("log_with", "wandb").unwrap_err();
    assert_eq!(e.status(), Status::Config, "{e}");
    assert!(e.message().contains("wandb"), "{e}");
    let e = cfg.set("log_with", "jsonl,wandb").unwrap_err();
    assert_eq!(e.status(), Status::Config, "{e}");

    let values = Values::from_pairs([("loss", 0.5)]).unwrap();
    {
        let acc = Accelerator::new().unwrap();
        let e = acc.log(&values, Some(0)).unwrap_err();
        assert_eq!(e.status(), Status::State, "log before init_trackers: {e}");
        let e = acc.init_trackers("a/b", None).unwrap_err();
        assert_eq!(e.status(), Status::InvalidArgument, "{e}");
        acc.init_trackers("p", None).unwrap();
        let e = acc.init_trackers("p", None).unwrap_err();
        assert_eq!(e.status(), Status::State, "a second init_trackers: {e}");
        let e = acc.log(&values, Some(u64::MAX)).unwrap_err();
        assert_eq!(e.status(), Status::InvalidArgument, "{e}");
        acc.end_training().unwrap();
    }
    {
        // Files without a directory to write them in.
        cfg.set("log_with", "jsonl").unwrap();
        let acc = Accelerator::with_config(&cfg).unwrap();
        let e = acc.init_trackers("p", None).unwrap_err();
        assert_eq!(e.status(), Status::Config, "{e}");
        assert!(e.message().contains("logging_dir"), "{e}");
    }
    {
        // A directory that cannot be made fails before training, not at the first log.
        let dir = temp_dir("not-a-dir");
        let file = dir.join("file");
        std::fs::write(&file, b"").unwrap();
        let acc = Accelerator::with_config(&tracking_config("jsonl", &file)).unwrap();
        let e = acc.init_trackers("p", None).unwrap_err();
        assert_eq!(e.status(), Status::Io, "{e}");
        assert!(e.message().contains("file"), "{e}");
        drop(acc);
        std::fs::remove_dir_all(dir).ok();
    }
}
