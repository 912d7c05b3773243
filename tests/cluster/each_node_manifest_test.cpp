// manifest.json's machine_ranks (save_on_each_node's machine-local copies): round trip, the ranks
// a checkpoint holds, and bad values refused naming the field.
#include <gtest/gtest.h>

#include "checkpoint/manifest.hpp"
#include "common/error.hpp"

using namespace accel::checkpoint;

namespace {

Manifest parse(const std::string& ranks) {
  return parse_manifest(
      "{\"format\": \"libaccel-checkpoint\", \"format_version\": 1, \"library_version\": \"x\", "
      "\"num_processes\": 4, \"step\": 3, \"machine_ranks\": " +
          ranks + ", \"files\": []}",
      "m.json");
}

}  // namespace

TEST(CheckpointManifest, MachineRanksRoundTrip) {
  Manifest m;
  m.library_version = "0.3.0";
  m.num_processes = 4;
  m.step = 7;
  EXPECT_EQ(to_json(m).find("machine_ranks"), std::string::npos);  // a complete checkpoint
  EXPECT_EQ(ranks_held(m), (std::vector<int>{0, 1, 2, 3}));
  m.machine_ranks = {2, 3};
  const Manifest back = parse_manifest(to_json(m), "m.json");
  EXPECT_EQ(back.machine_ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ(ranks_held(back), (std::vector<int>{2, 3}));
  EXPECT_EQ(parse("[0]").machine_ranks, std::vector<int>{0});
}

TEST(CheckpointManifest, BadMachineRanksAreRefused) {
  for (const char* bad : {"[]", "[3, 2]", "[1, 1]", "[4]", "[-1]", "[\"1\"]", "2", "[1.5]"}) {
    try {
      parse(bad);
      ADD_FAILURE() << "accepted machine_ranks " << bad;
    } catch (const accel::Error& e) {
      EXPECT_NE(std::string(e.what()).find("machine_ranks"), std::string::npos) << e.what();
    }
  }
}
