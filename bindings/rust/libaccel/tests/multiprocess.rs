//! Real processes over real Gloo: the examples and this crate's training loop under
//! `accel launch -n 2`, and one process x 64 against two x 32.
//!
//! This binary is both the test and the program `accel launch` runs on each rank: with
//! ACCEL_RS_ROLE set it plays that role (a rank) and exits non-zero when a check fails.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use accel::layers::Linear;
use accel::optimizers::AdamW;
use accel::{
    fields, Accelerator, Config, DataLoader, DataLoaderOptions, Dataset, DistributedType, Dtype,
    Field, Model, Optimizer, Reduction, Sample, Tensor,
};
use common::launch::{expect_line, launch, parameters_agree, run, run_tests, Check};
use common::{repo_root, temp_dir, FASHION_MNIST};

const MLP: &str = "
def forward(self, x):
    return self.fc2.forward(torch.relu(self.fc1.forward(x)))

def training_step(self, x, y):
    return torch.cross_entropy_loss(self.forward(x), y.long())
";

fn main() {
    if let Ok(role) = std::env::var("ACCEL_RS_ROLE") {
        let result = match role.as_str() {
            "train" => rank_train(),
            "equiv" => rank_equiv(),
            other => Err(format!("unknown role {other}")),
        };
        if let Err(why) = result {
            eprintln!("rank failed: {why}");
            std::process::exit(1);
        }
        return;
    }
    let tests: &[(&str, Check)] = &[
        (
            "collectives_example_on_two_ranks",
            collectives_example_on_two_ranks,
        ),
        (
            "training_example_on_two_ranks",
            training_example_on_two_ranks,
        ),
        (
            "training_example_matches_the_c_example",
            training_example_matches_the_c_example,
        ),
        ("two_ranks_train_and_agree", two_ranks_train_and_agree),
        ("one_by_64_equals_two_by_32", one_by_64_equals_two_by_32),
        (
            "zero_stage_two_from_the_config_equals_stage_zero",
            zero_stage_two_from_the_config_equals_stage_zero,
        ),
    ];
    run_tests(tests);
}

// ---- the parent side -------------------------------------------------------------------------

/// An example of this crate, built by `cargo test` next to this test's binary.
fn example(name: &str) -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let path = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("examples").join(name))
        .ok_or("no target directory")?;
    if path.exists() {
        Ok(path)
    } else {
        Err(format!(
            "{} is missing: `cargo test` builds the examples (or `cargo build --examples`)",
            path.display()
        ))
    }
}

fn collectives_example_on_two_ranks() -> Result<(), String> {
    let out = run(&mut launch(2, &example("collectives")?))?;
    for line in [
        "rank 0 of 2 (local rank 0) on cpu, main process",
        "rank 1 of 2 (local rank 1) on cpu",
        "gather                   shape [4] values 0 1 10 11",
        "pad + gather             shape [4] values 1 -1 1 1",
        "reduce sum of rank+1     shape [] values 3",
        "reduce mean of rank+1    shape [] values 1.5",
        "broadcast from last rank shape [3] values 3.5 4.5 5.5",
        "gather_object[0]       \"hello from rank 0\"",
        "gather_object[1]       \"hello from rank 1\"",
    ] {
        expect_line(&out, line)?;
    }
    Ok(())
}

