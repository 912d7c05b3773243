//! The safe API in one process: every kind of handle, bad input as `Err`, closures and their
//! failures, checkpoints, trackers.

mod common;

use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{one_accelerator, temp_dir, FASHION_MNIST};
use libaccel::layers::{self, BatchNorm2d, Conv2d, Embedding, Layer, LayerNorm, Linear};
use libaccel::optimizers::{self, Adagrad, Adam, AdamW, OptimizerOptions, RmsProp, Sgd};
use libaccel::schedules::{self, Anneal, SchedulerOptions};
use libaccel::{
    fields, Accelerator, Config, DataLoader, DataLoaderOptions, Dataset, DistributedType, Dtype,
    Field, Mask, Model, Optimizer, Padding, PaddingSide, Precision, Reduction, Sample, Scheduler,
    Status, Tensor,
};
use libaccel::{BoxError, Tracker, Value, Values, ValuesRef};

#[test]
fn the_loaded_library_is_the_supported_version() {
    let n = libaccel::version_number();
    assert!(
        (libaccel::sys::SUPPORTED_VERSION_MIN..libaccel::sys::SUPPORTED_VERSION_END).contains(&n)
    );
    assert_eq!(
        libaccel::version(),
        format!("{}.{}.{}", n / 10000, n / 100 % 100, n % 100)
    );
    libaccel::sys::check_version().unwrap();
    libaccel::sys::check_version_number(299).unwrap();
    let newer = libaccel::sys::check_version_number(300).unwrap_err();
    assert!(
        newer.contains("libaccel 0.3.0 is loaded") && newer.contains("[0.2.0, 0.3.0)"),
        "{newer}"
    );
    assert!(libaccel::sys::check_version_number(199).is_err());
    assert!(libaccel::sys::check_version_number(10000).is_err());
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

fn round_trip<T: libaccel::Element + PartialEq + std::fmt::Debug>(values: &[T]) {
    let t = Tensor::from_slice(values, &[2, values.len() as i64 / 2]).unwrap();
    assert_eq!(t.dtype().unwrap(), T::DTYPE);
    assert_eq!(t.to_vec::<T>().unwrap(), values);
    let mut out = values.to_vec();
    t.copy_to(&mut out).unwrap();
    assert_eq!(out, values);
}

#[test]
fn tensors_copy_every_element_type() {
    round_trip(&[1.5f32, -2.0, 3.25, 4.0]);
    round_trip(&[1.5f64, -2.0]);
    round_trip(&[i64::MIN, 0, 7, i64::MAX]);
    round_trip(&[i32::MIN, i32::MAX]);
    round_trip(&[-3i16, 9]);
    round_trip(&[-3i8, 9]);
    round_trip(&[0u8, 255]);
    round_trip(&[true, false, false, true]);
    let half = Tensor::from_bytes(&[0x00, 0x3c, 0x00, 0xc0], Dtype::F16, &[2]).unwrap();
    assert_eq!(half.dtype().unwrap(), Dtype::F16);
    assert_eq!(half.to_bytes().unwrap(), vec![0x00, 0x3c, 0x00, 0xc0]);
    assert_eq!(Dtype::BF16.size(), 2);
    assert_eq!(Dtype::I64.size(), 8);

    let t = Tensor::from_slice(&[0.5f32; 24], &[2, 3, 4]).unwrap();
    assert_eq!(t.shape().unwrap(), vec![2, 3, 4]);
    assert_eq!(t.dim_count().unwrap(), 3);
    assert_eq!(t.element_count().unwrap(), 24);
    assert_eq!(t.data_size().unwrap(), 96);
    let s = Tensor::scalar(7i64).unwrap();
    assert_eq!(s.shape().unwrap(), Vec::<i64>::new());
    assert_eq!(s.item_i64().unwrap(), 7);
    assert_eq!(s.item_f64().unwrap(), 7.0);
    // Shared between threads: tensors are Send + Sync.
    let shared = Arc::new(t);
    let other = Arc::clone(&shared);
    let n = std::thread::spawn(move || other.element_count().unwrap())
        .join()
        .unwrap();
    assert_eq!(n, 24);
}

#[test]
fn bad_tensor_input_is_an_error() {
    let e = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[2, 2]).unwrap_err();
    assert!(
        matches!(e.status(), Status::InvalidArgument | Status::Shape),
        "{e}"
    );
    assert!(!e.message().is_empty());
    let e = Tensor::from_slice(&[1.0f32], &[-1]).unwrap_err();
    assert!(!e.message().is_empty());
    let t = Tensor::from_slice(&[1.0f32, 2.0], &[2]).unwrap();
    assert_eq!(t.to_vec::<i64>().unwrap_err().status(), Status::Dtype);
    assert_eq!(
        t.copy_to(&mut [0f32; 3]).unwrap_err().status(),
        Status::Shape
    );
    assert_eq!(t.item_f64().unwrap_err().status(), Status::Shape);
    let scalar = Tensor::scalar(1.5f32).unwrap();
    assert_eq!(scalar.item_i64().unwrap_err().status(), Status::Dtype);
    let too_many = vec![1i64; 17];
    assert!(Tensor::from_slice(&[1u8], &too_many).is_err());
}

fn linear_model(inputs: usize, outputs: usize) -> Model {
    let mut model = Model::new().unwrap();
    model
        .add_layer(
            "fc",
            "linear",
            &format!("in_features={inputs} out_features={outputs}"),
        )
        .unwrap();
    model
        .define(
            "def forward(self, x):\n    return self.fc.forward(x)\n\n\
             def training_step(self, x, y):\n    \
             return torch.mse_loss(self.forward(x), y)\n\n\
             def both(self, x):\n    return (self.forward(x), x)\n",
        )
        .unwrap();
    model
}

#[test]
fn models_build_call_save_and_load() {
    let model = linear_model(3, 2);
    assert_eq!(model.parameter_element_count().unwrap(), 8);
    assert_eq!(model.tensor_names().unwrap(), vec!["fc.weight", "fc.bias"]);
    let w = model.tensor("fc.weight").unwrap();
    assert_eq!(w.shape().unwrap(), vec![2, 3]);
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    let out = model.call("both", &[&x]).unwrap();
    assert_eq!(out.len(), 2, "a tuple comes back as every tensor, one call");
    assert_eq!(out[0].shape().unwrap(), vec![2, 2]);
    assert_eq!(out[1].to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());

    let dir = temp_dir("torchscript");
    let path = dir.join("model.pt");
    model.save_torchscript(&path).unwrap();
    let loaded = Model::load_torchscript(&path).unwrap();
    let again = loaded.call1("forward", &[&x]).unwrap();
    assert_eq!(
        again.to_vec::<f32>().unwrap(),
        out[0].to_vec::<f32>().unwrap()
    );
    let e = Model::load_torchscript(dir.join("missing.pt")).unwrap_err();
    assert_eq!(e.status(), Status::Io);
    assert!(e.message().contains("missing.pt"), "{e}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn bad_model_input_is_an_error() {
    let mut model = linear_model(3, 2);
    let e = model.add_layer("x", "transformer", "").unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("transformer"), "{e}");
    let e = model
        .add_layer("y", "linear", "in_features=3 out_features=2 colour=red")
        .unwrap_err();
    assert!(e.message().contains("colour"), "{e}");
    let e = model.define("def broken(self:\n").unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    let x = Tensor::from_slice(&[1.0f32; 8], &[2, 4]).unwrap();
    let e = model.call("forward", &[&x]).unwrap_err();
    assert_eq!(e.status(), Status::Shape, "{e}");
    let e = model.call("no_such_method", &[&x]).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(model.tensor("fc.nothing").is_err());
    let e = Optimizer::new(&model, "lion").unwrap_err();
    assert!(e.message().contains("lion"), "{e}");
    let mut sgd = Optimizer::new(&model, "sgd").unwrap();
    let e = sgd.set("lr", "fast").unwrap_err();
    assert!(e.message().contains("lr"), "{e}");
    let e = sgd.set("betas", 0.9).unwrap_err();
    assert!(e.message().contains("betas"), "{e}");
    assert!(Scheduler::new(&sgd, "zigzag").is_err());
}

