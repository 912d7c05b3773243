//! The configuration keys of Accelerate's GradientAccumulationPlugin and DataLoaderConfiguration
//! that have no call of their own: set, read back, refused when malformed, and in force.

mod common;

use accel::{fields, Accelerator, Config, DataLoader, Dataset, Status, Tensor};
use common::one_accelerator;

#[test]
fn plugin_and_dataloader_keys() {
    let mut config = Config::new().unwrap();
    for (key, value) in [
        ("sync_each_batch", "true"),
        ("sync_with_dataloader", "false"),
        ("adjust_scheduler", "false"),
        ("data_seed", "1234"),
        ("use_seedable_sampler", "true"),
        ("save_on_each_node", "true"),
    ] {
        config
            .set(key, value)
            .unwrap_or_else(|e| panic!("{key}: {e}"));
        assert_eq!(config.get(key).unwrap(), value, "{key}");
    }
    for (key, value) in [("sync_each_batch", "sometimes"), ("data_seed", "x")] {
        let e = config.set(key, value).unwrap_err();
        assert_eq!(e.status(), Status::Config, "{key}: {e}");
    }

    // data_seed is every dataloader's default seed: two accelerators with it shuffle alike, and
    // as a loader given that seed does.
    let order = |config: &Config, seed: Option<u64>| -> Vec<i64> {
        let _one = one_accelerator();
        let acc = Accelerator::with_config(config).unwrap();
        let x = Tensor::from_slice(&(0..16i64).collect::<Vec<_>>(), &[16]).unwrap();
        let data = Dataset::from_tensors(&[&x]).unwrap();
        let mut loader = DataLoader::new(&acc, &data).unwrap();
        loader.set("batch_size", 16).unwrap();
        loader.set("shuffle", true).unwrap();
        if let Some(seed) = seed {
            loader.set("seed", seed).unwrap();
        }
        let [x] = fields(loader.next_batch().unwrap().unwrap()).unwrap();
        x.to_vec::<i64>().unwrap()
    };
    let mut seeded = Config::new().unwrap();
    seeded.set("data_seed", 1234).unwrap();
    let plain = Config::new().unwrap();
    assert_eq!(order(&seeded, None), order(&plain, Some(1234)));
    assert_ne!(order(&seeded, None), order(&plain, None));
}
