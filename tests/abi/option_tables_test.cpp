// accel.h's option tables against the library, and accel.hpp's typed options generated from them
// (tools/gen_options.py): every key of every kind is taken, every default is the library's own
// (the object with each default set explicitly behaves bitwise as the one with none set), and
// the typed aggregates are the key=value calls they stand for. Built as C++20, the standard whose
// designated initialisers the typed options are written with.
#include <gtest/gtest.h>
#include <accel/accel.hpp>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace {

struct Row {
  const char *object, *kind, *key, *type, *default_value, *words;
};

const std::vector<Row> kRows = {
#include "option_table.inc"
};

// A value for an option without a default (required, or decided by the library) that the
// library takes on the small objects below.
std::string sample(const Row& r) {
  static const std::map<std::string, std::string> by_key = {
      {"total_steps", "40"},    {"step_size", "5"},           {"gamma", "0.9"},
      {"max_lr", "0.1"},        {"in_features", "8"},         {"out_features", "4"},
      {"in_channels", "2"},     {"out_channels", "3"},        {"kernel_size", "3"},
      {"num_features", "2"},    {"normalized_shape", "8"},    {"num_embeddings", "10"},
      {"embedding_dim", "4"},   {"max_length", "16"},         {"split_batches", "false"},
      {"even_batches", "true"}, {"dispatch_batches", "false"}};
  const auto it = by_key.find(r.key);
  return it != by_key.end() ? it->second : std::string();
}

std::string value_of(const Row& r) {
  return std::string(r.default_value) == "-" ? sample(r) : r.default_value;
}

std::vector<Row> rows_of(const std::string& object, const std::string& kind) {
  std::vector<Row> out;
  for (const Row& r : kRows)
    if (object == r.object && kind == r.kind && *r.key) out.push_back(r);
  return out;
}

std::set<std::string> kinds_of(const std::string& object) {
  std::set<std::string> out;
  for (const Row& r : kRows)
    if (object == r.object) out.insert(r.kind);
  return out;
}

accel::Dataset samples(int n) {
  std::vector<float> x(static_cast<size_t>(n) * 8);
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    y[i] = i % 4;
    for (int f = 0; f < 8; ++f) x[i * 8 + f] = static_cast<float>((i * 31 + f * 17) % 13) / 13;
  }
  auto tx = accel::Tensor::from_data(x, {n, 8});
  auto ty = accel::Tensor::from_data(y, {n});
  return accel::Dataset::from_tensors({tx, ty});
}

accel::Model linear_model(accel::Accelerator& acc) {
  acc.set_seed(7);
  accel::Model m;
  m.add_layer("fc", "linear", "in_features=8 out_features=4");
  m.define(
      "def training_step(self, x, y):\n"
      "    return torch.cross_entropy_loss(self.fc.forward(x), y)\n");
  return m;
}

// Three plain steps on fixed data: the weights after them.
std::vector<float> three_steps(accel::Accelerator& acc, accel::Model& m, accel::Optimizer& opt) {
  accel::Dataset d = samples(12);
  accel::DataLoader loader(acc, d);
  loader.set("batch_size", "4");
  for (int step = 0; step < 3; ++step) {
    std::vector<accel::Tensor> batch = *loader.next();
    acc.backward(m.call("training_step", {batch[0], batch[1]})[0]);
    opt.step();
    opt.zero_grad();
  }
  return m.tensor("fc.weight").to_vector<float>();
}

std::vector<double> lr_trace(accel::Accelerator& acc, const std::string& kind, bool every_option) {
  accel::Model m = linear_model(acc);
  accel::Optimizer opt(m, "sgd");
  opt.set("lr", "0.05");
  accel::Scheduler sched(opt, kind);
  for (const Row& r : rows_of("schedule", kind))
    if (every_option || std::string(r.default_value) == "-") sched.set(r.key, value_of(r));
  std::vector<double> out;
  for (int step = 0; step < 30; ++step) {
    out.push_back(opt.lr());
    sched.step();
  }
  return out;
}

std::vector<std::vector<float>> layer_tensors(accel::Accelerator& acc, const std::string& kind,
                                              bool every_option) {
  acc.set_seed(11);
  accel::Model m;
  std::string spec;
  for (const Row& r : rows_of("layer", kind))
    if (every_option || std::string(r.default_value) == "-")
      spec += std::string(spec.empty() ? "" : " ") + r.key + "=" + value_of(r);
  m.add_layer("layer", kind, spec);
  std::vector<std::vector<float>> out;
  for (const auto& name : m.tensor_names()) {
    accel::Tensor t = m.tensor(name);
    if (t.dtype() == ACCEL_DTYPE_F32)  // batch norm's num_batches_tracked is a count
      out.push_back(t.to_vector<float>());
    else
      out.push_back({static_cast<float>(t.to_vector<int64_t>().at(0))});
  }
  return out;
}

}  // namespace

TEST(OptionTables, EveryObjectHasItsKinds) {
  EXPECT_EQ(kinds_of("optimizer"),
            (std::set<std::string>{"sgd", "adam", "adamw", "rmsprop", "adagrad"}));
  EXPECT_EQ(kinds_of("schedule").size(), 9u);
  EXPECT_EQ(kinds_of("layer").size(), 5u);
  EXPECT_EQ(rows_of("dataloader", "dataloader").size(), 18u);
}