/// Every typed option of every kind, each at a value other than its default: the library takes
/// them all (a key misspelt in the binding would be its "unknown option" error), and they mean
/// what the string API's do.
#[test]
fn typed_options_are_the_librarys_options() {
    let mut model = Model::new().unwrap();
    let every_layer: [(&str, &dyn Layer); 5] = [
        (
            "conv",
            &Conv2d::new(4, 8, 3)
                .stride(2)
                .padding(1)
                .dilation(2)
                .groups(2)
                .bias(false),
        ),
        ("fc", &Linear::new(3, 2).bias(false)),
        ("bn", &BatchNorm2d::new(8).eps(1e-3).momentum(0.2)),
        ("ln", &LayerNorm::new(2).eps(1e-6)),
        ("emb", &Embedding::new(10, 4)),
    ];
    for (name, layer) in every_layer {
        model
            .add_layer(name, layer.kind(), &layer.spec())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    assert_eq!(
        Linear::new(784, 10).bias(false).spec(),
        "in_features=784 out_features=10 bias=false"
    );
    model.add("fc2", layers::Linear::new(2, 1)).unwrap();
    let names = model.tensor_names().unwrap();
    assert!(!names.contains(&"fc.bias".to_string()), "{names:?}");
    assert_eq!(
        model.tensor("conv.weight").unwrap().shape().unwrap(),
        [8, 2, 3, 3]
    );
    let e = model
        .add("conv2", Conv2d::new(3, 4, 3).groups(2))
        .unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument, "{e}");

    fn optimizer(model: &Model, options: impl OptimizerOptions) -> Optimizer {
        let kind = options.kind();
        Optimizer::with(model, options).unwrap_or_else(|e| panic!("{kind}: {e}"))
    }
    let sgd = Sgd::new()
        .lr(0.5)
        .momentum(0.9)
        .dampening(0.0)
        .weight_decay(1e-4)
        .nesterov(true);
    assert_eq!(optimizer(&model, sgd).lr().unwrap(), 0.5);
    let adam = Adam::new().lr(0.01).beta1(0.8).beta2(0.99).eps(1e-6);
    optimizer(&model, adam.weight_decay(0.1).amsgrad(true));
    let adamw = AdamW::default().lr(0.01).beta1(0.8).beta2(0.99).eps(1e-6);
    optimizer(&model, adamw.weight_decay(0.0).amsgrad(true));
    let rmsprop = RmsProp::new()
        .lr(0.1)
        .alpha(0.9)
        .eps(1e-6)
        .weight_decay(0.1);
    optimizer(&model, rmsprop.momentum(0.5).centered(true));
    let adagrad = Adagrad::new().lr(0.1).lr_decay(0.01).weight_decay(0.1);
    optimizer(&model, adagrad.initial_accumulator_value(0.1).eps(1e-8));
    let e = Optimizer::with(&model, optimizers::Adam::new().beta1(1.0)).unwrap_err();
    assert!(e.message().contains("beta1"), "{e}");

    // A schedule's base rate is its optimizer's rate when made: a fresh optimizer for each.
    type MakeScheduler<'a> = &'a dyn Fn(&Optimizer) -> libaccel::Result<Scheduler>;
    let schedule = |make: MakeScheduler| {
        let mut s = make(&optimizer(&model, Sgd::new().lr(1.0))).unwrap();
        s.step().unwrap();
        s.lr().unwrap()
    };
    use schedules::{
        Constant, ConstantWithWarmup, Cosine, CosineWithRestarts, Exponential, OneCycle,
        Polynomial, Step,
    };
    let every_schedule: [(&str, f64, MakeScheduler); 9] = [
        ("constant", 1.0, &|o| Scheduler::with(o, Constant::new())),
        ("constant_with_warmup", 0.25, &|o| {
            Scheduler::with(o, ConstantWithWarmup::new().warmup_steps(4))
        }),
        ("linear", 0.5, &|o| {
            Scheduler::with(o, schedules::Linear::new(10).warmup_steps(2))
        }),
        ("cosine", 0.5, &|o| {
            Scheduler::with(o, Cosine::new(10).warmup_steps(2).num_cycles(0.25))
        }),
        ("cosine_with_restarts", 0.5, &|o| {
            Scheduler::with(
                o,
                CosineWithRestarts::new(10).warmup_steps(2).num_cycles(2.0),
            )
        }),
        ("polynomial", 0.5, &|o| {
            let p = Polynomial::new(10).warmup_steps(2).lr_end(0.01).power(2.0);
            Scheduler::with(o, p)
        }),
        ("step", 0.5, &|o| {
            Scheduler::with(o, Step::new(1).gamma(0.5))
        }),
        ("exponential", 0.5, &|o| {
            Scheduler::with(o, Exponential::new(0.5))
        }),
        ("one_cycle", 0.5, &|o| {
            let c = OneCycle::new(0.5, 5)
                .pct_start(0.4)
                .anneal_strategy(Anneal::Linear)
                .div_factor(2.0)
                .final_div_factor(100.0)
                .base_momentum(0.8)
                .max_momentum(0.9)
                .cycle_momentum(false);
            Scheduler::with(o, c)
        }),
    ];
    for (kind, lr_after_one_step, make) in every_schedule {
        assert_eq!(schedule(make), lr_after_one_step, "{kind}");
    }
    assert_eq!(OneCycle::new(0.5, 3).kind(), "one_cycle");
    let opt = optimizer(&model, Sgd::new());
    let mut zero = Scheduler::with(&opt, Step::new(0)).unwrap();
    let e = zero.step().unwrap_err();
    assert!(e.message().contains("step_size"), "{e}");

    let every_loader_option = DataLoaderOptions::new()
        .batch_size(2)
        .shuffle(true)
        .seed(7)
        .drop_last(true)
        .num_workers(1)
        .prefetch_factor(3)
        .split_batches(true)
        .even_batches(false)
        .device_placement(false);
    assert_eq!(every_loader_option.pairs().len(), 9);
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let x = Tensor::from_slice(&(0..5i64).collect::<Vec<_>>(), &[5]).unwrap();
    let data = Dataset::from_tensors(&[&x]).unwrap();
    let mut loader = DataLoader::with(&acc, &data, every_loader_option).unwrap();
    assert_eq!(loader.iter().count(), 2, "drop_last: 2 + 2, not the 1 left");
}

#[test]
fn optimizers_and_schedulers_step() {
    let model = linear_model(2, 1);
    let mut sgd = Optimizer::new(&model, "sgd").unwrap();
    sgd.set("lr", 0.5).unwrap();
    assert_eq!(sgd.lr().unwrap(), 0.5);
    sgd.set_lr(1.0).unwrap();
    let mut sched = Scheduler::new(&sgd, "step").unwrap();
    sched.set("step_size", 1).unwrap();
    sched.set("gamma", 0.5).unwrap();
    for _ in 0..3 {
        sgd.step().unwrap();
        sched.step().unwrap();
    }
    assert_eq!(sched.lr().unwrap(), 0.125);
    assert_eq!(sgd.lr().unwrap(), 0.125);
    assert!(!sgd.step_was_skipped().unwrap());
    sgd.zero_grad().unwrap();
}

#[test]
fn an_accelerator_trains_alone() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    assert_eq!(acc.process_index().unwrap(), 0);
    assert_eq!(acc.local_process_index().unwrap(), 0);
    assert_eq!(acc.num_processes().unwrap(), 1);
    assert!(acc.is_main_process().unwrap());
    assert!(acc.is_local_main_process().unwrap());
    assert_eq!(acc.device().unwrap(), "cpu");
    assert_eq!(acc.distributed_type().unwrap(), DistributedType::No);
    assert_eq!(acc.mixed_precision().unwrap(), Precision::No);
    assert!(acc.effective_config().unwrap().contains("mixed_precision"));
    let second = Accelerator::new().unwrap_err();
    assert_eq!(
        second.status(),
        Status::State,
        "one accelerator per process"
    );
    acc.set_seed(7, false).unwrap();

    // y = 2 x1 - x2 + 0.5, learnt by SGD through prepare / accumulate / backward / step.
    let n = 256;
    let xs: Vec<f32> = (0..2 * n)
        .map(|i| ((i * 37 % 101) as f32) / 50.0 - 1.0)
        .collect();
    let ys: Vec<f32> = (0..n)
        .map(|i| 2.0 * xs[2 * i] - xs[2 * i + 1] + 0.5)
        .collect();
    let x = Tensor::from_slice(&xs, &[n as i64, 2]).unwrap();
    let y = Tensor::from_slice(&ys, &[n as i64, 1]).unwrap();
    let data = Dataset::from_tensors(&[&x, &y]).unwrap();
    let mut loader = DataLoader::new(&acc, &data).unwrap();
    loader.set("batch_size", 32).unwrap();
    loader.set("shuffle", true).unwrap();
    let model = linear_model(2, 1);
    let mut opt = Optimizer::new(&model, "sgd").unwrap();
    opt.set("lr", 0.1).unwrap();
    let mut sched = Scheduler::new(&opt, "constant").unwrap();
    acc.prepare(&[&model, &opt, &sched, &loader]).unwrap();
    let (mut first, mut last) = (0.0, 0.0);
    for epoch in 0..20 {
        loader.set_epoch(epoch).unwrap();
        for batch in &mut loader {
            let [bx, by] = fields(batch.unwrap()).unwrap();
            acc.accumulate().unwrap();
            assert!(acc.sync_gradients().unwrap());
            let loss = model.call1("training_step", &[&bx, &by]).unwrap();
            acc.backward(&loss).unwrap();
            let norm = acc.clip_grad_norm(&model, 100.0, 2.0).unwrap();
            assert!(norm.is_finite());
            acc.clip_grad_value(&model, 100.0).unwrap();
            opt.step().unwrap();
            sched.step().unwrap();
            opt.zero_grad().unwrap();
            last = loss.item_f64().unwrap();
            if epoch == 0 && first == 0.0 {
                first = last;
            }
        }
        assert_eq!(loader.epoch().unwrap(), epoch + 1);
    }
    assert!(last < first / 100.0, "loss {first} -> {last}");
    let w = model.tensor("fc.weight").unwrap().to_vec::<f32>().unwrap();
    assert!(
        (w[0] - 2.0).abs() < 0.05 && (w[1] + 1.0).abs() < 0.05,
        "{w:?}"
    );
}

