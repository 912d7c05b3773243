#include "checkpoint/manifest.hpp"

#include <zlib.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <vector>

#include "common/error.hpp"

namespace accel::checkpoint {

std::string to_json(const Manifest& m) {
  nlohmann::ordered_json j;
  j["format"] = "libaccel-checkpoint";
  j["format_version"] = 1;
  j["library_version"] = m.library_version;
  j["num_processes"] = m.num_processes;
  j["step"] = m.step;
  if (!m.save_id.empty()) j["save_id"] = m.save_id;
  if (!m.machine_ranks.empty()) j["machine_ranks"] = m.machine_ranks;
  j["files"] = nlohmann::ordered_json::array();
  for (const auto& f : m.files)
    j["files"].push_back({{"path", f.path}, {"size", f.size}, {"crc32", f.crc32}});
  return j.dump(2) + "\n";
}

Manifest parse_manifest(const std::string& text, const std::string& name) {
  auto bad = [&](const std::string& what) -> Manifest {
    fail(Errc::io, "checkpoint manifest '" + name + "': " + what);
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    return bad(std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) return bad("not a JSON object");
  // Checked by type first: json::value() throws its own type_error for a "format" of another type.
  if (!j.contains("format") || !j["format"].is_string() ||
      j["format"].get<std::string>() != "libaccel-checkpoint")
    return bad("not a libaccel checkpoint manifest");
  if (!j.contains("format_version") || !j["format_version"].is_number_integer() ||
      j["format_version"].get<int64_t>() != 1)
    return bad("unknown format_version (this build reads 1)");
  Manifest m;
  if (!j.contains("library_version") || !j["library_version"].is_string())
    return bad("library_version is missing");
  m.library_version = j["library_version"].get<std::string>();
  if (!j.contains("num_processes") || !j["num_processes"].is_number_integer() ||
      j["num_processes"].get<int64_t>() < 1 || j["num_processes"].get<int64_t>() > (1 << 20))
    return bad("num_processes is missing or out of range");
  m.num_processes = static_cast<int>(j["num_processes"].get<int64_t>());
  if (!j.contains("step") || !j["step"].is_number_integer() || j["step"].get<int64_t>() < 0)
    return bad("step is missing or negative");
  m.step = j["step"].get<int64_t>();
  if (j.contains("save_id")) {
    if (!j["save_id"].is_string() || j["save_id"].get<std::string>().empty())
      return bad("save_id is not a non-empty string");
    m.save_id = j["save_id"].get<std::string>();
  }
  if (j.contains("machine_ranks")) {
    const auto& ranks = j["machine_ranks"];
    if (!ranks.is_array() || ranks.empty())
      return bad("machine_ranks is not a non-empty array of ranks");
    for (const auto& r : ranks) {
      if (!r.is_number_integer() || r.get<int64_t>() < 0 || r.get<int64_t>() >= m.num_processes ||
          (!m.machine_ranks.empty() && r.get<int64_t>() <= m.machine_ranks.back()))
        return bad("machine_ranks must be ascending ranks below num_processes (" +
                   std::to_string(m.num_processes) + ")");
      m.machine_ranks.push_back(static_cast<int>(r.get<int64_t>()));
    }
  }
  if (!j.contains("files") || !j["files"].is_array()) return bad("files is missing");
  for (const auto& f : j["files"]) {
    if (!f.is_object() || !f.contains("path") || !f["path"].is_string() || !f.contains("size") ||
        !f["size"].is_number_unsigned() || !f.contains("crc32") ||
        !f["crc32"].is_number_unsigned() || f["crc32"].get<uint64_t>() > 0xffffffffu)
      return bad("a files entry needs path, size and crc32");
    ManifestFile e{f["path"].get<std::string>(), f["size"].get<uint64_t>(),
                   static_cast<uint32_t>(f["crc32"].get<uint64_t>())};
    if (e.path.empty() || e.path.front() == '/' || e.path.find("..") != std::string::npos ||
        e.path.find('\0') != std::string::npos)
      return bad("file path '" + e.path + "' leaves the checkpoint directory");
    m.files.push_back(std::move(e));
  }
  return m;
}

std::vector<int> ranks_held(const Manifest& m) {
  if (!m.machine_ranks.empty()) return m.machine_ranks;
  std::vector<int> all;
  for (int r = 0; r < m.num_processes; ++r) all.push_back(r);
  return all;
}

ManifestFile describe_file(const std::string& dir, const std::string& relative) {
  const std::string path = dir + "/" + relative;
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(Errc::io, "checkpoint file '" + path + "' is missing or unreadable");
  ManifestFile f{relative, 0, 0};
  uLong crc = crc32(0L, Z_NULL, 0);
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto got = in.gcount();
    if (got <= 0) break;
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buf.data()), static_cast<uInt>(got));
    f.size += static_cast<uint64_t>(got);
  }
  if (in.bad()) fail(Errc::io, "error while reading checkpoint file '" + path + "'");
  f.crc32 = static_cast<uint32_t>(crc);
  return f;
}

void verify(const std::string& dir, const Manifest& m) {
  for (const auto& want : m.files) {
    std::ifstream probe(dir + "/" + want.path, std::ios::binary);
    if (!probe)
      fail(Errc::io, "checkpoint file '" + dir + "/" + want.path + "', listed in '" + dir +
                         "/manifest.json', is missing or unreadable");
    const ManifestFile got = describe_file(dir, want.path);
    if (got.size != want.size)
      fail(Errc::io, "checkpoint file '" + dir + "/" + want.path + "' has " +
                         std::to_string(got.size) + " bytes; the manifest says " +
                         std::to_string(want.size) + " (incomplete or altered)");
    if (got.crc32 != want.crc32)
      fail(Errc::io, "checkpoint file '" + dir + "/" + want.path +
                         "' does not match its checksum in the manifest (corrupt)");
  }
}

}  // namespace accel::checkpoint
