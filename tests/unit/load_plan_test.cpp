// Loading a pretrained checkpoint as transformers 4.4x does: its base_model_prefix rule, what is
// missing, unexpected or mismatched, dtype kinds, tied weights, and its report's words.
#include <gtest/gtest.h>

#include "checkpoint/load_plan.hpp"
#include "common/error.hpp"

namespace accel::checkpoint {
namespace {

using Names = std::vector<std::string>;

// A MiniLM-like checkpoint (BertModel's names) and a classifier holding it under "bert".
std::vector<TensorSpec> base_checkpoint() {
  return {{"embeddings.word_embeddings.weight", {30522, 384}, "F32"},
          {"embeddings.position_ids", {1, 512}, "I64"},
          {"encoder.layer.0.attention.self.query.weight", {384, 384}, "F16"},
          {"pooler.dense.weight", {384, 384}, "F32"}};
}

std::vector<TensorSpec> classifier() {
  return {{"bert.embeddings.word_embeddings.weight", {30522, 384}, "F32"},
          {"bert.encoder.layer.0.attention.self.query.weight", {384, 384}, "F32"},
          {"classifier.weight", {5, 384}, "F32"},
          {"classifier.bias", {5}, "F32"}};
}

TEST(LoadPlan, BaseCheckpointIntoATaskModelAsTransformersDoes) {
  LoadOptions o;
  o.base_model_prefix = "bert";
  o.strict = false;
  const LoadPlan plan = plan_load(classifier(), base_checkpoint(), o);
  EXPECT_EQ(plan.copies.size(), 2u);
  EXPECT_EQ(plan.copies[1], (std::pair<std::string, std::string>{
                                "bert.encoder.layer.0.attention.self.query.weight",
                                "encoder.layer.0.attention.self.query.weight"}));  // F16 -> F32
  EXPECT_EQ(plan.missing, (Names{"classifier.bias", "classifier.weight"}));
  EXPECT_EQ(plan.unexpected, (Names{"embeddings.position_ids", "pooler.dense.weight"}));
  const auto lines = load_report(plan, "BertForSequenceClassification", "minilm", false);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_FALSE(lines[0].warning);  // unexpected: info unless the architecture matches
  EXPECT_EQ(lines[0].text.rfind("Some weights of the model checkpoint at minilm were not used when "
                                "initializing BertForSequenceClassification: "
                                "['embeddings.position_ids', 'pooler.dense.weight']",
                                0),
            0u);
  EXPECT_TRUE(lines[1].warning);
  EXPECT_EQ(lines[1].text,
            "Some weights of BertForSequenceClassification were not initialized from the model "
            "checkpoint at minilm and are newly initialized: ['classifier.bias', "
            "'classifier.weight']\nYou should probably TRAIN this model on a down-stream task to "
            "be able to use it for predictions and inference.");
  EXPECT_THROW(plan_load(classifier(), base_checkpoint(), LoadOptions{"bert"}), accel::Error);
}

TEST(LoadPlan, TaskCheckpointIntoTheBaseModelGainsThePrefix) {
  std::vector<TensorSpec> checkpoint = {{"bert.pooler.dense.weight", {4, 4}, "BF16"},
                                        {"cls.predictions.bias", {7}, "F32"}};
  std::vector<TensorSpec> model = {{"pooler.dense.weight", {4, 4}, "F32"}};
  LoadOptions o{"bert", false};
  const LoadPlan plan = plan_load(model, checkpoint, o);
  EXPECT_EQ(plan.copies, (std::vector<std::pair<std::string, std::string>>{
                             {"pooler.dense.weight", "bert.pooler.dense.weight"}}));
  EXPECT_EQ(plan.unexpected, (Names{"cls.predictions.bias"}));
  EXPECT_TRUE(plan.missing.empty());
  const auto lines = load_report(plan, "BertModel", "ckpt", true);
  EXPECT_TRUE(lines[0].warning);
  EXPECT_FALSE(lines[1].warning);
  EXPECT_EQ(lines[1].text.rfind("All the weights of BertModel were initialized", 0), 0u);
}

TEST(LoadPlan, ShapeMismatchesFailUnlessIgnoredThenAreReported) {
  std::vector<TensorSpec> checkpoint = {{"classifier.weight", {1000, 8}, "F32"},
                                        {"body.weight", {8, 8}, "F32"}};
  std::vector<TensorSpec> model = {{"classifier.weight", {10, 8}, "F32"},
                                   {"body.weight", {8, 8}, "F32"}};
  EXPECT_THROW(plan_load(model, checkpoint, LoadOptions{}), accel::Error);
  LoadOptions o;
  o.strict = false;
  try {
    plan_load(model, checkpoint, o);
    ADD_FAILURE() << "a mismatch loaded without ignore_mismatched_sizes";
  } catch (const accel::Error& e) {
    EXPECT_EQ(e.code(), Errc::shape);
    EXPECT_NE(std::string(e.what()).find("classifier.weight: found shape torch.Size([1000, 8])"),
              std::string::npos);
  }
  o.ignore_mismatched_sizes = true;
  const LoadPlan plan = plan_load(model, checkpoint, o);
  EXPECT_EQ(plan.copies.size(), 1u);
  const auto lines = load_report(plan, "Net", "p", false);
  ASSERT_EQ(lines.size(), 2u);  // every checkpoint tensor used; the mismatch (no "All the weights")
  EXPECT_NE(lines[1].text.find("- classifier.weight: found shape torch.Size([1000, 8]) in the "
                               "checkpoint and torch.Size([10, 8]) in the model instantiated"),
            std::string::npos);
}

TEST(LoadPlan, TiedWeightsAndDtypeKinds) {
  std::vector<TensorSpec> model = {{"embed.weight", {6, 2}, "F32"}, {"head.weight", {6, 2}, "F32"}};
  LoadOptions o;
  o.tied = {{"embed.weight", "head.weight"}};
  const LoadPlan plan = plan_load(model, {{"embed.weight", {6, 2}, "F16"}}, o);  // strict passes
  EXPECT_TRUE(plan.missing.empty());
  o.strict = false;
  try {
    plan_load(model, {{"embed.weight", {6, 2}, "I64"}}, o);
    ADD_FAILURE() << "an integer tensor loaded into a floating one";
  } catch (const accel::Error& e) {
    EXPECT_EQ(e.code(), Errc::dtype);
  }
}

// The name map renames before the prefix rule: a checkpoint of other names ("layers.N", "gamma")
// loads under the task model's prefix decided from the new names; what it leaves unused is
// unexpected under its own name, also under strict; tied weights still count as one.
TEST(LoadPlan, NameMapRenamesBeforeThePrefixRule) {
  const std::vector<TensorSpec> checkpoint = {{"encoder.layers.0.LayerNorm.gamma", {4}, "F32"},
                                              {"encoder.layers.0.dense.weight", {4, 4}, "F16"},
                                              {"lm_head.weight", {4}, "F32"}};
  std::vector<std::string> asked;
  const MappedNames mapped =
      map_checkpoint_names(checkpoint, [&](const std::string& name) -> std::optional<std::string> {
        asked.push_back(name);
        if (name == "lm_head.weight") return std::nullopt;
        std::string s = name;
        s.replace(s.find("layers."), 7, "layer.");
        if (auto at = s.find(".gamma"); at != std::string::npos) s.replace(at, 6, ".weight");
        return s;
      });
  EXPECT_EQ(asked.size(), 3u);
  EXPECT_EQ(mapped.unused, Names{"lm_head.weight"});
  EXPECT_EQ(mapped.original.at("encoder.layer.0.LayerNorm.weight"),
            "encoder.layers.0.LayerNorm.gamma");
  const std::vector<TensorSpec> model = {{"bert.encoder.layer.0.LayerNorm.weight", {4}, "F32"},
                                         {"bert.encoder.layer.0.dense.weight", {4, 4}, "F32"},
                                         {"classifier.weight", {4}, "F32"},
                                         {"decoder.weight", {4}, "F32"}};
  LoadOptions o;
  o.base_model_prefix = "bert";
  o.strict = false;
  o.unused = mapped.unused;
  o.tied = {{"classifier.weight", "decoder.weight"}};  // neither loaded: both missing
  const LoadPlan plan = plan_load(model, mapped.checkpoint, o);
  EXPECT_EQ(plan.copies.size(), 2u);
  EXPECT_EQ(plan.copies[0].first, "bert.encoder.layer.0.LayerNorm.weight");
  EXPECT_EQ(plan.copies[0].second, "encoder.layer.0.LayerNorm.weight");
  EXPECT_EQ(plan.unexpected, Names{"lm_head.weight"});
  EXPECT_EQ(plan.missing, (Names{"classifier.weight", "decoder.weight"}));
  o.strict = true;
  try {
    plan_load(model, mapped.checkpoint, o);
    ADD_FAILURE() << "strict passed with a tensor left unused";
  } catch (const accel::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not in the model: lm_head.weight"), std::string::npos)
        << e.what();
  }
}

TEST(LoadPlan, NameMapGivingTwoTensorsOneNameIsAnErrorNamingBoth) {
  try {
    map_checkpoint_names({{"a.gamma", {2}, "F32"}, {"a.weight", {2}, "F32"}},
                         [](const std::string&) { return std::optional<std::string>("a.weight"); });
    ADD_FAILURE() << "two tensors mapped to one name";
  } catch (const accel::Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("'a.gamma' and 'a.weight' one name, 'a.weight'"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace accel::checkpoint
