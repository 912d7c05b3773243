// libaccel's side of transformers_trainer_diff.py: one JSON case per input line, one JSON answer
// per output line. A "run" case drives src/trainer's rules through the Trainer's loop as
// transformers 4.40's _inner_training_loop does (the driver runs transformers' own callbacks,
// _maybe_log_save_evaluate, _save_checkpoint and rotation through the same loop); a "rotate"
// case asks for one rotation, the end-of-training sweep and the latest checkpoint; a "reread"
// case reads a trainer_state.json transformers wrote and writes it again.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>
#include <limits>
#include <string>

#include "common/error.hpp"
#include "trainer/args.hpp"
#include "trainer/flow.hpp"
#include "trainer/rotation.hpp"
#include "trainer/state.hpp"

namespace {

using namespace accel::trainer;
using nlohmann::json;

// A number of the case; NaN and infinities come as Python's repr() text ("nan", "inf").
double num(const json& v) {
  if (!v.is_string()) return v.get<double>();
  const std::string t = v;
  const double inf = std::numeric_limits<double>::infinity();
  return t == "nan" ? std::numeric_limits<double>::quiet_NaN() : t == "inf" ? inf : -inf;
}

std::string flags(const TrainerControl& c) {
  return std::string(c.should_log ? "L" : "") + (c.should_evaluate ? "E" : "") +
         (c.should_save ? "S" : "") + (c.should_training_stop ? "X" : "");
}

struct Run {
  TrainingArgs args;
  TrainerState state;
  TrainerControl control;
  LossWindow window;
  EarlyStopping early{0, 0};
  std::vector<std::string> dirs;  // checkpoint directories in output_dir
  json in, out;
  size_t evals = 0;

  // Trainer._maybe_log_save_evaluate with evaluate() giving the case's next metrics.
  void log_save_evaluate(double grad_norm, double lr) {
    if (window.due(control, state)) {
      state.append_log(window.take(state, &grad_norm, lr));
      control.should_log = false;  // on_log
    }
    std::map<std::string, double> metrics;
    bool evaluated = false;
    if (control.should_evaluate) {
      metrics = in["metrics"][evals++ % in["metrics"].size()].get<std::map<std::string, double>>();
      state.append_log(metrics);  // evaluate() logs its metrics
      control.should_evaluate = false;
      if (args.early_stopping_patience > 0) early.on_evaluate(args, state, metrics, control);
      evaluated = true;
    }
    if (control.should_save) {
      const std::string dir = checkpoint_dir(args, state);
      update_best(args, state, evaluated ? &metrics : nullptr, dir);
      const std::string name = dir.substr(dir.rfind('/') + 1);
      if (std::find(dirs.begin(), dirs.end(), name) == dirs.end()) dirs.push_back(name);
      out["states"].push_back(state.to_json());
      json deleted = json::array();
      for (const auto& path : checkpoints_to_delete(
               args.output_dir, dirs, state.best_model_checkpoint, args.save_total_limit)) {
        const std::string gone = path.substr(path.rfind('/') + 1);
        deleted.push_back(gone);
        dirs.erase(std::find(dirs.begin(), dirs.end(), gone));
      }
      out["deleted"].push_back(deleted);
      control.should_save = false;  // on_save
    }
  }

  void train() {
    const Plan plan = make_plan(args, in["batches"].get<long long>());
    state.max_steps = plan.max_steps;
    state.num_train_epochs = plan.num_train_epochs;
    state.logging_steps = plan.logging_steps;
    state.eval_steps = plan.eval_steps;
    state.save_steps = plan.save_steps;
    state.train_batch_size = in["train_batch_size"].get<long long>();
    state.epoch = Number::of_int(0);
    early = EarlyStopping(args.early_stopping_patience, args.early_stopping_threshold);
    const long long batches = in["batches"], accum = args.gradient_accumulation_steps;
    const auto& losses = in["losses"];
    long long total_batches = 0;
    size_t k = 0;
    control.train_begin();
    for (long long epoch = 0; epoch < plan.num_train_epochs; ++epoch) {
      control.epoch_begin();
      for (long long step = 0; step < batches; ++step) {
        ++total_batches;
        if (step % accum == 0) control.step_begin();
        window.add(losses[k % losses.size()].get<float>(), state.global_step);
        const double grad_norm = num(in["grad_norms"][k % in["grad_norms"].size()]);
        const double lr = in["lrs"][k % in["lrs"].size()];
        ++k;
        const bool short_epoch = batches <= accum && step + 1 == batches;
        if (total_batches % accum == 0 || short_epoch) {
          ++state.global_step;
          state.epoch = Number::of_real(epoch_progress(epoch, step, batches));
          on_step_end(args, state, control);
          out["events"].push_back("s" + std::to_string(state.global_step) + ":" + flags(control));
          log_save_evaluate(grad_norm, lr);
        }
        if (control.should_epoch_stop || control.should_training_stop) break;
      }
      on_epoch_end(args, state, control);
      out["events"].push_back("e" + std::to_string(epoch) + ":" + flags(control));
      log_save_evaluate(num(in["grad_norms"][0]), in["lrs"][0]);
      if (control.should_training_stop) break;
    }
    json end = json::array();
    for (const auto& path : checkpoints_to_delete_at_end(
             args.output_dir, dirs, state.best_model_checkpoint, args.save_total_limit))
      end.push_back(path.substr(path.rfind('/') + 1));
    out["end_deleted"] = end;
    out["final"] = state.to_json();
  }
};

json run_case(const json& c) {
  Run r;
  r.in = c;
  r.out = {{"events", json::array()}, {"states", json::array()}, {"deleted", json::array()}};
  try {
    for (const auto& [k, v] : c["args"].items()) r.args.set(k, v.get<std::string>());
    r.args.finalize();
  } catch (const accel::Error& e) {
    return {{"error", e.what()}};
  }
  r.train();
  return r.out;
}

json rotate_case(const json& c) {
  const std::string out_dir = c["output_dir"];
  const auto dirs = c["dirs"].get<std::vector<std::string>>();
  std::optional<std::string> best;
  if (!c["best"].is_null()) best = c["best"].get<std::string>();
  std::optional<long long> limit;
  if (!c["limit"].is_null()) limit = c["limit"].get<long long>();
  const auto latest = latest_checkpoint(out_dir, dirs);
  return {{"deleted", checkpoints_to_delete(out_dir, dirs, best, limit)},
          {"end_deleted", checkpoints_to_delete_at_end(out_dir, dirs, best, limit)},
          {"latest", latest ? json(*latest) : json()}};
}

}  // namespace

int main() {
  for (std::string line; std::getline(std::cin, line);) {
    if (line.empty()) continue;
    const auto c = json::parse(line);
    json out;
    if (c["kind"] == "run")
      out = run_case(c);
    else if (c["kind"] == "rotate")
      out = rotate_case(c);
    else
      out = {{"text", TrainerState::from_json(c["text"]).to_json()}};
    std::cout << out.dump() << "\n";
  }
  return 0;
}
