#include "checkpoint/checkpoint_files.hpp"

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include <set>

#include "common/error.hpp"
#include "common/files.hpp"

namespace accel::checkpoint {

namespace {

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::vector<std::string> index_shards(const std::string& index_path) {
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(read_file(index_path));
  } catch (const accel::Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(Errc::io, "'" + index_path + "' is not valid JSON: " + e.what());
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    fail(Errc::io, "'" + index_path + "' has no weight_map object");
  const std::string dir = index_path.substr(0, index_path.rfind('/') + 1);
  std::set<std::string> unique;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    if (!it.value().is_string())
      fail(Errc::io, "'" + index_path + "': a weight_map value is not a file name");
    const std::string file = it.value().get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "..")
      fail(Errc::io, "'" + index_path + "' names a file outside its directory: " + file);
    unique.insert(dir + file);
  }
  return {unique.begin(), unique.end()};
}

}  // namespace

std::vector<std::string> checkpoint_files(const std::string& path) {
  if (is_directory(path)) {
    if (exists(path + "/model.safetensors.index.json"))
      return index_shards(path + "/model.safetensors.index.json");
    if (exists(path + "/model.safetensors")) return {path + "/model.safetensors"};
    fail(Errc::io,
         "'" + path + "' holds neither model.safetensors nor model.safetensors.index.json");
  }
  if (ends_with(path, ".json")) return index_shards(path);
  return {path};
}

}  // namespace accel::checkpoint
