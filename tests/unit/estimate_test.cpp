// `accel estimate-memory`'s pure parts (src/bigmodel/estimate, checkpoint_headers) and
// `accel merge-weights`' (src/checkpoint/merge): Python's number formatting as Accelerate prints
// it (the expected texts are Python 3.11's and Accelerate 1.15's output for the same inputs),
// headers read without the data, the ZeRO figures against the owners libaccel assigns, and a
// save_state directory merged or refused. The whole tables are compared with Accelerate's own in
// bigmodel.accelerate_estimate_differential.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "bigmodel/checkpoint_headers.hpp"
#include "bigmodel/estimate.hpp"
#include "checkpoint/manifest.hpp"
#include "checkpoint/merge.hpp"
#include "checkpoint/safetensors.hpp"
#include "common/error.hpp"
#include "zero/partition.hpp"

using namespace accel::bigmodel;
using accel::checkpoint::TensorEntry;

namespace {

TensorEntry entry(const std::string& name, const std::string& dtype, std::vector<int64_t> shape) {
  TensorEntry t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  return t;
}

// A safetensors file of `tensors` whose data section holds `data_bytes` bytes of 0x5a (all of it
// when -1).
std::string write_safetensors(const std::string& path, std::vector<TensorEntry> tensors,
                              long long data_bytes = -1) {
  const std::string header = accel::checkpoint::make_header(tensors, {});
  const uint64_t full = tensors.empty() ? 0 : tensors.back().end;
  std::ofstream(path, std::ios::binary)
      << header << std::string(data_bytes < 0 ? full : static_cast<uint64_t>(data_bytes), 'Z');
  return path;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool exists(const std::string& path) {
  return access(path.c_str(), F_OK) == 0;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const accel::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Estimate, PythonRoundAndReprAsPython) {
  const std::vector<std::pair<double, std::string>> cases = {
      {0.125, "0.12"},      {0.375, "0.38"}, {2.675, "2.67"},   {1.005, "1.0"},
      {1023.999, "1024.0"}, {5.0, "5.0"},    {0.001, "0.0"},    {12345678.9, "12345678.9"},
      {1e17, "1e+17"},      {0.5, "0.5"},    {1.0 / 3, "0.33"}, {999.995, "1000.0"}};
  for (const auto& [x, want] : cases) EXPECT_EQ(python_round2(x), want) << x;
}

TEST(Estimate, ConvertBytesAsAccelerate) {
  EXPECT_EQ(convert_bytes({512, true}), "512 bytes");
  EXPECT_EQ(convert_bytes({512, false}), "512.0 bytes");
  EXPECT_EQ(convert_bytes({1536, true}), "1.5 KB");
  EXPECT_EQ(convert_bytes({3.0 * 1125899906842624.0, true}), "3.0 PB");
  EXPECT_EQ(convert_bytes({2147482574.258176, false}), "2.0 GB");
  EXPECT_EQ(convert_bytes({1023.996, false}), "1024.0 bytes");
  EXPECT_EQ(convert_bytes({0, true}), "0 bytes");
}

TEST(Estimate, SizesCountFloatingTensorsAsFp32AndGroupByModule) {
  const std::vector<TensorEntry> tensors = {
      entry("scale", "F32", {10}),                    // the root's own: a layer by itself
      entry("embed.weight", "F16", {100, 8}),         // fp16 stored, fp32 counted: 3200
      entry("blocks.0.fc.weight", "BF16", {20, 20}),  // 1600
      entry("blocks.0.fc.bias", "F32", {20}),         // 80
      entry("blocks.0.norm.weight", "F32", {20}),     // 80
      entry("embed.position_ids", "I64", {1, 50}),    // stays int64: 400
      entry("blocks.1.fc.weight", "F32", {30, 20})};  // 2400
  const ModelSizes plain = model_sizes(tensors, "");
  EXPECT_EQ(plain.total, 40u + 3200 + 400 + 1600 + 80 + 80 + 2400);
  EXPECT_EQ(plain.largest_layer, 3600u) << "embed: weight and position_ids";
  EXPECT_EQ(plain.largest_names, std::vector<std::string>{"embed"});
  EXPECT_EQ(plain.buffer_bytes, 400u);
  EXPECT_EQ(plain.param_bytes.size(), 6u);
  EXPECT_EQ(plain.root_param_bytes, 40u);
  const ModelSizes blocks = model_sizes(tensors, R"(blocks\.\d+)");
  EXPECT_EQ(blocks.largest_layer, 3600u);
  const ModelSizes whole = model_sizes(tensors, "blocks");
  EXPECT_EQ(whole.largest_layer, 1600u + 80 + 80 + 2400) << "the outermost match wins";
  EXPECT_EQ(whole.largest_names, std::vector<std::string>{"blocks"});
  EXPECT_NE(error_of([&] { model_sizes(tensors, "("); }).find("--no-split"), std::string::npos);
}

TEST(Estimate, TableAsAccelerate) {
  // As Accelerate 1.15's estimate_command prints it for a model of 1536 bytes whose largest layer
  // is 1000 (its calculate_maximum_sizes replaced by these two numbers).
  ModelSizes s;
  s.total = 1536;
  s.largest_layer = 1000;
  EXPECT_EQ(accelerate_table(s, {"float32", "int4"}, "m"),
            "┌─────────────────────────────────────────────────────┐\n"
            "│             Memory Usage for loading `m`            │\n"
            "├───────┬─────────────┬───────────┬───────────────────┤\n"
            "│ dtype │Largest Layer│ Total Size│Training using Adam│\n"
            "├───────┼─────────────┼───────────┼───────────────────┤\n"
            "│float32│  1000 bytes │   1.5 KB  │       6.0 KB      │\n"
            "│  int4 │ 125.0 bytes │192.0 bytes│        N/A        │\n"
            "└───────┴─────────────┴───────────┴───────────────────┘");
  EXPECT_NE(error_of([&] { accelerate_table(s, {"int2"}, "m"); }).find("int2"), std::string::npos);
}

TEST(Estimate, HeadersAloneFromACutFileAndIndexes) {
  const std::string dir = ::testing::TempDir() + "estimate_" + std::to_string(getpid());
  ASSERT_EQ(std::system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()), 0);
  // Header intact, data section cut to 3 bytes: described as the header declares it.
  write_safetensors(dir + "/cut.safetensors",
                    {entry("a.weight", "F32", {1000, 1000}), entry("a.bias", "F16", {1000})}, 3);
  const auto cut = checkpoint_tensors(dir + "/cut.safetensors");
  ASSERT_EQ(cut.size(), 2u);
  EXPECT_EQ(model_sizes(cut, "").total, 4000000u + 4000);
  // A sharded index: shards by name; a missing shard is named.
  write_safetensors(dir + "/s1.safetensors", {entry("x.weight", "F32", {4})});
  write_safetensors(dir + "/s2.safetensors", {entry("y.weight", "F32", {6})});
  std::ofstream(dir + "/model.safetensors.index.json")
      << R"({"metadata": {}, "weight_map": {"x.weight": "s1.safetensors", "y.weight": "s2.safetensors"}})";
  EXPECT_EQ(model_sizes(checkpoint_tensors(dir), "").total, 40u) << "a directory with an index";
  std::ofstream(dir + "/bad.index.json") << R"({"weight_map": {"z": "gone.safetensors"}})";
  EXPECT_NE(error_of([&] { checkpoint_tensors(dir + "/bad.index.json"); }).find("gone.safetensors"),
            std::string::npos);
  // A corrupt header is refused by parse_header's checks.
  std::ofstream(dir + "/junk.safetensors", std::ios::binary)
      << std::string("\x10\0\0\0\0\0\0\0", 8) << "{not json at all";
  EXPECT_NE(error_of([&] { checkpoint_tensors(dir + "/junk.safetensors"); }).find("JSON"),
            std::string::npos);
  EXPECT_NE(error_of([&] { checkpoint_tensors(dir + "/nothing"); }).find("nothing"),
            std::string::npos);
  std::system(("rm -rf " + dir).c_str());
}

TEST(Estimate, ZeroFiguresFollowTheOwnersLibaccelAssigns) {
  std::vector<TensorEntry> tensors;
  for (int i = 0; i < 5; ++i)
    tensors.push_back(entry("fc" + std::to_string(i) + ".weight", "F32", {1000 + i * 100, 1000}));
  tensors.push_back(entry("fc0.count", "I64", {10}));
  const ModelSizes s = model_sizes(tensors, "");
  uint64_t all = 0, largest = 0;
  for (auto b : s.param_bytes) all += b, largest = std::max<uint64_t>(largest, b);
  const ZeroFigures z0 = zero_per_rank(s, 0, 3);
  EXPECT_EQ(z0.parameters, all + 80);
  EXPECT_EQ(z0.gradients, all);
  EXPECT_EQ(z0.optimizer, 2 * all);
  EXPECT_EQ(z0.transient, largest);
  // The rank that owns most under assign_owners.
  const auto owners = accel::zero::assign_owners(s.param_bytes, 3);
  std::vector<uint64_t> owned(3);
  for (size_t k = 0; k < owners.size(); ++k) owned[owners[k]] += s.param_bytes[k];
  const uint64_t most = *std::max_element(owned.begin(), owned.end());
  EXPECT_EQ(zero_per_rank(s, 1, 3).optimizer, 2 * most);
  EXPECT_EQ(zero_per_rank(s, 2, 3).gradients, most);
  const ZeroFigures z3 = zero_per_rank(s, 3, 3);
  EXPECT_EQ(z3.parameters, most + 80) << "buffers stay whole";
  // Units: fc4 and fc3, the two largest: fc4 with its gradient, fc3 prefetched.
  EXPECT_EQ(z3.transient, 2u * 1400 * 1000 * 4 + 1300u * 1000 * 4);
  EXPECT_LT(z3.total(), z0.total());
  EXPECT_NE(error_of([&] { zero_per_rank(s, 4, 2); }).find("stage"), std::string::npos);
}

TEST(MergeWeights, CopiesTheModelOfASaveOrRefusesAnIncompleteOne) {
  using namespace accel::checkpoint;
  const std::string dir = ::testing::TempDir() + "merge_" + std::to_string(getpid());
  const std::string save = dir + "/save";
  ASSERT_EQ(std::system(("rm -rf " + dir + " && mkdir -p " + save).c_str()), 0);
  write_safetensors(save + "/model_0.safetensors",
                    {entry("fc.weight", "F32", {8, 4}), entry("fc.bias", "BF16", {8})});
  write_safetensors(save + "/random_states_0.safetensors", {entry("cpu", "U8", {16})});
  write_safetensors(save + "/random_states_1.safetensors", {entry("cpu", "U8", {16})});
  Manifest m;
  m.num_processes = 2;
  for (const char* f :
       {"random_states_0.safetensors", "random_states_1.safetensors", "model_0.safetensors"})
    m.files.push_back(describe_file(save, f));
  std::ofstream(save + "/manifest.json") << to_json(m);

  EXPECT_EQ(merge_weights(save, dir + "/out"), dir + "/out/model.safetensors");
  EXPECT_EQ(slurp(dir + "/out/model.safetensors"), slurp(save + "/model_0.safetensors"));
  EXPECT_EQ(merge_weights(save, dir + "/one.safetensors"), dir + "/one.safetensors");
  EXPECT_NE(error_of([&] { merge_weights(save, dir + "/x", 1); }).find("holds 1 model"),
            std::string::npos);

  auto refused = [&](const std::string& from, const std::string& part) {
    const std::string out = dir + "/refused.safetensors";
    const std::string e = error_of([&] { merge_weights(from, out); });
    EXPECT_NE(e.find(part), std::string::npos) << e;
    EXPECT_FALSE(exists(out)) << e;
    EXPECT_FALSE(exists(out + ".partial-" + std::to_string(getpid()))) << e;
  };
  refused(dir + "/out", "not an accel_save_state directory");
  refused(dir + "/one.safetensors", "not a directory");
  refused(dir + "/absent", "absent");
  // A rank's file missing; a model file cut short; one corrupt at its full size.
  ASSERT_EQ(std::rename((save + "/random_states_1.safetensors").c_str(), (dir + "/rs1").c_str()),
            0);
  refused(save, "random_states_1.safetensors', listed in");
  ASSERT_EQ(std::rename((dir + "/rs1").c_str(), (save + "/random_states_1.safetensors").c_str()),
            0);
  const std::string model = slurp(save + "/model_0.safetensors");
  std::ofstream(save + "/model_0.safetensors", std::ios::binary)
      << model.substr(0, model.size() - 5);
  refused(save, "truncated or altered");
  std::string flipped = model;
  flipped.back() = static_cast<char>(flipped.back() ^ 1);
  std::ofstream(save + "/model_0.safetensors", std::ios::binary) << flipped;
  refused(save, "checksum");
  std::system(("rm -rf " + dir).c_str());
}