/// The values after `key` in every line that has it ("loss 0.9495" -> 0.9495).
fn values_after(output: &str, key: &str) -> Vec<f64> {
    output
        .lines()
        .filter_map(|l| {
            let rest = l.split(key).nth(1)?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .collect()
}

fn training_example_on_two_ranks() -> Result<(), String> {
    let mut cmd = launch(2, &example("train_fashion_mnist")?);
    cmd.args(["--max-steps", "300"]);
    let out = run(&mut cmd)?;
    let losses = values_after(&out, " loss ");
    if losses.len() != 3 || losses[2].partial_cmp(&losses[0]) != Some(std::cmp::Ordering::Less) {
        return Err(format!(
            "the loss does not fall at steps 100, 200, 300:\n{out}"
        ));
    }
    let accuracy = values_after(&out, "test accuracy ");
    if accuracy.len() != 1 || accuracy[0] < 0.7 {
        return Err(format!("test accuracy below 0.7 after 300 steps:\n{out}"));
    }
    Ok(())
}

/// The C and the Rust example, one process: the same losses and the same test result.
fn training_example_matches_the_c_example() -> Result<(), String> {
    let c = std::env::var_os("ACCEL_C_EXAMPLES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("build/bin"))
        .join("train_fashion_mnist");
    let args = ["--max-steps", "200", "--workers", "0"];
    let from_c = run(Command::new(&c).args(args))?;
    let from_rust = run(Command::new(example("train_fashion_mnist")?).args(args))?;
    // Everything but the timings: the first line, "step N/M loss X", and the accuracy count.
    let keep = |out: &str| -> Vec<String> {
        out.lines()
            .map(|l| {
                let l = l.split(" samples/s").next().unwrap_or(l);
                let l = l.split(" after ").next().unwrap_or(l);
                l.rsplit_once(" loss ")
                    .map_or(l.to_string(), |(head, tail)| {
                        format!(
                            "{head} loss {}",
                            tail.split_whitespace().next().unwrap_or("")
                        )
                    })
            })
            .collect()
    };
    // The rate's last field varies: drop what follows the loss value.
    let (a, b) = (keep(&from_c), keep(&from_rust));
    if a != b || a.len() != 4 {
        return Err(format!("C:\n{from_c}\nRust:\n{from_rust}"));
    }
    Ok(())
}

/// The training role, and after it (on the same two ranks: no launch of its own) uneven inputs
/// under join_uneven_inputs with the same model, the text inference helpers
/// (split_between_processes and the trigger), a stream, dispatched by the main process and
/// sharded on every process, and the logger's messages through the `log` facade.
fn two_ranks_train_and_agree() -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = temp_dir("train");
    let log = dir.join("log.txt");
    let out = run(launch(2, &exe)
        .env("ACCEL_RS_ROLE", "train")
        .env("ACCEL_RS_LOG", &log))?;
    logged_once_per_rank_and_in_order(&log)?;
    std::fs::remove_dir_all(dir).ok();
    for line in [
        "rank 0: the loss fell, parameters equal on every rank",
        "rank 1: the loss fell, parameters equal on every rank",
        "rank 0: 3 steps in join_uneven_inputs, parameters equal on every rank",
        "rank 1: 2 steps in join_uneven_inputs, parameters equal on every rank",
        r#"rank 0: split ["zero", "one"], padded ["zero", "one"], rows [0, 1]"#,
        r#"rank 1: split ["two"], padded ["two", "two"], rows [2, 2]"#,
        "rank 0: the trigger rank 1 set was seen, then lowered",
        "rank 1: the trigger rank 1 set was seen, then lowered",
        "rank 0: stream labels [[0], [2], [4]] dispatched (read here) and sharded",
        "rank 1: stream labels [[1], [3], [0]] dispatched (not read here) and sharded",
    ] {
        expect_line(&out, line)?;
    }
    Ok(())
}

/// The lines the ranks' `log` loggers appended to one file (`LEVEL rank/processes main_only:
/// message`, in the order written): a main-process-only message once, from rank 0; a message of
/// every process once per rank; three rounds in rank order though rank 1 arrived first; nothing
/// below the level.
fn logged_once_per_rank_and_in_order(path: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let lines: Vec<&str> = text.lines().collect();
    let mut want = vec![
        "INFO 0/2 true: once per job",
        "WARN 0/2 false: every rank",
        "WARN 1/2 false: every rank",
    ];
    let rounds = [
        "INFO 0/2 false: round 0",
        "INFO 1/2 false: round 0",
        "INFO 0/2 false: round 1",
        "INFO 1/2 false: round 1",
        "INFO 0/2 false: round 2",
        "INFO 1/2 false: round 2",
    ];
    let in_rounds: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.contains(": round "))
        .collect();
    if in_rounds != rounds {
        return Err(format!(
            "the in-order rounds are not in rank order:\n{text}"
        ));
    }
    want.extend(rounds);
    let (mut got, mut expected) = (lines.clone(), want.clone());
    got.sort_unstable();
    expected.sort_unstable();
    if got != expected {
        return Err(format!(
            "logged:\n{text}\nwanted (in any order but the rounds'):\n{}",
            want.join("\n")
        ));
    }
    Ok(())
}

fn params_of(path: &Path) -> Result<BTreeMap<String, Vec<f32>>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let name = words.next()?.to_string();
            Some((name, words.filter_map(|w| w.parse().ok()).collect()))
        })
        .collect())
}

