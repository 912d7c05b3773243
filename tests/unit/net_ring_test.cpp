// libaccel's TCP collectives with threads as ranks over real loopback connections: the mesh's
// handshake (and strangers refused), every collective on 2 to 4 ranks and every element type,
// and the failures: ranks that disagree, a peer that is late, leaves, or is closed under a running
// collective. The ordering of net::Sequencer.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "net/mesh.hpp"
#include "net/ring.hpp"
#include "net/sequencer.hpp"

using accel::Errc;
using accel::Error;
using namespace accel::net;
using namespace std::chrono_literals;

namespace {

// What the store does for the mesh: published addresses, waited for.
struct Board {
  std::mutex mu;
  std::condition_variable cv;
  std::map<int, std::string> at;
  std::vector<std::string> refused;
  void publish(int r, const std::string& text) {
    std::lock_guard<std::mutex> lock(mu);
    at[r] = text;
    cv.notify_all();
  }
  std::string lookup(int r) {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, 10s, [&] { return at.count(r) > 0; }))
      accel::fail(Errc::rendezvous, "rank " + std::to_string(r) + " never published");
    return at[r];
  }
};

MeshSetup setup_for(Board& board, int rank, int size, const std::string& key) {
  MeshSetup s;
  s.rank = rank;
  s.size = size;
  s.listen_address = "127.0.0.1";
  s.key = key;
  s.deadline = std::chrono::steady_clock::now() + 10s;
  s.publish = [&board, rank](const std::string& text) { board.publish(rank, text); };
  s.lookup = [&board](int r) { return board.lookup(r); };
  s.refused = [&board](const std::string& line) {
    std::lock_guard<std::mutex> lock(board.mu);
    board.refused.push_back(line);
  };
  s.name = "rank " + std::to_string(rank) + "'s collectives listener";
  return s;
}

// Runs body(ring) on `size` threads, each with its ring over a fresh mesh; rethrows the first
// failure of a rank that was not expected to fail.
void with_rings(int size, const std::function<void(Ring&)>& body,
                std::chrono::milliseconds timeout = 10s) {
  Board board;
  const std::string key = mesh_key("token", "session");
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      try {
        Ring ring(r, size, form_mesh(setup_for(board, r, size, key)), timeout);
        body(ring);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

template <class T>
T value_of(int rank, size_t i) {
  return static_cast<T>(static_cast<double>((rank + 1) * 3 + static_cast<int>(i % 7)) * 0.25);
}

template <class T>
void check_all_reduce(int size, size_t count, DType type) {
  std::vector<std::vector<T>> out(static_cast<size_t>(size));
  with_rings(size, [&](Ring& ring) {
    std::vector<T> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = value_of<T>(ring.rank(), i);
    ring.all_reduce(v.data(), count, type, Op::kSum, false);
    out[static_cast<size_t>(ring.rank())] = v;
  });
  for (size_t i = 0; i < count; ++i) {
    double want = 0;
    for (int r = 0; r < size; ++r) want += static_cast<double>(value_of<T>(r, i));
    ASSERT_NEAR(static_cast<double>(out[0][i]), want, 1e-6 * std::abs(want) + 1e-9) << i;
  }
  for (int r = 1; r < size && count > 0; ++r)
    EXPECT_EQ(0, std::memcmp(out[0].data(), out[static_cast<size_t>(r)].data(), count * sizeof(T)))
        << "rank " << r << " differs";
}

}  // namespace

TEST(NetRing, AllReduceSumsOnTwoThreeAndFourRanksBitwiseAlikeWhateverTheSize) {
  for (int size : {2, 3, 4})
    for (size_t count : {size_t{0}, size_t{1}, size_t{5}, size_t{1000}, size_t{1500000}}) {
      SCOPED_TRACE(std::to_string(size) + " ranks, " + std::to_string(count) + " elements");
      check_all_reduce<float>(size, count, DType::kF32);
    }
}

TEST(NetRing, AllReduceOfEveryElementType) {
  check_all_reduce<double>(3, 777, DType::kF64);
  check_all_reduce<int64_t>(3, 777, DType::kI64);
  check_all_reduce<int32_t>(2, 777, DType::kI32);
  check_all_reduce<int16_t>(2, 777, DType::kI16);
  check_all_reduce<int8_t>(2, 777, DType::kI8);
  check_all_reduce<uint8_t>(2, 777, DType::kU8);
  check_all_reduce<_Float16>(2, 777, DType::kF16);
}

TEST(NetRing, MaxMinAndAverage) {
  with_rings(3, [](Ring& ring) {
    std::vector<float> hi{1.0f * ring.rank(), -1.0f * ring.rank()}, lo = hi,
                                                                    avg{3.0f * ring.rank()};
    ring.all_reduce(hi.data(), 2, DType::kF32, Op::kMax, false);
    ring.all_reduce(lo.data(), 2, DType::kF32, Op::kMin, false);
    ring.all_reduce(avg.data(), 1, DType::kF32, Op::kSum, true);
    EXPECT_EQ(hi, (std::vector<float>{2.0f, 0.0f}));
    EXPECT_EQ(lo, (std::vector<float>{0.0f, -2.0f}));
    EXPECT_EQ(avg[0], 3.0f);  // (0 + 3 + 6) / 3
  });
}

TEST(NetRing, ReduceScatterLeavesEachRankItsSegmentSummed) {
  with_rings(3, [](Ring& ring) {
    std::vector<int64_t> v(10);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>(i) * (ring.rank() + 1);
    ring.reduce_scatter(v.data(), v.size(), DType::kI64, Op::kSum, false);
    const auto seg = Ring::segment(v.size(), 3, ring.rank());
    for (size_t i = seg.first; i < seg.second; ++i) EXPECT_EQ(v[i], static_cast<int64_t>(i) * 6);
  });
}

TEST(NetRing, AllGatherOfUnequalPartsAndBroadcastsFromEveryRoot) {
  with_rings(3, [](Ring& ring) {
    const std::vector<size_t> bytes_of{3, 0, 5};
    std::vector<unsigned char> out(8, 0);
    const size_t at = ring.rank() == 0 ? 0 : 3;
    for (size_t i = 0; i < bytes_of[static_cast<size_t>(ring.rank())]; ++i)
      out[at + i] = static_cast<unsigned char>(10 * ring.rank() + i);
    ring.all_gather(out.data(), bytes_of);
    EXPECT_EQ(out, (std::vector<unsigned char>{0, 1, 2, 20, 21, 22, 23, 24}));
    // Larger than a chain piece, so that forwarding is pipelined.
    for (int root = 0; root < 3; ++root) {
      std::vector<int32_t> v(700000, ring.rank() == root ? root + 7 : -1);
      ring.broadcast(v.data(), v.size() * sizeof(int32_t), root);
      EXPECT_EQ(v.front(), root + 7);
      EXPECT_EQ(v.back(), root + 7);
    }
    ring.barrier();
  });
}

TEST(NetRing, RanksThatDisagreeFailWithStateAndTheRingStaysUnusable) {
  std::vector<std::string> seen(2);
  with_rings(2, [&](Ring& ring) {
    std::vector<float> v(10 + static_cast<size_t>(ring.rank()), 1.0f);
    try {
      ring.all_reduce(v.data(), v.size(), DType::kF32, Op::kSum, false);
      ADD_FAILURE() << "rank " << ring.rank() << " reduced tensors of different sizes";
    } catch (const Error& e) {
      // The rank that reads the other's header first says why; its peer may see it leave first.
      EXPECT_TRUE(e.code() == Errc::state || e.code() == Errc::peer_failed) << e.what();
      seen[static_cast<size_t>(ring.rank())] = e.what();
    }
    try {
      ring.barrier();
      ADD_FAILURE() << "a barrier ran after the ranks disagreed";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::state);
      EXPECT_NE(std::string(e.what()).find("unusable after an earlier failure"), std::string::npos);
    }
  });
  const std::string both = seen[0] + "\n" + seen[1];
  EXPECT_NE(both.find("different order, or with different sizes"), std::string::npos) << both;
}

