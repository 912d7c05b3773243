#include "net/ring.hpp"

#include <algorithm>
#include <cstring>

#include "common/error.hpp"

namespace accel::net {

namespace {

// The circular buffer a reduction receives into: what arrives is combined at once, so a few
// socket buffers' worth is enough.
constexpr size_t kScratch = size_t{4} << 20;
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
// segment `rank`. What arrives lands in a small circular scratch and is combined at once.
void Ring::scatter_reduce(unsigned char* data, size_t count, DType type, Op op, bool average,
                          Kind kind, const Watch& watch) {
  const size_t unit = size_of(type);
  const auto detail = static_cast<uint8_t>(type);
  const size_t cap = kScratch - kScratch % unit;
  if (scratch_.size() < cap) scratch_.resize(cap);
  std::vector<Flow> flows;
  for (int s = 0; s + 1 < size_; ++s) {
    const auto out = segment(count, size_, (rank_ - s - 1 + 2 * size_) % size_);
    const auto in = segment(count, size_, (rank_ - s - 2 + 2 * size_) % size_);
    step_ = static_cast<uint16_t>(s);
    flows.clear();
    flows.push_back(
        send_to(right(), kind, detail, data + out.first * unit, (out.second - out.first) * unit));
    Flow f = recv_from(left(), kind, detail, scratch_.data(), (in.second - in.first) * unit);
    f.unit = unit;
    f.ring = cap;
    unsigned char* acc = data + in.first * unit;
    const unsigned char* got = scratch_.data();
    const int divisor = average && s + 2 == size_ ? size_ : 0;
    f.arrived = [acc, got, cap, unit, type, op, divisor](size_t from, size_t to) {
      const size_t n = (to - from) / unit;
      if (divisor)
        combine_average(acc + from, got + from % cap, n, type, divisor);
      else
        combine(acc + from, got + from % cap, n, type, op);
    };
    flows.push_back(std::move(f));
    move_all(flows, watch);
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
    scatter_reduce(bytes, count, type, op, average && is_floating(type), kAllReduce, watch);
    gather_segments(bytes, count, type, kAllReduce, watch);
  });
}

void Ring::reduce_scatter(void* data, size_t count, DType type, Op op, bool average) {
  collective("reduce_scatter", [&](const Watch& watch) {
    scatter_reduce(static_cast<unsigned char*>(data), count, type, op, average && is_floating(type),
                   kReduceScatter, watch);
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
