#include "net/ring.hpp"

#include <algorithm>
#include <cstring>

#include "common/error.hpp"

namespace accel::net {

namespace {

// A reduction step moves its segment in pieces of at most this many bytes: the scratch the
// received piece lands in stays small, at the cost of one poll round per piece.
constexpr size_t kPiece = size_t{8} << 20;
// A broadcast among more than two ranks forwards in pieces this large, so that every link of the
// chain is busy at once.
constexpr size_t kChainPiece = size_t{1} << 20;

}  // namespace

Ring::Ring(int rank, int size, std::vector<Link> links, std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), links_(std::move(links)), timeout_(timeout) {}

std::pair<size_t, size_t> Ring::segment(size_t count, int size, int index) {
  const auto n = static_cast<size_t>(size);
  const auto i = static_cast<size_t>(index);
  return {count * i / n, count * (i + 1) / n};
}

template <class Body>
void Ring::collective(const char* what, Body&& body) {
  if (!broken_.empty())
    fail(Errc::state,
         std::string(what) + ": the connections are unusable after an earlier failure: " + broken_);
  ++sequence_;
  step_ = 0;
  if (size_ == 1) return;
  const Watch watch{std::chrono::steady_clock::now() + timeout_, timeout_, what, &closing_};
  try {
    body(watch);
  } catch (const std::exception& e) {
    broken_ = e.what();
    throw;
  }
}

Flow Ring::send_to(int peer, Kind kind, uint8_t detail, const void* body, size_t bytes) {
  Flow f;
  f.link = &links_[static_cast<size_t>(peer)];
  f.sending = true;
  f.header = Header{sequence_, kind, detail, step_, bytes};
  f.body = static_cast<unsigned char*>(const_cast<void*>(body));
  return f;
}

Flow Ring::recv_from(int peer, Kind kind, uint8_t detail, void* body, size_t bytes) {
  Flow f;
  f.link = &links_[static_cast<size_t>(peer)];
  f.header = Header{sequence_, kind, detail, step_, bytes};
  f.body = static_cast<unsigned char*>(body);
  return f;
}

// N-1 steps: at step s this rank sends its running sum of segment (rank-s-1) to the right and adds
// the left's running sum of segment (rank-s-2) into its own, so that it ends with the whole sum of
// segment `rank`.
void Ring::scatter_reduce(unsigned char* data, size_t count, DType type, Op op, Kind kind,
                          const Watch& watch) {
  const size_t unit = size_of(type);
  const auto detail = static_cast<uint8_t>(type);
  size_t largest = 0;
  for (int i = 0; i < size_; ++i) {
    const auto seg = segment(count, size_, i);
    largest = std::max(largest, (seg.second - seg.first) * unit);
  }
  const size_t piece_cap = kPiece - kPiece % unit;
  if (scratch_.size() < std::min(largest, piece_cap)) scratch_.resize(std::min(largest, piece_cap));
  std::vector<Flow> flows(2);
  for (int s = 0; s + 1 < size_; ++s) {
    const auto out = segment(count, size_, (rank_ - s - 1 + 2 * size_) % size_);
    const auto in = segment(count, size_, (rank_ - s - 2 + 2 * size_) % size_);
    const size_t out_bytes = (out.second - out.first) * unit;
    const size_t in_bytes = (in.second - in.first) * unit;
    // Both sides cut a segment into the same pieces: its length decides them. A piece's step
    // number comes from s and its index, which both sides know.
    for (size_t done_out = 0, done_in = 0, k = 0; done_out < out_bytes || done_in < in_bytes; ++k) {
      step_ = static_cast<uint16_t>(s * 1024 + static_cast<int>(k));
      const size_t n_out = std::min(piece_cap, out_bytes - done_out);
      const size_t n_in = std::min(piece_cap, in_bytes - done_in);
      flows.clear();
      if (n_out || done_out < out_bytes)
        flows.push_back(send_to(right(), kind, detail, data + out.first * unit + done_out, n_out));
      if (n_in || done_in < in_bytes) {
        unsigned char* acc = data + in.first * unit + done_in;
        Flow f = recv_from(left(), kind, detail, scratch_.data(), n_in);
        f.unit = unit;
        const unsigned char* got = scratch_.data();
        f.arrived = [acc, got, unit, type, op](size_t from, size_t to) {
          combine(acc + from, got + from, (to - from) / unit, type, op);
        };
        flows.push_back(std::move(f));
      }
      move_all(flows, watch);
      done_out += n_out;
      done_in += n_in;
      if (n_out == 0 && n_in == 0) break;
    }
  }
}

// N-1 steps: at step s this rank passes segment (rank-s) to the right and receives segment
// (rank-s-1) from the left, straight into place.
void Ring::gather_segments(unsigned char* data, size_t count, DType type, Kind kind,
                           const Watch& watch) {
  const size_t unit = size_of(type);
  std::vector<Flow> flows;
  for (int s = 0; s + 1 < size_; ++s) {
    const auto out = segment(count, size_, (rank_ - s + size_) % size_);
    const auto in = segment(count, size_, (rank_ - s - 1 + 2 * size_) % size_);
    step_ = static_cast<uint16_t>(0x8000 + s);
    flows.clear();
    flows.push_back(
        send_to(right(), kind, 0, data + out.first * unit, (out.second - out.first) * unit));
    flows.push_back(
        recv_from(left(), kind, 0, data + in.first * unit, (in.second - in.first) * unit));
    move_all(flows, watch);
  }
}

void Ring::all_reduce(void* data, size_t count, DType type, Op op, bool average) {
  collective("all_reduce", [&](const Watch& watch) {
    auto* bytes = static_cast<unsigned char*>(data);
    scatter_reduce(bytes, count, type, op, kAllReduce, watch);
    const auto mine = segment(count, size_, rank_);
    if (average && is_floating(type))
      divide(bytes + mine.first * size_of(type), mine.second - mine.first, type, size_);
    gather_segments(bytes, count, type, kAllReduce, watch);
  });
}

void Ring::reduce_scatter(void* data, size_t count, DType type, Op op, bool average) {
  collective("reduce_scatter", [&](const Watch& watch) {
    auto* bytes = static_cast<unsigned char*>(data);
    scatter_reduce(bytes, count, type, op, kReduceScatter, watch);
    const auto mine = segment(count, size_, rank_);
    if (average && is_floating(type))
      divide(bytes + mine.first * size_of(type), mine.second - mine.first, type, size_);
  });
}

void Ring::all_gather(void* out, const std::vector<size_t>& bytes_of) {
  if (bytes_of.size() != static_cast<size_t>(size_))
    fail(Errc::internal, "all_gather: " + std::to_string(bytes_of.size()) + " sizes for " +
                             std::to_string(size_) + " ranks");
  std::vector<size_t> offset(bytes_of.size() + 1, 0);
  for (size_t r = 0; r < bytes_of.size(); ++r) offset[r + 1] = offset[r] + bytes_of[r];
  collective("all_gather", [&](const Watch& watch) {
    auto* bytes = static_cast<unsigned char*>(out);
    std::vector<Flow> flows;
    for (int s = 0; s + 1 < size_; ++s) {
      const auto o = static_cast<size_t>((rank_ - s + size_) % size_);
      const auto i = static_cast<size_t>((rank_ - s - 1 + 2 * size_) % size_);
      flows.clear();
      flows.push_back(send_to(right(), kAllGather, 0, bytes + offset[o], bytes_of[o]));
      flows.push_back(recv_from(left(), kAllGather, 0, bytes + offset[i], bytes_of[i]));
      move_all(flows, watch);
      ++step_;
    }
  });
}

// A chain from the root: each rank receives piece k from the one before it while it forwards
// piece k-1 to the one after it.
void Ring::broadcast(void* data, size_t bytes, int root) {
  if (root < 0 || root >= size_)
    fail(Errc::invalid_argument,
         "broadcast: root " + std::to_string(root) + " is not a rank of " + std::to_string(size_));
  collective("broadcast", [&](const Watch& watch) {
    auto* base = static_cast<unsigned char*>(data);
    const int place = (rank_ - root + size_) % size_;
    const int prev = place > 0 ? left() : -1;
    const int next = place + 1 < size_ ? right() : -1;
    const size_t piece = size_ == 2 ? std::max<size_t>(bytes, 1) : kChainPiece;
    const size_t pieces = std::max<size_t>(1, (bytes + piece - 1) / piece);
    auto range = [&](size_t k) {
      return std::make_pair(k * piece, std::min(bytes, (k + 1) * piece));
    };
    std::vector<Flow> flows;
    for (size_t k = 0; k <= pieces; ++k) {
      flows.clear();
      if (prev >= 0 && k < pieces) {
        const auto r = range(k);
        Flow f = recv_from(prev, kBroadcast, 0, base + r.first, r.second - r.first);
        f.header.step = static_cast<uint16_t>(k);
        flows.push_back(std::move(f));
      }
      // The root sends piece k now; a forwarding rank sends the piece it received last round.
      const size_t forward = prev < 0 ? k : k - 1;
      if (next >= 0 && (prev < 0 ? k < pieces : k >= 1)) {
        const auto r = range(forward);
        Flow f = send_to(next, kBroadcast, 0, base + r.first, r.second - r.first);
        f.header.step = static_cast<uint16_t>(forward);
        flows.push_back(std::move(f));
      }
      if (flows.empty()) continue;
      move_all(flows, watch);
    }
  });
}

void Ring::barrier() {
  collective("barrier", [&](const Watch& watch) {
    std::vector<Flow> flows;
    for (int s = 0; s + 1 < size_; ++s) {
      flows.clear();
      flows.push_back(send_to(right(), kBarrier, 0, nullptr, 0));
      flows.push_back(recv_from(left(), kBarrier, 0, nullptr, 0));
      move_all(flows, watch);
      ++step_;
    }
  });
}

}  // namespace accel::net
