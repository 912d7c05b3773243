// The shared-memory all-reduce with real processes (fork): results, rounds larger than a slot,
// bitwise agreement (through the slots and on mapped copies), a peer that dies, a peer that never
// arrives, and segments that are not ours.
#include "runtime/shm_reduce.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "runtime/shared_buffer.hpp"

using accel::runtime::ShmOp;
using accel::runtime::ShmReduce;
using accel::runtime::ShmType;
using namespace std::chrono_literals;

namespace {

constexpr size_t kSlot = 4096;  // small slots, so that a few thousand elements take many rounds

std::string unique_name() {
  static int counter = 0;
  return "/accel-test-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
}

// Rank r's value at index i: different on every rank, not exactly representable sums in fp32.
float value_of(int rank, size_t i) {
  return 0.1f * static_cast<float>(rank + 1) + 1e-3f * i;
}

// Runs body(shm, rank) on `world` ranks: rank 0 in this process, the others forked. Returns the
// exit codes of the forked ranks (0 = their body returned true).
std::vector<int> run_ranks(int world, const std::function<bool(ShmReduce&, int)>& body,
                           std::chrono::milliseconds child_delay = 0ms) {
  const std::string name = unique_name();
  ShmReduce root = ShmReduce::create(name, world, kSlot, 42);
  std::vector<pid_t> children;
  for (int r = 1; r < world; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      bool ok = false;
      try {
        ShmReduce shm = ShmReduce::attach(name, r, world, kSlot, 42);
        shm.publish_pid();
        std::this_thread::sleep_for(child_delay);
        ok = body(shm, r);
      } catch (...) {
        ok = false;
      }
      _exit(ok ? 0 : 1);
    }
    children.push_back(pid);
  }
  root.publish_pid();
  // The children publish their pids right after attaching; wait for that before watching them.
  std::this_thread::sleep_for(100ms);
  root.watch_peers();
  ShmReduce::unlink(name);
  const bool ok = body(root, 0);
  std::vector<int> codes;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  EXPECT_TRUE(ok);
  return codes;
}

}  // namespace

TEST(ShmReduce, SumsAcrossRanksInRankOrderOverManyRounds) {
  for (int world : {2, 3}) {
    const size_t n = 3 * (kSlot / 4) + 17;  // three full rounds and a partial one
    const auto codes = run_ranks(world, [&](ShmReduce& shm, int rank) {
      std::vector<float> data(n);
      for (size_t i = 0; i < n; ++i) data[i] = value_of(rank, i);
      shm.all_reduce(data.data(), n, ShmType::kF32, ShmOp::kSum, 10s);
      for (size_t i = 0; i < n; ++i) {
        float expected = value_of(0, i);
        for (int r = 1; r < world; ++r) expected += value_of(r, i);
        // Bitwise: every rank sums in rank order.
        if (std::memcmp(&expected, &data[i], sizeof expected) != 0) return false;
      }
      return true;
    });
    for (int c : codes) EXPECT_EQ(c, 0) << "world " << world;
  }
}

TEST(ShmReduce, MaxMinAndIntegerTypes) {
  const auto codes = run_ranks(3, [](ShmReduce& shm, int rank) {
    std::vector<int64_t> a{rank, -rank, 1000000000000LL * rank};
    shm.all_reduce(a.data(), a.size(), ShmType::kI64, ShmOp::kSum, 10s);
    std::vector<int32_t> b{rank, -rank};
    shm.all_reduce(b.data(), b.size(), ShmType::kI32, ShmOp::kMax, 10s);
    std::vector<double> c{1.5 * rank, -2.0 * rank};
    shm.all_reduce(c.data(), c.size(), ShmType::kF64, ShmOp::kMin, 10s);
    shm.all_reduce(c.data(), 0, ShmType::kF64, ShmOp::kSum, 10s);  // nothing to do, no hang
    return a == std::vector<int64_t>{3, -3, 3000000000000LL} && b == std::vector<int32_t>{2, 0} &&
           c == std::vector<double>{0.0, -4.0};
  });
  for (int c : codes) EXPECT_EQ(c, 0);
}

