//! accel's deprecated spellings, each still working (docs/stability.md: one minor version,
//! working and warning). The comment after each names the spelling that replaces it, which the
//! warning must name too.
use accel::{Accelerator, Model, Optimizer, Status, Tensor};

fn main() -> accel::Result<()> {
    let loss = Tensor::scalar(0.5f32)?;
    assert_eq!(loss.item_f64()?, 0.5); // item::<f64>()
    let count = Tensor::scalar(3i64)?;
    assert_eq!(count.item_i64()?, 3); // item::<i64>()

    let acc = Accelerator::new()?;
    let mut model = Model::new()?;
    model.add_layer("fc", "linear", "in_features=2 out_features=1")?;
    let opt = Optimizer::new(&model, "sgd")?;
    acc.prepare_shared(&[&model, &opt])?; // prepare((&mut model, &mut opt))
    let after = model.add_layer("more", "linear", "in_features=1 out_features=1");
    assert_eq!(
        after.map_err(|e| e.status()),
        Err(Status::State),
        "prepared"
    );
    println!("every deprecated spelling works");
    Ok(())
}
