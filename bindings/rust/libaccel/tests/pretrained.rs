//! Pretrained checkpoints loaded as transformers' from_pretrained loads them, on a safetensors
//! file written here byte by byte.

mod common;

use std::path::{Path, PathBuf};

use accel::{Error, Model, PretrainedOptions, Status, Tensor};
use common::temp_dir;

/// The safetensors file of a base model (no "bert." prefix), written by hand: 8 bytes of header
/// length (little-endian), the JSON header, the raw data. encoder.weight (F16 2x2 = 1,2,3,4),
/// pooler.weight (F32 [2] = 0.5,0.5), embeddings.position_ids (I64 [3] = 0,1,2).
fn write_base_checkpoint(dir: &Path) -> PathBuf {
    let header = concat!(
        r#"{"encoder.weight":{"dtype":"F16","shape":[2,2],"data_offsets":[0,8]},"#,
        r#""pooler.weight":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},"#,
        r#""embeddings.position_ids":{"dtype":"I64","shape":[3],"data_offsets":[16,40]}}"#
    );
    let mut data = (header.len() as u64).to_le_bytes().to_vec();
    data.extend_from_slice(header.as_bytes());
    for half in [0x3C00u16, 0x4000, 0x4200, 0x4400] {
        data.extend_from_slice(&half.to_le_bytes()); // fp16 1, 2, 3, 4
    }
    for f in [0.5f32, 0.5] {
        data.extend_from_slice(&f.to_le_bytes());
    }
    for i in [0i64, 1, 2] {
        data.extend_from_slice(&i.to_le_bytes());
    }
    let path = dir.join("model.safetensors");
    std::fs::write(&path, data).unwrap();
    path
}

/// A task model of the program's own tensors: the base model under "bert."
/// (bert.encoder.weight, 2x2 zeros) and a new head (classifier.weight, 1x2 = 9,9).
fn classifier_model() -> Model {
    let mut model = Model::new().unwrap();
    for (name, values, shape) in [
        (
            "bert.encoder.weight",
            &[0.0f32, 0.0, 0.0, 0.0][..],
            &[2i64, 2][..],
        ),
        ("classifier.weight", &[9.0, 9.0][..], &[1, 2][..]),
    ] {
        let mut w = Tensor::from_slice(values, shape).unwrap();
        w.set_requires_grad(true).unwrap();
        model.add_parameter(name, &w).unwrap();
    }
    model
}

fn values(model: &Model, name: &str) -> Vec<f32> {
    model.tensor(name).unwrap().to_vec::<f32>().unwrap()
}

fn bert() -> PretrainedOptions {
    PretrainedOptions::new().base_model_prefix("bert")
}

#[track_caller]
fn assert_status(err: Error, status: Status, words: &str) {
    assert_eq!(err.status(), status, "{err}");
    assert!(err.message().contains(words), "{err}");
}

#[test]
fn loads_as_transformers_does() {
    let dir = temp_dir("pretrained");
    let path = write_base_checkpoint(&dir);

    let mut model = classifier_model();
    let report = model
        .load_pretrained(&path, &bert().model_name("BertForSequenceClassification"))
        .unwrap();
    assert_eq!(values(&model, "bert.encoder.weight"), [1.0, 2.0, 3.0, 4.0]);
    assert_eq!(values(&model, "classifier.weight"), [9.0, 9.0]);
    assert_eq!(report.missing, ["classifier.weight"]);
    assert_eq!(
        report.unexpected,
        ["embeddings.position_ids", "pooler.weight"]
    );
    assert!(report.mismatched.is_empty(), "{report:?}");
    assert!(
        report.warnings.contains(
            "WARNING: Some weights of BertForSequenceClassification were not initialized"
        ),
        "{report:?}"
    );
    // The unexpected tensors are information unless the checkpoint is of this architecture.
    assert!(!report.warnings.contains("INFO: "), "{report:?}");
    assert!(
        report
            .text
            .contains("INFO: Some weights of the model checkpoint"),
        "{report:?}"
    );
    assert!(report.text.contains(&report.warnings), "{report:?}");

    let mut same = classifier_model();
    let report = same
        .load_pretrained(&path, &bert().architecture_matches(true))
        .unwrap();
    assert!(
        report
            .warnings
            .contains("WARNING: Some weights of the model checkpoint"),
        "{report:?}"
    );
    assert_eq!(report.text, report.warnings);

    // The string form takes the same keys.
    let mut by_text = classifier_model();
    let report = by_text
        .load_pretrained_spec(&path, "base_model_prefix=bert")
        .unwrap();
    assert_eq!(
        values(&by_text, "bert.encoder.weight"),
        [1.0, 2.0, 3.0, 4.0]
    );
    assert_eq!(report.missing, ["classifier.weight"]);
}

