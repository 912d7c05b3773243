//! train_fashion_mnist.rs - PyTorch's classic MNIST CNN trained on Fashion-MNIST with libaccel.
//!
//!   target/debug/examples/train_fashion_mnist                      one process
//!   accel launch -n 2 target/debug/examples/train_fashion_mnist    two processes, same code
//!   options: --epochs N (2) --batch-size B (64, per process) --lr X (1e-3) --accum K (1)
//!            --bf16 --max-steps S (0: whole epochs) --data DIR (/usr/share/datasets/fashion-mnist)
//!            --workers W (1: batches prefetched on one thread; 0: made when asked for)
//!
//! The same program as examples/c/train_fashion_mnist.c, with the same model, data order,
//! schedule and output: AdamW with a linear warmup/decay schedule; evaluation on the 10k test
//! images with gather_for_metrics. Progress lines go through the accelerator's logger at info
//! level (to the `log` facade; examples/stderr_log writes them as the C program's), the test
//! accuracy to standard output; the loss, learning rate and samples/s every 10 steps and the
//! accuracy go to the trackers the configuration's `log_with` names (none by default).
mod fashion;
mod stderr_log;

use std::process::ExitCode;

use accel::layers::{Conv2d, Linear};
use accel::optimizers::AdamW;
use accel::schedules;
use accel::{fields, Accelerator, Config, Model, Optimizer, Scheduler};

const SOURCE: &str = "\
def forward(self, images):
    x = images.float().div(255.0).sub(0.2860).div(0.3530).unsqueeze(1)
    x = torch.relu(self.conv1.forward(x))
    x = torch.relu(self.conv2.forward(x))
    x = torch.max_pool2d(x, [2, 2])
    x = torch.dropout(x, 0.25, self.training)
    x = torch.flatten(x, 1)
    x = torch.relu(self.fc1.forward(x))
    x = torch.dropout(x, 0.5, self.training)
    return self.fc2.forward(x)

def training_step(self, images, labels):
    return torch.cross_entropy_loss(self.forward(images), labels.long())

def correct(self, images, labels):
    return torch.eq(torch.argmax(self.forward(images), 1), labels.long()).long()
";

struct Options {
    epochs: i64,
    batch: i64,
    lr: f64,
    accum: i64,
    bf16: bool,
    max_steps: i64,
    data: String,
    workers: usize,
}

fn parse_args() -> Result<Options, String> {
    let mut o = Options {
        epochs: 2,
        batch: 64,
        lr: 1e-3,
        accum: 1,
        bf16: false,
        max_steps: 0,
        data: "/usr/share/datasets/fashion-mnist".to_string(),
        workers: 1,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next().ok_or_else(|| {
                format!(
                    "{name} needs a value (see the comment at the top of {})",
                    file!()
                )
            })
        };
        let number = |text: String, name: &str| {
            text.parse::<i64>()
                .map_err(|_| format!("{name} takes an integer, not {text}"))
        };
        match arg.as_str() {
            "--epochs" => o.epochs = number(value(&arg)?, &arg)?,
            "--batch-size" => o.batch = number(value(&arg)?, &arg)?,
            "--accum" => o.accum = number(value(&arg)?, &arg)?,
            "--max-steps" => o.max_steps = number(value(&arg)?, &arg)?,
            "--workers" => {
                o.workers = usize::try_from(number(value(&arg)?, &arg)?)
                    .map_err(|_| "--workers takes a number of threads, not less than 0")?
            }
            "--lr" => {
                let text = value(&arg)?;
                o.lr = text
                    .parse()
                    .map_err(|_| format!("--lr takes a number, not {text}"))?
            }
            "--data" => o.data = value(&arg)?,
            "--bf16" => o.bf16 = true,
            _ => {
                return Err(format!(
                    "unknown argument {arg} (see the comment at the top of {})",
                    file!()
                ))
            }
        }
    }
    Ok(o)
}

