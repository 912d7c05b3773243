//! Models built without their weights (Model::new_empty) and filled by a load, on a safetensors
//! file written here byte by byte.

mod common;

use std::path::{Path, PathBuf};

use accel::{load_checkpoint_in_model, Model, Status};
use common::temp_dir;

/// fc.weight (F32 2x2 = 1,2,3,4) and fc.bias (F32 [2] = 5,6): a linear layer 2 -> 2.
fn write_checkpoint(dir: &Path) -> PathBuf {
    let header = concat!(
        r#"{"fc.weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"#,
        r#""fc.bias":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}}"#
    );
    let mut data = (header.len() as u64).to_le_bytes().to_vec();
    data.extend_from_slice(header.as_bytes());
    for f in [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0] {
        data.extend_from_slice(&f.to_le_bytes());
    }
    let path = dir.join("model.safetensors");
    std::fs::write(&path, data).unwrap();
    path
}

fn empty_model() -> Model {
    let mut model = Model::new_empty(false).unwrap();
    model
        .add_layer("fc", "linear", "in_features=2 out_features=2")
        .unwrap();
    model
}

#[test]
fn an_empty_model_is_a_state_error_until_a_load_fills_it() {
    let dir = temp_dir("empty_init");
    let path = write_checkpoint(&dir);
    let mut model = empty_model();
    assert_eq!(model.parameter_element_count().unwrap(), 6);
    let err = model.tensor("fc.weight").unwrap_err();
    assert_eq!(err.status(), Status::State, "{err}");
    assert!(err.message().contains("'fc.weight'"), "{err}");
    assert!(err.message().contains("still empty"), "{err}");

    load_checkpoint_in_model(&mut model, &path).unwrap();
    let w = model.tensor("fc.weight").unwrap().to_vec::<f32>().unwrap();
    assert_eq!(w, [1.0, 2.0, 3.0, 4.0]);
    let b = model.tensor("fc.bias").unwrap().to_vec::<f32>().unwrap();
    assert_eq!(b, [5.0, 6.0]);
}
