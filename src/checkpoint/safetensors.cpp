#include "checkpoint/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>

#include "common/error.hpp"
#include "common/parse.hpp"

namespace accel::checkpoint {

namespace {

constexpr uint64_t kMaxHeader = 100u << 20;  // the reference implementation's limit

[[noreturn]] void bad(const std::string& name, const std::string& what) {
  fail(Errc::io, "safetensors file '" + name + "': " + what);
}

// One tensor's entry of the header: dtype, shape and offsets, checked against the data section.
TensorEntry parse_tensor_entry(const std::string& name, const std::string& key,
                               const nlohmann::json& v, uint64_t data_size) {
  const std::string where = "tensor '" + key + "': ";
  if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
    bad(name, where + "needs dtype, shape and data_offsets");
  TensorEntry t;
  t.name = key;
  if (!v["dtype"].is_string()) bad(name, where + "dtype is not a string");
  t.dtype = v["dtype"].get<std::string>();
  const size_t width = dtype_size(t.dtype);
  if (width == 0) bad(name, where + "unknown dtype '" + t.dtype + "'");
  if (!v["shape"].is_array()) bad(name, where + "shape is not an array");
  uint64_t count = 1;
  for (const auto& d : v["shape"]) {
    if (!d.is_number_unsigned()) bad(name, where + "shape holds a value that is not a size");
    const uint64_t dim = d.get<uint64_t>();
    if (dim != 0 && count > (uint64_t{1} << 62) / dim) bad(name, where + "shape is too large");
    count *= dim;
    t.shape.push_back(static_cast<int64_t>(dim));
  }
  const auto& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
      !off[1].is_number_unsigned())
    bad(name, where + "data_offsets is not [begin, end]");
  t.begin = off[0].get<uint64_t>();
  t.end = off[1].get<uint64_t>();
  if (t.begin > t.end || t.end > data_size)
    bad(name, where + "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                  "] fall outside the " + std::to_string(data_size) + " data bytes");
  // Compared by division: count * width can wrap around 64 bits for a forged shape.
  const uint64_t bytes = t.end - t.begin;
  if (bytes % width != 0 || bytes / width != count)
    bad(name, where + "holds " + std::to_string(bytes) + " bytes but this shape has " +
                  std::to_string(count) + " elements of " + t.dtype + " (" + std::to_string(width) +
                  " bytes each)");
  return t;
}

// The data section is the tensors back to back, nothing shared, nothing left over.
void check_back_to_back(const std::string& name, std::vector<TensorEntry>& tensors,
                        uint64_t data_size) {
  std::sort(tensors.begin(), tensors.end(),
            [](const TensorEntry& a, const TensorEntry& b) { return a.begin < b.begin; });
  uint64_t expected = 0;
  for (const auto& t : tensors) {
    if (t.begin != expected)
      bad(name, "tensor '" + t.name + "' starts at byte " + std::to_string(t.begin) +
                    ", expected " + std::to_string(expected) + " (overlapping or gapped offsets)");
    expected = t.end;
  }
  if (expected != data_size)
    bad(name, "the tensors cover " + std::to_string(expected) + " of " + std::to_string(data_size) +
                  " data bytes");
}

}  // namespace

size_t dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL") return 1;
  return 0;
}

Header parse_header(const uint8_t* prefix, size_t prefix_size, uint64_t file_size,
                    const std::string& name) {
  if (file_size < 8 || prefix_size < 8) bad(name, "shorter than the 8-byte header length");
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | prefix[i];
  if (len > kMaxHeader) bad(name, "header length " + std::to_string(len) + " exceeds 100 MB");
  if (len > file_size - 8)
    bad(name, "header length " + std::to_string(len) + " runs past the end of the file (" +
                  std::to_string(file_size) + " bytes)");
  if (prefix_size < 8 + len) bad(name, "the header was not read completely");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(prefix + 8, prefix + 8 + len);
  } catch (const std::exception& e) {
    bad(name, std::string("the header is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) bad(name, "the header is not a JSON object");
  Header h;
  h.data_start = 8 + len;
  const uint64_t data_size = file_size - h.data_start;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string key = it.key();
    const auto& v = it.value();
    if (key == "__metadata__") {
      if (!v.is_object()) bad(name, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          bad(name, "__metadata__ value '" + m.key() + "' is not a string");
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    h.tensors.push_back(parse_tensor_entry(name, key, v, data_size));
  }
  check_back_to_back(name, h.tensors, data_size);
  return h;
}

std::string make_header(std::vector<TensorEntry>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (!metadata.empty()) j["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (auto& t : tensors) {
    uint64_t count = 1;
    for (int64_t d : t.shape) count *= static_cast<uint64_t>(d);
    t.begin = offset;
    t.end = offset + count * dtype_size(t.dtype);
    offset = t.end;
    j[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
  }
  std::string text = j.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // aligns the data section to 8 bytes
  std::string out(8, '\0');
  uint64_t len = text.size();
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>((len >> (8 * i)) & 0xff);
  return out + text;
}

uint64_t parse_size(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  std::string number = text.substr(0, i), unit = text.substr(i);
  unit.erase(std::remove(unit.begin(), unit.end(), ' '), unit.end());
  std::string u;
  for (char c : unit) u += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const std::map<std::string, double> units = {{"", 1},
                                               {"B", 1},
                                               {"KB", 1e3},
                                               {"MB", 1e6},
                                               {"GB", 1e9},
                                               {"TB", 1e12},
                                               {"KIB", 1024.0},
                                               {"MIB", 1048576.0},
                                               {"GIB", 1073741824.0},
                                               {"TIB", 1099511627776.0}};
  auto it = units.find(u);
  double value = 0;  // parse_real, not std::stod: "1.5GB" must not depend on the C locale
  if (!parse_real(number, &value)) it = units.end();
  // Below 2^63 bytes, so that the conversion to an integer is defined (and the size is sane).
  if (it == units.end() || !(value > 0) || !(value * it->second < 9.2e18))
    fail(Errc::invalid_argument,
         "max_shard_size '" + text + "' is not a size such as 10GB, 500MB, 1GiB or a byte count");
  return static_cast<uint64_t>(value * it->second);
}

}  // namespace accel::checkpoint
