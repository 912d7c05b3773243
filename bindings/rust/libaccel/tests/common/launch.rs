//! What the multi-process tests share: `accel launch` of this test binary (or an example), the
//! output checks, and parameters compared across the ranks.

use std::path::{Path, PathBuf};
use std::process::Command;

use accel::{Accelerator, Model, Tensor};

use super::repo_root;

/// The `accel` program: ACCEL_CLI (ctest sets it), else the build tree's.
pub fn accel_cli() -> PathBuf {
    std::env::var_os("ACCEL_CLI")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("build/bin/accel"))
}

/// Runs a command; its combined output when it exits 0.
pub fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .env(
            "HF_HOME",
            std::env::temp_dir().join("libaccel-rs-no-hf-home"),
        )
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("{cmd:?} exited with {}:\n{text}", out.status))
    }
}

/// `accel launch -n <n> <program>`.
pub fn launch(n: u32, program: &Path) -> Command {
    let mut cmd = Command::new(accel_cli());
    cmd.arg("launch").arg("-n").arg(n.to_string()).arg(program);
    cmd
}

/// Ok when `output` has the line `line`.
pub fn expect_line(output: &str, line: &str) -> Result<(), String> {
    if output.lines().any(|l| l == line) {
        Ok(())
    } else {
        Err(format!("no line {line:?} in:\n{output}"))
    }
}

/// Every parameter equal on every rank (bit for bit: data parallelism keeps replicas identical).
pub fn parameters_agree(acc: &Accelerator, model: &Model) -> Result<(), String> {
    let world = acc.num_processes().map_err(|e| e.to_string())? as usize;
    for name in model.tensor_names().map_err(|e| e.to_string())? {
        let mine = model.tensor(&name).map_err(|e| e.to_string())?;
        let n = mine.element_count().map_err(|e| e.to_string())? as usize;
        let flat = Tensor::from_slice(
            &mine.to_vec::<f32>().map_err(|e| e.to_string())?,
            &[1, n as i64],
        )
        .map_err(|e| e.to_string())?;
        let all = acc
            .gather(&flat)
            .and_then(|t| t.to_vec::<f32>())
            .map_err(|e| e.to_string())?;
        for r in 1..world {
            if all[r * n..(r + 1) * n] != all[..n] {
                return Err(format!("{name} differs between rank 0 and rank {r}"));
            }
        }
    }
    Ok(())
}

/// One parent-side test: Err with what went wrong.
pub type Check = fn() -> Result<(), String>;

/// Runs the tests whose names contain an argument (all without one), libtest's way: a line
/// each, and exit status 1 when any failed.
pub fn run_tests(tests: &[(&str, Check)]) {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let mut failed = 0;
    for (name, test) in tests {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let start = std::time::Instant::now();
        match test() {
            Ok(()) => println!("test {name} ... ok ({:.1}s)", start.elapsed().as_secs_f64()),
            Err(why) => {
                println!("test {name} ... FAILED\n{why}\n");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        println!("{failed} multi-process test(s) failed");
        std::process::exit(1);
    }
}