#[test]
fn collectives_alone_are_the_identity() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let t = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3]).unwrap();
    assert_eq!(
        acc.gather(&t).unwrap().to_vec::<f32>().unwrap(),
        vec![1.0, 2.0, 3.0]
    );
    assert_eq!(
        acc.reduce(&t, Reduction::Max)
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![1.0, 2.0, 3.0]
    );
    for op in [Reduction::Sum, Reduction::Mean, Reduction::Min] {
        assert_eq!(acc.reduce(&t, op).unwrap().shape().unwrap(), vec![3]);
    }
    let padded = acc.pad_across_processes(&t, 0, -1.0, true).unwrap();
    assert_eq!(padded.shape().unwrap(), vec![3]);
    assert_eq!(
        acc.broadcast(Some(&t), 0).unwrap().element_count().unwrap(),
        3
    );
    let e = acc.broadcast(None, 0).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument, "{e}");
    assert_eq!(
        acc.gather_object(b"bytes").unwrap(),
        vec![b"bytes".to_vec()]
    );
    assert_eq!(acc.gather_object(b"").unwrap(), vec![Vec::<u8>::new()]);
    assert_eq!(
        acc.gather_for_metrics(&t).unwrap().element_count().unwrap(),
        3
    );
    acc.wait_for_everyone().unwrap();
    assert_eq!(acc.main_process_first(|| 5).unwrap(), 5);
    acc.print("printed by the main process").unwrap();
    let bools = Tensor::from_slice(&[true], &[1]).unwrap();
    assert_eq!(
        acc.reduce(&bools, Reduction::Sum).unwrap_err().status(),
        Status::Dtype
    );
}

#[test]
fn idx_datasets_and_their_errors() {
    let _one = one_accelerator();
    let test = Dataset::from_idx(&[
        format!("{FASHION_MNIST}/t10k-images-idx3-ubyte.gz"),
        format!("{FASHION_MNIST}/t10k-labels-idx1-ubyte.gz"),
    ])
    .unwrap();
    assert_eq!(test.sample_count().unwrap(), Some(10_000));
    assert_eq!(test.field_count().unwrap(), 2);
    let acc = Accelerator::new().unwrap();
    let mut loader = DataLoader::new(&acc, &test).unwrap();
    loader.set("batch_size", 1000).unwrap();
    loader.set("num_workers", 2).unwrap();
    assert_eq!(loader.batch_count().unwrap(), Some(10));
    let batch = loader.next_batch().unwrap().unwrap();
    assert_eq!(batch[0].shape().unwrap(), vec![1000, 28, 28]);
    assert_eq!(batch[0].dtype().unwrap(), Dtype::U8);
    assert!(batch[1].to_vec::<u8>().unwrap().iter().all(|&l| l < 10));
    assert_eq!(loader.position().unwrap(), (0, 1000));
    assert!(!loader.end_of_epoch().unwrap());
    assert_eq!(loader.remainder().unwrap(), 0);
    assert_eq!(loader.iter().count(), 9, "the rest of the epoch");

    let e = Dataset::from_idx(&["/no/such/images.gz"]).unwrap_err();
    assert_eq!(e.status(), Status::Io);
    assert!(e.message().contains("/no/such/images.gz"), "{e}");
    let e = Dataset::from_idx(&[
        format!("{FASHION_MNIST}/t10k-images-idx3-ubyte.gz"),
        format!("{FASHION_MNIST}/train-labels-idx1-ubyte.gz"),
    ])
    .unwrap_err();
    assert_eq!(e.status(), Status::Shape);
    let a = Tensor::from_slice(&[1.0f32; 4], &[4]).unwrap();
    let b = Tensor::from_slice(&[1.0f32; 3], &[3]).unwrap();
    assert_eq!(
        Dataset::from_tensors(&[&a, &b]).unwrap_err().status(),
        Status::Shape
    );
}

#[test]
fn dataloader_options_positions_and_close() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let x = Tensor::from_slice(&(0..10i64).collect::<Vec<_>>(), &[10]).unwrap();
    let data = Dataset::from_tensors(&[&x]).unwrap();
    let mut loader = DataLoader::new(&acc, &data).unwrap();
    drop(data); // the dataloader keeps it alive
    loader.set("batch_size", 4).unwrap();
    let e = loader.set("batch_size", 0).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    let e = loader.set("shuffel", true).unwrap_err();
    assert!(e.message().contains("shuffel"), "{e}");
    let first = |b: libaccel::Result<libaccel::Batch>| b.unwrap()[0].to_vec::<i64>().unwrap()[0];
    let mut epoch = loader.iter();
    assert_eq!(epoch.size_hint(), (0, Some(3)));
    assert_eq!(epoch.next().map(first), Some(0));
    assert_eq!(epoch.size_hint(), (0, Some(2)));
    assert_eq!(epoch.by_ref().map(first).collect::<Vec<_>>(), [4, 8]);
    assert!(epoch.next().is_none(), "an ended epoch stays ended");
    assert_eq!(epoch.size_hint(), (0, Some(0)));
    assert_eq!(loader.epoch().unwrap(), 1);
    // A loop left early leaves the epoch in progress; the next iteration continues it.
    assert_eq!(loader.iter().next().map(first), Some(0));
    assert_eq!(loader.iter().map(first).collect::<Vec<_>>(), [4, 8]);
    assert_eq!(loader.epoch().unwrap(), 2);
    // An epoch whose last batch was taken (take(batch_count)) ends before the next begins.
    assert_eq!(
        loader.iter().take(3).map(first).collect::<Vec<_>>(),
        [0, 4, 8]
    );
    assert!(loader.end_of_epoch().unwrap());
    assert_eq!(loader.iter().map(first).collect::<Vec<_>>(), [0, 4, 8]);
    assert_eq!(loader.epoch().unwrap(), 4);
    // Typed options: the same keys, checked by the compiler.
    loader
        .set_options(DataLoaderOptions::new().batch_size(5).drop_last(true))
        .unwrap();
    assert_eq!(loader.iter().map(first).collect::<Vec<_>>(), [0, 5]);
    let e = loader
        .set_options(DataLoaderOptions::new().batch_size(0))
        .unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    loader.set("batch_size", 4).unwrap();
    loader.set("drop_last", false).unwrap();
    loader.skip_first_batches(1).unwrap();
    assert_eq!(
        loader.next_batch().unwrap().unwrap()[0]
            .to_vec::<i64>()
            .unwrap(),
        vec![4, 5, 6, 7]
    );
    loader.set_position(0, 8).unwrap();
    assert_eq!(
        loader.next_batch().unwrap().unwrap()[0]
            .to_vec::<i64>()
            .unwrap(),
        vec![8, 9]
    );
    assert!(loader.end_of_epoch().unwrap());
    loader.close().unwrap();
    loader.close().unwrap(); // idempotent
    let e = loader.next_batch().unwrap_err();
    assert_eq!(e.status(), Status::State, "{e}");
    assert!(!e.message().is_empty());
    assert_eq!(
        loader.set("batch_size", 2).unwrap_err().status(),
        Status::State
    );
    assert!(fields::<3>(vec![x]).is_err());
}

fn squares(count: i64) -> impl Fn(i64, &mut [&mut [u8]]) -> Result<(), libaccel::BoxError> {
    move |i, f| {
        assert!(i < count);
        f[0].copy_from_slice(&(i * i).to_ne_bytes());
        f[1].copy_from_slice(
            &[i as f32, -(i as f32)]
                .iter()
                .flat_map(|v| v.to_ne_bytes())
                .collect::<Vec<_>>(),
        );
        Ok(())
    }
}

#[test]
fn closure_datasets_fill_samples_on_workers() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let spec = [Field::new(Dtype::I64, &[]), Field::new(Dtype::F32, &[2])];
    let data = Dataset::from_fn(100, &spec, squares(100)).unwrap();
    for workers in [0, 3] {
        let mut loader = DataLoader::new(&acc, &data).unwrap();
        loader.set("batch_size", 8).unwrap();
        loader.set("num_workers", workers).unwrap();
        let mut seen = Vec::new();
        for batch in &mut loader {
            let [sq, pair] = fields(batch.unwrap()).unwrap();
            let sq = sq.to_vec::<i64>().unwrap();
            assert_eq!(pair.shape().unwrap(), vec![sq.len() as i64, 2]);
            let pair = pair.to_vec::<f32>().unwrap();
            for (k, s) in sq.iter().enumerate() {
                let i = pair[2 * k] as i64;
                assert_eq!(*s, i * i);
                assert_eq!(pair[2 * k + 1], -(i as f32));
                seen.push(i);
            }
        }
        assert_eq!(seen, (0..100).collect::<Vec<_>>(), "workers {workers}");
    }
}

