// save_model / load_checkpoint_in_model through the C interface: one file and shards, the index
// JSON, an independent reader, mismatches and corrupt files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "accel/accel.h"
#include "accelerator_env.hpp"

namespace {

accel_model* make_model(int seed) {
  EXPECT_EQ(accel_set_seed(g_acc, static_cast<uint64_t>(seed), false), ACCEL_OK);
  accel_model* m = nullptr;
  EXPECT_EQ(accel_model_new(&m), ACCEL_OK);
  EXPECT_EQ(accel_model_add_layer(m, "fc1", "linear", "in_features=32 out_features=16"), ACCEL_OK);
  EXPECT_EQ(accel_model_add_layer(m, "bn", "batch_norm2d", "num_features=4"), ACCEL_OK);
  EXPECT_EQ(accel_model_add_layer(m, "fc2", "linear", "in_features=16 out_features=4"), ACCEL_OK);
  return m;
}

std::vector<float> values(const accel_model* m, const char* name) {
  accel_tensor* t = nullptr;
  EXPECT_EQ(accel_model_tensor(m, name, &t), ACCEL_OK);
  size_t bytes = 0;
  accel_tensor_data_size(t, &bytes);
  std::vector<float> v(bytes / 4);
  accel_tensor_to_data(t, v.data(), bytes, &bytes);
  accel_tensor_free(t);
  return v;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string run(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while (p && (n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  if (p) pclose(p);
  return out;
}

}  // namespace

TEST(Checkpoint, OneFileRoundTripAndIndependentReader) {
  // Missing parent directories are made, as Accelerate's os.makedirs does.
  run("rm -rf " + ::testing::TempDir() + "ckpt_parent");
  const std::string dir = ::testing::TempDir() + "ckpt_parent/one/";
  accel_model* a = make_model(1);
  OK(accel_save_model(g_acc, a, dir.c_str(), nullptr));
  accel_model* b = make_model(2);
  EXPECT_NE(values(a, "fc1.weight"), values(b, "fc1.weight"));
  OK(accel_load_checkpoint_in_model(b, dir.c_str()));
  for (const char* n : {"fc1.weight", "fc1.bias", "fc2.weight", "bn.running_var"})
    EXPECT_EQ(values(a, n), values(b, n)) << n;
  // Read by code that is not ours.
  const std::string out = run("PYTHONPATH=" + std::string(PYLIB_DIR) + " /usr/bin/python3 " +
                              std::string(READ_SAFETENSORS) + " " + dir + "/model.safetensors");
  EXPECT_NE(out.find("reader "), std::string::npos) << out;
  std::printf("independent reader: %s\n", out.substr(0, out.find('\n')).c_str());
  std::map<std::string, double> sums;
  std::istringstream in(out.substr(out.find('\n') + 1));
  std::string name;
  for (double s; in >> name >> s;) sums[name] = s;
  double ours = 0;
  for (float v : values(a, "fc1.weight")) ours += v;
  ASSERT_TRUE(sums.count("fc1.weight")) << out;
  EXPECT_NEAR(sums["fc1.weight"], ours, 1e-5);
  EXPECT_TRUE(sums.count("bn.num_batches_tracked")) << out;
  // A file where a directory must go is a clear error.
  const std::string file = ::testing::TempDir() + "ckpt_parent/a_file";
  run("touch " + file);
  EXPECT_EQ(accel_save_model(g_acc, a, file.c_str(), nullptr), ACCEL_ERR_IO);
  EXPECT_NE(std::string(accel_last_error_message()).find("is not a directory"), std::string::npos)
      << accel_last_error_message();
  EXPECT_EQ(accel_save_model(g_acc, a, (file + "/x").c_str(), nullptr), ACCEL_ERR_IO);
  accel_model_free(a);
  accel_model_free(b);
}

TEST(Checkpoint, ShardsAndIndexAsAccelerate) {
  const std::string dir = ::testing::TempDir() + "ckpt_shards";
  accel_model* a = make_model(3);
  OK(accel_save_model(g_acc, a, dir.c_str(), "1kB"));  // fc1.weight alone is 2048 bytes
  const std::string index = slurp(dir + "/model.safetensors.index.json");
  EXPECT_NE(index.find("\"total_size\""), std::string::npos) << index;
  EXPECT_NE(index.find("\"fc1.weight\": \"model-00001-of-0000"), std::string::npos) << index;
  EXPECT_NE(index.find("\"fc2.weight\": \"model-0000"), std::string::npos) << index;
  std::ifstream second(dir +
                       "/model-00002-of-00002.safetensors");  // fc1.weight alone, then the rest
  EXPECT_TRUE(second.good()) << index;
  accel_model* b = make_model(4);
  OK(accel_load_checkpoint_in_model(b, (dir + "/model.safetensors.index.json").c_str()));
  EXPECT_EQ(values(a, "fc2.weight"), values(b, "fc2.weight"));
  accel_model* c = make_model(5);
  OK(accel_load_checkpoint_in_model(c, dir.c_str()));
  EXPECT_EQ(values(a, "fc1.bias"), values(c, "fc1.bias"));
  EXPECT_EQ(accel_save_model(g_acc, a, dir.c_str(), "lots"), ACCEL_ERR_INVALID_ARGUMENT);
  for (auto* m : {a, b, c}) accel_model_free(m);
}

TEST(Checkpoint, MismatchesListTheTensorsAndChangeNothing) {
  const std::string dir = ::testing::TempDir() + "ckpt_mismatch";
  accel_model* a = make_model(6);
  OK(accel_save_model(g_acc, a, dir.c_str(), nullptr));
  accel_model* other = nullptr;
  OK(accel_model_new(&other));
  OK(accel_model_add_layer(other, "fc1", "linear", "in_features=32 out_features=8"));
  OK(accel_model_add_layer(other, "extra", "linear", "in_features=2 out_features=2"));
  const auto before = values(other, "fc1.bias");
  EXPECT_EQ(accel_load_checkpoint_in_model(other, dir.c_str()), ACCEL_ERR_SHAPE);
  const std::string msg = accel_last_error_message();
  EXPECT_NE(msg.find("missing: extra.weight, extra.bias"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unexpected: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("fc2.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("shape/dtype mismatch: fc1.weight"), std::string::npos) << msg;
  EXPECT_EQ(values(other, "fc1.bias"), before) << "nothing loaded";
  accel_model_free(other);
  accel_model_free(a);
}

TEST(Checkpoint, CorruptFilesAreClearStatuses) {
  const std::string dir = ::testing::TempDir() + "ckpt_corrupt";
  accel_model* a = make_model(7);
  OK(accel_save_model(g_acc, a, dir.c_str(), nullptr));
  const std::string good = slurp(dir + "/model.safetensors");
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
    return dir + "/" + name;
  };
  struct Case {
    std::string name, bytes, message;
  };
  std::string flipped = good;
  flipped[12] ^= 0x55;  // inside the JSON
  std::string huge = good;
  huge[6] = 0x7f;
  const std::vector<Case> cases = {
      {"truncated.safetensors", good.substr(0, good.size() - 10), "outside"},
      {"header_only.safetensors", good.substr(0, 20), "runs past the end"},
      {"flipped.safetensors", flipped, "safetensors file"},
      {"huge.safetensors", huge, "exceeds 100 MB"},
      {"empty.safetensors", "", "shorter than"},
  };
  for (const auto& c : cases) {
    const std::string path = write(c.name, c.bytes);
    EXPECT_EQ(accel_load_checkpoint_in_model(a, path.c_str()), ACCEL_ERR_IO) << c.name;
    EXPECT_NE(std::string(accel_last_error_message()).find(c.message), std::string::npos)
        << c.name << ": " << accel_last_error_message();
    EXPECT_NE(std::string(accel_last_error_message()).find(c.name), std::string::npos);
  }
  EXPECT_EQ(accel_load_checkpoint_in_model(a, "/nonexistent/ckpt"), ACCEL_ERR_IO);
  write("bad.index.json", "{\"weight_map\": {\"fc1.weight\": \"../../etc/passwd\"}}");
  EXPECT_EQ(accel_load_checkpoint_in_model(a, (dir + "/bad.index.json").c_str()), ACCEL_ERR_IO);
  EXPECT_NE(std::string(accel_last_error_message()).find("outside its directory"),
            std::string::npos);
  accel_model_free(a);
}

TEST(Checkpoint, LoadStateRefusesIncompleteOrCorruptCheckpoints) {
  const std::string dir = ::testing::TempDir() + "state_corrupt";
  std::system(("rm -rf " + dir).c_str());
  accel_model* m = make_model(8);
  accel_optimizer* o = nullptr;
  OK(accel_optimizer_new(m, "sgd", &o));
  void* objs[] = {m, o};
  OK(accel_prepare(g_acc, objs, 2));
  OK(accel_save_state(g_acc, dir.c_str()));
  OK(accel_load_state(g_acc, dir.c_str()));
  std::ifstream partial(dir + ".partial");
  EXPECT_FALSE(partial.good()) << "the partial directory is gone after the commit";
  const std::string model_file = dir + "/model_0.safetensors";
  const std::string good = slurp(model_file);
  std::string flipped = good;
  flipped[flipped.size() - 3] ^= 1;
  std::ofstream(model_file, std::ios::binary) << flipped;
  EXPECT_EQ(accel_load_state(g_acc, dir.c_str()), ACCEL_ERR_IO);
  EXPECT_NE(std::string(accel_last_error_message()).find("model_0.safetensors' does not match"),
            std::string::npos)
      << accel_last_error_message();
  std::ofstream(model_file, std::ios::binary) << good.substr(0, good.size() / 2);
  EXPECT_EQ(accel_load_state(g_acc, dir.c_str()), ACCEL_ERR_IO);
  EXPECT_NE(std::string(accel_last_error_message()).find("incomplete"), std::string::npos);
  std::remove(model_file.c_str());
  EXPECT_EQ(accel_load_state(g_acc, dir.c_str()), ACCEL_ERR_IO);
  EXPECT_NE(std::string(accel_last_error_message()).find("missing"), std::string::npos);
  std::ofstream(dir + "/manifest.json") << "{\"format\": \"libaccel-checkpoint\"";
  EXPECT_EQ(accel_load_state(g_acc, dir.c_str()), ACCEL_ERR_IO);
  EXPECT_NE(std::string(accel_last_error_message()).find("manifest"), std::string::npos);
  EXPECT_EQ(accel_load_state(g_acc, "/nonexistent/state"), ACCEL_ERR_IO);
  accel_optimizer_free(o);
  accel_model_free(m);
}

TEST(Checkpoint, EveryOptimizerKindResumesExactly) {
  // Saved after 3 steps, then 3 more steps; loading the checkpoint and taking the same 3 steps
  // again must land on the very same weights: only true when every piece of optimizer state
  // (momentum, Adam's moments and amsgrad maxima, RMSprop's averages, Adagrad's sums) round-trips.
  const std::string dir = ::testing::TempDir() + "state_optimizers";
  const std::pair<const char*, std::vector<std::pair<const char*, const char*>>> kinds[] = {
      {"sgd", {{"momentum", "0.9"}, {"nesterov", "true"}}},
      {"adam", {{"amsgrad", "true"}}},
      {"adamw", {{"weight_decay", "0.1"}}},
      {"rmsprop", {{"momentum", "0.5"}, {"centered", "true"}}},
      {"adagrad", {{"lr_decay", "0.01"}}}};
  std::vector<float> xv(8 * 32);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.37f * static_cast<float>(i));
  const int64_t xshape[] = {8, 32};
  for (const auto& [kind, options] : kinds) {
    SCOPED_TRACE(kind);
    std::system(("rm -rf " + dir).c_str());
    init_with({});
    accel_model* m = make_model(11);
    OK(accel_model_define(m,
                          "def loss(self, x):\n"
                          "    h = torch.relu(self.fc1.forward(x))\n"
                          "    return self.fc2.forward(h).pow(2).mean()\n"));
    accel_optimizer* o = nullptr;
    OK(accel_optimizer_new(m, kind, &o));
    OK(accel_optimizer_set(o, "lr", "0.01"));
    for (const auto& [key, value] : options) OK(accel_optimizer_set(o, key, value));
    void* objs[] = {m, o};
    OK(accel_prepare(g_acc, objs, 2));
    accel_tensor* x = nullptr;
    OK(accel_tensor_from_data(xv.data(), xv.size() * 4, ACCEL_DTYPE_F32, xshape, 2, &x));
    auto steps = [&](int n) {
      for (int i = 0; i < n; ++i) {
        accel_tensor* loss = call_one(m, "loss", {x});
        ASSERT_NE(loss, nullptr);
        OK(accel_backward(g_acc, loss));
        OK(accel_optimizer_step(o));
        OK(accel_optimizer_zero_grad(o));
        accel_tensor_free(loss);
      }
    };
    steps(3);
    const auto at_save = values(m, "fc1.weight");
    OK(accel_save_state(g_acc, dir.c_str()));
    steps(3);
    const auto after = values(m, "fc1.weight");
    EXPECT_NE(after, at_save);
    OK(accel_load_state(g_acc, dir.c_str()));
    EXPECT_EQ(values(m, "fc1.weight"), at_save);
    steps(3);
    EXPECT_EQ(values(m, "fc1.weight"), after) << "bitwise the same steps after the resume";
    accel_tensor_free(x);
    accel_optimizer_free(o);
    accel_model_free(m);
  }
  init_with({});
}

namespace {
struct Counter {
  int64_t value = 0;
  int saves = 0;
  int releases = 0;
};
int32_t save_counter(accel_state_writer* w, void* user) {
  auto* c = static_cast<Counter*>(user);
  ++c->saves;
  // In two pieces: the writer appends.
  if (accel_state_writer_write(w, &c->value, 4) != ACCEL_OK) return 1;
  return accel_state_writer_write(w, reinterpret_cast<char*>(&c->value) + 4, 4) == ACCEL_OK ? 0 : 1;
}
int32_t load_counter(const void* data, size_t size, void* user) {
  if (size != sizeof(int64_t)) return 1;
  std::memcpy(&static_cast<Counter*>(user)->value, data, sizeof(int64_t));
  return 0;
}
int32_t failing_save(accel_state_writer*, void*) {
  return 3;
}
void release_counter(void* user) {
  ++static_cast<Counter*>(user)->releases;
}
}  // namespace

TEST(Checkpoint, AutomaticNamingTotalLimitAndCustomObjects) {
  // project_dir's missing parents are made too (Accelerate's os.makedirs).
  const std::string project = ::testing::TempDir() + "project/runs/first";
  std::system(("rm -rf " + ::testing::TempDir() + "project").c_str());
  init_with({{"project_dir", project.c_str()},
             {"automatic_checkpoint_naming", "true"},
             {"total_limit", "2"}});
  Counter counter;
  OK(accel_register_for_checkpointing(g_acc, save_counter, load_counter, &counter,
                                      release_counter));
  for (int i = 0; i < 3; ++i) OK(accel_accumulate(g_acc));
  for (int i = 0; i < 4; ++i) {
    counter.value = 100 + i;
    OK(accel_save_state(g_acc, nullptr));
  }
  EXPECT_NE(slurp(project + "/checkpoints/checkpoint_3/manifest.json").find("\"step\": 3"),
            std::string::npos)
      << "the manifest records the step (micro-steps so far)";
  const std::string ls = run("ls " + project + "/checkpoints");
  EXPECT_EQ(ls, "checkpoint_2\ncheckpoint_3\n") << "total_limit 2 keeps the newest two";
  counter.value = 0;
  OK(accel_load_state(g_acc, nullptr));
  EXPECT_EQ(counter.value, 103) << "the newest checkpoint's custom object";
  EXPECT_EQ(counter.saves, 4) << "one save callback per checkpoint: no size query first";
  OK(accel_save_state(g_acc, nullptr));
  EXPECT_EQ(run("ls " + project + "/checkpoints"), "checkpoint_3\ncheckpoint_4\n")
      << "numbering continues after the loaded checkpoint";
  OK(accel_register_for_checkpointing(g_acc, failing_save, load_counter, &counter, nullptr));
  EXPECT_EQ(accel_save_state(g_acc, nullptr), ACCEL_ERR_CALLBACK);
  EXPECT_NE(std::string(accel_last_error_message()).find("save callback returned 3"),
            std::string::npos)
      << accel_last_error_message();
  EXPECT_EQ(run("ls " + project + "/checkpoints"), "checkpoint_3\ncheckpoint_4\n")
      << "a failed save leaves no partial directory and no new number";
  EXPECT_EQ(counter.releases, 0);
  const int saves = counter.saves;
  accel_accelerator_free(g_acc);
  g_acc = nullptr;
  EXPECT_EQ(counter.releases, 1) << "released once, when the accelerator is freed";
  OK(accel_init(nullptr, &g_acc));
  EXPECT_EQ(accel_save_state(g_acc, nullptr), ACCEL_ERR_INVALID_ARGUMENT)
      << "no project configured";
  EXPECT_EQ(counter.saves, saves) << "never called after the accelerator was freed";
  EXPECT_EQ(
      accel_register_for_checkpointing(g_acc, save_counter, nullptr, &counter, release_counter),
      ACCEL_ERR_INVALID_ARGUMENT);
  accel_accelerator_free(g_acc);
  g_acc = nullptr;
  EXPECT_EQ(counter.releases, 1) << "a refused registration is never released";
  OK(accel_init(nullptr, &g_acc));
}

namespace {

// CRC-32 (zlib's polynomial), to rewrite a manifest entry after editing a file on purpose.
uint32_t crc32_of(const std::string& data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : data) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

// Replaces `file` in checkpoint `dir` and updates its size and CRC-32 in manifest.json, so that
// only the content checks can catch what is wrong with it.
void replace_consistently(const std::string& dir, const std::string& file,
                          const std::string& text) {
  std::ofstream(dir + "/" + file, std::ios::binary) << text;
  std::string manifest = slurp(dir + "/manifest.json");
  const size_t at = manifest.find("\"" + file + "\"");
  ASSERT_NE(at, std::string::npos) << manifest;
  const size_t end = manifest.find('}', at);
  std::string entry = manifest.substr(at, end - at);
  const size_t size_at = entry.find("\"size\"");
  const size_t crc_at = entry.find("\"crc32\"");
  ASSERT_NE(size_at, std::string::npos);
  ASSERT_NE(crc_at, std::string::npos);
  auto set_number = [&](size_t key_at, uint64_t value) {
    const size_t colon = entry.find(':', key_at);
    size_t stop = entry.find_first_of(",}\n", colon);
    if (stop == std::string::npos) stop = entry.size();
    entry.replace(colon + 1, stop - colon - 1, " " + std::to_string(value));
  };
  // The later key first, so that the earlier one's offset stays valid.
  if (crc_at > size_at) {
    set_number(crc_at, crc32_of(text));
    set_number(size_at, text.size());
  } else {
    set_number(size_at, text.size());
    set_number(entry.find("\"crc32\""), crc32_of(text));
  }
  manifest.replace(at, end - at, entry);
  std::ofstream(dir + "/manifest.json", std::ios::binary) << manifest;
}

}  // namespace

// A failed load_state changes nothing: neither another optimizer kind (a common edit between
// runs) nor a training_state.json without a key replaces the model's weights first.
TEST(Checkpoint, FailedLoadStateChangesNothing) {
  const std::string dir = ::testing::TempDir() + "state_atomic";
  std::system(("rm -rf " + dir).c_str());
  init_with({});
  accel_model* m = make_model(21);
  accel_optimizer* o = nullptr;
  OK(accel_optimizer_new(m, "sgd", &o));
  OK(accel_optimizer_set(o, "lr", "0.5"));
  void* objs[] = {m, o};
  OK(accel_prepare(g_acc, objs, 2));
  OK(accel_save_state(g_acc, dir.c_str()));
  accel_optimizer_free(o);
  accel_model_free(m);

  // Another run: other weights, Adam where SGD was saved.
  init_with({});
  m = make_model(22);
  OK(accel_optimizer_new(m, "adam", &o));
  OK(accel_optimizer_set(o, "lr", "0.25"));
  void* objs2[] = {m, o};
  OK(accel_prepare(g_acc, objs2, 2));
  const auto weights = values(m, "fc1.weight");
  EXPECT_EQ(accel_load_state(g_acc, dir.c_str()), ACCEL_ERR_STATE);
  const std::string msg = accel_last_error_message();
  EXPECT_NE(msg.find("optimizer_0.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("sgd"), std::string::npos) << msg;
  EXPECT_EQ(values(m, "fc1.weight"), weights) << "the weights were replaced by a failed load";
  accel_optimizer_free(o);
  accel_model_free(m);

  // The same kind, but training_state.json lacks a key (its manifest entry matches).
  init_with({});
  m = make_model(23);
  OK(accel_optimizer_new(m, "sgd", &o));
  OK(accel_optimizer_set(o, "lr", "0.125"));
  void* objs3[] = {m, o};
  OK(accel_prepare(g_acc, objs3, 2));
  const auto before = values(m, "fc1.weight");
  std::string training = slurp(dir + "/training_state.json");
  const size_t key = training.find("\"micro_step\"");
  ASSERT_NE(key, std::string::npos) << training;
  training.replace(key, std::string("\"micro_step\"").size(), "\"micro_stepX\"");
  replace_consistently(dir, "training_state.json", training);
  EXPECT_EQ(accel_load_state(g_acc, dir.c_str()), ACCEL_ERR_IO);
  const std::string msg2 = accel_last_error_message();
  EXPECT_NE(msg2.find("training_state.json"), std::string::npos) << msg2;
  EXPECT_NE(msg2.find("'micro_step'"), std::string::npos) << msg2;
  EXPECT_EQ(values(m, "fc1.weight"), before);
  double lr = 0;
  OK(accel_optimizer_lr(o, &lr));
  EXPECT_EQ(lr, 0.125) << "the optimizer's options were replaced by a failed load";

  // A key of the wrong type is named the same way.
  replace_consistently(
      dir, "training_state.json",
      "{\"micro_step\": \"three\", \"sync_gradients\": true, \"dataloaders\": []}");
  EXPECT_EQ(accel_load_state(g_acc, dir.c_str()), ACCEL_ERR_IO);
  EXPECT_NE(std::string(accel_last_error_message()).find("'micro_step' has the wrong type"),
            std::string::npos)
      << accel_last_error_message();
  EXPECT_EQ(values(m, "fc1.weight"), before);
  accel_optimizer_free(o);
  accel_model_free(m);
  init_with({});
}

TEST(Checkpoint, ModelDefineIsAllOrNothing) {
  accel_model* m = make_model(3);
  // The first method compiles, the second does not: neither may be defined afterwards.
  EXPECT_EQ(accel_model_define(m,
                               "def first(self, x):\n"
                               "    return self.fc1.forward(x)\n"
                               "def second(self, x):\n"
                               "    return self.no_such_layer.forward(x)\n"),
            ACCEL_ERR_INVALID_ARGUMENT);
  std::vector<float> xv(32, 1.0f);
  const int64_t shape[] = {1, 32};
  accel_tensor* x = nullptr;
  OK(accel_tensor_from_data(xv.data(), xv.size() * 4, ACCEL_DTYPE_F32, shape, 2, &x));
  accel_tensor_list* out = nullptr;
  const accel_tensor* in[] = {x};
  EXPECT_EQ(accel_model_call(m, "first", in, 1, &out), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(accel_last_error_message()).find("no method 'first'"), std::string::npos)
      << accel_last_error_message();
  // The same source, fixed, defines both.
  OK(accel_model_define(m,
                        "def first(self, x):\n"
                        "    return self.fc1.forward(x)\n"
                        "def second(self, x):\n"
                        "    return self.fc2.forward(self.fc1.forward(x))\n"));
  OK(accel_model_call(m, "second", in, 1, &out));
  accel_tensor_list_free(out);
  accel_tensor_free(x);
  accel_model_free(m);
}

TEST(Checkpoint, NumbersAreCheckedWhicheverDoorTheyEnter) {
  accel_model* m = make_model(4);
  accel_optimizer* o = nullptr;
  OK(accel_optimizer_new(m, "adam", &o));
  OK(accel_optimizer_set_lr(o, 0.01));
  for (double bad : {std::nan(""), double(INFINITY), -double(INFINITY), -1.0}) {
    EXPECT_EQ(accel_optimizer_set_lr(o, bad), ACCEL_ERR_INVALID_ARGUMENT) << bad;
    EXPECT_NE(std::string(accel_last_error_message()).find("'lr'"), std::string::npos)
        << accel_last_error_message();
  }
  for (const char* bad : {"nan", "inf", "-1", "1e999"})
    EXPECT_EQ(accel_optimizer_set(o, "lr", bad), ACCEL_ERR_INVALID_ARGUMENT) << bad;
  EXPECT_EQ(accel_optimizer_set(o, "beta1", "1"), ACCEL_ERR_INVALID_ARGUMENT);
  double lr = 0;
  OK(accel_optimizer_lr(o, &lr));
  EXPECT_EQ(lr, 0.01);
  EXPECT_EQ(accel_clip_grad_norm(g_acc, m, std::nan(""), 2.0, nullptr), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_clip_grad_norm(g_acc, m, INFINITY, 2.0, nullptr), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_clip_grad_norm(g_acc, m, 1.0, std::nan(""), nullptr), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_clip_grad_value(g_acc, m, INFINITY), ACCEL_ERR_INVALID_ARGUMENT);
  accel_optimizer_free(o);
  accel_model_free(m);
}