TEST(ShmReduce, AllGatherOfUnequalPartsOverManyRoundsThenAnAllReduce) {
  for (int world : {2, 3}) {
    // Rank 1 gives nothing; the largest part takes two full rounds and a partial one.
    const std::vector<size_t> sizes{kSlot + 5, 0, 2 * kSlot + 3};
    std::vector<size_t> bytes_of(sizes.begin(), sizes.begin() + world);
    const auto codes = run_ranks(world, [&](ShmReduce& shm, int rank) {
      auto byte = [](int r, size_t i) { return static_cast<unsigned char>(r * 31 + i * 7); };
      std::vector<unsigned char> mine(bytes_of[rank]);
      for (size_t i = 0; i < mine.size(); ++i) mine[i] = byte(rank, i);
      size_t total = 0;
      for (size_t b : bytes_of) total += b;
      std::vector<unsigned char> out(total, 0xEE);
      shm.all_gather(mine.data(), bytes_of, out.data(), 10s);
      size_t at = 0;
      for (int r = 0; r < world; ++r)
        for (size_t i = 0; i < bytes_of[r]; ++i)
          if (out[at++] != byte(r, i)) return false;
      // The rounds stay in step with the all-reduces that follow.
      float x = 1;
      shm.all_reduce(&x, 1, ShmType::kF32, ShmOp::kSum, 10s);
      return x == static_cast<float>(world);
    });
    for (int c : codes) EXPECT_EQ(c, 0) << "world " << world;
  }
}

TEST(ShmReduce, ReduceToOwnersCombinesOnlyEachRanksRanges) {
  // Rank r keeps ranges of its own across round boundaries (or none); the rest of its data stays
  // what it gave.
  const size_t n = 2 * (kSlot / 4) + 9;
  const std::vector<std::vector<ShmReduce::Range>> ranges{
      {{0, 3}, {kSlot / 4 - 2, kSlot / 4 + 5}}, {}, {{7, 8}, {n - 4, n}}};
  const auto codes = run_ranks(3, [&](ShmReduce& shm, int rank) {
    std::vector<float> data(n);
    for (size_t i = 0; i < n; ++i) data[i] = value_of(rank, i);
    shm.all_reduce(data.data(), n, ShmType::kF32, ShmOp::kAvg, 10s, &ranges[rank]);
    for (size_t i = 0; i < n; ++i) {
      bool mine = false;
      for (const auto& [from, to] : ranges[rank]) mine = mine || (i >= from && i < to);
      const float expected =
          mine ? (value_of(0, i) + value_of(1, i) + value_of(2, i)) / 3.0f : value_of(rank, i);
      if (std::memcmp(&expected, &data[i], sizeof expected) != 0) return false;
    }
    return true;
  });
  for (int c : codes) EXPECT_EQ(c, 0);
}

TEST(ShmReduce, AllReduceOfMappedCopiesEqualsTheSlotsBitForBit) {
  // Each rank's copy in a SharedBuffer the others map; counts that split unevenly into parts and
  // chunks (one element; 17; 100003 floats, several 64 KiB chunks per part), three ops and types.
  using accel::runtime::SharedBuffer;
  for (int world : {2, 3}) {
    const auto codes = run_ranks(world, [&](ShmReduce& shm, int rank) {
      const std::string stem =
          "/accel-test-" + std::to_string(rank == 0 ? getpid() : getppid()) + "-mapped-r";
      const size_t most = 100003 * sizeof(double);
      std::vector<SharedBuffer> copies(world);
      copies[rank] = SharedBuffer::create(stem + std::to_string(rank), most);
      int32_t ready = 1;
      shm.all_reduce(&ready, 1, ShmType::kI32, ShmOp::kMin, 10s);
      for (int r = 0; r < world; ++r)
        if (r != rank) copies[r] = SharedBuffer::attach(stem + std::to_string(r), most);
      shm.all_reduce(&ready, 1, ShmType::kI32, ShmOp::kMin, 10s);
      SharedBuffer::unlink(stem + std::to_string(rank));
      std::vector<unsigned char*> at;
      for (const SharedBuffer& b : copies) at.push_back(b.data());
      auto same = [&](auto sample, ShmType type, ShmOp op, size_t n) {
        using T = decltype(sample);
        std::vector<T> want(n);
        auto* mine = reinterpret_cast<T*>(copies[rank].data());
        for (size_t i = 0; i < n; ++i)
          want[i] = mine[i] = static_cast<T>(value_of(rank, i) * (i % 2 ? -7 : 3));
        shm.all_reduce(want.data(), n, type, op, 10s);
        shm.all_reduce_mapped(at, n, type, op, 10s);
        return std::memcmp(want.data(), mine, n * sizeof(T)) == 0;
      };
      for (size_t n : {size_t{1}, size_t{17}, size_t{100003}})
        if (!same(0.0F, ShmType::kF32, ShmOp::kAvg, n) ||
            !same(0.0, ShmType::kF64, ShmOp::kSum, n) ||
            !same(int64_t{0}, ShmType::kI64, ShmOp::kMax, n))
          return false;
      return true;
    });
    for (int c : codes) EXPECT_EQ(c, 0) << "world " << world;
  }
}

