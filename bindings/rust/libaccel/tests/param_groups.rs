//! Optimizer parameter groups: each group steps with its own options, a scheduler sets every
//! group's rate from its own base rate, and what add_group refuses.

mod common;

use accel::optimizers::Sgd;
use accel::schedules::Step;
use accel::{Accelerator, Optimizer, Scheduler, Status, Tensor};
use common::{linear_model, one_accelerator};

#[test]
fn each_group_steps_with_its_own_options() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let mut model = linear_model(2, 1);
    let mut opt = Optimizer::with(&model, Sgd::new().lr(0.1)).unwrap();
    assert_eq!(opt.group_count().unwrap(), 1);
    let frozen_bias = opt.add_group(&["fc.bias"]).unwrap();
    assert_eq!(frozen_bias, 1);
    assert_eq!(opt.group_count().unwrap(), 2);
    assert_eq!(
        opt.group_lr(1).unwrap(),
        0.1,
        "a group starts from the defaults"
    );
    opt.set_group(frozen_bias, "lr", 0.0).unwrap();
    assert_eq!((opt.lr().unwrap(), opt.group_lr(1).unwrap()), (0.1, 0.0));

    acc.prepare((&mut model, &mut opt)).unwrap();
    let (w0, b0) = (
        model.tensor("fc.weight").unwrap().to_vec::<f32>().unwrap(),
        model.tensor("fc.bias").unwrap().to_vec::<f32>().unwrap(),
    );
    let x = Tensor::from_slice(&[1.0f32, 2.0], &[1, 2]).unwrap();
    let y = Tensor::from_slice(&[100.0f32], &[1, 1]).unwrap();
    acc.backward(&model.call1("training_step", &[&x, &y]).unwrap())
        .unwrap();
    opt.step().unwrap();
    let (w1, b1) = (
        model.tensor("fc.weight").unwrap().to_vec::<f32>().unwrap(),
        model.tensor("fc.bias").unwrap().to_vec::<f32>().unwrap(),
    );
    assert_ne!(w0, w1, "group 0 (the weight) stepped at lr 0.1");
    assert_eq!(b0, b1, "group 1 (the bias) stepped at lr 0");

    let e = opt.add_group(&["fc.weight"]).unwrap_err();
    assert_eq!(e.status(), Status::State, "{e}");
}

#[test]
fn add_group_refuses_and_schedulers_scale_every_group() {
    let model = linear_model(2, 1);
    let mut opt = Optimizer::with(&model, Sgd::new().lr(1.0)).unwrap();
    for (names, what) in [
        (&["fc.nope"][..], "fc.nope"),
        (&["fc.bias", "fc.bias"][..], "fc.bias"),
        (&[][..], ""),
    ] {
        let e = opt.add_group(names).unwrap_err();
        assert_eq!(e.status(), Status::InvalidArgument, "{names:?}: {e}");
        assert!(e.message().contains(what), "{e}");
    }
    assert_eq!(opt.add_group(&[String::from("fc.bias")]).unwrap(), 1);
    let e = opt.add_group(&["fc.bias"]).unwrap_err();
    assert_eq!(
        e.status(),
        Status::InvalidArgument,
        "in another group already: {e}"
    );
    let e = opt.set_group(2, "lr", 0.1).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument, "{e}");
    assert_eq!(
        opt.group_lr(2).unwrap_err().status(),
        Status::InvalidArgument
    );
    let e = opt.set_group(1, "no_such_option", 1).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument, "{e}");
    opt.set_group(1, "lr", 0.5).unwrap();
    opt.set("lr", 2.0).unwrap(); // group 0 and the default, not group 1
    assert_eq!(opt.group_lr(1).unwrap(), 0.5);

    let mut halving = Scheduler::with(&opt, Step::new(1).gamma(0.5)).unwrap();
    halving.step().unwrap();
    assert_eq!(
        (opt.group_lr(0).unwrap(), opt.group_lr(1).unwrap()),
        (1.0, 0.25)
    );
    assert_eq!(halving.lr().unwrap(), 1.0);
    let e = opt.add_group(&["fc.weight"]).unwrap_err();
    assert_eq!(e.status(), Status::State, "after a scheduler: {e}");
}
