// save_on_each_node on one machine changes nothing: `accel launch -n 2` (every rank on this
// machine) and a process alone write, with the setting on, the same files, byte for byte, as with
// it off (config.yaml aside, which records the setting, and manifest.json's line for it), and
// the same model files.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace {

std::string run(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while (p && (n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = p ? pclose(p) : -1;
  if (status != 0) ADD_FAILURE() << cmd << " failed (" << status << "):\n" << out;
  return out;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Every file below `dir` (relative path -> bytes).
void files_of(const std::string& dir, const std::string& prefix,
              std::map<std::string, std::string>& out) {
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    const std::string path = dir + "/" + name;
    if (stat(path.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode))
      files_of(path, prefix + name + "/", out);
    else
      out[prefix + name] = slurp(path);
  }
  closedir(d);
}

// The manifest without config.yaml's entry, which records the setting.
nlohmann::json manifest_without_config(const std::string& text) {
  auto j = nlohmann::json::parse(text);
  auto& files = j["files"];
  for (auto it = files.begin(); it != files.end();)
    it = (*it)["path"] == "config.yaml" ? files.erase(it) : it + 1;
  return j;
}

void save_both_ways(const std::string& launcher, const std::string& name) {
  const std::string root = ::testing::TempDir() + "each_node_" + name;
  run("rm -rf " + root + " && mkdir -p " + root);
  for (const char* on : {"false", "true"}) {
    const std::string tag = on;
    run("cd " + root +
        " && env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE "
        "OMP_NUM_THREADS=1 ACCEL_SAVE_ON_EACH_NODE=" +
        tag + " " + launcher + " " + EACH_NODE_PROGRAM + " save " + root + "/ckpt_" + tag + " " +
        root + "/model_" + tag + " 5");
  }
  std::map<std::string, std::string> off, on, model_off, model_on, all;
  files_of(root + "/ckpt_false", "", off);
  files_of(root + "/ckpt_true", "", on);
  files_of(root + "/model_false", "", model_off);
  files_of(root + "/model_true", "", model_on);
  files_of(root, "", all);
  ASSERT_FALSE(off.empty());
  ASSERT_TRUE(off.count("manifest.json") && on.count("manifest.json"));
  ASSERT_EQ(off.size(), on.size());
  for (const auto& [path, bytes] : off) {
    ASSERT_TRUE(on.count(path)) << path << " is missing with save_on_each_node on";
    if (path == "config.yaml") continue;
    if (path == "manifest.json")
      EXPECT_EQ(manifest_without_config(bytes), manifest_without_config(on[path]));
    else
      EXPECT_EQ(bytes, on[path]) << path << " differs with save_on_each_node on";
  }
  EXPECT_EQ(nlohmann::json::parse(on["manifest.json"]).count("machine_ranks"), 0u);
  EXPECT_NE(on["config.yaml"].find("save_on_each_node: true"), std::string::npos);
  EXPECT_EQ(model_off, model_on);
  EXPECT_EQ(model_on.count("model.safetensors"), 1u);
  for (const auto& [path, bytes] : all)
    EXPECT_EQ(path.find(".partial"), std::string::npos) << "left behind: " << path;
}

}  // namespace

TEST(CheckpointEachNode, OneMachineSaveIsUnchangedForOneProcess) {
  save_both_ways("", "one");
}

TEST(CheckpointEachNode, OneMachineSaveIsUnchangedForTwoRanks) {
  save_both_ways(std::string(ACCEL_CLI) + " launch -n 2", "two");
}