#[test]
fn a_closure_error_comes_back_from_next() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let data = Dataset::from_fn(50, &[Field::new(Dtype::U8, &[])], |i, f| {
        if i == 17 {
            return Err(format!("sample {i} is unreadable").into());
        }
        f[0][0] = i as u8;
        Ok(())
    })
    .unwrap();
    for workers in [0, 2] {
        let mut loader = DataLoader::new(&acc, &data).unwrap();
        loader.set("batch_size", 5).unwrap();
        loader.set("num_workers", workers).unwrap();
        let results: Vec<_> = loader.iter().collect();
        let e = results.last().unwrap().as_ref().unwrap_err();
        assert_eq!(e.status(), Status::Callback);
        assert!(e.message().contains("sample 17 is unreadable"), "{e}");
        assert_eq!(
            results.iter().filter(|r| r.is_ok()).count(),
            3,
            "batches before 15..20"
        );
        // The next iteration starts the epoch again.
        assert!(loader.next_batch().unwrap().is_some());
    }
}

#[test]
fn a_closure_panic_on_a_worker_thread_is_resumed_in_next() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let data = Dataset::from_fn(64, &[Field::new(Dtype::I32, &[3])], |i, f| {
        if i == 40 {
            panic!("sample {i} exploded");
        }
        f[0].copy_from_slice(
            &[i as i32; 3]
                .iter()
                .flat_map(|v| v.to_ne_bytes())
                .collect::<Vec<_>>(),
        );
        Ok(())
    })
    .unwrap();
    for workers in [2, 0] {
        let mut loader = DataLoader::new(&acc, &data).unwrap();
        loader.set("batch_size", 8).unwrap();
        loader.set("num_workers", workers).unwrap();
        let mut good = 0;
        let panic = catch_unwind(AssertUnwindSafe(|| {
            for batch in &mut loader {
                batch.unwrap();
                good += 1;
            }
        }))
        .unwrap_err();
        let text = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert_eq!(text, "sample 40 exploded", "workers {workers}");
        assert_eq!(good, 5, "batches 0..5 came before the one with sample 40");
        // The loader is still usable: the next call starts the epoch again.
        loader.set_epoch(1).unwrap();
        assert!(loader.next_batch().unwrap().is_some());
    }
}

#[test]
fn dropping_a_dataloader_while_workers_run_stops_the_closure() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    struct Released(Arc<AtomicBool>);
    impl Drop for Released {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let released = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let guard = Released(Arc::clone(&released));
    let counter = Arc::clone(&calls);
    let data = Dataset::from_fn(100_000, &[Field::new(Dtype::F64, &[16])], move |_, f| {
        let _keep = &guard; // the closure owns the guard: dropped when the library releases it
        counter.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(2));
        f[0].fill(0);
        Ok(())
    })
    .unwrap();
    let mut loader = DataLoader::new(&acc, &data).unwrap();
    loader.set("batch_size", 4).unwrap();
    loader.set("num_workers", 4).unwrap();
    loader.set("prefetch_factor", 8).unwrap();
    assert!(loader.next_batch().unwrap().is_some());
    drop(data);
    assert!(
        !released.load(Ordering::SeqCst),
        "the dataloader still uses the closure"
    );
    let freeing = std::time::Instant::now();
    drop(loader); // workers are inside the closure right now
    assert!(
        freeing.elapsed() < Duration::from_secs(2),
        "drop waits only for running samples"
    );
    assert!(
        released.load(Ordering::SeqCst),
        "the closure is released with the last user"
    );
    let after = calls.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        after,
        "never called after drop"
    );
}

#[test]
fn checkpoints_carry_registered_objects() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let model = linear_model(2, 1);
    let mut opt = Optimizer::new(&model, "adam").unwrap();
    acc.prepare(&[&model, &opt]).unwrap();
    let counter = Arc::new(Mutex::new(vec![1u8, 2, 3]));
    let (saved, loaded) = (Arc::clone(&counter), Arc::clone(&counter));
    acc.register_for_checkpointing(
        move |w| {
            w.write_all(&saved.lock().unwrap())?;
            Ok(())
        },
        move |bytes| {
            *loaded.lock().unwrap() = bytes.to_vec();
            Ok(())
        },
    )
    .unwrap();
    let dir = temp_dir("state");
    let x = Tensor::from_slice(&[1.0f32, 2.0], &[1, 2]).unwrap();
    let y = Tensor::from_slice(&[1.0f32], &[1, 1]).unwrap();
    let loss = model.call1("training_step", &[&x, &y]).unwrap();
    acc.backward(&loss).unwrap();
    opt.step().unwrap();
    let before = model.tensor("fc.weight").unwrap().to_vec::<f32>().unwrap();
    acc.save_state(dir.join("ckpt")).unwrap();
    acc.save_model(&model, dir.join("weights"), None).unwrap();
    assert!(dir.join("weights/model.safetensors").exists());
    assert!(dir.join("ckpt/manifest.json").exists());

    *counter.lock().unwrap() = vec![];
    opt.zero_grad().unwrap();
    let loss = model.call1("training_step", &[&x, &y]).unwrap();
    acc.backward(&loss).unwrap();
    opt.step().unwrap();
    assert_ne!(
        model.tensor("fc.weight").unwrap().to_vec::<f32>().unwrap(),
        before
    );
    acc.load_state(dir.join("ckpt")).unwrap();
    assert_eq!(*counter.lock().unwrap(), vec![1, 2, 3]);
    assert_eq!(
        model.tensor("fc.weight").unwrap().to_vec::<f32>().unwrap(),
        before
    );

    let mut fresh = linear_model(2, 1);
    libaccel::load_checkpoint_in_model(&mut fresh, dir.join("weights")).unwrap();
    assert_eq!(
        fresh.tensor("fc.weight").unwrap().to_vec::<f32>().unwrap(),
        before
    );
    let mut other = linear_model(3, 1);
    let e = libaccel::load_checkpoint_in_model(&mut other, dir.join("weights")).unwrap_err();
    assert_eq!(e.status(), Status::Shape);
    let e = acc.load_state(dir.join("nothing")).unwrap_err();
    assert_eq!(e.status(), Status::Io);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn checkpoint_closure_failures_come_back() {
    let _one = one_accelerator();
    let dir = temp_dir("failing-state");
    {
        let acc = Accelerator::new().unwrap();
        acc.register_for_checkpointing(|_| Err("disk of the mind is full".into()), |_| Ok(()))
            .unwrap();
        let e = acc.save_state(dir.join("a")).unwrap_err();
        assert_eq!(e.status(), Status::Callback);
        assert!(e.message().contains("disk of the mind is full"), "{e}");
        assert!(
            !dir.join("a").exists(),
            "a failed save leaves no checkpoint"
        );
    }
    {
        let acc = Accelerator::new().unwrap();
        acc.register_for_checkpointing(|w| Ok(w.write_all(b"x")?), |_| panic!("cannot load"))
            .unwrap();
        acc.save_state(dir.join("b")).unwrap();
        let panic = catch_unwind(AssertUnwindSafe(|| acc.load_state(dir.join("b")))).unwrap_err();
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"cannot load"));
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn errors_show_status_and_message() {
    let e = libaccel::Error::new(Status::Io, "gone");
    assert_eq!(e.to_string(), "ACCEL_ERR_IO: gone");
    assert_eq!(Status::Timeout.name(), "ACCEL_ERR_TIMEOUT");
    assert_eq!(Status::from_raw(0), None);
    assert_eq!(Status::from_raw(99), Some(Status::Other(99)));
    assert_eq!(Status::Callback.to_raw(), libaccel::sys::ACCEL_ERR_CALLBACK);
    let _ = Config::new().unwrap().set("nope", 1);
    let last = libaccel::last_error().unwrap();
    assert_eq!(last.status(), Status::Config);
    let io: std::io::Error = e.into();
    assert!(io.to_string().contains("gone"));
}

/// A model of the caller's own tensors (accel.h, "Models of the host's own tensors"): what the
/// binding checks without tch-rs to compute a forward with.
#[test]
fn models_of_the_callers_own_tensors() {
    let mut w = Tensor::from_slice(&[1f32, 2., 3.], &[3]).unwrap();
    let mut model = Model::new().unwrap();
    let e = model.add_parameter("fc.weight", &w).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("does not require grad"), "{e}");
    w.set_requires_grad(true).unwrap();
    model.add_parameter("fc.weight", &w).unwrap();
    drop(w); // the model keeps its own reference
    let e = model
        .add_buffer("fc.weight", &Tensor::from_slice(&[0f32], &[1]).unwrap())
        .unwrap_err();
    assert!(e.message().contains("already has 'fc.weight'"), "{e}");
    assert_eq!(model.tensor_names().unwrap(), vec!["fc.weight".to_string()]);
    assert_eq!(model.forward(|| 7).unwrap(), 7);
    let e = libaccel::check_torch("0.1.0", None, std::ptr::null()).unwrap_err();
    assert_eq!(e.status(), Status::Unsupported);
    assert!(e.message().contains("built against LibTorch 0.1.0"), "{e}");
}

