// Numbers in text under a comma-decimal locale, as a Julia, Go or Rust host may set it with
// setlocale() (and a C++ host with std::locale::global): option values, YAML files, layer specs,
// shard sizes and checkpoints must read and write exactly as in the C locale.
#include <gtest/gtest.h>

#include <clocale>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <locale>
#include <string>

#include "accel/accel.h"
#include "accelerator_env.hpp"

namespace {

// Switches the whole process to de_DE.UTF-8 (comma as the decimal separator) for one test.
class CommaLocale : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(std::setlocale(LC_ALL, "de_DE.UTF-8"), nullptr)
        << "the de_DE.UTF-8 locale is missing: tools/setup.sh installs Debian's locales and "
           "generates it";
    std::locale::global(std::locale("de_DE.UTF-8"));
    char text[16];
    std::snprintf(text, sizeof text, "%.2f", 0.5);
    ASSERT_STREQ(text, "0,50") << "the locale must really use a decimal comma";
  }
  void TearDown() override {
    std::locale::global(std::locale::classic());
    std::setlocale(LC_ALL, "C");
  }
};

std::string config_value(const accel_config* c, const char* key) {
  char buf[128];
  size_t n = 0;
  EXPECT_EQ(accel_config_get(c, key, buf, sizeof buf, &n), ACCEL_OK) << accel_last_error_message();
  return buf;
}

}  // namespace

TEST_F(CommaLocale, OptionValuesAndSchedules) {
  accel_model* m = nullptr;
  OK(accel_model_new(&m));
  OK(accel_model_add_layer(m, "fc", "linear", "in_features=2 out_features=1"));
  accel_optimizer* o = nullptr;
  OK(accel_optimizer_new(m, "sgd", &o));
  OK(accel_optimizer_set(o, "lr", "0.01"));
  OK(accel_optimizer_set(o, "momentum", "1e-1"));
  double lr = 0;
  OK(accel_optimizer_lr(o, &lr));
  EXPECT_EQ(lr, 0.01);
  EXPECT_EQ(accel_optimizer_set(o, "lr", "0,01"), ACCEL_ERR_INVALID_ARGUMENT)
      << "the comma form is not a number in libaccel's option syntax, whatever the locale";
  accel_scheduler* s = nullptr;
  OK(accel_scheduler_new(o, "step", &s));
  OK(accel_scheduler_set(s, "step_size", "1"));
  OK(accel_scheduler_set(s, "gamma", "0.5"));
  OK(accel_scheduler_step(s));
  OK(accel_scheduler_lr(s, &lr));
  EXPECT_DOUBLE_EQ(lr, 0.005);
  accel_scheduler_free(s);
  accel_optimizer_free(o);
  accel_model_free(m);
}

TEST_F(CommaLocale, ConfigSettersAndYamlFilesWithFloats) {
  accel_config* c = nullptr;
  OK(accel_config_new(&c));
  OK(accel_config_set(c, "rendezvous_timeout", "0.5"));
  EXPECT_EQ(config_value(c, "rendezvous_timeout"), "0.5");
  const std::string path = ::testing::TempDir() + "locale_floats.yaml";
  std::ofstream(path) << "compute_environment: LOCAL_MACHINE\n"
                         "collective_timeout: 12.5\n"
                         "rendezvous_timeout: 0.25\n"
                         "mixed_precision: bf16\n";
  OK(accel_config_load_file(c, path.c_str()));
  EXPECT_EQ(config_value(c, "collective_timeout"), "12.5");
  EXPECT_EQ(config_value(c, "rendezvous_timeout"), "0.5") << "the setter still wins";
  init_with({{"collective_timeout", "12.5"}, {"rendezvous_timeout", "0.25"}});
  char dump[8192];
  size_t n = 0;
  OK(accel_effective_config(g_acc, dump, sizeof dump, &n));
  EXPECT_NE(std::string(dump).find("collective_timeout: 12.5"), std::string::npos) << dump;
  accel_config_free(c);
  init_with({});
}

