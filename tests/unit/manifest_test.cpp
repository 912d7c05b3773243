// The checkpoint manifest: round trip, verification of sizes and checksums, and bad manifests.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "checkpoint/manifest.hpp"
#include "common/error.hpp"

using namespace accel::checkpoint;

namespace {
void expect_bad(const std::string& text, const std::string& part) {
  try {
    parse_manifest(text, "m.json");
    ADD_FAILURE() << "accepted: " << text;
  } catch (const accel::Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}
}  // namespace

TEST(Manifest, RoundTripAndVerification) {
  const std::string dir = ::testing::TempDir() + "manifest_dir";
  ASSERT_EQ(std::system(("mkdir -p " + dir + "/sub").c_str()), 0);
  std::ofstream(dir + "/a.bin", std::ios::binary) << "hello";
  std::ofstream(dir + "/sub/b.bin", std::ios::binary) << std::string(3000000, 'x');
  Manifest m;
  m.library_version = "0.1.0";
  m.num_processes = 2;
  m.step = 40;
  m.save_id = "00c0ffee0badf00d";
  m.files = {describe_file(dir, "a.bin"), describe_file(dir, "sub/b.bin")};
  EXPECT_EQ(m.files[0].size, 5u);
  EXPECT_EQ(m.files[0].crc32, 0x3610a686u) << "CRC-32 of 'hello'";
  const Manifest back = parse_manifest(to_json(m), "m.json");
  EXPECT_EQ(back.num_processes, 2);
  EXPECT_EQ(back.step, 40);
  EXPECT_EQ(back.save_id, "00c0ffee0badf00d");
  ASSERT_EQ(back.files.size(), 2u);
  EXPECT_EQ(back.files[1].path, "sub/b.bin");
  EXPECT_NO_THROW(verify(dir, back));
  std::ofstream(dir + "/a.bin", std::ios::binary) << "hellO";
  try {
    verify(dir, back);
    FAIL();
  } catch (const accel::Error& e) {
    EXPECT_NE(std::string(e.what()).find("a.bin' does not match its checksum"), std::string::npos)
        << e.what();
  }
  std::ofstream(dir + "/a.bin", std::ios::binary) << "hell";
  EXPECT_THROW(verify(dir, back), accel::Error);
  std::remove((dir + "/sub/b.bin").c_str());
  try {
    std::ofstream(dir + "/a.bin", std::ios::binary) << "hello";
    verify(dir, back);
    FAIL();
  } catch (const accel::Error& e) {
    EXPECT_NE(std::string(e.what()).find("sub/b.bin', listed in"), std::string::npos) << e.what();
  }
}

TEST(Manifest, BadManifestsAreClearErrors) {
  expect_bad("{", "not valid JSON");
  expect_bad("[]", "not a JSON object");
  expect_bad(R"({"format":"other"})", "not a libaccel checkpoint");
  expect_bad(R"({"format":40})", "not a libaccel checkpoint");  // found by the fuzzer
  expect_bad(R"({"format":null,"files":[]})", "not a libaccel checkpoint");
  expect_bad(R"({"format":"libaccel-checkpoint","format_version":2})", "format_version");
  const std::string head =
      R"({"format":"libaccel-checkpoint","format_version":1,"library_version":"0.1.0",)";
  expect_bad(head + R"("num_processes":0,"step":1,"files":[]})", "num_processes");
  expect_bad(head + R"("num_processes":1,"step":-1,"files":[]})", "step");
  expect_bad(head + R"("num_processes":1,"step":1,"files":[{"path":"a"}]})", "needs path, size");
  expect_bad(head + R"("num_processes":1,"step":1,"files":[{"path":"../x","size":1,"crc32":1}]})",
             "leaves the checkpoint directory");
  expect_bad(head + R"("num_processes":1,"step":1,"files":[{"path":"/etc/x","size":1,"crc32":1}]})",
             "leaves the checkpoint directory");
  expect_bad(head + R"("num_processes":1,"step":1,"save_id":7,"files":[]})", "save_id");
  expect_bad(head + R"("num_processes":1,"step":1,"save_id":"","files":[]})", "save_id");
  // A manifest of 0.2.4 and before has no save_id: its per-rank files are taken as they are.
  EXPECT_EQ(parse_manifest(head + R"("num_processes":1,"step":1,"files":[]})", "m.json").save_id,
            "");
}
