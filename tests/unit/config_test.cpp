// Configuration: precedence of the four layers and one validation path for all sources.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>

#include "common/error.hpp"
#include "config/config.hpp"

using accel::Errc;
using accel::Error;
using accel::config::Config;
using accel::config::EnvMap;
using accel::config::Source;

namespace {

// The exact file `accelerate config` writes for 1 machine, 2 GPUs, bf16 (see the behaviour notes).
const char* kAccelerateFile = R"(compute_environment: LOCAL_MACHINE
debug: false
distributed_type: MULTI_GPU
downcast_bf16: 'no'
enable_cpu_affinity: false
gpu_ids: all
machine_rank: 0
main_training_function: main
mixed_precision: bf16
num_machines: 1
num_processes: 2
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: false
)";

// `accelerate config default` writes JSON into the .yaml file.
const char* kAccelerateDefaultJson = R"({
  "compute_environment": "LOCAL_MACHINE",
  "debug": false,
  "distributed_type": "NO",
  "downcast_bf16": false,
  "enable_cpu_affinity": false,
  "machine_rank": 0,
  "main_training_function": "main",
  "mixed_precision": "no",
  "num_machines": 1,
  "num_processes": 1,
  "rdzv_backend": "static",
  "same_network": false,
  "tpu_env": [],
  "tpu_use_cluster": false,
  "tpu_use_sudo": false,
  "use_cpu": true
})";

// Runs `body`, expecting accel::Error of class `code` whose message contains every `parts`.
template <class F>
void expect_error(F&& body, Errc code, std::initializer_list<std::string> parts) {
  try {
    body();
    ADD_FAILURE() << "no error was raised";
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.code()), static_cast<int>(code)) << e.what();
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "message lacks '" << p << "': " << e.what();
  }
}

