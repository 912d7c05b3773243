// The safetensors header parser against valid and corrupt headers: every bad input is a clear
// error, never a read out of bounds.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "checkpoint/safetensors.hpp"
#include "common/error.hpp"

using accel::checkpoint::make_header;
using accel::checkpoint::parse_header;
using accel::checkpoint::parse_size;
using accel::checkpoint::TensorEntry;

namespace {

// A file: the 8-byte length, `json`, then `data_bytes` zero bytes.
std::string file_with(const std::string& json, size_t data_bytes) {
  std::string out(8, '\0');
  uint64_t len = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  return out + json + std::string(data_bytes, '\0');
}

void expect_bad(const std::string& file, const std::string& part) {
  try {
    parse_header(reinterpret_cast<const uint8_t*>(file.data()), file.size(), file.size(), "f");
    ADD_FAILURE() << "accepted; expected an error about: " << part;
  } catch (const accel::Error& e) {
    EXPECT_EQ(e.code(), accel::Errc::io);
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(Safetensors, RoundTripOfTheHeader) {
  std::vector<TensorEntry> t(2);
  t[0].name = "w";
  t[0].dtype = "F32";
  t[0].shape = {2, 3};
  t[1].name = "b";
  t[1].dtype = "BF16";
  t[1].shape = {3};
  const std::string header = make_header(t, {{"format", "pt"}});
  EXPECT_EQ((header.size() - 8) % 8, 0u) << "data aligned to 8 bytes";
  const std::string file = header + std::string(24 + 6, '\0');
  const auto h =
      parse_header(reinterpret_cast<const uint8_t*>(file.data()), file.size(), file.size(), "f");
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors[0].name, "w");
  EXPECT_EQ(h.tensors[1].begin, 24u);
  EXPECT_EQ(h.tensors[1].end, 30u);
  EXPECT_EQ(h.metadata.at("format"), "pt");
  EXPECT_EQ(h.data_start, header.size());
}

TEST(Safetensors, CorruptHeadersAreClearErrors) {
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_NO_THROW(parse_header(reinterpret_cast<const uint8_t*>(file_with(ok, 8).data()),
                               file_with(ok, 8).size(), file_with(ok, 8).size(), "f"));
  expect_bad(std::string(5, '\0'), "shorter than");
  std::string huge = file_with(ok, 8);
  huge[7] = 0x10;  // a length of 2^60
  expect_bad(huge, "exceeds 100 MB");
  std::string past = file_with(ok, 8);
  past[0] = static_cast<char>(ok.size() + 100);
  expect_bad(past, "runs past the end");
  expect_bad(file_with(R"({"a":{"dtype":"F32",)", 8), "not valid JSON");
  expect_bad(file_with(R"([1,2])", 0), "not a JSON object");
  expect_bad(file_with(R"({"a":{"dtype":"F99","shape":[2],"data_offsets":[0,8]}})", 8),
             "unknown dtype");
  expect_bad(file_with(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", 8), "outside");
  expect_bad(file_with(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
             "8 bytes but this shape has 3 elements");
  // 2^61 + 1 elements of 8 bytes wrap around to 8 bytes in 64-bit arithmetic.
  expect_bad(
      file_with(R"({"a":{"dtype":"F64","shape":[2305843009213693953],"data_offsets":[0,8]}})", 8),
      "2305843009213693953 elements");
  expect_bad(file_with(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
             "not a size");
  expect_bad(file_with(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8), "outside");
  expect_bad(file_with(R"({"a":{"dtype":"F32","shape":[2]}})", 8),
             "needs dtype, shape and data_offsets");
  expect_bad(file_with(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                       12),
             "overlapping or gapped");
  expect_bad(file_with(ok, 12), "cover 8 of 12");
  expect_bad(file_with(R"({"__metadata__":{"k":1}})", 0), "not a string");
  expect_bad(
      file_with(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", 8),
      "too large");
}

TEST(Safetensors, ShardSizesAsAccelerate) {
  EXPECT_EQ(parse_size("10GB"), 10000000000ull);
  EXPECT_EQ(parse_size("500MB"), 500000000ull);
  EXPECT_EQ(parse_size("1GiB"), 1073741824ull);
  EXPECT_EQ(parse_size("100kB"), 100000ull);
  EXPECT_EQ(parse_size("12345"), 12345ull);
  EXPECT_THROW(parse_size("ten GB"), accel::Error);
  EXPECT_THROW(parse_size("5XB"), accel::Error);
  EXPECT_THROW(parse_size(""), accel::Error);
  EXPECT_THROW(parse_size("0MB"), accel::Error);
  EXPECT_THROW(parse_size("1e300TB"), accel::Error) << "beyond any 64-bit size";
}
