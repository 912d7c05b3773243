//! The step helpers on two real processes (`accel launch -n 2`): find_executable_batch_size
//! agreeing on one size, LocalSGD averaging the parameters, and which rank runs what.
//!
//! As tests/multiprocess.rs, this binary is both the test and the program each rank runs (with
//! ACCEL_RS_ROLE set).

mod common;

use std::path::Path;

use accel::{Accelerator, Error, Model, Optimizer, Status, Tensor};
use common::launch::{expect_line, launch, parameters_agree, run, run_tests, Check};
use common::{linear_model, temp_dir};

fn main() {
    if let Ok(role) = std::env::var("ACCEL_RS_ROLE") {
        let result = match role.as_str() {
            "steps" => rank_steps(),
            other => Err(format!("unknown role {other}")),
        };
        if let Err(why) = result {
            eprintln!("rank failed: {why}");
            std::process::exit(1);
        }
        return;
    }
    let tests: &[(&str, Check)] = &[(
        "two_ranks_agree_on_a_batch_size_and_average_parameters",
        two_ranks_agree_on_a_batch_size_and_average_parameters,
    )];
    run_tests(tests);
}

// ---- the parent side -------------------------------------------------------------------------

fn two_ranks_agree_on_a_batch_size_and_average_parameters() -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = temp_dir("steps");
    let out = run(launch(2, &exe)
        .env("ACCEL_RS_ROLE", "steps")
        .env("ACCEL_RS_DIR", &dir))?;
    std::fs::remove_dir_all(dir).ok();
    let tries = "[128, 115, 103, 92, 82, 73, 65, 58, 52, 46, 41, 36, 32, 28, 25, 22, 19]";
    for line in [
        format!("rank 0: batch size 19 after {tries}"),
        format!("rank 1: batch size 19 after {tries}"),
        "rank 0: rank 1's own error stopped the search here too (ACCEL_ERR_PEER_FAILED)".into(),
        "rank 1: its own error came back unchanged".into(),
        "rank 0: 3 averages over 5 steps, parameters apart before the end, equal after".into(),
        "rank 1: 3 averages over 5 steps, parameters apart before the end, equal after".into(),
        "rank 0: main, local main, not last; its block ran first".into(),
        "rank 1: last; its block ran after the local main process's".into(),
    ] {
        expect_line(&out, &line)?;
    }
    Ok(())
}

// ---- the ranks -------------------------------------------------------------------------------

fn rank_steps() -> Result<(), String> {
    let acc = Accelerator::new().map_err(|e| e.to_string())?;
    let rank = acc.process_index().map_err(|e| e.to_string())?;
    let dir = std::env::var_os("ACCEL_RS_DIR").ok_or("ACCEL_RS_DIR")?;
    batch_size_agreed(&acc, rank).map_err(|e| format!("rank {rank}: {e}"))?;
    local_sgd_averages(&acc, rank).map_err(|e| format!("rank {rank}: {e}"))?;
    who_runs_what(&acc, rank, Path::new(&dir)).map_err(|e| format!("rank {rank}: {e}"))?;
    acc.wait_for_everyone().map_err(|e| e.to_string())
}

/// Rank 0 runs out of memory above 40, rank 1 above 20: every rank retries while any ran out,
/// so both try the same sizes and both get 19. Then rank 1 fails otherwise at 8: its error
/// comes back to it as it was, and the search stops on rank 0 as well.
fn batch_size_agreed(acc: &Accelerator, rank: i32) -> Result<(), String> {
    let limit = if rank == 0 { 40 } else { 20 };
    let mut tries = Vec::new();
    let (size, ran_at) = acc
        .find_executable_batch_size(128, |size| {
            tries.push(size);
            if size > limit {
                return Err(Error::new(Status::OutOfMemory, "fake: out of memory"));
            }
            Ok(size)
        })
        .map_err(|e| e.to_string())?;
    if size != ran_at {
        return Err(format!("size {size}, the try that ran had {ran_at}"));
    }
    println!("rank {rank}: batch size {size} after {tries:?}");

    let own = Error::new(Status::Shape, "rank 1's own error");
    let result = acc.find_executable_batch_size(8, |_| {
        if rank == 1 {
            return Err(own.clone());
        }
        Ok(())
    });
    match (rank, result) {
        (0, Err(e)) if e.status() == Status::PeerFailed => println!(
            "rank 0: rank 1's own error stopped the search here too ({})",
            e.status()
        ),
        (1, Err(e)) if e == own => println!("rank 1: its own error came back unchanged"),
        (_, other) => return Err(format!("the failing search gave {other:?}")),
    }
    Ok(())
}

