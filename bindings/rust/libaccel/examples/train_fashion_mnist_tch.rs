//! train_fashion_mnist_tch.rs - PyTorch's MNIST CNN written with tch-rs (`nn::VarStore`), trained
//! on Fashion-MNIST with libaccel: the model stays tch's, libaccel makes it data-parallel (rank
//! 0's weights, gradient synchronisation, AdamW stepping the VarStore's tensors in place).
//!
//!   cargo build --features tch --examples     (LIBTORCH: the 2.11.0 wheel, see docs/rust.md)
//!   accel launch -n 2 target/debug/examples/train_fashion_mnist_tch
//!   options: --epochs N (2) --batch-size B (64, per process) --lr X (1e-3) --max-steps S (0)
//!            --data DIR (/usr/share/datasets/fashion-mnist) --workers W (1)
//!            --print-params (rank 0 prints every parameter at the end, for the tests)
//!
//! The same run as examples/c/train_fashion_mnist.c: AdamW, linear warmup/decay, evaluation with
//! gather_for_metrics, progress through the accelerator's logger, and the loss, learning rate,
//! samples/s and accuracy to the trackers of `log_with`.
mod fashion;
mod stderr_log;

use std::process::ExitCode;

use accel::optimizers::AdamW;
use accel::schedules;
use accel::tch;
use accel::tch::nn::{self, ModuleT};
use accel::{fields, Accelerator, Model, Optimizer, Scheduler, Tensor};

/// The CNN of PyTorch's MNIST example, as a tch module over a VarStore.
fn net(vs: &nn::Path) -> impl ModuleT {
    nn::seq_t()
        .add_fn(|x| ((x.to_kind(tch::Kind::Float) / 255.0 - 0.2860) / 0.3530).unsqueeze(1))
        .add(nn::conv2d(vs / "conv1", 1, 32, 3, Default::default()))
        .add_fn(|x| x.relu())
        .add(nn::conv2d(vs / "conv2", 32, 64, 3, Default::default()))
        .add_fn(|x| x.relu().max_pool2d_default(2))
        .add_fn_t(|x, train| x.dropout(0.25, train).flatten(1, -1))
        .add(nn::linear(vs / "fc1", 9216, 128, Default::default()))
        .add_fn_t(|x, train| x.relu().dropout(0.5, train))
        .add(nn::linear(vs / "fc2", 128, 10, Default::default()))
}

struct Options {
    epochs: i64,
    batch: i64,
    lr: f64,
    max_steps: i64,
    data: String,
    workers: usize,
    print_params: bool,
}

fn parse_args() -> Result<Options, String> {
    let mut o = Options {
        epochs: 2,
        batch: 64,
        lr: 1e-3,
        max_steps: 0,
        data: "/usr/share/datasets/fashion-mnist".to_string(),
        workers: 1,
        print_params: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--epochs" => o.epochs = value()?.parse().map_err(|_| "--epochs: an integer")?,
            "--batch-size" => o.batch = value()?.parse().map_err(|_| "--batch-size: an integer")?,
            "--max-steps" => {
                o.max_steps = value()?.parse().map_err(|_| "--max-steps: an integer")?
            }
            "--workers" => {
                o.workers = value()?
                    .parse()
                    .map_err(|_| "--workers: a number of threads")?
            }
            "--lr" => o.lr = value()?.parse().map_err(|_| "--lr: a number")?,
            "--data" => o.data = value()?,
            "--print-params" => o.print_params = true,
            _ => {
                return Err(format!(
                    "unknown argument {arg} (see the top of {})",
                    file!()
                ))
            }
        }
    }
    Ok(o)
}

fn run(o: &Options) -> Result<(), Box<dyn std::error::Error>> {
    let acc = Accelerator::new()?;
    let world = i64::from(acc.num_processes()?);
    acc.set_seed(1234, false)?; // seeds LibTorch's generator too: the same start on every rank

    let vs = nn::VarStore::new(tch::Device::Cpu);
    let cnn = net(&vs.root());
    let mut model = Model::from_var_store(&vs)?;
    let params = model.parameter_element_count()?;

    let (mut train, mut test) = fashion::loaders(&acc, &o.data, o.batch, o.workers)?;
    // IDX files have a known length (only a stream's is None).
    let mut total_steps = train.batch_count()?.expect("a sized dataset") * o.epochs;
    if o.max_steps > 0 && o.max_steps < total_steps {
        total_steps = o.max_steps;
    }

    let mut opt = Optimizer::with(&model, AdamW::new().lr(o.lr))?;
    // The schedule counts single-process optimizer steps (see accel_scheduler_new).
    let schedule =
        schedules::Linear::new(total_steps * world).warmup_steps(total_steps * world / 10);
    let mut sched = Scheduler::with(&opt, schedule)?;
    acc.prepare((&mut model, &mut opt, &mut sched, &mut train, &mut test))?;
    acc.logger().info(format!(
        "{world} process(es), {params} parameters, {total_steps} steps of {} per process",
        o.batch
    ))?;
    fashion::init_trackers(&acc, "train_fashion_mnist_tch", o.lr, o.batch, world, 1)?;

    let mut progress = fashion::Progress::new(o.batch * world, total_steps);
    let mut epoch = 0;
    while epoch < o.epochs && !progress.done() {
        train.set_epoch(epoch)?;
        // The end of the epoch, or the last step.
        while let Some(batch) = progress.next_batch(&mut train)? {
            let [images, labels] = fields(batch)?;
            acc.accumulate()?;
            let (images, labels) = (images.to_tch()?, labels.to_tch()?);
            let loss = model.forward(|| {
                cnn.forward_t(&images, true)
                    .cross_entropy_for_logits(&labels.to_kind(tch::Kind::Int64))
            })?;
            acc.backward(&Tensor::from_tch(&loss)?)?;
            opt.step()?;
            sched.step()?;
            opt.zero_grad()?;
            progress.step_done(&acc, &sched, epoch, loss.double_value(&[]))?;
            if progress.done() {
                break;
            }
        }
        epoch += 1;
    }

    // Evaluation: each test sample counted once over all processes.
    let (mut correct, mut seen) = (0i64, 0i64);
    let _no_grad = tch::no_grad_guard();
    for batch in &mut test {
        let [images, labels] = fields(batch?)?;
        let (images, labels) = (images.to_tch()?, labels.to_tch()?);
        let hits = model.forward(|| {
            cnn.forward_t(&images, false)
                .argmax(1, false)
                .eq_tensor(&labels.to_kind(tch::Kind::Int64))
                .to_kind(tch::Kind::Int64)
        })?;
        let all = acc
            .gather_for_metrics(&Tensor::from_tch(&hits)?)?
            .to_vec::<i64>()?;
        correct += all.iter().sum::<i64>();
        seen += all.len() as i64;
    }
    acc.print(&format!(
        "test accuracy {:.4} ({correct} of {seen}) after {:.1}s of training",
        correct as f64 / seen as f64,
        progress.elapsed()
    ))?;
    progress.finish(&acc, correct as f64 / seen as f64)?;
    if o.print_params && acc.is_main_process()? {
        let mut names: Vec<_> = vs.variables().into_iter().collect();
        names.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, t) in names {
            let values = Vec::<f32>::try_from(t.flatten(0, -1))?;
            let text: Vec<String> = values.iter().map(|v| format!("{v:e}")).collect();
            println!("param {name} {}", text.join(" "));
        }
    }
    acc.wait_for_everyone()?;
    Ok(())
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
            eprintln!("train_fashion_mnist_tch failed: {e}");
            ExitCode::FAILURE
        }
    }
}
