//! no_sync and LocalSGD in one process (two processes: tests/multiprocess_steps.rs).

mod common;

use accel::{Accelerator, Model, Optimizer, Status, Tensor};
use common::{linear_model, one_accelerator};

/// A forward and a backward of the same batch.
fn backward(acc: &Accelerator, model: &Model) -> accel::Result<()> {
    let x = Tensor::from_slice(&[0.5f32, -1.0, 2.0, 0.25], &[2, 2])?;
    let y = Tensor::from_slice(&[1.0f32, -1.0], &[2, 1])?;
    acc.backward(&model.call1("training_step", &[&x, &y])?)
}

/// The gradients' 2-norm, unclipped.
fn grad_norm(acc: &Accelerator, model: &Model) -> f64 {
    acc.clip_grad_norm(model, 1e30, 2.0).unwrap()
}

#[test]
fn no_sync_keeps_adding_gradients_and_nests() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let mut model = linear_model(2, 1);
    let mut opt = Optimizer::new(&model, "sgd").unwrap();
    acc.prepare((&mut model, &mut opt)).unwrap();
    backward(&acc, &model).unwrap();
    let once = grad_norm(&acc, &model);
    opt.zero_grad().unwrap();

    let value = acc
        .no_sync(&model, || -> accel::Result<&str> {
            backward(&acc, &model)?;
            acc.no_sync(&model, || backward(&acc, &model))??; // pairs nest
            Ok("done")
        })
        .unwrap()
        .unwrap();
    assert_eq!(value, "done");
    let twice = grad_norm(&acc, &model);
    assert!((twice - 2.0 * once).abs() < 1e-5 * once, "{once} {twice}");
    opt.step().unwrap();
    opt.zero_grad().unwrap();

    // A panic inside ends the pair before it resumes: the next pair is a fresh one.
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        acc.no_sync(&model, || panic!("inside no_sync"))
    }));
    assert!(panicked.is_err());
    backward(&acc, &model).unwrap();
    let plain = grad_norm(&acc, &model);
    opt.zero_grad().unwrap();
    acc.no_sync(&model, || backward(&acc, &model))
        .unwrap()
        .unwrap();
    assert_eq!(grad_norm(&acc, &model), plain);
}

#[test]
fn local_sgd_in_one_process_counts_steps() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let mut model = linear_model(2, 1);
    let mut opt = Optimizer::new(&model, "sgd").unwrap();
    opt.set("lr", 0.1).unwrap();
    acc.prepare((&mut model, &mut opt)).unwrap();

    let e = accel::LocalSgd::new(&acc, &model, 0).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument, "{e}");
    let e = acc.local_sgd(&model, -1, |_| Ok(())).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument, "{e}");

    let mut local_sgd = accel::LocalSgd::new(&acc, &model, 2).unwrap();
    let e = local_sgd.set("outer_optimiser", "nesterov").unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument, "{e}");
    for _ in 0..5 {
        backward(&acc, &model).unwrap();
        opt.step().unwrap();
        opt.zero_grad().unwrap();
        local_sgd.step().unwrap();
    }
    // Alone there is nothing to average with: it only counts.
    assert_eq!(local_sgd.average_count().unwrap(), 0);
    local_sgd.end().unwrap();
    local_sgd.end().unwrap(); // a second end does nothing
    assert_eq!(local_sgd.average_count().unwrap(), 0);
    drop(local_sgd);

    // The closure form: the block's value after the end; its error without the end.
    let steps = acc
        .local_sgd(&model, 3, |local_sgd| {
            for _ in 0..4 {
                backward(&acc, &model)?;
                opt.step()?;
                opt.zero_grad()?;
                local_sgd.step()?;
            }
            Ok(local_sgd.average_count()? + 4)
        })
        .unwrap();
    assert_eq!(steps, 4);
    let e = acc
        .local_sgd(&model, 3, |_| -> accel::Result<()> {
            Err(accel::Error::new(Status::Io, "the block's own error"))
        })
        .unwrap_err();
    assert_eq!(e.message(), "the block's own error");
    // Gradients synchronise again after each form: no_sync was ended every time.
    acc.no_sync(&model, || ()).unwrap();
}
