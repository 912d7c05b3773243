//! The Trainer from Rust: its events in transformers' order, Rust steps against the model's own,
//! compute_metrics, predict, callbacks steering the loop, and failures of closures and callbacks.

mod common;

use std::error::Error as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use accel::{
    Accelerator, CallbackResult, Config, ControlFlag, DataLoader, Dataset, EvalOutput, Metrics,
    Model, Optimizer, Scheduler, Status, Tensor, Trainer, TrainerCallback, TrainerContext,
    TrainerEvent,
};
use common::{one_accelerator, repo_root, temp_dir};

const FEATURES: usize = 8;
const CLASSES: i64 = 4;

/// tests/mp/trainer_program.c's model: one linear layer and its TorchScript steps.
const SOURCE: &str = "def training_step(self, x, y):\n\
    \x20   return torch.cross_entropy_loss(self.fc.forward(x), y)\n\
    def eval_step(self, x, y):\n\
    \x20   logits = self.fc.forward(x)\n\
    \x20   return torch.cross_entropy_loss(logits, y), logits.argmax(1)\n\
    def index(self, x, y):\n\
    \x20   return x[:, 0]\n";

/// trainer_program.c's data: the class a function of the features, x[0] the sample's index.
fn dataset(n: usize) -> Dataset {
    let mut x = vec![0f32; n * FEATURES];
    let mut y = vec![0i64; n];
    for i in 0..n {
        y[i] = (i as i64 * 7) % CLASSES;
        x[i * FEATURES] = i as f32;
        for f in 1..FEATURES {
            let class_feature = (f as i64 % CLASSES == y[i]) as i32 as f32;
            x[i * FEATURES + f] = ((i * 31 + f * 17) % 13) as f32 / 13.0 + class_feature;
        }
    }
    let x = Tensor::from_slice(&x, &[n as i64, FEATURES as i64]).unwrap();
    let y = Tensor::from_slice(&y, &[n as i64]).unwrap();
    Dataset::from_tensors(&[&x, &y]).unwrap()
}

fn loader(acc: &Accelerator, n: usize, shuffle: bool) -> DataLoader {
    let mut l = DataLoader::new(acc, &dataset(n)).unwrap();
    l.set("batch_size", 4).unwrap();
    if shuffle {
        l.set("shuffle", true).unwrap();
        l.set("seed", 7).unwrap();
    }
    l
}

/// trainer_program.c's objects: accumulation 2, seed 42, AdamW with a linear schedule.
struct Setup {
    acc: Accelerator,
    model: Model,
    opt: Optimizer,
    sched: Scheduler,
    train: DataLoader,
    eval: DataLoader,
}

fn setup(train_samples: usize, eval_samples: usize, shuffle: bool) -> Setup {
    let mut cfg = Config::new().unwrap();
    cfg.set("gradient_accumulation_steps", 2).unwrap();
    let acc = Accelerator::with_config(&cfg).unwrap();
    acc.set_seed(42, false).unwrap();
    let mut model = Model::new().unwrap();
    model
        .add_layer("fc", "linear", "in_features=8 out_features=4")
        .unwrap();
    model.define(SOURCE).unwrap();
    let mut opt = Optimizer::new(&model, "adamw").unwrap();
    opt.set("lr", 0.01).unwrap();
    let mut sched = Scheduler::new(&opt, "linear").unwrap();
    sched.set("warmup_steps", 20).unwrap();
    sched.set("total_steps", 2000).unwrap();
    let train = loader(&acc, train_samples, shuffle);
    let eval = loader(&acc, eval_samples, false);
    Setup {
        acc,
        model,
        opt,
        sched,
        train,
        eval,
    }
}

/// A Trainer of a Setup's objects, its fields borrowed one by one (so that the evaluation
/// loader, borrowed shared, can also go to predict).
macro_rules! trainer {
    ($s:expr, $settings:expr) => {
        Trainer::new(
            &$s.acc,
            &mut $s.model,
            &mut $s.opt,
            Some(&mut $s.sched),
            &mut $s.train,
            Some(&$s.eval),
            $settings,
        )
    };
}