fn one_by_64_equals_two_by_32() -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = temp_dir("equiv");
    let one = dir.join("1x64.txt");
    let two = dir.join("2x32.txt");
    run(launch(1, &exe)
        .env("ACCEL_RS_ROLE", "equiv")
        .env("ACCEL_RS_BATCH", "64")
        .env("ACCEL_RS_OUT", &one))?;
    run(launch(2, &exe)
        .env("ACCEL_RS_ROLE", "equiv")
        .env("ACCEL_RS_BATCH", "32")
        .env("ACCEL_RS_OUT", &two))?;
    expect_close(&one, &two, 1e-5, "1 x 64 and 2 x 32")?;
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

/// The parameters in files `a` and `b` (4 tensors) within `tolerance` x each tensor's largest.
fn expect_close(a: &Path, b: &Path, tolerance: f32, what: &str) -> Result<(), String> {
    let (a, b) = (params_of(a)?, params_of(b)?);
    if a.len() != 4 || a.keys().ne(b.keys()) {
        return Err(format!(
            "parameter names differ: {:?} vs {:?}",
            a.keys(),
            b.keys()
        ));
    }
    for (name, x) in &a {
        let y = &b[name];
        let scale = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = x.iter().zip(y).fold(0f32, |m, (p, q)| m.max((p - q).abs()));
        if x.len() != y.len() || worst > tolerance * scale {
            return Err(format!("{name}: {what} differ by {worst} (scale {scale})"));
        }
    }
    Ok(())
}

/// ZeRO stage 2 chosen through Config (each rank steps, and keeps the gradients of, the
/// parameters it owns) trains to what stage 0 does, with AdamW on two ranks.
fn zero_stage_two_from_the_config_equals_stage_zero() -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = temp_dir("zero");
    let (plain, sharded, state) = (
        dir.join("stage0.txt"),
        dir.join("stage2.txt"),
        dir.join("state"),
    );
    let equiv = |out: &Path| {
        let mut cmd = launch(2, &exe);
        cmd.env("ACCEL_RS_ROLE", "equiv")
            .env("ACCEL_RS_BATCH", "32")
            .env("ACCEL_RS_OPTIMIZER", "adamw")
            .env("ACCEL_RS_OUT", out);
        cmd
    };
    run(&mut equiv(&plain))?;
    run(equiv(&sharded)
        .env("ACCEL_RS_ZERO_STAGE", "2")
        .env("ACCEL_RS_STATE_DIR", &state))?;
    expect_close(&plain, &sharded, 1e-6, "stage 0 and stage 2")?;
    // The job was sharded: each rank saved its own part of the optimizer state.
    for rank in 0..2 {
        let part = state.join(format!("optimizer_0.rank_{rank}.safetensors"));
        if !part.exists() {
            return Err(format!(
                "no optimizer part of rank {rank}: {}",
                part.display()
            ));
        }
    }
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

// ---- the ranks -------------------------------------------------------------------------------

fn mlp(hidden: i64, inputs: i64, outputs: i64) -> accel::Result<Model> {
    let mut model = Model::new()?;
    model.add("fc1", Linear::new(inputs, hidden))?;
    model.add("fc2", Linear::new(hidden, outputs))?;
    model.define(MLP)?;
    Ok(model)
}

