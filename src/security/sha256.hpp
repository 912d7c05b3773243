// SHA-256 and HMAC-SHA-256 (FIPS 180-4, RFC 2104): the job token's proofs. Pure logic, no
// dependencies: one hash for a few hundred bytes per connection does not justify linking OpenSSL.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace accel::security {

using Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(const std::string& s) { update(s.data(), s.size()); }
  Digest finish();  // the object is spent afterwards

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t used_ = 0;
  uint64_t total_ = 0;
};

Digest sha256(const std::string& data);

// HMAC-SHA-256 of `message` under `key` (any length: a longer key is hashed first, as RFC 2104).
Digest hmac_sha256(const std::string& key, const std::string& message);

// Equal in time that does not depend on where the first difference is.
bool digests_equal(const uint8_t* a, const uint8_t* b, size_t size);

std::string to_hex(const uint8_t* data, size_t size);

}  // namespace accel::security
