// accel_load_pretrained (and accel.hpp's Model::load_pretrained): a checkpoint of a base model into
// a model holding it under a prefix with a new head, fp16 into fp32, transformers' report, strict
// refusals with the model unchanged.
#include <gtest/gtest.h>
#include <unistd.h>
#include <accel/accel.hpp>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

struct Stored {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

// A safetensors file written by hand: the header JSON, then the tensors' bytes in order.
std::string write_safetensors(const std::string& name, const std::vector<Stored>& tensors) {
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
  const std::string path =
      ::testing::TempDir() + name + "_" + std::to_string(getpid()) + ".safetensors";
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << data;
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

}  // namespace