// ---- text: ragged fields, padding, length grouping, split and the trigger -------------------

/// A corpus of `lengths.len()` samples: sample i has the tokens 100 * i + j for j < lengths[i]
/// (a ragged i64 field) and the label i (an i64 scalar).
fn corpus(lengths: &[i64]) -> Dataset {
    let of_length = Arc::new(lengths.to_vec());
    let of_fill = Arc::clone(&of_length);
    Dataset::from_ragged_fn(
        lengths.len() as i64,
        &[Field::ragged(Dtype::I64, &[]), Field::new(Dtype::I64, &[])],
        move |i, out| {
            assert_eq!(out.len(), 2, "one entry per field");
            out[0] = of_length[i as usize];
            Ok(())
        },
        move |i, f| {
            let n = of_fill[i as usize];
            assert_eq!(f[0].len(), n as usize * 8, "sample {i}: length x one row");
            for (j, dst) in f[0].chunks_exact_mut(8).enumerate() {
                dst.copy_from_slice(&(100 * i + j as i64).to_ne_bytes());
            }
            f[1].copy_from_slice(&i.to_ne_bytes());
            Ok(())
        },
    )
    .unwrap()
}

/// A batch as (shape, i64 values) per field.
fn shapes_and_values(batch: libaccel::Batch) -> Vec<(Vec<i64>, Vec<i64>)> {
    batch
        .iter()
        .map(|t| (t.shape().unwrap(), t.to_vec::<i64>().unwrap()))
        .collect()
}

fn next_values(loader: &mut DataLoader) -> Vec<(Vec<i64>, Vec<i64>)> {
    shapes_and_values(loader.next_batch().unwrap().expect("a batch"))
}

#[test]
fn ragged_batches_are_padded_to_the_longest_with_masks() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let data = corpus(&[2, 0, 3, 1, 4]);
    assert_eq!(data.field_count().unwrap(), 2);
    assert!(Field::ragged(Dtype::I64, &[4]).is_ragged());
    assert_eq!(Field::ragged(Dtype::F32, &[4]).shape, [Field::RAGGED, 4]);
    for workers in [0, 2] {
        let options = DataLoaderOptions::new().batch_size(3).num_workers(workers);
        let mut loader = DataLoader::with(&acc, &data, options).unwrap();
        assert_eq!(loader.field_count(), 3, "tokens, label, the tokens' mask");
        let b = next_values(&mut loader);
        assert_eq!(b.len(), 3);
        assert_eq!(b[0], (vec![3, 3], vec![0, 1, 0, 0, 0, 0, 200, 201, 202]));
        assert_eq!(b[1], (vec![3], vec![0, 1, 2]));
        assert_eq!(b[2], (vec![3, 3], vec![1, 1, 0, 0, 0, 0, 1, 1, 1]));
        // The short last batch: padded to its own longest.
        let b = next_values(&mut loader);
        assert_eq!(b[0], (vec![2, 4], vec![300, 0, 0, 0, 400, 401, 402, 403]));
        assert_eq!(b[2], (vec![2, 4], vec![1, 0, 0, 0, 1, 1, 1, 1]));
        assert!(loader.next_batch().unwrap().is_none(), "workers {workers}");
    }

    // Left padding with -1 to a multiple of 4, and the lengths rather than the mask: every
    // ragged field through the options, one field through set_field_padding.
    let mut loader = DataLoader::with(&acc, &data, DataLoaderOptions::new().batch_size(3)).unwrap();
    let padding = Padding::new().pad_value(-1.0).pad_to_multiple_of(4);
    loader
        .set_options(DataLoaderOptions::new().padding(padding))
        .unwrap();
    let left = Padding::new()
        .padding_side(PaddingSide::Left)
        .mask(Mask::Lengths);
    loader.set_field_padding(0, left).unwrap();
    let b = next_values(&mut loader);
    assert_eq!(
        b[0],
        (
            vec![3, 4],
            vec![-1, -1, 0, 1, -1, -1, -1, -1, -1, 200, 201, 202]
        )
    );
    assert_eq!(b[2], (vec![3], vec![2, 0, 3]));

    // No mask: one field fewer; and back (the binding follows the library's field count).
    loader
        .set_options(DataLoaderOptions::new().padding(Padding::new().mask(Mask::None)))
        .unwrap();
    assert_eq!(loader.field_count(), 2);
    let b = next_values(&mut loader);
    assert_eq!(b.len(), 2);
    assert_eq!(b[1], (vec![3], vec![0, 1, 2]), "a new epoch after set");
    loader.set_field(0, "mask", Mask::AttentionMask).unwrap();
    assert_eq!(loader.field_count(), 3);
    let b = next_values(&mut loader);
    assert_eq!(b[2], (vec![3, 4], vec![0, 0, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1]));
    // The mask changed behind the binding's back, through the raw handle.
    let key = std::ffi::CString::new("mask").unwrap();
    let none = std::ffi::CString::new("none").unwrap();
    // SAFETY: a live handle and NUL-terminated strings.
    let status = unsafe {
        libaccel::sys::accel_dataloader_set(loader.as_raw(), key.as_ptr(), none.as_ptr())
    };
    assert_eq!(status, libaccel::sys::ACCEL_OK);
    assert_eq!(next_values(&mut loader).len(), 2);
    let attention = std::ffi::CString::new("attention_mask").unwrap();
    // SAFETY: as above.
    let status = unsafe {
        libaccel::sys::accel_dataloader_set(loader.as_raw(), key.as_ptr(), attention.as_ptr())
    };
    assert_eq!(status, libaccel::sys::ACCEL_OK);
    assert_eq!(
        next_values(&mut loader).len(),
        3,
        "more fields than counted"
    );
    assert_eq!(loader.field_count(), 3);
}

#[test]
fn padding_options_and_ragged_declarations_are_checked() {
    let every_padding_option = Padding::new()
        .pad_value(0.5)
        .padding_side(PaddingSide::Right)
        .pad_to_multiple_of(8)
        .max_length(Some(16))
        .truncation(true)
        .mask(Mask::Lengths);
    assert_eq!(
        every_padding_option.pairs(),
        [
            ("pad_value", "0.5".to_string()),
            ("padding_side", "right".to_string()),
            ("pad_to_multiple_of", "8".to_string()),
            ("max_length", "16".to_string()),
            ("truncation", "true".to_string()),
            ("mask", "lengths".to_string()),
        ]
    );
    let options = DataLoaderOptions::new()
        .batch_size(2)
        .group_by_length(true)
        .padding(every_padding_option);
    assert_eq!(
        options.pairs().len(),
        8,
        "the padding's pairs after the others"
    );
    assert_eq!(options.pairs()[1], ("group_by_length", "true".to_string()));
    assert_eq!(Mask::default(), Mask::AttentionMask);
    assert_eq!(PaddingSide::default().to_string(), "right");

    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let data = corpus(&[1, 2]);
    let mut loader = DataLoader::with(&acc, &data, options).unwrap();
    assert_eq!(loader.field_count(), 3, "tokens, label, lengths");
    let e = loader.set_field_padding(1, Padding::new().pad_value(0.0));
    let e = e.unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("field 1 is not ragged"), "{e}");
    let e = loader.set_field(2, "pad_value", 0).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("out of range"), "{e}");
    let e = loader.set("padding_side", "centre").unwrap_err();
    assert!(e.message().contains("allowed: right, left"), "{e}");
    for bad in [
        Padding::new().pad_to_multiple_of(0),
        Padding::new().max_length(Some(0)),
        Padding::new().pad_value(f64::NAN),
    ] {
        let e = loader.set_field_padding(0, bad).unwrap_err();
        assert_eq!(e.status(), Status::InvalidArgument, "{bad:?}");
    }
    let e = loader.set_field(0, "pad_valu", 0).unwrap_err();
    assert!(e.message().contains("pad_valu"), "{e}");

    // Padding and grouping need a ragged field.
    let x = Tensor::from_slice(&[1i64, 2, 3], &[3]).unwrap();
    let fixed = Dataset::from_tensors(&[&x]).unwrap();
    let mut loader = DataLoader::new(&acc, &fixed).unwrap();
    for options in [
        DataLoaderOptions::new().group_by_length(true),
        DataLoaderOptions::new().padding(Padding::new().max_length(Some(4))),
    ] {
        let e = loader.set_options(options).unwrap_err();
        assert_eq!(e.status(), Status::InvalidArgument, "{options:?}");
        assert!(e.message().contains("this dataset has none"), "{e}");
    }
    // Ragged fields only through from_ragged_fn, and only their first dimension.
    let ragged = [Field::ragged(Dtype::I64, &[])];
    let e = Dataset::from_fn(2, &ragged, |_, _| Ok(())).unwrap_err();
    assert_eq!(e.status(), Status::Shape);
    assert!(e.message().contains("from_ragged_fn"), "{e}");
    let second = [Field::new(Dtype::I64, &[2, Field::RAGGED])];
    let e = Dataset::from_ragged_fn(2, &second, |_, _| Ok(()), |_, _| Ok(())).unwrap_err();
    assert_eq!(e.status(), Status::Shape, "{e}");
    // Without a ragged field it is a dataset as from_fn makes.
    let plain = Dataset::from_ragged_fn(
        3,
        &[Field::new(Dtype::U8, &[])],
        |_, _| unreachable!("no ragged field: no lengths"),
        |i, f| {
            f[0][0] = i as u8;
            Ok(())
        },
    )
    .unwrap();
    let mut loader =
        DataLoader::with(&acc, &plain, DataLoaderOptions::new().batch_size(3)).unwrap();
    let [only] = fields(loader.next_batch().unwrap().unwrap()).unwrap();
    assert_eq!(only.to_vec::<u8>().unwrap(), [0, 1, 2]);
}