TEST(NetRing, ALatePeerTimesOutNamingItAndALeavingPeerIsAPeerFailure) {
  std::atomic<bool> done{false};
  with_rings(
      2,
      [&](Ring& ring) {
        if (ring.rank() == 1) {
          while (!done) std::this_thread::sleep_for(5ms);
          return;  // leaves: its connection closes
        }
        float x = 1;
        try {
          ring.all_reduce(&x, 1, DType::kF32, Op::kSum, false);
          ADD_FAILURE() << "no timeout";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), Errc::timeout) << e.what();
          EXPECT_NE(std::string(e.what()).find("waited for rank 1 [127.0.0.1]"), std::string::npos)
              << e.what();
        }
        done = true;
      },
      300ms);
  with_rings(2, [&](Ring& ring) {
    if (ring.rank() == 1) return;
    std::vector<float> v(100000, 1.0f);
    try {
      ring.all_reduce(v.data(), v.size(), DType::kF32, Op::kSum, false);
      ADD_FAILURE() << "rank 1 left, yet the all-reduce completed";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::peer_failed) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank 1 [127.0.0.1]"), std::string::npos) << e.what();
    }
  });
}

TEST(NetRing, ClosingEndsARunningCollectiveAtOnce) {
  std::atomic<bool> done{false};
  with_rings(2, [&](Ring& ring) {
    if (ring.rank() == 1) {
      while (!done) std::this_thread::sleep_for(5ms);
      return;
    }
    std::thread closer([&] {
      std::this_thread::sleep_for(100ms);
      ring.close();
    });
    const auto start = std::chrono::steady_clock::now();
    float x = 1;
    EXPECT_THROW(ring.all_reduce(&x, 1, DType::kF32, Op::kSum, false), Error);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
    closer.join();
    done = true;
  });
}