fn rank_train() -> Result<(), String> {
    let acc = Accelerator::new().map_err(|e| e.to_string())?;
    let rank = acc.process_index().map_err(|e| e.to_string())?;
    let train = || -> accel::Result<(f64, f64, Model, Optimizer, DataLoader)> {
        acc.set_seed(5, false)?;
        let mut model = mlp(64, 784, 10)?;
        let mut opt = Optimizer::with(&model, AdamW::new().lr(2e-3))?;
        let data = Dataset::from_idx(&[
            format!("{FASHION_MNIST}/train-images-idx3-ubyte.gz"),
            format!("{FASHION_MNIST}/train-labels-idx1-ubyte.gz"),
        ])?;
        let options = DataLoaderOptions::new()
            .batch_size(32)
            .shuffle(true)
            .num_workers(1);
        let mut loader = DataLoader::with(&acc, &data, options)?;
        acc.prepare((&mut model, &mut opt, &mut loader))?;
        let (mut first, mut last) = (0.0, 0.0);
        for (step, batch) in loader.iter().take(300).enumerate() {
            let [images, labels] = fields(batch?)?;
            let x = Tensor::from_slice(
                &images
                    .to_vec::<u8>()?
                    .iter()
                    .map(|&p| f32::from(p) / 255.0)
                    .collect::<Vec<_>>(),
                &[images.shape()?[0], 784],
            )?;
            acc.accumulate()?;
            let loss = model.call1("training_step", &[&x, &labels])?;
            acc.backward(&loss)?;
            opt.step()?;
            opt.zero_grad()?;
            let value = acc.reduce(&loss, Reduction::Mean)?.item::<f64>()?;
            if step < 20 {
                first += value / 20.0;
            } else if step >= 280 {
                last += value / 20.0;
            }
        }
        // The loader stays open: join_uneven_inputs' even_batches override sets every prepared
        // loader's, and a closed one refuses (State).
        Ok((first, last, model, opt, loader))
    };
    let (first, last, model, mut opt, _loader) = train().map_err(|e| e.to_string())?;
    if last.partial_cmp(&(0.7 * first)) != Some(std::cmp::Ordering::Less) {
        return Err(format!(
            "rank {rank}: the loss did not fall: {first:.4} -> {last:.4}"
        ));
    }
    parameters_agree(&acc, &model)?;
    println!("rank {rank}: the loss fell, parameters equal on every rank");
    join_uneven(&acc, rank, &model, &mut opt).map_err(|e| format!("rank {rank}: {e}"))?;
    split_and_trigger(&acc, rank).map_err(|e| format!("rank {rank}: {e}"))?;
    stream_shards(&acc, rank).map_err(|e| format!("rank {rank}: {e}"))?;
    log_lines(&acc, rank).map_err(|e| format!("rank {rank}: {e}"))?;
    acc.wait_for_everyone().map_err(|e| e.to_string())
}

/// The rank's `log` logger: each record as one line appended to the file ACCEL_RS_LOG names
/// (one write each, O_APPEND: the file's order is the order the ranks wrote in), with its rank
/// and processes from the record's key-values.
struct AppendLog(Mutex<std::fs::File>);

impl log::Log for AppendLog {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.target() == accel::LOG_TARGET
    }

    fn log(&self, record: &log::Record<'_>) {
        let kv = |key: &str| record.key_values().get(log::kv::Key::from_str(key));
        let line = format!(
            "{} {}/{} {}: {}\n",
            record.level(),
            kv("rank").and_then(|v| v.to_i64()).unwrap_or(-1),
            kv("num_processes").and_then(|v| v.to_i64()).unwrap_or(-1),
            kv("main_process_only")
                .and_then(|v| v.to_bool())
                .unwrap_or(false),
            record.args()
        );
        let mut file = self.0.lock().unwrap_or_else(|p| p.into_inner());
        file.write_all(line.as_bytes())
            .expect("the log file takes a line");
    }

    fn flush(&self) {}
}