std::string temp_file(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST(Config, DefaultsWhenNothingIsSet) {
  Config c;
  const auto r = c.resolve({});
  EXPECT_EQ(r.text("mixed_precision"), "no");
  EXPECT_EQ(r.integer("gradient_accumulation_steps"), 1);
  EXPECT_EQ(r.at("mixed_precision").origin.source, Source::kDefault);
  EXPECT_DOUBLE_EQ(r.seconds("collective_timeout"), 300.0);
}

TEST(Config, PrecedenceSetterOverEnvOverFileOverDefault) {
  Config c;
  c.load_yaml_text("mixed_precision: fp16\ngradient_accumulation_steps: 4\nuse_cpu: true\n",
                   "f.yaml");
  const EnvMap env{{"ACCELERATE_MIXED_PRECISION", "bf16"},
                   {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "8"}};
  c.set("mixed_precision", "no");
  const auto r = c.resolve(env);
  EXPECT_EQ(r.text("mixed_precision"), "no");
  EXPECT_EQ(r.at("mixed_precision").origin.source, Source::kSetter);
  EXPECT_EQ(r.integer("gradient_accumulation_steps"), 8);
  EXPECT_EQ(r.at("gradient_accumulation_steps").origin.describe(),
            "env ACCELERATE_GRADIENT_ACCUMULATION_STEPS");
  EXPECT_TRUE(r.flag("use_cpu"));
  EXPECT_EQ(r.at("use_cpu").origin.describe(), "file f.yaml:3");
  EXPECT_EQ(r.at("num_machines").origin.source, Source::kDefault);
}

TEST(Config, EnvironmentBooleansUseAccelerateSpellings) {
  Config c;
  for (const char* yes : {"1", "true", "YES", "on", "t", "y"})
    EXPECT_TRUE(c.resolve({{"ACCELERATE_USE_CPU", yes}}).flag("use_cpu")) << yes;
  for (const char* no : {"0", "false", "No", "off", "f", "n"})
    EXPECT_FALSE(c.resolve({{"ACCELERATE_USE_CPU", no}}).flag("use_cpu")) << no;
  expect_error(
      [&] {
        c.resolve({{"ACCELERATE_USE_CPU", "maybe"}});
      },
      Errc::config, {"use_cpu", "env ACCELERATE_USE_CPU", "maybe", "true/false"});
}

TEST(Config, AccelerateWrittenFileLoads) {
  Config c;
  const std::string path = temp_file("accelerate.yaml", kAccelerateFile);
  c.load_file(path);
  const auto r = c.resolve({});
  EXPECT_EQ(r.text("mixed_precision"), "bf16");
  EXPECT_EQ(r.integer("num_processes"), 2);
  EXPECT_EQ(r.text("distributed_type"), "MULTI_GPU");
  EXPECT_EQ(r.at("num_processes").origin.describe(), "file " + path + ":11");
}

TEST(Config, AccelerateDefaultJsonLoads) {
  Config c;
  c.load_yaml_text(kAccelerateDefaultJson, "default_config.yaml");
  const auto r = c.resolve({});
  EXPECT_TRUE(r.flag("use_cpu"));
  EXPECT_EQ(r.text("mixed_precision"), "no");
  EXPECT_EQ(r.text("downcast_bf16"), "false");
}

TEST(Config, LegacyFp16KeyMeansMixedPrecisionFp16) {
  Config c;
  c.load_yaml_text("fp16: true\n", "old.yaml");
  EXPECT_EQ(c.resolve({}).text("mixed_precision"), "fp16");
}

TEST(Config, UnknownKeyInEachSourceNamesKeySourceAndSuggestion) {
  Config c;
  expect_error([&] { c.load_yaml_text("num_processes: 2\nmixed_precison: bf16\n", "x.yaml"); },
               Errc::config,
               {"mixed_precison", "file x.yaml:2", "did you mean 'mixed_precision'", "Known keys"});
  expect_error([&] { c.set("colective_timeout", "3"); }, Errc::config,
               {"colective_timeout", "setter", "collective_timeout"});
  expect_error(
      [&] {
        c.resolve({{"ACCEL_COLECTIVE_TIMEOUT", "3"}});
      },
      Errc::config, {"ACCEL_COLECTIVE_TIMEOUT", "did you mean ACCEL_COLLECTIVE_TIMEOUT"});
}

TEST(Config, BadValueInEachSourceNamesAllowedValues) {
  Config c;
  expect_error([&] { c.load_yaml_text("mixed_precision: fp32\n", "y.yaml"); }, Errc::config,
               {"mixed_precision", "file y.yaml:1", "'fp32'", "no, fp16, bf16"});
  expect_error(
      [&] {
        c.resolve({{"ACCELERATE_MIXED_PRECISION", "fp32"}});
      },
      Errc::config, {"env ACCELERATE_MIXED_PRECISION", "no, fp16, bf16"});
  expect_error([&] { c.set("mixed_precision", "fp32"); }, Errc::config,
               {"setter", "no, fp16, bf16"});
  expect_error([&] { c.set("gradient_accumulation_steps", "0"); }, Errc::config,
               {"gradient_accumulation_steps", "an integer from 1"});
  expect_error([&] { c.set("num_processes", "two"); }, Errc::config, {"num_processes", "integer"});
  expect_error([&] { c.set("collective_timeout", "-1"); }, Errc::config,
               {"collective_timeout", "seconds"});
  expect_error(
      [&] {
        c.resolve({{"ACCEL_NUM_THREADS", "lots"}});
      },
      Errc::config, {"num_threads", "env ACCEL_NUM_THREADS"});
}

TEST(Config, FailedSetterLeavesPreviousValue) {
  Config c;
  c.set("mixed_precision", "bf16");
  EXPECT_THROW(c.set("mixed_precision", "int4"), Error);
  EXPECT_EQ(c.resolve({}).text("mixed_precision"), "bf16");
}

TEST(Config, FailedFileLoadLeavesPreviousFile) {
  Config c;
  c.load_yaml_text("mixed_precision: bf16\n", "good.yaml");
  EXPECT_THROW(c.load_yaml_text("mixed_precision: bf16\nbogus: 1\n", "bad.yaml"), Error);
  EXPECT_EQ(c.resolve({}).text("mixed_precision"), "bf16");
  EXPECT_EQ(c.file_path(), "good.yaml");
}

TEST(Config, UnsupportedAccelerateFeaturesAreReportedNotDropped) {
  Config c;
  expect_error([&] { c.load_yaml_text("tpu_use_cluster: true\n", "t.yaml"); }, Errc::unsupported,
               {"tpu_use_cluster", "TPU"});
  expect_error([&] { c.load_yaml_text("tpu_env: [A=1]\n", "t.yaml"); }, Errc::unsupported,
               {"tpu_env"});
  expect_error([&] { c.load_yaml_text("distributed_type: XLA\n", "d.yaml"); }, Errc::unsupported,
               {"distributed_type", "XLA", "NO, MULTI_CPU, MULTI_GPU, FSDP, DEEPSPEED"});
  expect_error([&] { c.set("mixed_precision", "fp8"); }, Errc::unsupported, {"fp8"});
  expect_error(
      [&] {
        c.resolve({{"ACCELERATE_DYNAMO_BACKEND", "inductor"}});
      },
      Errc::unsupported, {"dynamo"});
  // Neutral values, as Accelerate writes them, are fine.
  c.load_yaml_text(
      "deepspeed_config: {}\nfsdp_config: {}\ntpu_env: []\n"
      "dynamo_config:\n  dynamo_backend: 'NO'\nipex_config:\n  ipex: false\n",
      "ok.yaml");
  EXPECT_NO_THROW(
      c.resolve({{"ACCELERATE_USE_FSDP", "false"}, {"ACCELERATE_DYNAMO_BACKEND", "NO"}}));
  // Accelerate's questionnaire (up to 1.12) writes ipex_config into every CPU file; IPEX on is
  // refused.
  Config ipex;
  expect_error([&] { ipex.load_yaml_text("ipex_config:\n  ipex: true\n", "ipex.yaml"); },
               Errc::unsupported, {"ipex.yaml:1", "IPEX"});
}

TEST(Config, FileErrorsNameTheFile) {
  Config c;
  expect_error([&] { c.load_file("/nonexistent/dir/config.yaml"); }, Errc::io,
               {"/nonexistent/dir/config.yaml"});
  expect_error([&] { c.load_yaml_text("a: [1, 2\nb: 3\n", "broken.yaml"); }, Errc::config,
               {"broken.yaml", "not valid YAML"});
  expect_error([&] { c.load_yaml_text("- 1\n- 2\n", "list.yaml"); }, Errc::config,
               {"list.yaml", "mapping"});
  expect_error([&] { c.load_yaml_text("use_cpu: true\nuse_cpu: false\n", "dup.yaml"); },
               Errc::config, {"use_cpu", "twice"});
  expect_error([&] { c.load_yaml_text("use_deepspeed: false\n", "env_only.yaml"); }, Errc::config,
               {"'use_deepspeed'", "env_only.yaml:1", "only through the environment"});
}

TEST(Config, EmptyFileIsAllDefaults) {
  Config c;
  c.load_yaml_text("", "empty.yaml");
  EXPECT_EQ(c.resolve({}).at("mixed_precision").origin.source, Source::kDefault);
}

TEST(Config, ReservedAccelVariablesAreNotConfigErrors) {
  Config c;
  EXPECT_NO_THROW(c.resolve({{"ACCEL_RUN_ID", "x"},
                             {"ACCEL_CONFIG_FILE", "/f"},
                             {"ACCEL_STORE_HOSTED", "1"},
                             {"ACCELERATE_SOMETHING_ELSE", "1"},
                             {"ACCEL_UNRELATED_TOOL_SETTING", "1"}}));
}

TEST(Config, DumpListsEveryKeyWithItsSource) {
  Config c;
  c.load_yaml_text("num_processes: 2\n", "cfg.yaml");
  c.set("gradient_accumulation_steps", "3");
  const std::string dump = c.resolve({{"ACCELERATE_MIXED_PRECISION", "bf16"}}).dump_yaml();
  EXPECT_NE(dump.find("mixed_precision: bf16"), std::string::npos) << dump;
  EXPECT_NE(dump.find("# env ACCELERATE_MIXED_PRECISION"), std::string::npos);
  EXPECT_NE(dump.find("# file cfg.yaml:1"), std::string::npos);
  EXPECT_NE(dump.find("gradient_accumulation_steps: 3"), std::string::npos);
  EXPECT_NE(dump.find("# setter"), std::string::npos);
  EXPECT_NE(dump.find("dynamo_backend: 'no'"), std::string::npos) << "YAML 1.1 words are quoted";
  for (const auto& spec : accel::config::key_table())
    EXPECT_NE(dump.find(std::string(spec.in_file ? "" : "# ") + spec.name + ":"), std::string::npos)
        << spec.name;
  // The dump is itself a loadable configuration: the env-only keys are comments.
  Config reread;
  reread.load_yaml_text(dump, "dump.yaml");
  EXPECT_EQ(reread.resolve({}).text("mixed_precision"), "bf16");
  EXPECT_EQ(reread.resolve({}).integer("num_processes"), 2);
}

TEST(Config, DefaultLocationFollowsAccelerate) {
  using accel::config::default_file_candidates;
  EXPECT_EQ(default_file_candidates({{"HF_HOME", "/h"}, {"XDG_CACHE_HOME", "/x"}, {"HOME", "/u"}}),
            std::vector<std::string>{"/h/accelerate/default_config.yaml"});
  EXPECT_EQ(default_file_candidates({{"XDG_CACHE_HOME", "/x"}, {"HOME", "/u"}}),
            std::vector<std::string>{"/x/huggingface/accelerate/default_config.yaml"});
  EXPECT_EQ(default_file_candidates({{"HOME", "/u"}}),
            std::vector<std::string>{"/u/.cache/huggingface/accelerate/default_config.yaml"});
}

TEST(Config, LoadsDefaultFileWhenPresentAndNothingOtherwise) {
  const std::string home = ::testing::TempDir() + "hfhome";
  std::string cmd = "mkdir -p " + home + "/accelerate";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  Config none;
  EXPECT_EQ(none.load_default_file({{"HF_HOME", home + "-absent"}}), "");
  std::ofstream(home + "/accelerate/default_config.yaml") << "mixed_precision: bf16\n";
  Config c;
  EXPECT_EQ(c.load_default_file({{"HF_HOME", home}}), home + "/accelerate/default_config.yaml");
  EXPECT_EQ(c.resolve({}).text("mixed_precision"), "bf16");
}

// Every file we write must load back to the same values: random valid configurations, set through
// the setter with random spellings, dumped and read back as a file.
TEST(Config, RandomValidConfigsDumpAndLoadBackEqual) {
  using accel::config::Kind;
  std::mt19937 rng(20261123);
  auto pick = [&](std::initializer_list<const char*> items) {
    std::vector<const char*> v(items);
    return std::string(v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)]);
  };
  // Pieces of text that trip YAML readers: indicators, quotes, YAML 1.1 words, numbers, UTF-8.
  auto random_text = [&] {
    std::string out;
    const int pieces = std::uniform_int_distribution<int>(0, 4)(rng);
    for (int i = 0; i < pieces; ++i)
      out += pick({"a",    "Z", "0",  "1.5",      "1e3",      "0x1F", "no", "On", "~",
                   "null", " ", ": ", "#",        "'",        "\"",   "{",  "}",  "[",
                   "]",    ",", "&",  "*",        "!",        "|",    ">",  "%",  "@",
                   "`",    "-", "?",  "/tmp/x y", "\xc3\xa9", "_",    "."});
    return out;
  };
  int checked = 0;
  for (int round = 0; round < 300; ++round) {
    Config c;
    for (const auto& spec : accel::config::key_table()) {
      if (!spec.in_file || spec.neutral_only || rng() % 2) continue;
      std::string value;
      switch (spec.kind) {
        case Kind::kString:
          // log_with is a list of tracker names, checked when set.
          value = std::string(spec.name) == "log_with"
                      ? pick({"", "tensorboard", "jsonl, csv", "all", "csv,tensorboard"})
                      : random_text();
          break;
        case Kind::kBool:
          value = pick({"true", "False", "yes", "NO", "on", "off", "1", "0", "y", "n", "t", "f"});
          break;
        case Kind::kInt:
          value = std::to_string(std::uniform_int_distribution<long long>(spec.min, spec.max)(rng));
          break;
        case Kind::kSeconds:
          value = pick({"0.001", "0.5", "3", "120", "1e3", "2.5e2", "10000000"});
          break;
        case Kind::kEnum: {
          value = spec.allowed[rng() % spec.allowed.size()];
          if (rng() % 2)
            for (auto& ch : value) ch = static_cast<char>(std::tolower(ch));
          break;
        }
        case Kind::kMap:
        case Kind::kList:
          continue;
      }
      try {
        c.set(spec.name, value);
      } catch (const Error& e) {
        // mixed_precision fp16 and the like may be refused by a check across keys: not here.
        FAIL() << spec.name << "=" << value << ": " << e.what();
      }
    }
    const auto first = c.resolve({});
    const std::string dump = first.dump_yaml();
    Config reread;
    try {
      reread.load_yaml_text(dump, "dump.yaml");
    } catch (const Error& e) {
      FAIL() << e.what() << "\n" << dump;
    }
    const auto second = reread.resolve({});
    for (const auto& spec : accel::config::key_table()) {
      if (!spec.in_file) continue;
      ASSERT_EQ(first.text(spec.name), second.text(spec.name)) << spec.name << "\n" << dump;
      ++checked;
    }
  }
  EXPECT_GT(checked, 1000);
}