TEST(NetMesh, StrangersAreRefusedWithinASecondAndNamedAndTheRanksStillConnect) {
  Board board;
  const std::string key = mesh_key("token", "session");
  std::vector<Link> zero;
  std::thread rank0([&] { zero = form_mesh(setup_for(board, 0, 2, key)); });
  const std::string at = board.lookup(0);
  const int port = std::stoi(at.substr(at.find(' ') + 1));
  auto stranger = [&](const std::string& says) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    if (!says.empty()) {
      EXPECT_EQ(send(fd, says.data(), says.size(), 0), static_cast<ssize_t>(says.size()));
    }
    const auto start = std::chrono::steady_clock::now();
    char buf[64];
    while (recv(fd, buf, sizeof buf, 0) > 0) {
    }
    close(fd);
    return std::chrono::steady_clock::now() - start;
  };
  EXPECT_LT(stranger(""), 1s);
  EXPECT_LT(stranger("GET / HTTP/1.0\r\n\r\n"), 1s);
  std::string wrong = "ACCELNC1";
  wrong += std::string("\x01\0\0\0", 4) + std::string(16, 'n') + std::string(32, 'p');
  EXPECT_LT(stranger(wrong), 1s);
  std::vector<Link> one = form_mesh(setup_for(board, 1, 2, key));
  rank0.join();
  ASSERT_TRUE(zero[1].connected());
  ASSERT_TRUE(one[0].connected());
  std::lock_guard<std::mutex> lock(board.mu);
  ASSERT_EQ(board.refused.size(), 3u);
  const std::string all = board.refused[0] + "\n" + board.refused[1] + "\n" + board.refused[2];
  EXPECT_NE(all.find("refused a connection from 127.0.0.1:"), std::string::npos) << all;
  EXPECT_NE(all.find("did not complete the handshake within 0.8 s"), std::string::npos) << all;
  EXPECT_NE(all.find("does not speak libaccel's collective protocol"), std::string::npos) << all;
  EXPECT_NE(all.find("proof of the job token is wrong"), std::string::npos) << all;
}

TEST(NetMesh, ARankWithAnotherTokenIsRefusedAndSaysWhy) {
  Board board;
  std::string rank1_error;
  std::thread rank1([&] {
    try {
      form_mesh(setup_for(board, 1, 2, mesh_key("other token", "session")));
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::rendezvous);
      rank1_error = e.what();
    }
  });
  MeshSetup s0 = setup_for(board, 0, 2, mesh_key("token", "session"));
  s0.deadline = std::chrono::steady_clock::now() + 1500ms;
  EXPECT_THROW(form_mesh(s0), Error);
  rank1.join();
  EXPECT_NE(rank1_error.find("refused this rank's proof of the job token"), std::string::npos)
      << rank1_error;
  std::lock_guard<std::mutex> lock(board.mu);
  ASSERT_FALSE(board.refused.empty());
  EXPECT_NE(board.refused[0].find("proof of the job token is wrong"), std::string::npos);
}

TEST(NetSequencer, RunsJobsInOrderOnItsThreadOrTheWaitersAndPassesErrorsOn) {
  Sequencer seq;
  std::vector<int> order;
  std::mutex mu;
  auto job = [&](int n) {
    return [&, n] {
      std::this_thread::sleep_for(2ms);
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(n);
    };
  };
  auto a = seq.start(job(1));
  auto b = seq.start(job(2));
  auto c = seq.start([] { accel::fail(Errc::timeout, "third failed"); });
  seq.run(job(4));
  seq.finish(b);
  seq.finish(a);
  try {
    seq.finish(c);
    ADD_FAILURE() << "the job's error was lost";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::timeout);
  }
  EXPECT_EQ(order, (std::vector<int>{1, 2, 4}));
}

TEST(NetMesh, EachRankIsConnectedToItsTwoRingNeighboursOnly) {
  EXPECT_TRUE(ring_peers(0, 1, true).empty());
  EXPECT_EQ(ring_peers(0, 2, false), std::vector<int>{1});
  EXPECT_EQ(ring_peers(1, 2, true), std::vector<int>{0});
  EXPECT_EQ(ring_peers(0, 5, false), (std::vector<int>{4, 1}));
  EXPECT_EQ(ring_peers(4, 5, true), (std::vector<int>{3, 0}));
  EXPECT_EQ(ring_peers(2, 5, true), std::vector<int>{1});
  EXPECT_EQ(ring_peers(2, 5, false), std::vector<int>{3});
  Board board;
  const std::string key = mesh_key("token", "session");
  std::vector<std::vector<Link>> links(5);
  std::vector<std::thread> threads;
  for (int r = 0; r < 5; ++r)
    threads.emplace_back([&, r] { links[r] = form_mesh(setup_for(board, r, 5, key)); });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 5; ++r)
    for (int p = 0; p < 5; ++p)
      EXPECT_EQ(links[r][p].connected(), p == (r + 1) % 5 || p == (r + 4) % 5)
          << "rank " << r << ", peer " << p;
}
