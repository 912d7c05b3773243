//! What the two Fashion-MNIST examples (the TorchScript model and the tch-rs one) share: the data
//! and its loaders, the progress line of examples/c/train_fashion_mnist.c, word for word, logged
//! at info level, and what that program logs to the run's trackers.

use std::time::Instant;

use accel::{Accelerator, DataLoader, DataLoaderOptions, Dataset, Scheduler, Values};

/// Starts the trackers' run (none write unless the configuration's `log_with` names some) with
/// the C example's hyperparameters.
pub fn init_trackers(
    acc: &Accelerator,
    project: &str,
    lr: f64,
    batch: i64,
    world: i64,
    accum: i64,
) -> accel::Result<()> {
    let config = Values::from_pairs([
        ("lr", lr),
        ("batch_size", batch as f64),
        ("processes", world as f64),
        ("gradient_accumulation_steps", accum as f64),
    ])?;
    acc.init_trackers(project, Some(&config))
}

/// The training and test loaders over the IDX files in `dir`: batches of `batch` shuffled with
/// seed 42 for training, of 100 for the test, as the C example.
pub fn loaders(
    acc: &Accelerator,
    dir: &str,
    batch: i64,
    workers: usize,
) -> accel::Result<(DataLoader, DataLoader)> {
    let set = |images: &str, labels: &str| {
        Dataset::from_idx(&[format!("{dir}/{images}"), format!("{dir}/{labels}")])
    };
    let train_set = set("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")?;
    let test_set = set("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")?;
    let train_options = DataLoaderOptions::new()
        .batch_size(batch)
        .shuffle(true)
        .seed(42)
        .num_workers(workers);
    let train = DataLoader::with(acc, &train_set, train_options)?;
    let test_options = DataLoaderOptions::new().batch_size(100).num_workers(1);
    let test = DataLoader::with(acc, &test_set, test_options)?;
    Ok((train, test))
}

/// The training's progress: the loss's moving average, the time spent waiting for batches, and
/// every 100 steps (and at the last) the C example's line.
pub struct Progress {
    start: Instant,
    samples_per_step: i64,
    total_steps: i64,
    pub step: i64,
    loss_avg: f64,
    waited: f64,
}

impl Progress {
    pub fn new(samples_per_step: i64, total_steps: i64) -> Progress {
        Progress {
            start: Instant::now(),
            samples_per_step,
            total_steps,
            step: 0,
            loss_avg: 0.0,
            waited: 0.0,
        }
    }

    /// The next batch of `loader`, its wait counted; `None` at the end of the epoch.
    pub fn next_batch(&mut self, loader: &mut DataLoader) -> accel::Result<Option<accel::Batch>> {
        let asked = Instant::now();
        let batch = loader.next_batch()?;
        self.waited += asked.elapsed().as_secs_f64();
        Ok(batch)
    }

    /// Counts a step of loss `value` in `epoch` (from 0): every 10 steps (and at the last) the
    /// loss's moving average, the learning rate and the samples per second to the trackers, every
    /// 100 (and at the last) the C example's line to the logger.
    pub fn step_done(
        &mut self,
        acc: &Accelerator,
        sched: &Scheduler,
        epoch: i64,
        value: f64,
    ) -> accel::Result<()> {
        self.loss_avg = if self.step == 0 {
            value
        } else {
            0.98 * self.loss_avg + 0.02 * value
        };
        self.step += 1;
        let (step, total) = (self.step, self.total_steps);
        if step % 10 == 0 || step == total {
            let rate = (step * self.samples_per_step) as f64 / self.elapsed();
            let values = Values::new()?
                .number("loss", self.loss_avg)?
                .number("lr", sched.lr()?)?
                .number("samples_per_s", rate)?;
            acc.log(&values, Some(step as u64))?;
        }
        if step % 100 == 0 || step == total {
            let elapsed = self.elapsed();
            let rate = (step * self.samples_per_step) as f64 / elapsed;
            acc.logger().info(format!(
                "epoch {} step {step}/{total} loss {:.4} {rate:.0} samples/s ETA {:.0}s data wait {:.2}%",
                epoch + 1,
                self.loss_avg,
                (total - step) as f64 * self.samples_per_step as f64 / rate,
                100.0 * self.waited / elapsed
            ))?;
        }
        Ok(())
    }

    /// The test accuracy to the trackers, at the last step, and the end of their run.
    pub fn finish(&self, acc: &Accelerator, accuracy: f64) -> accel::Result<()> {
        let values = Values::new()?.number("accuracy", accuracy)?;
        acc.log(&values, Some(self.step as u64))?;
        acc.end_training()
    }

    /// Seconds since the progress began.
    pub fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Whether the last step was taken.
    pub fn done(&self) -> bool {
        self.step >= self.total_steps
    }
}