/// Accelerate's logger on two ranks (the checks are the parent's, on the file): once per job, on
/// every rank, three rounds in rank order with rank 1 made to arrive first, and a debug message
/// below the level.
fn log_lines(acc: &Accelerator, rank: i32) -> Result<(), String> {
    let path = std::env::var_os("ACCEL_RS_LOG").ok_or("ACCEL_RS_LOG")?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| e.to_string())?;
    let logger: &'static AppendLog = Box::leak(Box::new(AppendLog(Mutex::new(file))));
    log::set_logger(logger).map_err(|e| e.to_string())?;
    log::set_max_level(log::LevelFilter::Trace);
    let fail = |e: accel::Error| e.to_string();
    let logger = acc.logger();
    logger.info("once per job").map_err(fail)?;
    logger.all_processes().warn("every rank").map_err(fail)?;
    for round in 0..3 {
        std::thread::sleep(std::time::Duration::from_millis(40 * (1 - rank as u64)));
        logger
            .in_order()
            .info(format!("round {round}"))
            .map_err(fail)?;
    }
    logger
        .all_processes()
        .debug("hidden below info")
        .map_err(fail)
}

/// join_uneven_inputs with the role's model (its only prepared model, no buffers): 10 samples,
/// 2 per rank and step, even_batches off inside the join: rank 0 makes 3 steps while rank 1,
/// done after 2, answers its gradient all-reduce; then rank 1 takes rank 0's parameters.
fn join_uneven(
    acc: &Accelerator,
    rank: i32,
    model: &Model,
    opt: &mut Optimizer,
) -> Result<(), String> {
    let fail = |e: accel::Error| e.to_string();
    let params = || -> accel::Result<Vec<f32>> {
        let mut all = Vec::new();
        for name in model.tensor_names()? {
            all.extend(model.tensor(&name)?.to_vec::<f32>()?);
        }
        Ok(all)
    };
    let xs: Vec<f32> = (0..10 * 784)
        .map(|i| ((i * 37 % 255) as f32) / 255.0)
        .collect();
    let x = Tensor::from_slice(&xs, &[10, 784]).map_err(fail)?;
    let y = Tensor::from_slice(&(0..10).collect::<Vec<i64>>(), &[10]).map_err(fail)?;
    let data = Dataset::from_tensors(&[&x, &y]).map_err(fail)?;
    let mut loader = DataLoader::new(acc, &data).map_err(fail)?;
    loader.set("batch_size", 2).map_err(fail)?;
    acc.prepare(&mut loader).map_err(fail)?;
    let (steps, before_end) = acc
        .join_uneven_inputs(Some(false), |acc| {
            let mut steps = 0;
            for batch in &mut loader {
                let [bx, by] = fields(batch?)?;
                acc.accumulate()?;
                let loss = model.call1("training_step", &[&bx, &by])?;
                acc.backward(&loss)?;
                opt.step()?;
                opt.zero_grad()?;
                steps += 1;
            }
            Ok((steps, params()?))
        })
        .map_err(fail)?;
    let after = params().map_err(fail)?;
    if steps != 3 - rank {
        return Err(format!("{steps} steps in the join"));
    }
    // Rank 0 trained longest and keeps its parameters; rank 1 takes them.
    if (after == before_end) != (rank == 0) {
        return Err(format!(
            "the parameters {} at the end of the join",
            if rank == 0 { "changed" } else { "stayed" }
        ));
    }
    parameters_agree(acc, model)?;
    // The override ended with the join: even batches again (3 per rank, the last padded).
    if loader.batch_count().map_err(fail)? != Some(3) {
        return Err("even_batches was not restored after the join".into());
    }
    println!("rank {rank}: {steps} steps in join_uneven_inputs, parameters equal on every rank");
    Ok(())
}

