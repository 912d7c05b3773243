// accel_load_pretrained (and accel.hpp's Model::load_pretrained): a checkpoint of a base model into
// a model holding it under a prefix with a new head, fp16 into fp32, transformers' report, strict
// refusals with the model unchanged; accel_load_pretrained_mapped's name map.
#include <gtest/gtest.h>
#include <unistd.h>
#include <accel/accel.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

struct Stored {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

// A safetensors file written by hand at `path`: the header JSON, then the tensors' bytes in order.
void write_safetensors_at(const std::string& path, const std::vector<Stored>& tensors) {
  std::string header = "{", data;
  for (const auto& t : tensors) {
    std::string shape;
    for (int64_t d : t.shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    header += (header.size() > 1 ? "," : "") +
              ("\"" + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[" + shape +
               "],\"data_offsets\":[" + std::to_string(data.size()) + "," +
               std::to_string(data.size() + t.bytes.size()) + "]}");
    data += t.bytes;
  }
  header += "}";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << data;
}

std::string write_safetensors(const std::string& name, const std::vector<Stored>& tensors) {
  const std::string path =
      ::testing::TempDir() + name + "_" + std::to_string(getpid()) + ".safetensors";
  write_safetensors_at(path, tensors);
  return path;
}

template <class T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// A base checkpoint: encoder.weight 2x2 in fp16 (1, 2, 3, 4), pooler.weight, an int64 buffer.
std::string base_checkpoint() {
  const std::vector<uint16_t> halves = {0x3C00, 0x4000, 0x4200, 0x4400};  // 1, 2, 3, 4
  return write_safetensors(
      "base", {{"encoder.weight", "F16", {2, 2}, bytes_of(halves)},
               {"pooler.weight", "F32", {2}, bytes_of(std::vector<float>{5, 6})},
               {"embeddings.position_ids", "I64", {3}, bytes_of(std::vector<int64_t>{0, 1, 2})}});
}

// A classifier holding the base under "bert", with a new head, all fp32.
accel::Model classifier(std::vector<accel::Tensor>& keep) {
  accel::Model m;
  keep.push_back(accel::Tensor::from_data<float>({0, 0, 0, 0}, {2, 2}));
  keep.push_back(accel::Tensor::from_data<float>({9, 9}, {1, 2}));
  for (auto& t : keep) t.set_requires_grad(true);
  m.add_parameter("bert.encoder.weight", keep[0]);
  m.add_parameter("classifier.weight", keep[1]);
  return m;
}

TEST(LoadPretrained, ABaseCheckpointFillsTheBodyAndLeavesTheNewHead) {
  std::vector<accel::Tensor> keep;
  accel::Model m = classifier(keep);
  const auto report = m.load_pretrained(
      base_checkpoint(), "base_model_prefix=bert model_name=BertForSequenceClassification");
  EXPECT_EQ(m.tensor("bert.encoder.weight").to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(m.tensor("classifier.weight").to_vector<float>(), (std::vector<float>{9, 9}));
  EXPECT_EQ(report.missing, (std::vector<std::string>{"classifier.weight"}));
  EXPECT_EQ(report.unexpected,
            (std::vector<std::string>{"embeddings.position_ids", "pooler.weight"}));
  EXPECT_TRUE(report.mismatched.empty());
  EXPECT_NE(report.warnings.find("WARNING: Some weights of BertForSequenceClassification were not "
                                 "initialized from the model checkpoint at "),
            std::string::npos)
      << report.warnings;
  EXPECT_EQ(report.warnings.find("INFO: "), std::string::npos);
  EXPECT_NE(report.text.find("INFO: Some weights of the model checkpoint at"), std::string::npos);
}

TEST(LoadPretrained, StrictAndBadInputsFailWithTheModelUnchanged) {
  std::vector<accel::Tensor> keep;
  accel::Model m = classifier(keep);
  const std::string path = base_checkpoint();
  accel_load_report* report = nullptr;
  EXPECT_EQ(
      accel_load_pretrained(m.get(), path.c_str(), "base_model_prefix=bert strict=true", &report),
      ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(accel_last_error_message()).find("missing from the checkpoint"),
            std::string::npos);
  EXPECT_EQ(report, nullptr);
  EXPECT_EQ(m.tensor("bert.encoder.weight").to_vector<float>(), (std::vector<float>{0, 0, 0, 0}));
  EXPECT_EQ(accel_load_pretrained(m.get(), path.c_str(), "strictness=1", nullptr),
            ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_load_pretrained(m.get(), (path + ".nope").c_str(), nullptr, nullptr),
            ACCEL_ERR_IO);
  // A shape mismatch: an error unless ignored, then reported.
  const std::string wide = write_safetensors(
      "wide", {{"classifier.weight", "F32", {1, 3}, bytes_of(std::vector<float>{1, 2, 3})}});
  EXPECT_EQ(accel_load_pretrained(m.get(), wide.c_str(), nullptr, nullptr), ACCEL_ERR_SHAPE);
  const auto ignored = m.load_pretrained(wide, "ignore_mismatched_sizes=true");
  EXPECT_EQ(ignored.mismatched, (std::vector<std::string>{"classifier.weight"}));
  EXPECT_NE(ignored.warnings.find("found shape torch.Size([1, 3]) in the checkpoint and "
                                  "torch.Size([1, 2]) in the model instantiated"),
            std::string::npos);
  // An integer tensor for a floating one.
  const std::string ints = write_safetensors(
      "ints", {{"classifier.weight", "I64", {1, 2}, bytes_of(std::vector<int64_t>{1, 2})}});
  EXPECT_EQ(accel_load_pretrained(m.get(), ints.c_str(), nullptr, nullptr), ACCEL_ERR_DTYPE);
  EXPECT_EQ(m.tensor("classifier.weight").to_vector<float>(), (std::vector<float>{9, 9}));
  // A truncated file.
  const std::string cut = ::testing::TempDir() + "cut_" + std::to_string(getpid());
  {
    std::ifstream in(path, std::ios::binary);
    std::string all((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(cut, std::ios::binary) << all.substr(0, all.size() - 3);
  }
  EXPECT_EQ(accel_load_pretrained(m.get(), cut.c_str(), nullptr, nullptr), ACCEL_ERR_IO);
  // The report's own errors.
  ASSERT_EQ(accel_load_pretrained(m.get(), path.c_str(), "base_model_prefix=bert", &report),
            ACCEL_OK);
  accel_bytes_list* list = nullptr;
  EXPECT_EQ(accel_load_report_keys(report, "lost", &list), ACCEL_ERR_INVALID_ARGUMENT);
  accel_load_report_free(report);
  accel_load_report_free(nullptr);
}

// Loading reads each tensor straight into place, so every failure that can be known before the
// bytes is found before the first tensor is written: a sharded checkpoint whose first shard is
// good and whose second is truncated, corrupt, missing or of an unknown dtype, or a shape
// mismatch, leaves both tensors as they were, through both entry points.
TEST(LoadPretrained, ShardedLoadsReadInPlaceAndBadShardsChangeNothing) {
  const std::string dir = ::testing::TempDir() + "inplace_" + std::to_string(getpid());
  ASSERT_EQ(std::system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()), 0);
  std::vector<accel::Tensor> keep;
  keep.push_back(accel::Tensor::from_data<float>({7, 7}, {2}));
  keep.push_back(accel::Tensor::from_data<float>({8, 8, 8}, {3}));
  for (auto& t : keep) t.set_requires_grad(true);
  accel::Model m;
  m.add_parameter("a", keep[0]);
  m.add_parameter("b", keep[1]);
  const std::string index = dir + "/model.safetensors.index.json";
  std::ofstream(index) << R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})";
  const Stored a{"a", "F32", {2}, bytes_of(std::vector<float>{1.5F, -2})};
  const Stored b32{"b", "F32", {3}, bytes_of(std::vector<float>{3, 4, 5})};
  const std::vector<uint16_t> b_bf16 = {0x4040, 0x4080, 0x40A0};  // 3, 4, 5
  const Stored b16{"b", "BF16", {3}, bytes_of(b_bf16)};
  write_safetensors_at(dir + "/s1.safetensors", {a});
  auto unchanged = [&](const std::string& what) {
    EXPECT_EQ(m.tensor("a").to_vector<float>(), (std::vector<float>{7, 7})) << what;
    EXPECT_EQ(m.tensor("b").to_vector<float>(), (std::vector<float>{8, 8, 8})) << what;
  };
  auto both_fail = [&](accel_status want, const std::string& message, const std::string& what) {
    EXPECT_EQ(accel_load_checkpoint_in_model(m.get(), index.c_str()), want) << what;
    EXPECT_NE(std::string(accel_last_error_message()).find(message), std::string::npos)
        << what << ": " << accel_last_error_message();
    unchanged(what);
    EXPECT_EQ(accel_load_pretrained(m.get(), index.c_str(), nullptr, nullptr), want) << what;
    EXPECT_NE(std::string(accel_last_error_message()).find(message), std::string::npos)
        << what << ": " << accel_last_error_message();
    unchanged(what);
  };
  // The second shard's bytes, good and then spoiled one way after another.
  write_safetensors_at(dir + "/s2.safetensors", {b32});
  std::string good;
  {
    std::ifstream in(dir + "/s2.safetensors", std::ios::binary);
    good.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto put = [&](const std::string& bytes) {
    std::ofstream(dir + "/s2.safetensors", std::ios::binary | std::ios::trunc) << bytes;
  };
  put(good.substr(0, good.size() - 4));
  both_fail(ACCEL_ERR_IO, "s2.safetensors", "a truncated shard");
  std::string corrupt = good;
  corrupt[9] = '[';  // the JSON's opening brace
  put(corrupt);
  both_fail(ACCEL_ERR_IO, "not valid JSON", "a corrupt header");
  std::remove((dir + "/s2.safetensors").c_str());
  both_fail(ACCEL_ERR_IO, "s2.safetensors", "a missing shard");
  write_safetensors_at(dir + "/s2.safetensors", {{"b", "F7", {3}, "abc"}});
  both_fail(ACCEL_ERR_IO, "unknown dtype 'F7'", "an unknown dtype");
  write_safetensors_at(dir + "/s2.safetensors", {{"b", "U16", {3}, "abcdef"}});
  both_fail(ACCEL_ERR_IO, "dtype U16 is not supported", "a dtype LibTorch lacks");
  // A shape mismatch: strict (both entry points), and not strict without ignore_mismatched_sizes.
  write_safetensors_at(dir + "/s2.safetensors",
                       {{"b", "F32", {4}, bytes_of(std::vector<float>{1, 2, 3, 4})}});
  both_fail(ACCEL_ERR_SHAPE, "b", "a shape mismatch");
  EXPECT_EQ(accel_load_pretrained(m.get(), index.c_str(), "strict=true", nullptr), ACCEL_ERR_SHAPE);
  unchanged("a strict shape mismatch");
  // Ignored: the other tensor loads, the mismatched one keeps its values.
  const auto ignored = m.load_pretrained(index, "ignore_mismatched_sizes=true");
  EXPECT_EQ(ignored.mismatched, (std::vector<std::string>{"b"}));
  EXPECT_EQ(m.tensor("a").to_vector<float>(), (std::vector<float>{1.5F, -2}));
  EXPECT_EQ(m.tensor("b").to_vector<float>(), (std::vector<float>{8, 8, 8}));
  // Good shards: fp32 read straight in, bf16 converted into the fp32 tensor.
  write_safetensors_at(dir + "/s2.safetensors", {b16});
  m.load_pretrained(index, "strict=true");
  EXPECT_EQ(m.tensor("b").to_vector<float>(), (std::vector<float>{3, 4, 5}));
  write_safetensors_at(dir + "/s2.safetensors",
                       {{"b", "F32", {3}, bytes_of(std::vector<float>{6, 7, 8})}});
  EXPECT_EQ(accel_load_checkpoint_in_model(m.get(), index.c_str()), ACCEL_OK);
  EXPECT_EQ(m.tensor("b").to_vector<float>(), (std::vector<float>{6, 7, 8}));
  EXPECT_EQ(m.tensor("a").to_vector<float>(), (std::vector<float>{1.5F, -2}));
}

// A checkpoint of another framework's names: layers.N for layer.N, LayerNorm gamma/beta for
// weight/bias, and a head the task model lacks.
std::string foreign_checkpoint() {
  const std::vector<uint16_t> halves = {0x3C00, 0x4000, 0x4200, 0x4400};  // 1, 2, 3, 4
  return write_safetensors(
      "foreign",
      {{"encoder.layers.0.LayerNorm.beta", "F32", {2}, bytes_of(std::vector<float>{3, 4})},
       {"encoder.layers.0.LayerNorm.gamma", "F32", {2}, bytes_of(std::vector<float>{1, 2})},
       {"encoder.layers.1.dense.weight", "F16", {2, 2}, bytes_of(halves)},
       {"lm_head.weight", "F32", {2}, bytes_of(std::vector<float>{7, 7})}});
}

// The task model for it: the body under "bert", a new head.
accel::Model task_model(std::vector<accel::Tensor>& keep) {
  accel::Model m;
  const char* names[] = {"bert.encoder.layer.0.LayerNorm.weight",
                         "bert.encoder.layer.0.LayerNorm.bias", "bert.encoder.layer.1.dense.weight",
                         "classifier.weight"};
  keep.push_back(accel::Tensor::from_data<float>({0, 0}, {2}));
  keep.push_back(accel::Tensor::from_data<float>({0, 0}, {2}));
  keep.push_back(accel::Tensor::from_data<float>({0, 0, 0, 0}, {2, 2}));
  keep.push_back(accel::Tensor::from_data<float>({9, 9}, {2}));
  for (size_t i = 0; i < keep.size(); ++i) {
    keep[i].set_requires_grad(true);
    m.add_parameter(names[i], keep[i]);
  }
  return m;
}

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

// What the C map below was asked, and how it answers: the model's name, "" for the head, or a
// failure for the name in `fail_on`.
struct MapState {
  std::vector<std::string> asked;
  std::vector<size_t> capacities;
  std::string fail_on, too_long_on, duplicate_to;
  const accel_model* model = nullptr;  // calls back into it when set
  accel_status inner = ACCEL_OK;
};

int32_t c_map(const char* checkpoint_name, char* out, size_t capacity, void* user_data) {
  auto* st = static_cast<MapState*>(user_data);
  const std::string name = checkpoint_name;
  st->asked.push_back(name);
  st->capacities.push_back(capacity);
  if (st->model) {
    accel_tensor* t = nullptr;
    st->inner = accel_model_tensor(st->model, "classifier.weight", &t);
    accel_tensor_free(t);
  }
  if (name == st->fail_on) return -3;
  if (name == st->too_long_on) {
    std::memset(out, 'x', capacity);  // no room for the NUL
    return 0;
  }
  std::string to = name == "lm_head.weight" ? "" : name;
  to = replaced(replaced(replaced(to, "layers.", "layer."), ".gamma", ".weight"), ".beta", ".bias");
  if (!st->duplicate_to.empty() && name.find("LayerNorm") != std::string::npos)
    to = st->duplicate_to;
  std::snprintf(out, capacity, "%s", to.c_str());
  return 0;
}

TEST(LoadPretrained, ANameMapRenamesBeforeThePrefixRuleAndReportsMappedNames) {
  std::vector<accel::Tensor> keep;
  accel::Model m = task_model(keep);
  const std::string path = foreign_checkpoint();
  MapState st;
  accel_load_report* report = nullptr;
  ASSERT_EQ(accel_load_pretrained_mapped(m.get(), path.c_str(), "base_model_prefix=bert", c_map,
                                         &st, &report),
            ACCEL_OK)
      << accel_last_error_message();
  // Once per checkpoint tensor, in name order, with the documented capacity.
  EXPECT_EQ(st.asked, (std::vector<std::string>{
                          "encoder.layers.0.LayerNorm.beta", "encoder.layers.0.LayerNorm.gamma",
                          "encoder.layers.1.dense.weight", "lm_head.weight"}));
  EXPECT_EQ(st.capacities, std::vector<size_t>(4, 4096));
  // The mapped names took the prefix ("bert.") and the fp16 tensor was cast.
  EXPECT_EQ(m.tensor("bert.encoder.layer.0.LayerNorm.weight").to_vector<float>(),
            (std::vector<float>{1, 2}));
  EXPECT_EQ(m.tensor("bert.encoder.layer.0.LayerNorm.bias").to_vector<float>(),
            (std::vector<float>{3, 4}));
  EXPECT_EQ(m.tensor("bert.encoder.layer.1.dense.weight").to_vector<float>(),
            (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(m.tensor("classifier.weight").to_vector<float>(), (std::vector<float>{9, 9}));
  // The head the map left unused is unexpected under its own name; the new head is missing.
  auto keys = [&](const char* kind) {
    accel_bytes_list* list = nullptr;
    EXPECT_EQ(accel_load_report_keys(report, kind, &list), ACCEL_OK);
    std::vector<std::string> out;
    size_t n = 0;
    EXPECT_EQ(accel_bytes_list_count(list, &n), ACCEL_OK);
    for (size_t i = 0; i < n; ++i) {
      const void* data = nullptr;
      size_t size = 0;
      EXPECT_EQ(accel_bytes_list_get(list, i, &data, &size), ACCEL_OK);
      out.emplace_back(static_cast<const char*>(data), size);
    }
    accel_bytes_list_free(list);
    return out;
  };
  EXPECT_EQ(keys("unexpected"), (std::vector<std::string>{"lm_head.weight"}));
  EXPECT_EQ(keys("missing"), (std::vector<std::string>{"classifier.weight"}));
  accel_load_report_free(report);
  // Strict: the mapped names, and the unused one, are what it refuses.
  EXPECT_EQ(accel_load_pretrained_mapped(m.get(), path.c_str(),
                                         "base_model_prefix=bert strict=true", c_map, &st, nullptr),
            ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(accel_last_error_message()).find("not in the model: lm_head.weight"),
            std::string::npos)
      << accel_last_error_message();
  // Without the map nothing of it matches: every name is unexpected.
  const auto plain = m.load_pretrained(path, "base_model_prefix=bert");
  EXPECT_EQ(plain.unexpected.size(), 4u);
}

TEST(LoadPretrained, NameMapFailuresLeaveTheModelUnchanged) {
  std::vector<accel::Tensor> keep;
  accel::Model m = task_model(keep);
  const std::string path = foreign_checkpoint();
  auto unchanged = [&](const std::string& what) {
    EXPECT_EQ(m.tensor("bert.encoder.layer.0.LayerNorm.weight").to_vector<float>(),
              (std::vector<float>{0, 0}))
        << what;
    EXPECT_EQ(m.tensor("bert.encoder.layer.1.dense.weight").to_vector<float>(),
              (std::vector<float>{0, 0, 0, 0}))
        << what;
  };
  auto fails = [&](MapState st, accel_status want, const std::vector<std::string>& words,
                   const std::string& what) {
    accel_load_report* report = nullptr;
    EXPECT_EQ(accel_load_pretrained_mapped(m.get(), path.c_str(), "base_model_prefix=bert", c_map,
                                           &st, &report),
              want)
        << what;
    const std::string message = accel_last_error_message();
    for (const auto& w : words)
      EXPECT_NE(message.find(w), std::string::npos) << what << ": " << message;
    EXPECT_EQ(report, nullptr) << what;
    unchanged(what);
  };
  MapState failing;
  failing.fail_on = "lm_head.weight";  // the last name: every other one was mapped already
  fails(failing, ACCEL_ERR_CALLBACK, {"returned -3", "lm_head.weight"}, "a failing map");
  MapState too_long;
  too_long.too_long_on = "encoder.layers.1.dense.weight";
  fails(too_long, ACCEL_ERR_CALLBACK, {"encoder.layers.1.dense.weight", "longer than 4095 bytes"},
        "a name that does not fit");
  MapState duplicate;
  duplicate.duplicate_to = "encoder.layer.0.LayerNorm.weight";
  fails(duplicate, ACCEL_ERR_INVALID_ARGUMENT,
        {"encoder.layers.0.LayerNorm.beta", "encoder.layers.0.LayerNorm.gamma",
         "encoder.layer.0.LayerNorm.weight"},
        "two names mapped to one");
  // A map calling back into the model it loads is refused, not a deadlock.
  MapState reentrant;
  reentrant.model = m.get();
  reentrant.fail_on = "encoder.layers.0.LayerNorm.beta";
  accel_load_pretrained_mapped(m.get(), path.c_str(), nullptr, c_map, &reentrant, nullptr);
  EXPECT_EQ(reentrant.inner, ACCEL_ERR_STATE);
  unchanged("a map calling the model");
}

TEST(CppWraps, LoadPretrainedWithANameMap) {
  std::vector<accel::Tensor> keep;
  accel::Model m = task_model(keep);
  const std::string path = foreign_checkpoint();
  // A task checkpoint of another prefix ("roberta.") renamed into this one's: the prefix rule
  // sees the new names, so they load as they are.
  const std::vector<uint16_t> halves = {0x3C00, 0x4000, 0x4200, 0x4400};
  const std::string task = write_safetensors(
      "roberta", {{"roberta.encoder.layers.1.dense.weight", "F16", {2, 2}, bytes_of(halves)},
                  {"classifier.weight", "F32", {3}, bytes_of(std::vector<float>{1, 2, 3})}});
  std::vector<std::string> asked;
  const auto report = m.load_pretrained(task, "base_model_prefix=bert ignore_mismatched_sizes=true",
                                        [&](std::string_view name) -> std::optional<std::string> {
                                          asked.emplace_back(name);
                                          std::string s =
                                              replaced(std::string(name), "roberta.", "bert.");
                                          return replaced(s, "layers.", "layer.");
                                        });
  EXPECT_EQ(asked.size(), 2u);
  EXPECT_EQ(m.tensor("bert.encoder.layer.1.dense.weight").to_vector<float>(),
            (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(report.mismatched, (std::vector<std::string>{"classifier.weight"}));
  EXPECT_TRUE(report.unexpected.empty());
  // std::nullopt leaves a tensor unused; an exception is rethrown with the model unchanged.
  const auto dropped = m.load_pretrained(path, "base_model_prefix=bert",
                                         [](std::string_view) { return std::nullopt; });
  EXPECT_EQ(dropped.unexpected.size(), 4u);
  EXPECT_THROW(m.load_pretrained(path, "",
                                 [](std::string_view name) -> std::optional<std::string> {
                                   if (name == "lm_head.weight") throw std::out_of_range("no head");
                                   return std::string("bert.") + std::string(name);
                                 }),
               std::out_of_range);
  EXPECT_EQ(m.tensor("bert.encoder.layer.1.dense.weight").to_vector<float>(),
            (std::vector<float>{1, 2, 3, 4}));
  try {
    m.load_pretrained(path, "", [](std::string_view) { return std::string(5000, 'n'); });
    ADD_FAILURE() << "a name of 5000 bytes loaded";
  } catch (const accel::Error& e) {
    EXPECT_EQ(e.status(), ACCEL_ERR_CALLBACK);
    EXPECT_NE(std::string(e.what()).find("longer than 4095 bytes"), std::string::npos) << e.what();
  }
  // An empty std::function is the plain load.
  EXPECT_EQ(m.load_pretrained(path, "", accel::Model::NameMap()).unexpected.size(), 4u);
}

}  // namespace
