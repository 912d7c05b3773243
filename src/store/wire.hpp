// libaccel's rendezvous store protocol, shared by the server (store/server.*) and the client
// (store/client.*). Pure logic.
//
// A connection opens with a handshake in which each side proves it holds the job token without
// sending it (HMAC-SHA-256 over both sides' fresh nonces):
//   server -> client  kServerHello (8 bytes) + server nonce (16)
//   client -> server  kClientHello (8) + client nonce (16) + client_proof (32)
//   server -> client  server_proof (32), or the connection closes: refused
// Then requests and replies, each a little-endian u32 length and that many bytes: a request is
// an Op byte and its fields, a reply a Status byte and its fields. Strings and byte vectors are a
// u32 length and the bytes, integers 8 little-endian bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "security/sha256.hpp"

namespace accel::store {

constexpr char kServerHello[8] = {'A', 'C', 'C', 'E', 'L', 'S', 'T', '1'};
constexpr char kClientHello[8] = {'A', 'C', 'C', 'E', 'L', 'C', 'L', '1'};
constexpr size_t kNonceBytes = 16;
constexpr size_t kServerHelloBytes = 8 + kNonceBytes;
constexpr size_t kClientHelloBytes = 8 + kNonceBytes + 32;
// The largest request or reply: far above what a rendezvous stores (addresses, ids), far below
// what a stranger could make the server hold.
constexpr uint32_t kMaxMessage = 64u << 20;

enum class Op : uint8_t {
  kSet = 1,
  kGet = 2,  // waits for the key
  kAdd = 3,
  kCheck = 4,
  kDelete = 5,
  kNumKeys = 6,
  kWait = 7,
  kCompareSet = 8,
};

enum class Status : uint8_t { kOk = 0, kTimeout = 1, kBadRequest = 2 };

// HMAC of the token over a label and two nonces: each side proves the token over the other's
// nonce, its own label first, so that neither proof can be replayed as the other.
inline security::Digest proof(const std::string& token, const char* label, const uint8_t* first,
                              const uint8_t* second) {
  return security::hmac_sha256(
      token, label + std::string(reinterpret_cast<const char*>(first), kNonceBytes) +
                 std::string(reinterpret_cast<const char*>(second), kNonceBytes));
}

inline security::Digest client_proof(const std::string& token, const uint8_t* server_nonce,
                                     const uint8_t* client_nonce) {
  return proof(token, "accel store client ", server_nonce, client_nonce);
}

inline security::Digest server_proof(const std::string& token, const uint8_t* server_nonce,
                                     const uint8_t* client_nonce) {
  return proof(token, "accel store server ", client_nonce, server_nonce);
}

inline uint32_t read_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

// Appends fields to a message body.
class Writer {
 public:
  Writer& u8(uint8_t v) {
    out_.push_back(static_cast<char>(v));
    return *this;
  }
  Writer& i64(int64_t v) {
    for (int i = 0; i < 8; ++i)
      out_.push_back(static_cast<char>(static_cast<uint64_t>(v) >> (8 * i)));
    return *this;
  }
  Writer& bytes(const void* data, size_t size) {
    put_u32(static_cast<uint32_t>(size));
    out_.append(static_cast<const char*>(data), size);
    return *this;
  }
  Writer& str(const std::string& s) { return bytes(s.data(), s.size()); }
  Writer& vec(const std::vector<uint8_t>& v) { return bytes(v.data(), v.size()); }
  // The body with its length in front.
  std::string framed() const {
    Writer w;
    w.put_u32(static_cast<uint32_t>(out_.size()));
    return w.out_ + out_;
  }

 private:
  void put_u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>(v >> (8 * i)));
  }
  std::string out_;
};

// Reads fields from a message body; every read checks the bounds (ok() false after a short one).
class Reader {
 public:
  Reader(const char* data, size_t size) : p_(data), end_(data + size) {}
  uint8_t u8() {
    if (!need(1)) return 0;
    return static_cast<uint8_t>(*p_++);
  }
  int64_t i64() {
    if (!need(8)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p_[i])) << (8 * i);
    p_ += 8;
    return static_cast<int64_t>(v);
  }
  std::string str() {
    const uint32_t n = u32();
    if (!need(n)) return {};
    std::string s(p_, n);
    p_ += n;
    return s;
  }
  std::vector<uint8_t> vec() {
    const std::string s = str();
    return std::vector<uint8_t>(s.begin(), s.end());
  }
  bool ok() const { return ok_; }
  bool done() const { return ok_ && p_ == end_; }

 private:
  uint32_t u32() {
    if (!need(4)) return 0;
    const uint32_t v = read_u32(p_);
    p_ += 4;
    return v;
  }
  bool need(size_t n) {
    if (!ok_ || static_cast<size_t>(end_ - p_) < n) ok_ = false;
    return ok_;
  }
  const char* p_;
  const char* end_;
  bool ok_ = true;
};

}  // namespace accel::store