#[test]
fn above_max_length_is_a_shape_error_naming_the_sample_unless_truncated() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let data = corpus(&[2, 5, 1]);
    let options = DataLoaderOptions::new()
        .batch_size(1)
        .padding(Padding::new().max_length(Some(3)));
    let mut loader = DataLoader::with(&acc, &data, options).unwrap();
    let epoch: Vec<_> = loader.iter().collect();
    assert_eq!(epoch.len(), 2, "the iterator ends at the error");
    let first = epoch[0].as_ref().unwrap();
    assert_eq!(first[0].to_vec::<i64>().unwrap(), [0, 1]);
    let e = epoch[1].as_ref().unwrap_err();
    assert_eq!(e.status(), Status::Shape);
    assert!(
        e.message()
            .contains("sample 1, field 0 has length 5, above max_length 3"),
        "{e}"
    );
    // Nothing lost: the epoch starts again from its first sample.
    assert_eq!(next_values(&mut loader)[0].1, [0, 1]);

    let truncate = DataLoaderOptions::new()
        .batch_size(3)
        .padding(Padding::new().truncation(true));
    loader.set_options(truncate).unwrap();
    let b = next_values(&mut loader);
    assert_eq!(b[0], (vec![3, 3], vec![0, 1, 0, 100, 101, 102, 200, 0, 0]));
    assert_eq!(b[2], (vec![3, 3], vec![1, 1, 0, 1, 1, 1, 1, 0, 0]));
    let left = Padding::new().padding_side(PaddingSide::Left);
    loader.set_field_padding(0, left).unwrap();
    let b = next_values(&mut loader);
    assert_eq!(b[0].1, [0, 0, 1, 100, 101, 102, 0, 0, 200]);
    // No limit again: the longest sample whole.
    let unlimited = Padding::new().max_length(None);
    loader.set_field_padding(0, unlimited).unwrap();
    let b = next_values(&mut loader);
    assert_eq!(b[0].0, [3, 5]);
    assert_eq!(b[2].1, [0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1]);
}

#[test]
fn length_closure_failures_come_back_from_next() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let spec = [Field::ragged(Dtype::F32, &[2])];
    let fill = |_: i64, f: &mut [&mut [u8]]| -> Result<(), libaccel::BoxError> {
        f[0].fill(0);
        Ok(())
    };
    let failing = Dataset::from_ragged_fn(
        20,
        &spec,
        |i, l| {
            if i == 13 {
                return Err(format!("sample {i} has no tokenizer").into());
            }
            l[0] = i % 3;
            Ok(())
        },
        fill,
    )
    .unwrap();
    let panicking = Dataset::from_ragged_fn(
        20,
        &spec,
        |i, l| {
            if i == 9 {
                panic!("length of {i} exploded");
            }
            l[0] = 1;
            Ok(())
        },
        fill,
    )
    .unwrap();
    let negative = Dataset::from_ragged_fn(
        20,
        &spec,
        |i, l| {
            l[0] = if i == 4 { -4 } else { 2 };
            Ok(())
        },
        fill,
    )
    .unwrap();
    for workers in [0, 2] {
        let options = DataLoaderOptions::new().batch_size(5).num_workers(workers);
        let mut loader = DataLoader::with(&acc, &failing, options).unwrap();
        let results: Vec<_> = loader.iter().collect();
        let e = results.last().unwrap().as_ref().unwrap_err();
        assert_eq!(e.status(), Status::Callback);
        assert!(e.message().contains("sample 13 has no tokenizer"), "{e}");
        assert_eq!(
            results.len(),
            3,
            "batches 0..5 and 5..10, then 10..15 fails"
        );
        let b = loader.next_batch().unwrap().unwrap();
        assert_eq!(b[0].shape().unwrap(), [5, 2, 2], "the epoch starts again");

        let mut loader = DataLoader::with(&acc, &panicking, options).unwrap();
        let mut good = 0;
        let panic = catch_unwind(AssertUnwindSafe(|| {
            for batch in &mut loader {
                batch.unwrap();
                good += 1;
            }
        }))
        .unwrap_err();
        let text = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert_eq!(text, "length of 9 exploded", "workers {workers}");
        assert_eq!(good, 1);

        let mut loader = DataLoader::with(&acc, &negative, options).unwrap();
        let e = loader.next_batch().unwrap_err();
        assert_eq!(e.status(), Status::Shape);
        assert!(
            e.message()
                .contains("sample 4, field 0: the length callback reported -4"),
            "{e}"
        );
    }
    // Grouping asks every length before the first batch: the failure comes back from there.
    let options = DataLoaderOptions::new().batch_size(5).group_by_length(true);
    let mut loader = DataLoader::with(&acc, &failing, options).unwrap();
    let e = loader.next_batch().unwrap_err();
    assert_eq!(e.status(), Status::Callback);
    assert!(e.message().contains("sample 13 has no tokenizer"), "{e}");
}

#[test]
fn group_by_length_gives_every_sample_once_longest_batch_first() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let lengths: Vec<i64> = (0..64).map(|i| (i * 37) % 23).collect();
    let data = corpus(&lengths);
    let options = DataLoaderOptions::new()
        .batch_size(4)
        .shuffle(true)
        .seed(5)
        .num_workers(2)
        .group_by_length(true)
        .padding(Padding::new().mask(Mask::None));
    let mut loader = DataLoader::with(&acc, &data, options).unwrap();
    let real: i64 = lengths.iter().sum();
    for epoch in 0..2 {
        let (mut seen, mut padded_tokens, mut first_width) = (Vec::new(), 0, None);
        for batch in &mut loader {
            let [tokens, labels] = fields(batch.unwrap()).unwrap();
            let shape = tokens.shape().unwrap();
            first_width.get_or_insert(shape[1]);
            padded_tokens += shape[0] * shape[1];
            seen.extend(labels.to_vec::<i64>().unwrap());
        }
        assert_eq!(
            first_width,
            Some(22),
            "epoch {epoch}: the longest batch first"
        );
        seen.sort_unstable();
        assert_eq!(seen, (0..64).collect::<Vec<_>>(), "epoch {epoch}");
        // Megabatches sorted by length pad far less than a random order would.
        assert!(
            padded_tokens < real + real / 4,
            "epoch {epoch}: padded {padded_tokens} for {real}"
        );
    }
}

#[test]
fn split_between_processes_alone_gives_everything() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let prompts = vec!["a cat".to_string(), "a dog".into(), "a fish".into()];
    for padding in [false, true] {
        assert_eq!(
            acc.split_between_processes(&prompts, padding).unwrap(),
            prompts
        );
        assert_eq!(
            acc.split_indices_between_processes(5, padding).unwrap(),
            [0, 1, 2, 3, 4]
        );
        let none: [u8; 0] = [];
        assert!(acc
            .split_between_processes(&none, padding)
            .unwrap()
            .is_empty());
        let t = Tensor::from_slice(&[0i32, 0, 1, 10, 2, 20], &[3, 2]).unwrap();
        let mine = acc.split_tensor_between_processes(&t, padding).unwrap();
        assert_eq!(mine.shape().unwrap(), [3, 2]);
        assert_eq!(mine.to_vec::<i32>().unwrap(), [0, 0, 1, 10, 2, 20]);
    }
    let scalar = Tensor::scalar(1.0f32).unwrap();
    let e = acc
        .split_tensor_between_processes(&scalar, false)
        .unwrap_err();
    assert_eq!(e.status(), Status::Shape, "{e}");
}

#[test]
fn a_trigger_is_seen_once_then_lowered() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    assert!(!acc.check_trigger().unwrap());
    acc.set_trigger().unwrap();
    assert!(acc.check_trigger().unwrap());
    assert!(!acc.check_trigger().unwrap(), "the check lowers it");
    // Any thread may raise it.
    std::thread::scope(|s| {
        s.spawn(|| acc.set_trigger().unwrap());
    });
    acc.set_trigger().unwrap(); // twice is once
    assert!(acc.check_trigger().unwrap());
    assert!(!acc.check_trigger().unwrap());
}