TEST_F(CommaLocale, LayerSpecsBecomeTorchScriptFloats) {
  accel_model* m = nullptr;
  OK(accel_model_new(&m));
  OK(accel_model_add_layer(m, "bn", "batch_norm2d", "num_features=2 eps=0.001 momentum=0.25"));
  OK(accel_model_add_layer(m, "ln", "layer_norm", "normalized_shape=3 eps=0.5"));
  OK(accel_model_define(m,
                        "def forward(self, x):\n"
                        "    return self.ln.forward(x)\n"
                        "def norm(self, x):\n"
                        "    return self.bn.forward(x)\n"));
  accel_tensor* x = nullptr;
  const float v[] = {1, 2, 3};
  const int64_t shape[] = {1, 3};
  OK(accel_tensor_from_data(v, sizeof v, ACCEL_DTYPE_F32, shape, 2, &x));
  accel_tensor* y = call_one(m, "forward", {x});
  ASSERT_NE(y, nullptr);
  // layer_norm of [1, 2, 3] with eps 0.5: (x - 2) / sqrt(2/3 + 0.5).
  const auto out = values_of<float>(y);
  EXPECT_NEAR(out[0], -1.0 / std::sqrt(2.0 / 3.0 + 0.5), 1e-6);
  accel_tensor_free(y);
  accel_tensor_free(x);
  accel_model_free(m);
}

TEST_F(CommaLocale, CheckpointsWriteAndReadTheirNumbers) {
  const std::string dir = ::testing::TempDir() + "locale_state";
  const std::string model_dir = ::testing::TempDir() + "locale_model";
  std::system(("rm -rf " + dir + " " + model_dir).c_str());
  init_with({{"collective_timeout", "12.5"}});
  accel_model* m = nullptr;
  OK(accel_model_new(&m));
  OK(accel_model_add_layer(m, "fc", "linear", "in_features=2 out_features=2"));
  accel_optimizer* o = nullptr;
  OK(accel_optimizer_new(m, "adamw", &o));
  OK(accel_optimizer_set(o, "lr", "0.0125"));
  OK(accel_optimizer_set(o, "beta2", "0.995"));
  accel_scheduler* s = nullptr;
  OK(accel_scheduler_new(o, "exponential", &s));
  OK(accel_scheduler_set(s, "gamma", "0.75"));
  void* objs[] = {m, o, s};
  OK(accel_prepare(g_acc, objs, 3));
  OK(accel_scheduler_step(s));
  double before = 0, after = 0;
  OK(accel_optimizer_lr(o, &before));
  OK(accel_save_model(g_acc, m, model_dir.c_str(), "0.5MB"));
  OK(accel_load_checkpoint_in_model(m, model_dir.c_str()));
  OK(accel_save_state(g_acc, dir.c_str()));
  OK(accel_optimizer_set_lr(o, 3.0));
  OK(accel_load_state(g_acc, dir.c_str()));
  OK(accel_optimizer_lr(o, &after));
  EXPECT_EQ(after, before) << "the learning rate read back from the checkpoint's JSON";
  accel_scheduler_free(s);
  accel_optimizer_free(o);
  accel_model_free(m);
  init_with({});
}

// The trackers' files are read by JSON, CSV and YAML readers: "0.5" whatever the host's locale.
TEST_F(CommaLocale, TrackerFilesWriteNumbersWithAPoint) {
  const std::string dir = ::testing::TempDir() + "locale_trackers";
  std::system(("rm -rf '" + dir + "'").c_str());
  init_with({{"log_with", "jsonl,csv,tensorboard"}, {"logging_dir", dir.c_str()}});
  accel_values* v = nullptr;
  OK(accel_values_new(&v));
  OK(accel_values_set_number(v, "lr", 0.5));
  OK(accel_init_trackers(g_acc, "run", v));
  OK(accel_values_set_number(v, "loss", 1.25));
  OK(accel_log(g_acc, v, 3));
  OK(accel_end_training(g_acc));
  accel_values_free(v);
  auto slurp = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string jsonl = slurp(dir + "/run/metrics.jsonl");
  EXPECT_NE(jsonl.find("\"values\": {\"lr\": 0.5, \"loss\": 1.25}"), std::string::npos) << jsonl;
  const std::string csv = slurp(dir + "/run/metrics.csv");
  EXPECT_NE(csv.find(",3,loss,1.25\n"), std::string::npos) << csv;
  EXPECT_EQ(csv.find("1,25"), std::string::npos) << csv;
  EXPECT_EQ(slurp(dir + "/run/hparams.yml"), "lr: 0.5\n");
  init_with({});
}