/// Three items on two ranks: [0, 1] | [2], padded [0, 1] | [2, 2], for a list and for a
/// tensor's rows; and a trigger set by rank 1 alone (from another thread) seen by both.
fn split_and_trigger(acc: &Accelerator, rank: i32) -> Result<(), String> {
    let fail = |e: accel::Error| e.to_string();
    let items = ["zero", "one", "two"];
    let mine = acc.split_between_processes(&items, false).map_err(fail)?;
    let padded = acc.split_between_processes(&items, true).map_err(fail)?;
    let (want, want_padded): (&[&str], &[&str]) = if rank == 0 {
        (&["zero", "one"], &["zero", "one"])
    } else {
        (&["two"], &["two", "two"])
    };
    if mine != want || padded != want_padded {
        return Err(format!("split {mine:?}, padded {padded:?}"));
    }
    // set_seed gives the program's generators one seed on every rank, apart when device-specific.
    acc.set_seed(1234, false).map_err(fail)?;
    let same = acc.seed();
    acc.set_seed(1234, true).map_err(fail)?;
    if same != Some(1234) || acc.seed() != Some(1234 + rank as u64) {
        return Err(format!("seeds {same:?} then {:?}", acc.seed()));
    }
    // A dictionary's values split alike.
    let columns = std::collections::BTreeMap::from([("id", vec![0, 1, 2]), ("len", vec![5, 6, 7])]);
    let split: std::collections::BTreeMap<&str, Vec<i32>> = acc
        .split_map_between_processes(&columns, true)
        .map_err(fail)?;
    let want_columns = if rank == 0 {
        [vec![0, 1], vec![5, 6]]
    } else {
        [vec![2, 2], vec![7, 7]]
    };
    if split["id"] != want_columns[0] || split["len"] != want_columns[1] {
        return Err(format!("split map {split:?}"));
    }
    let t = Tensor::from_slice(&[0i64, 0, 1, 10, 2, 20], &[3, 2]).map_err(fail)?;
    let rows = acc
        .split_tensor_between_processes(&t, true)
        .and_then(|r| r.to_vec::<i64>())
        .map_err(fail)?;
    let first: Vec<i64> = rows.chunks(2).map(|r| r[0]).collect();
    if rows.chunks(2).any(|r| r[1] != 10 * r[0]) || first.len() != 2 {
        return Err(format!("padded rows {rows:?}"));
    }
    println!("rank {rank}: split {mine:?}, padded {padded:?}, rows {first:?}");

    if acc.check_trigger().map_err(fail)? {
        return Err("a trigger nobody set".into());
    }
    if rank == 1 {
        std::thread::scope(|s| s.spawn(|| acc.set_trigger()).join())
            .map_err(|_| "set_trigger panicked".to_string())?
            .map_err(fail)?;
    }
    if !acc.check_trigger().map_err(fail)? {
        return Err("the trigger rank 1 set was not seen".into());
    }
    if acc.check_trigger().map_err(fail)? {
        return Err("the trigger stayed raised after a check".into());
    }
    println!("rank {rank}: the trigger rank 1 set was seen, then lowered");
    Ok(())
}

/// A stream of five samples (label = position), one per batch: global batches [0, 1], [2, 3],
/// [4, 0] (the last completed from the epoch's first), the same whether the main process reads
/// it and sends each rank its row (dispatch_batches, where rank 1 never runs the closure) or
/// every rank reads it all and keeps its own.
fn stream_shards(acc: &Accelerator, rank: i32) -> Result<(), String> {
    let fail = |e: accel::Error| e.to_string();
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&calls);
    let data = Dataset::from_stream(&[Field::new(Dtype::I64, &[])], move |_, i| {
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok((i < 5).then(|| Sample::new().with(0, &[i])))
    })
    .map_err(fail)?;
    let want: &[Vec<i64>] = if rank == 0 {
        &[vec![0], vec![2], vec![4]]
    } else {
        &[vec![1], vec![3], vec![0]]
    };
    let mut read_here = Vec::new();
    for dispatch in [true, false] {
        calls.store(0, std::sync::atomic::Ordering::SeqCst);
        let options = DataLoaderOptions::new()
            .batch_size(1)
            .dispatch_batches(dispatch);
        let mut loader = DataLoader::with(acc, &data, options).map_err(fail)?;
        if loader.batch_count().map_err(fail)?.is_some() {
            return Err("a stream has a batch count".into());
        }
        let mut labels = Vec::new();
        for batch in &mut loader {
            let [label] = fields(batch.map_err(fail)?).map_err(fail)?;
            labels.push(label.to_vec::<i64>().map_err(fail)?);
        }
        if labels != want {
            return Err(format!(
                "dispatch_batches {dispatch}: stream labels {labels:?}"
            ));
        }
        read_here.push(calls.load(std::sync::atomic::Ordering::SeqCst) > 0);
    }
    // Without dispatch every rank reads the stream; with it the main process alone.
    if read_here != [rank == 0, true] {
        return Err(format!("the closure ran (dispatch, shard): {read_here:?}"));
    }
    let here = if rank == 0 {
        "read here"
    } else {
        "not read here"
    };
    println!("rank {rank}: stream labels {want:?} dispatched ({here}) and sharded");
    Ok(())
}

