//! Models: built, called, saved and loaded; bad input as `Err`; models of the caller's own
//! tensors.

mod common;

use accel::{Model, Optimizer, Scheduler, Status, Tensor};
use common::{linear_model, temp_dir};

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
    let e = accel::check_torch("0.1.0", None, std::ptr::null()).unwrap_err();
    assert_eq!(e.status(), Status::Unsupported);
    assert!(e.message().contains("built against LibTorch 0.1.0"), "{e}");
}