/// In a world of one join is off: the closure runs and its value or error comes back, the end
/// runs whatever the closure does (another join opens after it), a join inside a join is State.
#[test]
fn join_uneven_inputs_in_one_process_runs_the_closure_and_always_ends() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    for even in [None, Some(false), Some(true)] {
        assert_eq!(acc.join_uneven_inputs(even, |_| Ok(7)).unwrap(), 7);
    }
    // A loop inside, on a model with buffers (refused only with join on, i.e. several ranks).
    let mut model = Model::new().unwrap();
    model.add("fc", Linear::new(3, 2)).unwrap();
    model.add("bn", BatchNorm2d::new(2)).unwrap(); // unused: its buffers are what counts
    model
        .define("def training_step(self, x):\n    return self.fc.forward(x).pow(2).mean()\n")
        .unwrap();
    let mut opt = Optimizer::new(&model, "sgd").unwrap();
    let x = Tensor::from_slice(
        &(0..30).map(|i| i as f32 / 10.0).collect::<Vec<_>>(),
        &[10, 3],
    )
    .unwrap();
    let data = Dataset::from_tensors(&[&x]).unwrap();
    let mut loader = DataLoader::with(&acc, &data, DataLoaderOptions::new().batch_size(4)).unwrap();
    acc.prepare(&[&model, &opt, &loader]).unwrap();
    let steps = acc
        .join_uneven_inputs(Some(false), |acc| {
            let mut steps = 0;
            for batch in &mut loader {
                let [x] = fields(batch?)?;
                acc.backward(&model.call1("training_step", &[&x])?)?;
                opt.step()?;
                opt.zero_grad()?;
                steps += 1;
            }
            Ok(steps)
        })
        .unwrap();
    assert_eq!(steps, 3);

    // The closure's error, as it was.
    let e = acc
        .join_uneven_inputs(None, |acc| acc.broadcast(None, 0))
        .unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument, "{e}");
    // Nested: the inner begin is refused, the outer still ends.
    let e = acc
        .join_uneven_inputs(Some(false), |acc| acc.join_uneven_inputs(None, |_| Ok(1)))
        .unwrap_err();
    assert_eq!(e.status(), Status::State, "{e}");
    // A panic resumes after the end.
    let panicked = catch_unwind(AssertUnwindSafe(|| {
        acc.join_uneven_inputs(None, |_| -> libaccel::Result<()> { panic!("in the loop") })
    }))
    .unwrap_err();
    assert_eq!(panicked.downcast_ref::<&str>(), Some(&"in the loop"));
    // An error type of the program's own travels inside.
    let mine: Result<i32, String> = acc
        .join_uneven_inputs(None, |_| Ok(Err("mine".to_string())))
        .unwrap();
    assert_eq!(mine, Err("mine".to_string()));
    assert_eq!(
        acc.join_uneven_inputs(None, |_| Ok("after")).unwrap(),
        "after"
    );
}

// ---- streams: datasets of unknown length, read in order -------------------------------------

/// Every call of a stream's closure: (epoch, position).
type Calls = Arc<Mutex<Vec<(i64, i64)>>>;

/// A stream of `lengths.len()` samples as `corpus` has them (tokens 100 * i + j, label i), that
/// records its calls.
fn stream_corpus(lengths: &[i64]) -> (Dataset, Calls) {
    let lengths = lengths.to_vec();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&calls);
    let data = Dataset::from_stream(
        &[Field::ragged(Dtype::I64, &[]), Field::new(Dtype::I64, &[])],
        move |epoch, i| {
            log.lock().unwrap().push((epoch, i));
            let Some(&n) = lengths.get(i as usize) else {
                return Ok(None);
            };
            let tokens: Vec<i64> = (0..n).map(|j| 100 * i + j).collect();
            Ok(Some(Sample::new().with(0, &tokens).with(1, &[i])))
        },
    )
    .unwrap();
    (data, calls)
}

/// The labels (field 1) of a batch.
fn labels_of(batch: libaccel::Batch) -> Vec<i64> {
    batch[1].to_vec::<i64>().unwrap()
}

#[test]
fn a_stream_pads_ragged_fields_and_starts_each_epoch_at_position_zero() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let (data, calls) = stream_corpus(&[2, 0, 3, 1, 4]);
    assert_eq!(
        data.sample_count().unwrap(),
        None,
        "a stream's length is unknown"
    );
    assert_eq!(data.field_count().unwrap(), 2);
    for workers in [0, 2] {
        let options = DataLoaderOptions::new().batch_size(3).num_workers(workers);
        let mut loader = DataLoader::with(&acc, &data, options).unwrap();
        assert_eq!(loader.batch_count().unwrap(), None);
        assert_eq!(loader.iter().size_hint(), (0, None));
        assert_eq!(loader.field_count(), 3, "tokens, label, the tokens' mask");
        calls.lock().unwrap().clear();
        for epoch in 0..2 {
            let b = next_values(&mut loader);
            assert_eq!(b[0], (vec![3, 3], vec![0, 1, 0, 0, 0, 0, 200, 201, 202]));
            assert_eq!(b[1], (vec![3], vec![0, 1, 2]));
            assert_eq!(b[2], (vec![3, 3], vec![1, 1, 0, 0, 0, 0, 1, 1, 1]));
            // The short last batch: padded to its own longest.
            let b = next_values(&mut loader);
            assert_eq!(b[0], (vec![2, 4], vec![300, 0, 0, 0, 400, 401, 402, 403]));
            assert_eq!(b[1], (vec![2], vec![3, 4]));
            assert_eq!(b[2], (vec![2, 4], vec![1, 0, 0, 0, 1, 1, 1, 1]));
            assert!(loader.end_of_epoch().unwrap());
            assert_eq!(loader.remainder().unwrap(), 2, "known at the last batch");
            assert!(
                loader.next_batch().unwrap().is_none(),
                "the end of the stream"
            );
            assert_eq!(loader.epoch().unwrap(), epoch + 1);
        }
        // Each epoch read from position 0 to the end (position 5 said there was no more).
        let want: Vec<(i64, i64)> = (0..2).flat_map(|e| (0..6).map(move |i| (e, i))).collect();
        assert_eq!(*calls.lock().unwrap(), want, "workers {workers}");
    }

    // Resuming at a saved cursor reads the stream again from position 0 and drops what is before.
    let mut loader = DataLoader::with(&acc, &data, DataLoaderOptions::new().batch_size(2)).unwrap();
    loader.set_position(0, 2).unwrap();
    calls.lock().unwrap().clear();
    assert_eq!(labels_of(loader.next_batch().unwrap().unwrap()), [2, 3]);
    assert_eq!(calls.lock().unwrap()[..4], [(0, 0), (0, 1), (0, 2), (0, 3)]);
    assert_eq!(loader.position().unwrap(), (0, 4));

    // An empty stream: an epoch with no batch.
    let empty = Dataset::from_stream(&[Field::new(Dtype::U8, &[])], |_, _| Ok(None)).unwrap();
    let mut loader = DataLoader::new(&acc, &empty).unwrap();
    assert!(loader.next_batch().unwrap().is_none());
    assert_eq!(loader.iter().count(), 0);
}