TEST(ShmReduce, APeerThatDiesDuringAnAllGatherIsNamed) {
  const auto codes = run_ranks(2, [](ShmReduce& shm, int rank) {
    if (rank == 1) _exit(7);
    unsigned char b = 1, out[2];
    try {
      shm.all_gather(&b, {1, 1}, out, 60s);
    } catch (const accel::Error& e) {
      return e.code() == accel::Errc::peer_failed &&
             std::string(e.what()).find("rank 1 exited during a shared-memory all-gather") !=
                 std::string::npos;
    }
    return false;
  });
  ASSERT_EQ(codes.size(), 1u);
  EXPECT_EQ(codes[0], 7);
}

TEST(ShmReduce, APeerThatDiesIsNamedQuickly) {
  const auto start = std::chrono::steady_clock::now();
  const auto codes = run_ranks(2, [](ShmReduce& shm, int rank) {
    float x = 1;
    if (rank == 1) _exit(7);  // dies without taking part
    try {
      shm.all_reduce(&x, 1, ShmType::kF32, ShmOp::kSum, 60s);
    } catch (const accel::Error& e) {
      return e.code() == accel::Errc::peer_failed &&
             std::string(e.what()).find("rank 1 exited") != std::string::npos;
    }
    return false;
  });
  ASSERT_EQ(codes.size(), 1u);
  EXPECT_EQ(codes[0], 7);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s) << "not the 60 s timeout";
}

TEST(ShmReduce, APeerThatNeverArrivesTimesOutNamingIt) {
  const auto codes = run_ranks(3, [](ShmReduce& shm, int rank) {
    float x = 1;
    if (rank == 2) {
      std::this_thread::sleep_for(1500ms);  // alive, but not in the collective
      return true;
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      shm.all_reduce(&x, 1, ShmType::kF32, ShmOp::kSum, 300ms);
    } catch (const accel::Error& e) {
      const auto took = std::chrono::steady_clock::now() - start;
      return e.code() == accel::Errc::timeout &&
             std::string(e.what()).find("rank(s) 2") != std::string::npos && took >= 300ms &&
             took < 1400ms;
    }
    return false;
  });
  for (int c : codes) EXPECT_EQ(c, 0);
}

TEST(ShmReduce, SegmentsThatAreNotOursAreRefused) {
  const std::string name = unique_name();
  {
    ShmReduce shm = ShmReduce::create(name, 2, kSlot, 7);
    EXPECT_THROW(ShmReduce::create(name, 2, kSlot, 7), accel::Error) << "name taken";
    EXPECT_THROW(ShmReduce::attach(name, 1, 2, kSlot, 8), accel::Error) << "wrong token";
    EXPECT_THROW(ShmReduce::attach(name, 1, 3, kSlot, 7), accel::Error) << "wrong world";
    EXPECT_NO_THROW(ShmReduce::attach(name, 1, 2, kSlot, 7));
    ShmReduce::unlink(name);
  }
  EXPECT_THROW(ShmReduce::attach(name, 1, 2, kSlot, 7), accel::Error) << "unlinked";
  EXPECT_EQ(ShmReduce::default_slot_bytes(2), size_t{8} << 20);
  EXPECT_EQ(ShmReduce::default_slot_bytes(64), size_t{1} << 20);
}
