//! clip_grad_value and clip_grad_norm after a backward, the gradients read back exactly: with SGD
//! at lr 1 and nothing else, a step moves each parameter by minus its gradient.

mod common;

use accel::layers::Linear;
use accel::{Accelerator, Model, Optimizer, Status, Tensor};
use common::one_accelerator;

/// fc: 3 -> 1; `total(x)` is the sum of the outputs, so the weight's gradient is the sum of the
/// rows of x and the bias's the number of rows.
fn model() -> Model {
    let mut model = Model::new().unwrap();
    model.add("fc", Linear::new(3, 1)).unwrap();
    model
        .define("def total(self, x):\n    return self.fc.forward(x).sum()\n")
        .unwrap();
    model
}

fn params(model: &Model) -> Vec<f32> {
    let mut all = model.tensor("fc.weight").unwrap().to_vec::<f32>().unwrap();
    all.extend(model.tensor("fc.bias").unwrap().to_vec::<f32>().unwrap());
    all
}

/// The gradients after one backward of `x`, clipped by `clip`, as an SGD step at lr 1 applies
/// them.
fn applied_gradients(
    acc: &Accelerator,
    x: &[f32],
    clip: impl FnOnce(&Accelerator, &Model),
) -> Vec<f32> {
    let mut model = model();
    let mut sgd = Optimizer::new(&model, "sgd").unwrap();
    sgd.set("lr", 1.0).unwrap();
    acc.prepare((&mut model, &mut sgd)).unwrap();
    let x = Tensor::from_slice(x, &[(x.len() / 3) as i64, 3]).unwrap();
    let before = params(&model);
    acc.backward(&model.call1("total", &[&x]).unwrap()).unwrap();
    clip(acc, &model);
    sgd.step().unwrap();
    let after = params(&model);
    before.iter().zip(&after).map(|(b, a)| b - a).collect()
}

fn assert_close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-5, "{got:?} != {want:?}");
    }
}

#[test]
fn clip_grad_value_clamps_every_gradient() {
    let _one = one_accelerator();
    let acc = Accelerator::new().unwrap();
    // Two rows: gradients [2.5, -3.5, 0.25] for the weight and 2 for the bias.
    let x = [2.0f32, -3.0, 0.125, 0.5, -0.5, 0.125];
    let unclipped = applied_gradients(&acc, &x, |_, _| {});
    assert_close(&unclipped, &[2.5, -3.5, 0.25, 2.0]);

    let clipped = applied_gradients(&acc, &x, |acc, model| {
        acc.clip_grad_value(model, 1.0).unwrap();
    });
    assert_close(&clipped, &[1.0, -1.0, 0.25, 1.0]);

    // The norms before and after, through clip_grad_norm with a max_norm that clips nothing.
    let norms = applied_gradients(&acc, &x, |acc, model| {
        let before = acc.clip_grad_norm(model, 1e9, 2.0).unwrap();
        let want = (2.5f64 * 2.5 + 3.5 * 3.5 + 0.25 * 0.25 + 2.0 * 2.0).sqrt();
        assert!((before - want).abs() < 1e-5, "{before} {want}");
        acc.clip_grad_value(model, 0.5).unwrap();
        let after = acc.clip_grad_norm(model, 1e9, 2.0).unwrap();
        let want = (0.5f64 * 0.5 * 3.0 + 0.25 * 0.25).sqrt();
        assert!((after - want).abs() < 1e-5, "{after} {want}");
    });
    assert_close(&norms, &[0.5, -0.5, 0.25, 0.5]);

    // clip_grad_norm scales every gradient by max_norm / norm.
    let scaled = applied_gradients(&acc, &x, |acc, model| {
        let norm = acc.clip_grad_norm(model, 1.0, 2.0).unwrap();
        assert!((norm - 22.5625f64.sqrt()).abs() < 1e-5);
    });
    let s = 1.0 / 22.5625f32.sqrt();
    assert_close(&scaled, &[2.5 * s, -3.5 * s, 0.25 * s, 2.0 * s]);

    let e = acc.clip_grad_value(&model(), -1.0).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument, "{e}");
}
