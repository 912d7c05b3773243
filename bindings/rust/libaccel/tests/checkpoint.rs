//! Checkpoints: registered objects saved and loaded, the closures' failures.

mod common;

use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use accel::{Accelerator, Optimizer, Status, Tensor};
use common::{linear_model, one_accelerator, temp_dir};

#[test]
fn checkpoints_carry_registered_objects() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    let mut model = linear_model(2, 1);
    let mut opt = Optimizer::new(&model, "adam").unwrap();
    acc.prepare((&mut model, &mut opt)).unwrap();
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
    accel::load_checkpoint_in_model(&mut fresh, dir.join("weights")).unwrap();
    assert_eq!(
        fresh.tensor("fc.weight").unwrap().to_vec::<f32>().unwrap(),
        before
    );
    let mut other = linear_model(3, 1);
    let e = accel::load_checkpoint_in_model(&mut other, dir.join("weights")).unwrap_err();
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
