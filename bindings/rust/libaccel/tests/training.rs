//! Training in one process: the typed options of layers, optimizers and schedules, steps, an
//! accelerator that trains alone.

mod common;

use accel::layers::{self, BatchNorm2d, Conv2d, Embedding, Layer, LayerNorm, Linear};
use accel::optimizers::{self, Adagrad, Adam, AdamW, OptimizerOptions, RmsProp, Sgd};
use accel::schedules::{self, Anneal, SchedulerOptions};
use accel::{
    fields, Accelerator, DataLoader, DataLoaderOptions, Dataset, DistributedType, Model, Optimizer,
    Precision, Prepare, Scheduler, Status, Tensor,
};
use common::{linear_model, one_accelerator};

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
    type MakeScheduler<'a> = &'a dyn Fn(&Optimizer) -> accel::Result<Scheduler>;
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
    let mut model = linear_model(2, 1);
    let mut opt = Optimizer::new(&model, "sgd").unwrap();
    opt.set("lr", 0.1).unwrap();
    let mut sched = Scheduler::new(&opt, "constant").unwrap();
    acc.prepare((&mut model, &mut opt, &mut sched, &mut loader))
        .unwrap();
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
            last = loss.item::<f64>().unwrap();
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

/// prepare takes its objects mutably borrowed in each form: a tuple (with a `&mut dyn Prepare`
/// in it), one object, or a slice counted at run time; each prepares what it is given (a
/// prepared model takes no new layers, an unprepared one does).
#[test]
fn prepare_takes_a_tuple_one_object_or_a_slice() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let x = Tensor::from_slice(&[0f32; 8], &[4, 2]).unwrap();
    let data = Dataset::from_tensors(&[&x]).unwrap();
    let mut loader = DataLoader::new(&acc, &data).unwrap();
    acc.prepare(&mut loader).unwrap();

    let mut listed = linear_model(2, 1);
    let mut listed_opt = Optimizer::new(&listed, "sgd").unwrap();
    let mut objects: Vec<&mut dyn Prepare> = vec![&mut listed, &mut listed_opt];
    acc.prepare(objects.as_mut_slice()).unwrap();
    let prepared = listed.add_layer("more", "linear", "in_features=1 out_features=1");
    assert_eq!(prepared.unwrap_err().status(), Status::State);

    let mut paired = linear_model(2, 1);
    let mut paired_opt = Optimizer::new(&paired, "sgd").unwrap();
    let mut unprepared = linear_model(2, 1);
    let opt: &mut dyn Prepare = &mut paired_opt;
    acc.prepare((&mut paired, opt)).unwrap();
    assert_eq!(
        paired
            .add_layer("more", "linear", "in_features=1 out_features=1")
            .unwrap_err()
            .status(),
        Status::State
    );
    unprepared
        .add_layer("more", "linear", "in_features=1 out_features=1")
        .unwrap();
}