#[test]
fn a_failing_stream_closure_keeps_the_position_and_the_next_call_gives_the_failed_batch() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let failed = Arc::new(AtomicBool::new(false));
    let panicked = Arc::new(AtomicBool::new(false));
    let (fail_once, panic_once) = (Arc::clone(&failed), Arc::clone(&panicked));
    let data = Dataset::from_stream(&[Field::new(Dtype::I64, &[])], move |_, i| {
        if i == 5 && !fail_once.swap(true, Ordering::SeqCst) {
            return Err(format!("sample {i} is unreadable").into());
        }
        if i == 7 && !panic_once.swap(true, Ordering::SeqCst) {
            panic!("sample {i} exploded");
        }
        Ok((i < 10).then(|| Sample::new().with(0, &[i])))
    })
    .unwrap();
    let first = |b: libaccel::Batch| b[0].to_vec::<i64>().unwrap();
    for workers in [0, 2] {
        failed.store(false, Ordering::SeqCst);
        panicked.store(false, Ordering::SeqCst);
        let options = DataLoaderOptions::new().batch_size(2).num_workers(workers);
        let mut loader = DataLoader::with(&acc, &data, options).unwrap();
        let results: Vec<_> = loader.iter().collect();
        assert_eq!(
            results.len(),
            3,
            "workers {workers}: two batches, then the error"
        );
        let e = results[2].as_ref().unwrap_err();
        assert_eq!(e.status(), Status::Callback, "{e}");
        assert!(e.message().contains("sample 5 is unreadable"), "{e}");
        assert_eq!(loader.position().unwrap(), (0, 4), "the batches returned");
        // The next call reads the stream again up to there and gives the batch that failed.
        assert_eq!(first(loader.next_batch().unwrap().unwrap()), [4, 5]);
        let panic = catch_unwind(AssertUnwindSafe(|| loader.next_batch())).unwrap_err();
        let text = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert_eq!(text, "sample 7 exploded", "workers {workers}");
        assert_eq!(loader.position().unwrap(), (0, 6));
        let rest: Vec<_> = loader.iter().map(|b| first(b.unwrap())).collect();
        assert_eq!(rest, [vec![6, 7], vec![8, 9]], "workers {workers}");
        assert_eq!(loader.epoch().unwrap(), 1);
    }

    // From an iterator per epoch: an Err item fails the same way, and `open` runs again.
    let opened = Arc::new(AtomicUsize::new(0));
    let opens = Arc::clone(&opened);
    let fail_once = Arc::new(AtomicBool::new(false));
    let data = Dataset::from_stream_iter(&[Field::new(Dtype::I32, &[2])], move |epoch| {
        opens.fetch_add(1, Ordering::SeqCst);
        let fail = Arc::clone(&fail_once);
        Ok((0..5i32).map(move |i| {
            if i == 3 && !fail.swap(true, Ordering::SeqCst) {
                return Err("row 3 is missing".into());
            }
            Ok(Sample::new().with(0, &[i, epoch as i32]))
        }))
    })
    .unwrap();
    let mut loader = DataLoader::with(&acc, &data, DataLoaderOptions::new().batch_size(2)).unwrap();
    let rows = |b: libaccel::Batch| b[0].to_vec::<i32>().unwrap();
    assert_eq!(rows(loader.next_batch().unwrap().unwrap()), [0, 0, 1, 0]);
    let e = loader.next_batch().unwrap_err();
    assert_eq!(e.status(), Status::Callback);
    assert!(e.message().contains("row 3 is missing"), "{e}");
    assert_eq!(rows(loader.next_batch().unwrap().unwrap()), [2, 0, 3, 0]);
    assert_eq!(rows(loader.next_batch().unwrap().unwrap()), [4, 0]);
    assert!(loader.next_batch().unwrap().is_none());
    assert_eq!(
        opened.load(Ordering::SeqCst),
        2,
        "opened again after the failure"
    );
    assert_eq!(
        rows(loader.next_batch().unwrap().unwrap()),
        [0, 1, 1, 1],
        "epoch 1"
    );
    assert_eq!(opened.load(Ordering::SeqCst), 3);
}

#[test]
fn text_lines_are_a_stream_of_ragged_bytes() {
    let _one = one_accelerator();
    let dir = temp_dir("text-lines");
    let path = dir.join("corpus.txt");
    std::fs::write(&path, "hello\nworld\r\n\nend").unwrap();
    let text = Dataset::from_text_lines(&path).unwrap();
    assert_eq!(text.sample_count().unwrap(), None);
    assert_eq!(text.field_count().unwrap(), 1);
    let acc = Accelerator::new().unwrap();
    let options = DataLoaderOptions::new()
        .batch_size(2)
        .padding(Padding::new().pad_value(b'.' as f64));
    let mut loader = DataLoader::with(&acc, &text, options).unwrap();
    for _ in 0..2 {
        let mut lines = Vec::new();
        for batch in &mut loader {
            let [bytes, mask] = fields(batch.unwrap()).unwrap();
            assert_eq!(bytes.dtype().unwrap(), Dtype::U8);
            let width = bytes.shape().unwrap()[1] as usize;
            let (bytes, mask) = (bytes.to_vec::<u8>().unwrap(), mask.to_vec::<i64>().unwrap());
            for (row, m) in bytes.chunks(width).zip(mask.chunks(width)) {
                let n = m.iter().sum::<i64>() as usize;
                assert!(row[n..].iter().all(|&b| b == b'.'), "{row:?}");
                lines.push(String::from_utf8(row.to_vec()).unwrap());
            }
        }
        assert_eq!(lines, ["hello", "world", "...", "end"], "every epoch");
    }
    let missing = dir.join("missing.txt");
    let e = Dataset::from_text_lines(&missing).unwrap_err();
    assert_eq!(e.status(), Status::Io);
    assert!(e.message().contains("missing.txt"), "{e}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn stream_samples_and_options_are_checked() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let spec = [Field::ragged(Dtype::F32, &[2]), Field::new(Dtype::I64, &[])];
    fn good() -> Sample {
        Sample::new().with(0, &[1.0f32, 2.0]).with(1, &[7i64])
    }
    let bad = |at: i64, sample: fn() -> Sample| {
        let data = Dataset::from_stream(&spec, move |_, i| {
            Ok((i < 4).then(|| if i == at { sample() } else { good() }))
        })
        .unwrap();
        let mut loader =
            DataLoader::with(&acc, &data, DataLoaderOptions::new().batch_size(2)).unwrap();
        let e = loader.iter().find_map(Result::err).expect("an error");
        (e.status(), e.message().to_string())
    };
    assert_eq!(good().bytes(1), Some(&7i64.to_ne_bytes()[..]));
    // A fixed field takes exactly one sample.
    let (status, message) = bad(2, || Sample::new().with(0, &[0f32; 2]).with(1, &[1i64, 2]));
    assert_eq!(status, Status::Shape, "{message}");
    assert!(
        message.contains("sample 2, field 1: 16 bytes given"),
        "{message}"
    );
    // A ragged field takes whole rows (of 2 floats here).
    let (status, message) = bad(3, || Sample::new().with(0, &[0f32; 3]).with(1, &[1i64]));
    assert_eq!(status, Status::Shape, "{message}");
    assert!(message.contains("sample 3, field 0: 12 bytes given, not a whole number of rows"));
    // Typed values of another element type; raw bytes are taken as they are.
    let (status, message) = bad(1, || Sample::new().with(0, &[0f32; 2]).with(1, &[1i32, 0]));
    assert_eq!(status, Status::Dtype, "{message}");
    assert!(
        message.contains("sample 1, field 1: I32 values given"),
        "{message}"
    );
    // A field left unset, and one out of range.
    let (status, message) = bad(0, || Sample::new().with(0, &[0f32; 2]));
    assert_eq!(status, Status::Callback, "{message}");
    assert!(message.contains("without writing field 1"), "{message}");
    let (status, message) = bad(0, || good().with(2, &[0u8]));
    assert_eq!(status, Status::InvalidArgument, "{message}");
    assert!(message.contains("field 2 is out of range"), "{message}");
    // An empty ragged field and raw bytes are fine.
    let data = Dataset::from_stream(&spec, |_, i| {
        Ok((i < 2).then(|| {
            Sample::new()
                .with(0, &[0f32; 0])
                .with_bytes(1, i.to_ne_bytes())
        }))
    })
    .unwrap();
    let mut loader = DataLoader::with(&acc, &data, DataLoaderOptions::new().batch_size(2)).unwrap();
    let [rows, labels, mask] = fields(loader.next_batch().unwrap().unwrap()).unwrap();
    assert_eq!(rows.shape().unwrap(), [2, 0, 2]);
    assert_eq!(labels.to_vec::<i64>().unwrap(), [0, 1]);
    assert_eq!(mask.shape().unwrap(), [2, 0]);

    // Options: dispatch_batches, and no length grouping over a stream.
    let options = DataLoaderOptions::new().dispatch_batches(false);
    assert_eq!(options.pairs(), [("dispatch_batches", "false".to_string())]);
    loader
        .set_options(options.dispatch_batches(true).batch_size(1))
        .unwrap();
    assert_eq!(loader.iter().count(), 2);
    let e = loader
        .set_options(DataLoaderOptions::new().group_by_length(true))
        .unwrap_err();
    assert_eq!(e.status(), Status::Unsupported, "{e}");
    let x = Tensor::from_slice(&[1i64, 2, 3], &[3]).unwrap();
    let sized = Dataset::from_tensors(&[&x]).unwrap();
    let mut loader = DataLoader::new(&acc, &sized).unwrap();
    loader
        .set_options(DataLoaderOptions::new().dispatch_batches(false))
        .unwrap();
    let e = loader
        .set_options(DataLoaderOptions::new().dispatch_batches(true))
        .unwrap_err();
    assert_eq!(e.status(), Status::Unsupported, "{e}");
}

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

/// A config whose runs write `log_with` under `dir`.
fn tracking_config(log_with: &str, dir: &std::path::Path) -> Config {
    let mut cfg = Config::new().unwrap();
    cfg.set("log_with", log_with).unwrap();
    cfg.set("logging_dir", dir.display()).unwrap();
    cfg
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

// ---- the logger -------------------------------------------------------------------------------

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
    use libaccel::LogLevel;
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
    use libaccel::LogLevel;
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
    use libaccel::LogLevel;
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
    acc.set_log_sink(move |record: &libaccel::LogRecord<'_>| {
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
    acc.set_log_sink(move |record: &libaccel::LogRecord<'_>| {
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
    acc.set_log_sink(move |_: &libaccel::LogRecord<'_>| {
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
        Some((Status::State, Status::State, libaccel::LogLevel::INFO))
    );

    // Standard error (the library's own line), then the facade again.
    acc.log_to_stderr().unwrap();
    acc.logger().info("to stderr").unwrap();
    assert!(captured().is_empty());
    acc.log_to_facade().unwrap();
    acc.logger().info("back").unwrap();
    assert_eq!(captured().len(), 1);
}
