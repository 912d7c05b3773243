//! calls_bench.rs - what one call costs from Rust, beside C's bench/calls.c (its loops, mirrored):
//! a one-element f32 tensor made from one float and dropped, an element-count query, and a sum of
//! a one-element tensor across the processes, the result dropped.
//!
//!   cargo build --release --example calls_bench
//!   accel launch -n 2 target/release/examples/calls_bench [iterations (200000)]
//!
//! Rank 0 prints `create_free_ns`, `query_ns` and `allreduce_ns`, ns per call, the best of 5
//! repetitions after a warm-up; the collective runs iterations / 400 times (500 by default).
use std::cell::Cell;
use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

use accel::{Accelerator, Reduction, Tensor};

const REPETITIONS: usize = 5;

fn one_element(value: f32) -> accel::Result<Tensor> {
    Tensor::from_slice(&[value], &[1])
}

/// Nanoseconds per call of `call`, run `n` times.
fn per_call(n: u64, mut call: impl FnMut(u64) -> accel::Result<()>) -> accel::Result<f64> {
    let start = Instant::now();
    for i in 0..n {
        call(i)?;
    }
    Ok(start.elapsed().as_secs_f64() * 1e9 / n as f64)
}

fn run(n: u64) -> accel::Result<()> {
    let n_collective = (n / 400).max(1);
    let acc = Accelerator::new()?;
    let t = one_element(1.0)?;
    let create_free = |i: u64| one_element(i as f32).map(drop);
    // Summed as C sums into a volatile: the query cannot be optimised away.
    let sink = Cell::new(0i64);
    let query = |_| {
        sink.set(sink.get() + black_box(t.element_count()?));
        Ok(())
    };
    let allreduce = |_| acc.reduce(&t, Reduction::Sum).map(drop);
    // Warm-up: the allocator's caches, the branch predictor, the collective's first connection.
    per_call(n / 10, create_free)?;
    per_call(n / 10, query)?;
    per_call(n_collective / 10 + 1, allreduce)?;
    let (mut c, mut q, mut r) = (f64::INFINITY, f64::INFINITY, f64::INFINITY);
    for _ in 0..REPETITIONS {
        c = c.min(per_call(n, create_free)?);
        q = q.min(per_call(n, query)?);
        r = r.min(per_call(n_collective, allreduce)?);
    }
    black_box(sink.get());
    if acc.process_index()? == 0 {
        println!("create_free_ns {c:.1}\nquery_ns {q:.1}\nallreduce_ns {r:.1}");
    }
    Ok(())
}

fn main() -> ExitCode {
    let n = match std::env::args().nth(1).map(|a| a.parse::<u64>()) {
        None => 200_000,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("usage: calls_bench [iterations > 0]");
            return ExitCode::from(2);
        }
    };
    match run(n) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("calls_bench failed: {e}");
            ExitCode::FAILURE
        }
    }
}
