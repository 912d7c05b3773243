// A rank must not outlive the program that started it: when accel launch, torchrun, mpirun or srun
// dies (the OOM killer, a preemption, a CI timeout), its ranks would otherwise train on, holding
// memory, ports and GPUs. Pure POSIX: no LibTorch.
#pragma once

#include <sys/types.h>

#include <string>

#include "config/config.hpp"

namespace accel::runtime {

// The launching engine named by the environment: "accel launch" (ACCEL_STORE_HOSTED), "torchrun"
// (TORCHELASTIC_RUN_ID), "Open MPI" (OMPI_COMM_WORLD_RANK), "MPICH/Hydra" (PMI_RANK), "srun"
// (SLURM_STEP_ID); empty when none is (a program started by hand or by a shell).
std::string launching_engine(const config::EnvMap& env);

// Under a launching engine, asks the kernel to SIGKILL this process when its parent dies
// (PR_SET_PDEATHSIG), and kills it at once when the parent has died already (the parent at library
// load is not the parent now). A program started by hand is left alone: its parent is a shell.
// Returns the engine's name, or "" when nothing was done.
std::string die_with_launching_engine(const config::EnvMap& env);

// For a child between fork and exec (async-signal-safe): SIGKILL when `parent` dies, and _exit at
// once when it has died already.
void die_with_parent_after_fork(pid_t parent);

}  // namespace accel::runtime
