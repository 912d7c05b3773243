//! collectives.rs - libaccel's runtime from Rust: where am I, and every collective once.
//!
//!   accel launch -n 2 target/debug/examples/collectives
//!
//! Each rank contributes a tensor that depends on its rank; the main process prints what came
//! back. Run alone it is a world of one and every collective is the identity. The same program
//! as examples/c/collectives.c, line for line the same output.
use std::io::Write;
use std::process::ExitCode;

use accel::{Accelerator, DistributedType, Dtype, Precision, Reduction, Tensor};

fn print_tensor(acc: &Accelerator, label: &str, t: &Tensor) -> accel::Result<()> {
    let shape = t.shape()?;
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let mut line = format!("{label:<24} shape [{}] values", dims.join(", "));
    if t.dtype()? == Dtype::F32 {
        for v in t.to_vec::<f32>()? {
            line.push_str(&format!(" {v}"));
        }
    }
    acc.print(&line)
}

fn run() -> accel::Result<()> {
    let acc = Accelerator::new()?;
    let rank = acc.process_index()?;
    let world = acc.num_processes()?;
    let local_rank = acc.local_process_index()?;
    let is_main = acc.is_main_process()?;
    let device = acc.device()?;
    let dist = acc.distributed_type()?;
    let mp = acc.mixed_precision()?;
    acc.set_seed(42, false)?;

    println!(
        "rank {rank} of {world} (local rank {local_rank}) on {device}{}",
        if is_main { ", main process" } else { "" }
    );
    std::io::stdout().flush().ok();
    acc.wait_for_everyone()?;
    let dist = match dist {
        DistributedType::No => "NO",
        DistributedType::MultiCpu => "MULTI_CPU",
        _ => "MULTI_GPU",
    };
    let mp = match mp {
        Precision::No => "no",
        Precision::Bf16 => "bf16",
        _ => "fp16",
    };
    acc.print(&format!(
        "distributed type {dist}, mixed precision {mp}, libaccel {}",
        accel::version()
    ))?;

    // gather: rank r contributes [r*10, r*10+1]; everyone gets [0, 1, 10, 11, ...].
    let mine = Tensor::from_slice(&[(rank * 10) as f32, (rank * 10 + 1) as f32], &[2])?;
    print_tensor(&acc, "gather", &acc.gather(&mine)?)?;

    // pad_across_processes: rank r holds r+1 ones; padded with -1 to the longest, then gathered.
    let n = (rank + 1).min(16) as usize;
    let ones = Tensor::from_slice(&vec![1.0f32; n], &[n as i64])?;
    let padded = acc.pad_across_processes(&ones, 0, -1.0, false)?;
    print_tensor(&acc, "pad + gather", &acc.gather(&padded)?)?;

    // reduce: sum and mean of (rank + 1).
    let v = Tensor::scalar((rank + 1) as f32)?;
    print_tensor(
        &acc,
        "reduce sum of rank+1",
        &acc.reduce(&v, Reduction::Sum)?,
    )?;
    print_tensor(
        &acc,
        "reduce mean of rank+1",
        &acc.reduce(&v, Reduction::Mean)?,
    )?;

    // broadcast from the last rank: only it needs a tensor.
    let source = if rank == world - 1 {
        Some(Tensor::from_slice(&[3.5f32, 4.5, 5.5], &[3])?)
    } else {
        None
    };
    let got = acc.broadcast(source.as_ref(), world - 1)?;
    print_tensor(&acc, "broadcast from last rank", &got)?;

    // gather_object: bytes of any length per rank.
    let text = format!("hello from rank {rank}");
    for (i, bytes) in acc.gather_object(text.as_bytes())?.iter().enumerate() {
        acc.print(&format!(
            "gather_object[{i}]       \"{}\"",
            String::from_utf8_lossy(bytes)
        ))?;
    }
    acc.wait_for_everyone()
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("collectives failed: {e}");
            ExitCode::FAILURE
        }
    }
}
