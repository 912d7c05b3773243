// The job token: a per-job secret every rank holds, proved (never sent) before the rendezvous
// store serves a connection. accel launch makes one per single-machine job and hands it to its
// ranks in ACCEL_JOB_TOKEN; a user or an engine sets ACCEL_JOB_TOKEN (or ACCEL_JOB_TOKEN_FILE) for
// every machine of a multi-machine job. Pure logic.
#pragma once

#include <string>

#include "config/config.hpp"

namespace accel::security {

struct JobToken {
  std::string secret;  // empty: no token was given
  std::string source;  // "ACCEL_JOB_TOKEN", "ACCEL_JOB_TOKEN_FILE (path)", or empty
  bool present() const { return !secret.empty(); }
};

// ACCEL_JOB_TOKEN, else the first line of the file ACCEL_JOB_TOKEN_FILE names. Throws
// accel::Error(config) for an empty token, an unreadable file, or both variables set.
JobToken read_job_token(const config::EnvMap& env);

// 32 random bytes from the kernel, as 64 hex digits. Throws accel::Error(io) without entropy.
std::string new_job_token();

// A store key prefix derived from the token ("" without one): a process that reaches a store
// libaccel does not guard (torchrun's) cannot name this job's keys without the token.
std::string token_key_prefix(const JobToken& token);

}  // namespace accel::security