/// Each event as "<on_event name> <global_step>".
struct Recorder(Arc<Mutex<Vec<String>>>);

impl TrainerCallback for Recorder {
    fn on_event(
        &mut self,
        ctx: &mut TrainerContext<'_>,
        event: TrainerEvent,
        _values: Option<&Metrics>,
    ) -> CallbackResult {
        let line = format!("{event} {}", ctx.global_step()?);
        self.0.lock().unwrap().push(line);
        Ok(())
    }
}

/// The per-event methods (on_event's default dispatch), with the values they get.
#[derive(Default)]
struct Seen {
    logged_losses: Vec<f64>,
    eval_losses: Vec<f64>,
    test_losses: Vec<f64>,
    saves: Vec<u64>,
    epochs_ended: Vec<f64>,
    prediction_steps: usize,
}

struct PerEvent(Arc<Mutex<Seen>>);

impl TrainerCallback for PerEvent {
    fn on_log(&mut self, _: &mut TrainerContext<'_>, logs: &Metrics) -> CallbackResult {
        if let Some(loss) = logs.get("loss") {
            self.0.lock().unwrap().logged_losses.push(loss);
        }
        Ok(())
    }
    fn on_evaluate(&mut self, _: &mut TrainerContext<'_>, metrics: &Metrics) -> CallbackResult {
        let loss = metrics.get("eval_loss").ok_or("no eval_loss")?;
        self.0.lock().unwrap().eval_losses.push(loss);
        Ok(())
    }
    fn on_predict(&mut self, _: &mut TrainerContext<'_>, metrics: &Metrics) -> CallbackResult {
        let loss = metrics.get("test_loss").ok_or("no test_loss")?;
        self.0.lock().unwrap().test_losses.push(loss);
        Ok(())
    }
    fn on_save(&mut self, ctx: &mut TrainerContext<'_>) -> CallbackResult {
        let step = ctx.global_step()?;
        self.0.lock().unwrap().saves.push(step);
        Ok(())
    }
    fn on_epoch_end(&mut self, ctx: &mut TrainerContext<'_>) -> CallbackResult {
        let epoch = ctx.epoch()?;
        self.0.lock().unwrap().epochs_ended.push(epoch);
        Ok(())
    }
    fn on_prediction_step(&mut self, _: &mut TrainerContext<'_>) -> CallbackResult {
        self.0.lock().unwrap().prediction_steps += 1;
        Ok(())
    }
}

#[test]
fn event_names_are_transformers_methods() {
    for (i, event) in TrainerEvent::ALL.into_iter().enumerate() {
        assert_eq!(event.to_raw() as usize, i);
        assert_eq!(TrainerEvent::from_raw(event.to_raw()), Some(event));
        assert!(event.name().starts_with("on_"), "{}", event.name());
    }
    assert_eq!(TrainerEvent::StepEnd.name(), "on_step_end");
    assert_eq!(TrainerEvent::from_raw(15), None);
    assert_eq!(
        ControlFlag::ShouldTrainingStop.name(),
        "should_training_stop"
    );
}

