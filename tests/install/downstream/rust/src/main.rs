//! A project of its own that depends on libaccel by README.md's lines alone (tests/install):
//! under `accel launch -n 2` the ranks gather their indices and rank 0 reports.
use accel::{Accelerator, Tensor};

fn main() -> accel::Result<()> {
    let acc = Accelerator::new()?;
    let rank = acc.process_index()?;
    let world = acc.num_processes()?;
    let all: Vec<i64> = acc
        .gather(&Tensor::from_slice(&[i64::from(rank)], &[1])?)?
        .to_vec()?;
    if all != (0..i64::from(world)).collect::<Vec<_>>() {
        eprintln!("rank {rank} gathered {all:?}");
        std::process::exit(2);
    }
    if acc.is_main_process()? {
        println!(
            "downstream ok: libaccel {}, {world} ranks",
            accel::version()
        );
    }
    Ok(())
}