TEST(Config, DumpOfEnvironmentOnlyKeysLoadsBack) {
  Config c;
  const std::string dump = c.resolve({{"ACCELERATE_USE_DEEPSPEED", "false"}}).dump_yaml();
  EXPECT_NE(dump.find("# use_deepspeed: false"), std::string::npos) << dump;
  Config reread;
  EXPECT_NO_THROW(reread.load_yaml_text(dump, "dump.yaml"));
  // Written into a file by hand, such a key says where it belongs instead of offering itself.
  expect_error(
      [&] { reread.load_yaml_text("use_deepspeed: false\n", "c.yaml"); }, Errc::config,
      {"use_deepspeed", "c.yaml:1", "only through the environment", "ACCELERATE_USE_DEEPSPEED"});
  try {
    reread.load_yaml_text("use_deepspeedd: false\n", "c.yaml");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("use_deepspeed'"), std::string::npos) << e.what();
  }
}

TEST(Config, SpecialAndHugeFilesAreRefusedWithoutReading) {
  Config c;
  c.load_yaml_text("num_processes: 2\n", "before.yaml");
  expect_error([&] { c.load_file(::testing::TempDir()); }, Errc::io,
               {"not a regular file", "directory"});
  expect_error([&] { c.load_file("/dev/zero"); }, Errc::io, {"/dev/zero", "not a regular file"});
  const std::string huge = ::testing::TempDir() + "huge_config.yaml";
  {
    std::ofstream out(huge);
    for (int i = 0; i < 80000; ++i) out << "# a comment line to make the file large\n";
  }
  expect_error([&] { c.load_file(huge); }, Errc::io, {huge, "larger than"});
  expect_error([&] { c.load_file(::testing::TempDir() + "no_such_config.yaml"); }, Errc::io,
               {"no_such_config.yaml"});
  // Every failure left the previous file's values.
  EXPECT_EQ(c.resolve({}).integer("num_processes"), 2);
  EXPECT_EQ(c.file_path(), "before.yaml");
}