/// 20 SGD steps on fixed data, no dropout, no shuffle: the parameters depend only on the global
/// batch, not on how many processes share it.
fn rank_equiv() -> Result<(), String> {
    let batch: i64 = std::env::var("ACCEL_RS_BATCH")
        .ok()
        .and_then(|b| b.parse().ok())
        .ok_or("ACCEL_RS_BATCH")?;
    let out = std::env::var_os("ACCEL_RS_OUT").ok_or("ACCEL_RS_OUT")?;
    // ACCEL_RS_ZERO_STAGE: the job's sharding, chosen through the configuration as a program
    // would (Accelerate's DeepSpeed keys).
    let acc = match std::env::var("ACCEL_RS_ZERO_STAGE") {
        Ok(stage) => {
            let configured = || -> accel::Result<Accelerator> {
                let mut config = Config::new()?;
                config.set("distributed_type", "DEEPSPEED")?;
                config.set("deepspeed_config", format!("{{zero_stage: {stage}}}"))?;
                Accelerator::with_config(&config)
            };
            configured()
        }
        Err(_) => Accelerator::new(),
    }
    .map_err(|e| e.to_string())?;
    let adamw = std::env::var("ACCEL_RS_OPTIMIZER").as_deref() == Ok("adamw");
    let dist = acc.distributed_type().map_err(|e| e.to_string())?;
    if std::env::var_os("ACCEL_RS_ZERO_STAGE").is_some() && dist != DistributedType::DeepSpeed {
        return Err(format!(
            "distributed type {dist:?} under DeepSpeed's configuration"
        ));
    }
    let run = || -> accel::Result<Model> {
        acc.set_seed(11, false)?;
        let n = 64 * 20;
        let xs: Vec<f32> = (0..n * 8)
            .map(|i| ((i * 7919 % 1000) as f32) / 500.0 - 1.0)
            .collect();
        let ys: Vec<i64> = (0..n).map(|i| (i * 31 % 4) as i64).collect();
        let x = Tensor::from_slice(&xs, &[n as i64, 8])?;
        let y = Tensor::from_slice(&ys, &[n as i64])?;
        let data = Dataset::from_tensors(&[&x, &y])?;
        let mut loader = DataLoader::new(&acc, &data)?;
        loader.set("batch_size", batch)?;
        let mut model = mlp(16, 8, 4)?;
        let (kind, lr) = if adamw { ("adamw", 0.01) } else { ("sgd", 0.1) };
        let mut opt = Optimizer::new(&model, kind)?;
        opt.set("lr", lr)?;
        acc.prepare((&mut model, &mut opt, &mut loader))?;
        for b in &mut loader {
            let [bx, by] = fields(b?)?;
            acc.accumulate()?;
            let loss = model.call1("training_step", &[&bx, &by])?;
            acc.backward(&loss)?;
            opt.step()?;
            opt.zero_grad()?;
        }
        if let Some(dir) = std::env::var_os("ACCEL_RS_STATE_DIR") {
            acc.save_state(dir)?;
        }
        Ok(model)
    };
    let model = run().map_err(|e| e.to_string())?;
    if acc.is_main_process().map_err(|e| e.to_string())? {
        let mut text = String::new();
        for name in model.tensor_names().map_err(|e| e.to_string())? {
            let values = model
                .tensor(&name)
                .and_then(|t| t.to_vec::<f32>())
                .map_err(|e| e.to_string())?;
            text.push_str(&name);
            for v in values {
                text.push_str(&format!(" {v:e}"));
            }
            text.push('\n');
        }
        std::fs::write(&out, text).map_err(|e| e.to_string())?;
    }
    acc.wait_for_everyone().map_err(|e| e.to_string())
}
