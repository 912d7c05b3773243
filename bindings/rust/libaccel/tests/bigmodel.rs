//! Big-model inference: Accelerate's device map over a model, and dispatch with disk offload,
//! whose outputs must be those of the model fully loaded, on a safetensors file written here.

mod common;

use std::path::{Path, PathBuf};

use accel::{load_checkpoint_in_model, Model, Status, Tensor};
use common::temp_dir;

const LAYERS: usize = 4;
const WIDTH: usize = 8;

/// l0..l3, each Linear(8, 8): weight [8, 8] then bias [8], values from a small formula.
fn write_checkpoint(dir: &Path) -> PathBuf {
    let (mut header, mut data, mut offset) = (Vec::new(), Vec::new(), 0usize);
    for l in 0..LAYERS {
        for (name, shape, count) in [
            ("weight", format!("[{WIDTH},{WIDTH}]"), WIDTH * WIDTH),
            ("bias", format!("[{WIDTH}]"), WIDTH),
        ] {
            header.push(format!(
                r#""l{l}.{name}":{{"dtype":"F32","shape":{shape},"data_offsets":[{offset},{}]}}"#,
                offset + 4 * count
            ));
            for i in 0..count {
                let v = ((l * 31 + i * 7) % 17) as f32 / 17.0 - 0.5;
                data.extend_from_slice(&v.to_le_bytes());
            }
            offset += 4 * count;
        }
    }
    let header = format!("{{{}}}", header.join(","));
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.extend_from_slice(&data);
    let path = dir.join("model.safetensors");
    std::fs::write(&path, file).unwrap();
    path
}

fn chain() -> Model {
    let mut model = Model::new().unwrap();
    let mut body = String::from("def forward(self, x):\n");
    for l in 0..LAYERS {
        let spec = format!("in_features={WIDTH} out_features={WIDTH}");
        model.add_layer(&format!("l{l}"), "linear", &spec).unwrap();
        body += &format!("    x = self.l{l}.forward(x)\n");
    }
    model.define(&(body + "    return x\n")).unwrap();
    model
}

#[test]
fn a_dispatched_model_computes_what_the_loaded_one_does() {
    let dir = temp_dir("bigmodel");
    let path = write_checkpoint(&dir);
    let mut full = chain();
    load_checkpoint_in_model(&mut full, &path).unwrap();
    let x = Tensor::from_slice(&[0.25f32; 2 * WIDTH], &[2, WIDTH as i64]).unwrap();
    let want = full
        .call1("forward", &[&x])
        .unwrap()
        .to_vec::<f32>()
        .unwrap();

    let mut model = chain();
    // 288 bytes a layer: room for about two of the four on the cpu.
    let map = model.infer_device_map("max_memory=cpu:700,disk").unwrap();
    assert!(map.iter().any(|line| line.ends_with("=disk")), "{map:?}");
    model.dispatch(&path, &map.join("\n")).unwrap();
    for _ in 0..2 {
        let got = model
            .call1("forward", &[&x])
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        assert_eq!(got, want);
    }
}

#[test]
fn a_map_that_cannot_fit_is_out_of_memory() {
    let err = chain().infer_device_map("max_memory=cpu:100").unwrap_err();
    assert_eq!(err.status(), Status::OutOfMemory, "{err}");
}