TEST(Config, MalformedYamlAndWrongTypesAreConfigErrors) {
  const char* bad[] = {"num_processes: [1, 2]\n",
                       "mixed_precision: {a: 1}\n",
                       "num_processes: 2\nnum_processes: 3\n",
                       "- a\n- b\n",
                       "num_processes: 'two'\n",
                       "rendezvous_timeout: .nan\n",
                       "rendezvous_timeout: .inf\n",
                       "collective_timeout: -1\n",
                       "main_process_ip: \"a\\nb\"\n",
                       "key: [unclosed\n",
                       "\t- tab: indent\n  : :\n"};
  for (const char* text : bad) {
    Config c;
    try {
      c.load_yaml_text(text, "bad.yaml");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      EXPECT_EQ(static_cast<int>(e.code()), static_cast<int>(Errc::config)) << text;
      EXPECT_NE(std::string(e.what()).find("bad.yaml"), std::string::npos) << e.what();
    }
  }
  // Random bytes and deep nesting: an error or a configuration, never a crash or a hang.
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) {
    std::string text(std::uniform_int_distribution<size_t>(0, 200)(rng), ' ');
    for (auto& ch : text) ch = static_cast<char>(rng() % 128);
    Config c;
    try {
      c.load_yaml_text(text, "random.yaml");
    } catch (const Error&) {
    }
  }
  Config deep;
  EXPECT_THROW(
      deep.load_yaml_text(std::string(100000, '[') + "1" + std::string(100000, ']'), "deep.yaml"),
      Error);
}