fn run(o: &Options) -> accel::Result<()> {
    let mut cfg = Config::new()?;
    cfg.set("gradient_accumulation_steps", o.accum)?;
    if o.bf16 {
        cfg.set("mixed_precision", "bf16")?;
    }
    let acc = Accelerator::with_config(&cfg)?;
    drop(cfg);
    let world = i64::from(acc.num_processes()?);
    acc.set_seed(1234, false)?;

    // The CNN of PyTorch's MNIST example.
    let mut model = Model::new()?;
    model.add("conv1", Conv2d::new(1, 32, 3))?;
    model.add("conv2", Conv2d::new(32, 64, 3))?;
    model.add("fc1", Linear::new(9216, 128))?;
    model.add("fc2", Linear::new(128, 10))?;
    model.define(SOURCE)?;
    let params = model.parameter_element_count()?;

    let (mut train, mut test) = fashion::loaders(&acc, &o.data, o.batch, o.workers)?;
    // IDX files have a known length (only a stream's is None).
    let steps_per_epoch = train.batch_count()?.expect("a sized dataset");
    let mut total_steps = steps_per_epoch * o.epochs;
    if o.max_steps > 0 && o.max_steps < total_steps {
        total_steps = o.max_steps;
    }

    let mut opt = Optimizer::with(&model, AdamW::new().lr(o.lr))?;
    // The schedule counts single-process optimizer steps: the accelerator steps it num_processes
    // times per step (see accel_scheduler_new), so it is written for total_steps * world / accum.
    let schedule = schedules::Linear::new(total_steps * world / o.accum)
        .warmup_steps(total_steps * world / o.accum / 10);
    let mut sched = Scheduler::with(&opt, schedule)?;
    acc.prepare((&mut model, &mut opt, &mut sched, &mut train, &mut test))?;
    acc.logger().info(format!(
        "{world} process(es), {params} parameters, {total_steps} steps of {} per process{}",
        o.batch,
        if o.bf16 { ", bf16" } else { "" }
    ))?;
    fashion::init_trackers(&acc, "train_fashion_mnist", o.lr, o.batch, world, o.accum)?;

    let mut progress = fashion::Progress::new(o.batch * world, total_steps);
    let mut epoch = 0;
    while epoch < o.epochs && !progress.done() {
        train.set_epoch(epoch)?;
        model.train(true)?;
        // The end of the epoch, or the last step.
        while let Some(batch) = progress.next_batch(&mut train)? {
            let [images, labels] = fields(batch)?;
            acc.accumulate()?;
            let loss = model.call1("training_step", &[&images, &labels])?;
            acc.backward(&loss)?;
            opt.step()?;
            sched.step()?;
            opt.zero_grad()?;
            progress.step_done(&acc, &sched, epoch, loss.item::<f64>()?)?;
            if progress.done() {
                break;
            }
        }
        epoch += 1;
    }

    // Evaluation: each test sample counted once over all processes.
    model.train(false)?;
    let (mut correct, mut seen) = (0i64, 0i64);
    for batch in &mut test {
        let [images, labels] = fields(batch?)?;
        let hits = model.call1("correct", &[&images, &labels])?;
        let all = acc.gather_for_metrics(&hits)?.to_vec::<i64>()?;
        correct += all.iter().sum::<i64>();
        seen += all.len() as i64;
    }
    acc.print(&format!(
        "test accuracy {:.4} ({correct} of {seen}) after {:.1}s of training",
        correct as f64 / seen as f64,
        progress.elapsed()
    ))?;
    progress.finish(&acc, correct as f64 / seen as f64)?;
    acc.wait_for_everyone()
}

fn main() -> ExitCode {
    stderr_log::init();
    let options = match parse_args() {
        Ok(o) => o,
        Err(why) => {
            eprintln!("{why}");
            return ExitCode::from(2);
        }
    };
    match run(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("train_fashion_mnist failed: {e}");
            ExitCode::FAILURE
        }
    }
}