/// LocalSGD every 2 steps over 5 steps of each rank's own data: averages at steps 2 and 4 and
/// at the end (step 5 did not), 3 in all; the parameters part after step 5 and agree after the
/// end.
fn local_sgd_averages(acc: &Accelerator, rank: i32) -> Result<(), String> {
    let fail = |e: accel::Error| e.to_string();
    let mut model = linear_model(2, 1);
    let mut opt = Optimizer::new(&model, "sgd").map_err(fail)?;
    opt.set("lr", 0.1).map_err(fail)?;
    acc.prepare((&mut model, &mut opt)).map_err(fail)?;
    // Each rank its own batch: without averaging the replicas drift apart.
    let r = rank as f32 + 1.0;
    let x = Tensor::from_slice(&[r, -r, 0.5 * r, 2.0], &[2, 2]).map_err(fail)?;
    let y = Tensor::from_slice(&[r, 3.0 * r], &[2, 1]).map_err(fail)?;
    let step = |opt: &mut Optimizer, model: &Model| -> accel::Result<()> {
        acc.backward(&model.call1("training_step", &[&x, &y])?)?;
        opt.step()?;
        opt.zero_grad()
    };
    let mut local_sgd = accel::LocalSgd::new(acc, &model, 2).map_err(fail)?;
    for i in 1..=5 {
        step(&mut opt, &model).map_err(fail)?;
        local_sgd.step().map_err(fail)?;
        if i == 4 {
            parameters_agree(acc, &model).map_err(|e| format!("after the average at 4: {e}"))?;
        }
    }
    if parameters_agree(acc, &model).is_ok() {
        return Err("the parameters agree after step 5, which did not average".into());
    }
    local_sgd.end().map_err(fail)?;
    parameters_agree(acc, &model).map_err(|e| format!("after the end: {e}"))?;
    let averages = local_sgd.average_count().map_err(fail)?;
    local_sgd.end().map_err(fail)?; // a second end: no collective, nothing averaged
    if averages != 3 || local_sgd.average_count().map_err(fail)? != 3 {
        return Err(format!("{averages} averages over 5 steps"));
    }
    println!(
        "rank {rank}: {averages} averages over 5 steps, parameters apart before the end, equal \
         after"
    );
    Ok(())
}

/// is_last_process and the on_* closures on each rank, and local_main_process_first: the local
/// main process's block has finished (its file written) before the other rank's starts.
fn who_runs_what(acc: &Accelerator, rank: i32, dir: &Path) -> Result<(), String> {
    let fail = |e: accel::Error| e.to_string();
    let mut ran = Vec::new();
    acc.on_main_process(|| ran.push("main")).map_err(fail)?;
    acc.on_local_main_process(|| ran.push("local main"))
        .map_err(fail)?;
    acc.on_last_process(|| ran.push("last")).map_err(fail)?;
    let mine = acc.on_process(1, || rank).map_err(fail)?;
    let want: &[&str] = if rank == 0 {
        &["main", "local main"]
    } else {
        &["last"]
    };
    if ran != want
        || mine != (rank == 1).then_some(1)
        || acc.is_last_process().map_err(fail)? != (rank == 1)
    {
        return Err(format!("ran {ran:?}, on_process(1) {mine:?}"));
    }
    let cache = dir.join("cache.txt");
    let found = acc
        .local_main_process_first(|| -> std::io::Result<bool> {
            let found = cache.exists();
            if rank == 0 {
                // Slow enough that rank 1, were it not held back, would look before the write.
                std::thread::sleep(std::time::Duration::from_millis(300));
                std::fs::write(&cache, "made once per machine")?;
            }
            Ok(found)
        })
        .map_err(fail)?
        .map_err(|e| e.to_string())?;
    if found != (rank == 1) {
        return Err(format!("the cache file was there: {found}"));
    }
    if rank == 0 {
        println!("rank 0: main, local main, not last; its block ran first");
    } else {
        println!("rank 1: last; its block ran after the local main process's");
    }
    Ok(())
}
