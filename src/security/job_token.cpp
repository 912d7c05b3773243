#include "security/job_token.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/error.hpp"
#include "security/random.hpp"
#include "security/sha256.hpp"

namespace accel::security {

JobToken read_job_token(const config::EnvMap& env) {
  auto inline_token = env.find("ACCEL_JOB_TOKEN");
  auto file = env.find("ACCEL_JOB_TOKEN_FILE");
  JobToken t;
  if (inline_token != env.end() && file != env.end())
    fail(Errc::config,
         "both ACCEL_JOB_TOKEN and ACCEL_JOB_TOKEN_FILE are set; set one (the same on every "
         "machine of the job)");
  if (inline_token != env.end()) {
    if (inline_token->second.empty())
      fail(Errc::config, "ACCEL_JOB_TOKEN is set but empty; unset it or give the job a secret");
    t.secret = inline_token->second;
    t.source = "ACCEL_JOB_TOKEN";
  } else if (file != env.end()) {
    std::ifstream in(file->second);
    if (!in)
      fail(Errc::config,
           "ACCEL_JOB_TOKEN_FILE '" + file->second + "' cannot be read: " + std::strerror(errno));
    std::getline(in, t.secret);
    if (!t.secret.empty() && t.secret.back() == '\r') t.secret.pop_back();
    if (t.secret.empty())
      fail(Errc::config,
           "ACCEL_JOB_TOKEN_FILE '" + file->second + "' holds no token on its first line");
    t.source = "ACCEL_JOB_TOKEN_FILE (" + file->second + ")";
  }
  return t;
}

std::string new_job_token() {
  uint8_t bytes[32];
  random_bytes(bytes, sizeof bytes);
  return to_hex(bytes, sizeof bytes);
}

std::string token_key_prefix(const JobToken& token) {
  if (!token.present()) return "";
  const Digest d = hmac_sha256(token.secret, "accel key prefix");
  return to_hex(d.data(), 12);
}

}  // namespace accel::security