// Every default set explicitly leaves the optimizer as PyTorch's defaults made it: three steps
// give bitwise the weights of the optimizer with nothing set.
TEST(OptionTables, OptimizerDefaultsAreTheLibrarys) {
  for (const std::string& kind : kinds_of("optimizer")) {
    accel::Accelerator acc;
    accel::Model plain_model = linear_model(acc);
    accel::Optimizer plain(plain_model, kind);
    const auto want = three_steps(acc, plain_model, plain);
    accel::Model set_model = linear_model(acc);
    accel::Optimizer set(set_model, kind);
    for (const Row& r : rows_of("optimizer", kind)) set.set(r.key, value_of(r));
    EXPECT_EQ(three_steps(acc, set_model, set), want) << kind;
  }
}

TEST(OptionTables, ScheduleDefaultsAreTheLibrarys) {
  accel::Accelerator acc;
  for (const std::string& kind : kinds_of("schedule"))
    EXPECT_EQ(lr_trace(acc, kind, true), lr_trace(acc, kind, false)) << kind;
}

TEST(OptionTables, LayerDefaultsAreTheLibrarys) {
  accel::Accelerator acc;
  for (const std::string& kind : kinds_of("layer"))
    EXPECT_EQ(layer_tensors(acc, kind, true), layer_tensors(acc, kind, false)) << kind;
}

// The dataloader's options on a dataset of tensors (the padding ones apart): a loader with every
// default set gives the batches of one with none set.
TEST(OptionTables, DataLoaderDefaultsAreTheLibrarys) {
  accel::Accelerator acc;
  auto batches = [&](bool every_option) {
    accel::Dataset d = samples(10);
    accel::DataLoader loader(acc, d);
    for (const Row& r : rows_of("dataloader", "dataloader"))
      if (every_option && std::string(r.default_value) != "-" &&
          std::string(r.key).rfind("pad", 0) != 0 && std::string(r.key) != "max_length" &&
          std::string(r.key) != "truncation" && std::string(r.key) != "mask")
        loader.set(r.key, value_of(r));
    std::vector<std::vector<float>> out;
    while (auto b = loader.next()) out.push_back((*b)[0].to_vector<float>());
    return out;
  };
  EXPECT_EQ(batches(true), batches(false));
}

// The typed aggregates are their key=value calls: the same weights, rates and batches.
TEST(OptionTables, TypedOptionsAreTheirKeys) {
  accel::Accelerator acc;
  accel::Model typed_model = linear_model(acc);
  accel::Optimizer typed(typed_model, accel::AdamWOptions{.lr = 5e-3, .weight_decay = 0.05});
  EXPECT_EQ(typed.lr(), 5e-3);
  const auto got = three_steps(acc, typed_model, typed);
  accel::Model keyed_model = linear_model(acc);
  accel::Optimizer keyed(keyed_model, "adamw");
  keyed.set("lr", "0.005").set("weight_decay", "0.05");
  EXPECT_EQ(got, three_steps(acc, keyed_model, keyed));

  accel::Optimizer sgd(keyed_model, accel::SGDOptions{.lr = 0.05});
  accel::Scheduler one_cycle(
      sgd,
      accel::OneCycleSchedule{.max_lr = 0.1,
                              .total_steps = 40,
                              .anneal_strategy = accel::OneCycleSchedule::AnnealStrategy::linear});
  accel::Optimizer sgd2(keyed_model, "sgd");
  sgd2.set("lr", "0.05");
  accel::Scheduler one_cycle2(sgd2, "one_cycle");
  one_cycle2.set("max_lr", "0.1").set("total_steps", "40").set("anneal_strategy", "linear");
  for (int step = 0; step < 10; ++step, one_cycle.step(), one_cycle2.step())
    EXPECT_EQ(sgd.lr(), sgd2.lr()) << step;

  accel::Dataset d = samples(10);
  accel::DataLoader typed_loader(acc, d,
                                 accel::DataLoaderOptions{.batch_size = 3, .shuffle = true});
  accel::DataLoader keyed_loader(acc, d);
  keyed_loader.set("batch_size", "3").set("shuffle", "true");
  EXPECT_EQ((*typed_loader.next())[0].to_vector<float>(),
            (*keyed_loader.next())[0].to_vector<float>());

  accel::Model layers;
  layers.add_layer("fc", accel::LinearOptions{.in_features = 8, .out_features = 2, .bias = false});
  EXPECT_EQ(layers.tensor_names(), std::vector<std::string>{"fc.weight"});
  EXPECT_THROW(accel::Optimizer(layers, "sgd").set(accel::AdamOptions{.beta1 = 0.8}), accel::Error);
}

// Every dataloader key, the padding ones included, on a dataset with a ragged field (the lines of
// a file): each is taken, and every default set gives the batches of none set.
TEST(OptionTables, DataLoaderTakesEveryKey) {
  const std::string path = ::testing::TempDir() + "option_tables_lines.txt";
  {
    std::ofstream f(path);
    f << "one\ntwo lines\nthree\nfour and more\nfive\n";
  }
  accel::Accelerator acc;
  auto batches = [&](bool every_option) {
    accel::Dataset d = accel::Dataset::from_text_lines(path);
    accel::DataLoader loader(acc, d);
    for (const Row& r : rows_of("dataloader", "dataloader"))
      if (every_option) loader.set(r.key, value_of(r));
    loader.set("batch_size", "2");
    std::vector<std::vector<uint8_t>> out;
    while (auto b = loader.next()) out.push_back((*b)[0].to_vector<uint8_t>());
    return out;
  };
  const auto plain = batches(false);
  EXPECT_EQ(plain.size(), 3u);
  EXPECT_EQ(batches(true), plain);
  std::remove(path.c_str());
}
