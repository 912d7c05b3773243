//! Collectives and process control in a world of one: the identity, split between processes,
//! the trigger, join_uneven_inputs.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};

use accel::layers::{BatchNorm2d, Linear};
use accel::{
    fields, Accelerator, DataLoader, DataLoaderOptions, Dataset, Model, Optimizer, Reduction,
    Status, Tensor,
};
use common::one_accelerator;

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
    // Dictionaries: any map type; values of different lengths are refused.
    let columns = std::collections::HashMap::from([("id", vec![1, 2]), ("len", vec![5, 6])]);
    let mine: std::collections::HashMap<_, _> =
        acc.split_map_between_processes(&columns, true).unwrap();
    assert_eq!(mine, columns);
    let ragged = std::collections::BTreeMap::from([("a", vec![1]), ("b", vec![1, 2])]);
    let e = acc
        .split_map_between_processes::<_, _, _, Vec<_>>(&ragged, false)
        .unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument, "{e}");
    assert!(e.to_string().contains("same length"), "{e}");
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
    acc.prepare((&mut model, &mut opt, &mut loader)).unwrap();
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
        acc.join_uneven_inputs(None, |_| -> accel::Result<()> { panic!("in the loop") })
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