#[test]
fn strict_and_failed_loads_leave_the_model_unchanged() {
    let dir = temp_dir("pretrained-strict");
    let path = write_base_checkpoint(&dir);

    let mut strict = classifier_model();
    let err = strict
        .load_pretrained(&path, &bert().strict(true))
        .unwrap_err();
    assert_status(err, Status::InvalidArgument, "classifier.weight");
    assert_eq!(values(&strict, "bert.encoder.weight"), [0.0; 4]);
    assert_eq!(values(&strict, "classifier.weight"), [9.0, 9.0]);

    let err = strict
        .load_pretrained(dir.join("none.safetensors"), &PretrainedOptions::new())
        .unwrap_err();
    assert_status(err, Status::Io, "none.safetensors");

    // A tensor of another shape: a Shape error, or kept and reported with
    // ignore_mismatched_sizes.
    let mut narrow = Model::new().unwrap();
    let mut w = Tensor::from_slice(&[7.0f32, 7.0], &[1, 2]).unwrap();
    w.set_requires_grad(true).unwrap();
    narrow.add_parameter("bert.encoder.weight", &w).unwrap();
    let err = narrow.load_pretrained(&path, &bert()).unwrap_err();
    assert_eq!(err.status(), Status::Shape, "{err}");
    let report = narrow
        .load_pretrained(&path, &bert().ignore_mismatched_sizes(true))
        .unwrap();
    assert_eq!(report.mismatched, ["encoder.weight"]);
    assert!(
        report.warnings.contains("shapes did not match"),
        "{report:?}"
    );
    assert_eq!(values(&narrow, "bert.encoder.weight"), [7.0, 7.0]);

    // A text option cannot carry another option in; an unknown key is the library's error.
    let err = strict
        .load_pretrained(&path, &PretrainedOptions::new().model_name("x,strict=true"))
        .unwrap_err();
    assert_status(err, Status::InvalidArgument, "model_name");
    let err = strict
        .load_pretrained_spec(&path, "strictly=true")
        .unwrap_err();
    assert_status(err, Status::InvalidArgument, "unknown load option");
}

#[test]
fn a_name_map_renames_before_the_prefix_rule() {
    let dir = temp_dir("pretrained_mapped");
    let path = write_base_checkpoint(&dir);
    let mut model = classifier_model();
    let mut asked = Vec::new();
    // The checkpoint's names made a task checkpoint's ("bert.encoder.weight"), the rest unused.
    let report = model
        .load_pretrained_mapped(&path, &bert(), |name| {
            asked.push(name.to_string());
            name.starts_with("encoder.").then(|| format!("bert.{name}"))
        })
        .unwrap();
    assert_eq!(
        asked,
        ["embeddings.position_ids", "encoder.weight", "pooler.weight"]
    );
    assert_eq!(values(&model, "bert.encoder.weight"), [1.0, 2.0, 3.0, 4.0]);
    assert_eq!(
        report.unexpected,
        ["embeddings.position_ids", "pooler.weight"]
    );
    assert_eq!(report.missing, ["classifier.weight"]);
}

#[test]
fn name_map_failures_leave_the_model_unchanged() {
    let dir = temp_dir("pretrained_mapped_fail");
    let path = write_base_checkpoint(&dir);
    let mut model = classifier_model();
    let unchanged = |model: &Model| assert_eq!(values(model, "bert.encoder.weight"), [0.0; 4]);

    let err = model
        .load_pretrained_mapped(&path, &bert(), |_| Some("encoder.weight".to_string()))
        .unwrap_err();
    assert_status(err, Status::InvalidArgument, "one name, 'encoder.weight'");
    unchanged(&model);

    let err = model
        .load_pretrained_mapped(&path, &bert(), |_| Some("n".repeat(5000)))
        .unwrap_err();
    assert_status(err, Status::Callback, "longer than 4095 bytes");
    unchanged(&model);

    let err = model
        .load_pretrained_mapped(&path, &bert(), |_| Some(String::new()))
        .unwrap_err();
    assert_status(err, Status::InvalidArgument, "empty");
    unchanged(&model);

    // A panic on the last name comes back as the panic, the model unchanged.
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        model.load_pretrained_mapped(&path, &bert(), |name| {
            assert!(name != "pooler.weight", "no pooler here");
            Some(name.to_string())
        })
    }));
    let payload = panicked.expect_err("the map's panic resumes");
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"no pooler here"));
    unchanged(&model);
}