/// tests/mp/trainer_events.txt's run (which transformers' own Trainer gives, as
/// tests/mp/transformers_trainer_events.py checks): the same events at the same steps.
#[test]
fn events_are_transformers_events() {
    let _one = one_accelerator();
    let dir = temp_dir("trainer-events");
    let mut s = setup(24, 10, false);
    let settings = format!(
        "num_train_epochs=2,logging_steps=2,logging_first_step=true,eval_strategy=steps,\
         eval_steps=3,save_strategy=steps,save_steps=3,save_total_limit=2,speed_metrics=false,\
         output_dir={}/run",
        dir.display()
    );
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::new(Mutex::new(Seen::default()));
    {
        let mut trainer = trainer!(s, &settings).unwrap();
        trainer.add_callback(Recorder(Arc::clone(&events))).unwrap();
        trainer.add_callback(PerEvent(Arc::clone(&seen))).unwrap();
        trainer.train().unwrap();
        assert_eq!(trainer.global_step().unwrap(), 6);
        assert_eq!(trainer.epoch().unwrap(), 2.0);
        let metrics = trainer.evaluate().unwrap();
        let prediction = trainer.predict(&s.eval).unwrap();
        assert!(metrics.get("eval_loss").is_some(), "{metrics:?}");
        assert!(prediction.metrics.get("test_loss").is_some());
        let state = trainer.state_json().unwrap();
        assert!(state.contains("\"global_step\": 6"), "{state}");
        assert!(state.contains("\"log_history\""), "{state}");
    }
    let expected =
        std::fs::read_to_string(repo_root().join("tests/mp/trainer_events.txt")).unwrap();
    let expected: Vec<&str> = expected.lines().collect();
    let got = events.lock().unwrap().clone();
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(g, e, "line {}", i + 1);
    }
    assert_eq!(got.len(), expected.len(), "{got:#?}");

    // The per-event methods saw what the file says they should, with their values.
    let count = |name: &str| expected.iter().filter(|l| l.starts_with(name)).count();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.eval_losses.len(), count("on_evaluate "));
    assert_eq!(seen.test_losses.len(), count("on_predict "));
    assert_eq!(seen.saves, vec![3, 6]);
    assert_eq!(seen.epochs_ended, vec![1.0, 2.0]);
    assert_eq!(seen.prediction_steps, count("on_prediction_step "));
    // Logged at steps 1 (logging_first_step), 2, 4 and 6: the training logs have a loss.
    assert_eq!(seen.logged_losses.len(), 4, "{:?}", seen.logged_losses);
    assert!(seen.logged_losses.iter().all(|l| l.is_finite() && *l > 0.0));
    // save_total_limit=2 kept both checkpoints, each with its trainer_state.json.
    for step in [3, 6] {
        let ckpt = dir.join(format!("run/checkpoint-{step}/trainer_state.json"));
        assert!(ckpt.is_file(), "{}", ckpt.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every parameter's bits after training `s` with `settings`, the Rust step in place of the
/// model's when `rust_step`; and how often the Rust step ran.
fn trained_bits(rust_step: bool, dir: &std::path::Path) -> (Vec<Vec<u32>>, Vec<Vec<u32>>, usize) {
    let mut s = setup(24, 10, true);
    let bits = |model: &Model| -> Vec<Vec<u32>> {
        model
            .tensor_names()
            .unwrap()
            .iter()
            .map(|n| {
                let v = model.tensor(n).unwrap().to_vec::<f32>().unwrap();
                v.iter().map(|x| x.to_bits()).collect()
            })
            .collect()
    };
    let before = bits(&s.model);
    let calls = Arc::new(AtomicUsize::new(0));
    let settings = format!(
        "max_steps=9,logging_steps=3,save_strategy=no,speed_metrics=false,progress_bar=false,\
         output_dir={}",
        dir.display()
    );
    {
        let mut trainer = trainer!(s, &settings).unwrap();
        if rust_step {
            let calls = Arc::clone(&calls);
            trainer
                .set_training_step(move |model, batch| {
                    calls.fetch_add(1, Ordering::Relaxed);
                    assert_eq!(batch.len(), 2);
                    Ok(model.call1("training_step", batch)?)
                })
                .unwrap();
        }
        trainer.train().unwrap();
        assert_eq!(trainer.global_step().unwrap(), 9);
    }
    let after = bits(&s.model);
    (before, after, calls.load(Ordering::Relaxed))
}

/// A Rust step that calls the model's training_step gives bitwise the default step's
/// parameters (the Trainer does the rest of the step the same way).
#[test]
fn rust_training_step_equals_the_models_own() {
    let _one = one_accelerator();
    let dir = temp_dir("trainer-step");
    let (before, default_step, none) = trained_bits(false, &dir);
    let (before_rust, rust_step, calls) = trained_bits(true, &dir);
    assert_eq!(none, 0);
    assert_eq!(calls, 18, "9 steps of 2 micro-batches");
    assert_eq!(before, before_rust, "the same initialisation");
    assert_ne!(before, default_step, "training changed the parameters");
    assert_eq!(default_step, rust_step);
    let _ = std::fs::remove_dir_all(&dir);
}

fn accuracy(predictions: &Tensor, labels: &Tensor) -> f64 {
    let p = predictions.to_vec::<i64>().unwrap();
    let l = labels.to_vec::<i64>().unwrap();
    assert_eq!(p.len(), l.len());
    p.iter().zip(&l).filter(|(a, b)| a == b).count() as f64 / l.len() as f64
}

/// compute_metrics in Rust: its accuracy is eval_accuracy (test_accuracy for predict), computed
/// on every evaluation sample once.
#[test]
fn compute_metrics_in_rust() {
    let _one = one_accelerator();
    let dir = temp_dir("trainer-metrics");
    let mut s = setup(24, 10, true);
    let settings = format!(
        "num_train_epochs=1,eval_strategy=epoch,save_strategy=no,speed_metrics=false,\
         progress_bar=false,output_dir={}",
        dir.display()
    );
    let mut trainer = trainer!(s, &settings).unwrap();
    let sizes = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&sizes);
    trainer
        .set_compute_metrics(move |predictions: &Tensor, labels: &Tensor| {
            seen.lock().unwrap().push(labels.element_count()?);
            Ok(vec![("accuracy", accuracy(predictions, labels))])
        })
        .unwrap();
    trainer.train().unwrap();
    let metrics = trainer.evaluate().unwrap();
    let prediction = trainer.predict(&s.eval).unwrap();
    let (p, l) = (prediction.predictions.unwrap(), prediction.labels.unwrap());
    let expected = accuracy(&p, &l);
    assert_eq!(metrics.get("eval_accuracy"), Some(expected), "{metrics:?}");
    assert_eq!(prediction.metrics.get("test_accuracy"), Some(expected));
    assert!(metrics.get("eval_loss").is_some_and(f64::is_finite));
    // One evaluation in training (eval_strategy=epoch), one standalone, one predict.
    assert_eq!(*sizes.lock().unwrap(), vec![10, 10, 10]);
    let state = trainer.state_json().unwrap();
    assert!(state.contains("\"eval_accuracy\""), "{state}");
    drop(trainer);
    let _ = std::fs::remove_dir_all(&dir);
}

/// predict gives every sample once, in dataset order, with an uneven last batch (23 samples of
/// 4); a Rust evaluation step gives the batch's labels field back as it is.
#[test]
fn predict_returns_every_sample_once_in_order() {
    let _one = one_accelerator();
    let dir = temp_dir("trainer-predict");
    let mut s = setup(24, 10, false);
    let mut other = loader(&s.acc, 23, false);
    s.acc.prepare(&mut other).unwrap();
    let settings = format!("speed_metrics=false,output_dir={}", dir.display());
    let mut trainer = trainer!(s, &settings).unwrap();
    let batches = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&batches);
    trainer
        .set_eval_step(move |model, batch| {
            counted.fetch_add(1, Ordering::Relaxed);
            Ok(EvalOutput {
                loss: None,
                predictions: Some(model.call1("index", batch)?),
                labels: Some(batch[1].shallow_clone()?),
            })
        })
        .unwrap();
    let prediction = trainer.predict(&other).unwrap();
    assert_eq!(batches.load(Ordering::Relaxed), 6);
    let p = prediction.predictions.unwrap().to_vec::<f32>().unwrap();
    assert_eq!(p, (0..23).map(|i| i as f32).collect::<Vec<_>>());
    let l = prediction.labels.unwrap().to_vec::<i64>().unwrap();
    assert_eq!(l, (0..23).map(|i| (i * 7) % CLASSES).collect::<Vec<_>>());
    // No loss given: no test_loss.
    assert_eq!(prediction.metrics.get("test_loss"), None);
    drop(trainer);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A callback that sets should_training_stop at step 3 ends training there (of 6 steps).
#[test]
fn a_callback_stops_training() {
    struct StopAt(u64, Arc<Mutex<Vec<bool>>>);
    impl TrainerCallback for StopAt {
        fn on_step_end(&mut self, ctx: &mut TrainerContext<'_>) -> CallbackResult {
            if ctx.global_step()? == self.0 {
                let before = ctx.control(ControlFlag::ShouldTrainingStop)?;
                ctx.stop_training()?;
                let after = ctx.control(ControlFlag::ShouldTrainingStop)?;
                self.1.lock().unwrap().extend([before, after]);
            }
            Ok(())
        }
    }
    let _one = one_accelerator();
    let dir = temp_dir("trainer-stop");
    let mut s = setup(24, 10, false);
    let settings = format!(
        "num_train_epochs=2,save_strategy=no,speed_metrics=false,output_dir={}",
        dir.display()
    );
    let mut trainer = trainer!(s, &settings).unwrap();
    let flags = Arc::new(Mutex::new(Vec::new()));
    trainer.add_callback(StopAt(3, Arc::clone(&flags))).unwrap();
    trainer.train().unwrap();
    assert_eq!(trainer.global_step().unwrap(), 3);
    assert_eq!(trainer.epoch().unwrap(), 1.0);
    assert_eq!(*flags.lock().unwrap(), vec![false, true]);
    drop(trainer);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A panicking callback's panic comes back from train; an Err-returning step is a Callback
/// error with the step's error as its source; a bad setting is an InvalidArgument error; and
/// the process, the accelerator and the Trainer go on working afterwards.
#[test]
fn failures_of_closures_and_callbacks() {
    struct PanicAt(u64);
    impl TrainerCallback for PanicAt {
        fn on_step_end(&mut self, ctx: &mut TrainerContext<'_>) -> CallbackResult {
            if ctx.global_step()? == self.0 {
                panic!("callback panicked at step {}", self.0);
            }
            Ok(())
        }
    }
    #[derive(Debug)]
    struct NoLoss;
    impl std::fmt::Display for NoLoss {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("no loss today")
        }
    }
    impl std::error::Error for NoLoss {}

    let _one = one_accelerator();
    let dir = temp_dir("trainer-failures");
    let mut s = setup(24, 10, false);
    let e = trainer!(s, "num_train_epoch=2").unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument, "{e}");
    assert!(e.to_string().contains("num_train_epoch"), "{e}");

    let settings = format!(
        "num_train_epochs=2,save_strategy=no,speed_metrics=false,output_dir={}",
        dir.display()
    );
    {
        let mut trainer = trainer!(s, &settings).unwrap();
        // One Trainer per accelerator at a time.
        let mut model = Model::new().unwrap();
        model
            .add_layer("fc", "linear", "in_features=8 out_features=4")
            .unwrap();
        let mut opt = Optimizer::new(&model, "sgd").unwrap();
        let mut train = loader(&s.acc, 8, false);
        let e = Trainer::new(&s.acc, &mut model, &mut opt, None, &mut train, None, "").unwrap_err();
        assert_eq!(e.status(), Status::State, "{e}");
        trainer.add_callback(PanicAt(2)).unwrap();
        let panic = catch_unwind(AssertUnwindSafe(|| trainer.train())).unwrap_err();
        let what = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert_eq!(what, "callback panicked at step 2");
        assert_eq!(trainer.global_step().unwrap(), 2);
        // The Trainer still evaluates (the callback panics only at step 2's end).
        let metrics = trainer.evaluate().unwrap();
        assert!(metrics.get("eval_loss").is_some(), "{metrics:?}");
    }
    {
        let mut trainer = trainer!(s, &settings).unwrap();
        trainer
            .set_training_step(|_, _| Err(Box::new(NoLoss)))
            .unwrap();
        let e = trainer.train().unwrap_err();
        assert_eq!(e.status(), Status::Callback, "{e}");
        assert!(e.to_string().contains("no loss today"), "{e}");
        assert!(e.source().is_some_and(|s| s.is::<NoLoss>()), "{e:?}");
        // An evaluation step's error, and compute_metrics giving a name the library refuses.
        trainer
            .set_eval_step(|_, _| Err("no evaluation either".into()))
            .unwrap();
        let e = trainer.evaluate().unwrap_err();
        assert_eq!(e.status(), Status::Callback, "{e}");
        assert!(e.to_string().contains("no evaluation either"), "{e}");
        trainer
            .set_eval_step(|model, batch| {
                let mut out = model.call("eval_step", batch)?.into_iter();
                Ok(EvalOutput {
                    loss: out.next(),
                    predictions: out.next(),
                    labels: Some(batch[1].shallow_clone()?),
                })
            })
            .unwrap();
        trainer
            .set_compute_metrics(|_: &Tensor, _: &Tensor| Ok([("bad\0name", 1.0)]))
            .unwrap();
        let e = trainer.evaluate().unwrap_err();
        assert_eq!(e.status(), Status::InvalidArgument, "{e}");
        // A callback's error names its event.
        struct Fails;
        impl TrainerCallback for Fails {
            fn on_evaluate(&mut self, _: &mut TrainerContext<'_>, _: &Metrics) -> CallbackResult {
                Err("evaluation refused".into())
            }
        }
        trainer
            .set_compute_metrics(|_: &Tensor, _: &Tensor| Ok([("one", 1.0)]))
            .unwrap();
        trainer.add_callback(Fails).unwrap();
        let e = trainer.evaluate().unwrap_err();
        assert_eq!(e.status(), Status::Callback, "{e}");
        let text = e.to_string();
        assert!(
            text.contains("on_evaluate") && text.contains("evaluation refused"),
            "{text}"
        );
    }
    // The accelerator goes on.
    let all = s
        .acc
        .gather(&Tensor::from_slice(&[1f32], &[1]).unwrap())
        .unwrap();
    assert_eq!(all.to_vec::<f32>().unwrap(), vec![1.0]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// auto_find_batch_size from Rust: a step failing out of memory (an `OutOfMemory` error) above
/// 3 rows is tried again smaller, 5 then 4 then 3, and the run found is bitwise the run started
/// at 3; without the setting, the step's out-of-memory failure is the call's.
#[test]
fn auto_find_batch_size_retries_what_ran_out_of_memory() {
    let _one = one_accelerator();
    let dir = temp_dir("trainer-auto-batch");
    let settings = format!(
        "max_steps=6,save_strategy=no,speed_metrics=false,progress_bar=false,output_dir={}",
        dir.display()
    );
    let run = |start: i64, extra: &str| {
        let mut s = setup(24, 10, false);
        s.train.set("batch_size", start).unwrap();
        let refused = Arc::new(AtomicUsize::new(0));
        let result = {
            let mut trainer = trainer!(s, &format!("{settings}{extra}")).unwrap();
            let counter = Arc::clone(&refused);
            trainer
                .set_training_step(move |model, batch| {
                    if batch[0].shape()?[0] > 3 {
                        counter.fetch_add(1, Ordering::Relaxed);
                        return Err(Box::new(accel::Error::new(Status::OutOfMemory, "pretend")));
                    }
                    Ok(model.call1("training_step", batch)?)
                })
                .unwrap();
            trainer.train().map(|()| trainer.state_json().unwrap())
        };
        let weights = s
            .model
            .tensor("fc.weight")
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        let bits: Vec<u32> = weights.iter().map(|x| x.to_bits()).collect();
        (result, bits, refused.load(Ordering::Relaxed))
    };
    let (want, want_bits, none) = run(3, "");
    assert!(want.is_ok());
    assert_eq!(none, 0);
    let (got, got_bits, refused) = run(5, ",auto_find_batch_size=true");
    let state = got.unwrap();
    assert!(state.contains("\"train_batch_size\": 3,"), "{state}");
    assert_eq!(refused, 2, "5 and 4 refused");
    assert_eq!(got_bits, want_bits);
    let (failed, _, _) = run(5, "");
    assert_eq!(failed.unwrap_err().status(), Status::OutOfMemory);
    let _ = std::fs::remove_dir_all(&dir);
}
