//! host_model_tch.rs - a rank of the tch-rs host-model check: an MLP in a tch `nn::VarStore`, lent
//! to libaccel, trained 24 SGD steps (momentum 0.9) on fixed data with batch B per process. Each
//! rank seeds LibTorch with its own index, so only accel_prepare's broadcast makes them agree;
//! every rank checks it holds rank 0's values bit for bit, and rank 0 prints every parameter as
//! "param NAME v1 v2 ...".
//!   accel launch -n 2 target/debug/examples/host_model_tch 32
use accel::optimizers::Sgd;
use accel::tch;
use accel::tch::nn::{self, Module};
use accel::{Accelerator, DataLoader, DataLoaderOptions, Dataset, Model, Optimizer, Tensor};

fn run(batch: i64) -> Result<(), Box<dyn std::error::Error>> {
    let acc = Accelerator::new()?;
    let rank = acc.process_index()?;
    tch::manual_seed(100 + i64::from(rank));
    let vs = nn::VarStore::new(tch::Device::Cpu);
    let root = vs.root();
    let mlp = nn::seq()
        .add(nn::linear(&root / "fc1", 20, 32, Default::default()))
        .add_fn(|x| x.relu())
        .add(nn::linear(&root / "fc2", 32, 4, Default::default()));
    let mut model = Model::from_var_store(&vs)?;
    let mut opt = Optimizer::with(&model, Sgd::new().lr(0.05).momentum(0.9))?;

    // The data of mp_program's "equiv" mode: 1280 samples, 20 features, 4 classes.
    let n = 1280i64;
    let index = tch::Tensor::arange(n, (tch::Kind::Int64, tch::Device::Cpu)).unsqueeze(1);
    let columns = tch::Tensor::arange(20, (tch::Kind::Int64, tch::Device::Cpu)).unsqueeze(0);
    let x = (((index * 7 + columns * 13).remainder(17)).to_kind(tch::Kind::Float) / 17.0) - 0.5;
    let y = (tch::Tensor::arange(n, (tch::Kind::Int64, tch::Device::Cpu)) * 3).remainder(4);
    let data = Dataset::from_tensors(&[&Tensor::from_tch(&x)?, &Tensor::from_tch(&y)?])?;
    let mut loader = DataLoader::with(&acc, &data, DataLoaderOptions::new().batch_size(batch))?;
    acc.prepare((&mut model, &mut opt, &mut loader))?;

    let mut step = 0;
    while step < 24 {
        let Some(fields) = loader.next_batch()? else {
            continue;
        };
        let [xb, yb] = accel::fields(fields)?;
        let (xb, yb) = (xb.to_tch()?, yb.to_tch()?);
        acc.accumulate()?;
        let loss = model.forward(|| mlp.forward(&xb).cross_entropy_for_logits(&yb))?;
        acc.backward(&Tensor::from_tch(&loss)?)?;
        opt.step()?;
        opt.zero_grad()?;
        step += 1;
    }

    let mut named: Vec<_> = vs.variables().into_iter().collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, t) in named {
        let all = acc
            .gather(&Tensor::from_tch(&t.detach().copy().unsqueeze(0))?)?
            .to_tch()?;
        for r in 1..all.size()[0] {
            if !all.get(r).equal(&all.get(0)) {
                return Err(format!("rank {rank}: {name} differs from rank 0's").into());
            }
        }
        if acc.is_main_process()? {
            let values = Vec::<f32>::try_from(t.flatten(0, -1))?;
            let text: Vec<String> = values.iter().map(|v| format!("{v:e}")).collect();
            println!("param {name} {}", text.join(" "));
        }
    }
    acc.wait_for_everyone()?;
    Ok(())
}

fn main() -> std::process::ExitCode {
    let batch = std::env::args()
        .nth(1)
        .and_then(|b| b.parse().ok())
        .unwrap_or(64);
    match run(batch) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("host_model_tch failed: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
