#include "trainer/trainer.hpp"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include <unistd.h>

#include "accelerator/accelerator.hpp"
#include "common/error.hpp"
#include "common/interrupt.hpp"
#include "data/loader.hpp"
#include "model/model.hpp"
#include "ops/collectives.hpp"
#include "optim/lr_scheduler.hpp"
#include "optim/optimizer.hpp"
#include "prepare/session.hpp"
#include "runtime/communicator.hpp"
#include "trainer/python_json.hpp"
#include "trainer/rotation.hpp"
#include "trainer/trainer_loop.hpp"

namespace accel::trainer {

namespace {

constexpr char kStateFile[] = "trainer_state.json";
// libaccel's own: where in the epoch the save fell, every rank's open loss window, the early
// stopping counter and the loss total, so that a resumed run continues bit for bit (transformers
// skips batches by arithmetic and restarts the window and the total at zero).
constexpr char kLoopFile[] = "trainer_loop.json";

// transformers' rewrite_logs, which its tracker integrations apply: eval_x -> eval/x,
// test_x -> test/x, anything else -> train/x.
std::string tracker_key(const std::string& k) {
  for (const char* p : {"eval_", "test_"})
    if (k.rfind(p, 0) == 0) return std::string(p, 4) + "/" + k.substr(5);
  return "train/" + k;
}

// Python's str() of a logs dict, as the Trainer prints it.
std::string logs_text(const std::map<std::string, Number>& logs) {
  std::string s = "{";
  for (const auto& [k, v] : logs) {
    if (s.size() > 1) s += ", ";
    s += "'" + k + "': " + (v.is_int ? std::to_string(v.integer) : python_float_repr(v.real));
  }
  return s + "}";
}

}  // namespace

Trainer::Trainer(Accelerator& acc, Objects objects, const std::string& settings, Steps steps)
    : acc_(acc),
      session_(acc.shared_session()),
      objects_(std::move(objects)),
      steps_(std::move(steps)) {
  auto& s = acc_.session();
  if (!objects_.model || !objects_.optimizer || !objects_.train)
    fail(Errc::invalid_argument,
         "trainer: a model, an optimizer and a training dataloader are required");
  auto prepared_loader = [&](const std::shared_ptr<data::DataLoader>& l) {
    for (const auto& p : s.dataloaders())
      if (p == l) return true;
    return false;
  };
  if (!s.is_prepared(objects_.model.get()) || !s.is_prepared(objects_.optimizer.get()) ||
      (objects_.scheduler && !s.is_prepared(objects_.scheduler.get())) ||
      !prepared_loader(objects_.train) || (objects_.eval && !prepared_loader(objects_.eval)))
    fail(Errc::state, "trainer: every object must be prepared on this accelerator");
  const long long accumulation = acc_.runtime().gradient_accumulation_steps();
  args_.gradient_accumulation_steps = accumulation;
  args_.set_all(settings);
  args_.finalize();
  if (args_.gradient_accumulation_steps != accumulation)
    fail(Errc::invalid_argument,
         "trainer: gradient_accumulation_steps=" +
             std::to_string(args_.gradient_accumulation_steps) +
             " differs from the accelerator's " + std::to_string(accumulation) +
             ": the accelerator accumulates, so set it in its configuration");
  if (args_.eval_strategy != Interval::no && !objects_.eval)
    fail(Errc::invalid_argument, std::string("trainer: eval_strategy=") +
                                     interval_name(args_.eval_strategy) +
                                     " needs an evaluation dataloader");
  early_ = EarlyStopping(args_.early_stopping_patience, args_.early_stopping_threshold);
  set_training_step(std::move(steps_.training_step));
  set_eval_step(std::move(steps_.eval_step));
  const bool state_free = s.register_named(
      kStateFile, {[this] { return state_.to_json(); },
                   [this](const std::string& b) { loaded_state_ = TrainerState::from_json(b); }});
  if (!state_free)
    fail(Errc::state, "trainer: this accelerator already has a Trainer; free it first");
  s.register_named(kLoopFile, {[this] { return save_loop_state(); },
                               [this](const std::string& b) { loaded_loop_ = b; }});
}

Trainer::~Trainer() {
  if (auto s = session_.lock()) {
    s->unregister_named(kStateFile);
    s->unregister_named(kLoopFile);
  }
}

void Trainer::set_training_step(std::function<at::Tensor(const std::vector<at::Tensor>&)> step) {
  if (step) {
    steps_.training_step = std::move(step);
    return;
  }
  steps_.training_step = [this](const std::vector<at::Tensor>& batch) {
    auto out = acc_.session().call(*objects_.model, "training_step", batch);
    if (out.empty()) fail(Errc::invalid_argument, "trainer: training_step returned nothing");
    return out[0];
  };
}

void Trainer::set_eval_step(std::function<EvalOutput(const std::vector<at::Tensor>&)> step) {
  if (step) {
    steps_.eval_step = std::move(step);
    return;
  }
  steps_.eval_step = [this](const std::vector<at::Tensor>& batch) {
    auto out = acc_.session().call(*objects_.model, "eval_step", batch);
    if (out.size() < 2)
      fail(Errc::invalid_argument,
           "trainer: the model's eval_step must return (loss, predictions)");
    return EvalOutput{out[0], out[1], batch.empty() ? at::Tensor() : batch.back()};
  };
}

void Trainer::emit(Event e, const Metrics* values) {
  // CallbackHandler's resets, made before the callbacks see the event.
  switch (e) {
    case Event::train_begin:
      control_.train_begin();
      break;
    case Event::epoch_begin:
      control_.epoch_begin();
      break;
    case Event::step_begin:
      control_.step_begin();
      break;
    case Event::log:
      control_.should_log = false;
      break;
    case Event::evaluate:
      control_.should_evaluate = false;
      break;
    case Event::save:
      control_.should_save = false;
      break;
    default:
      break;
  }
  if (e == Event::evaluate && args_.early_stopping_patience > 0 && values)
    early_.on_evaluate(args_, state_, *values, control_);
  for (auto& cb : callbacks_) cb(e, state_, control_, values);
}

double Trainer::ranks_mean(double value) const {
  auto* comm = acc_.runtime().communicator();
  if (!comm) return value;
  // The Trainer's _nested_gather(tr_loss).mean(): an fp32 mean of every rank's fp32 sum.
  return ops::gather(comm, at::full({1}, static_cast<float>(value), at::kFloat))
      .mean()
      .item<float>();
}

void Trainer::begin_state(Loop& loop) {
  const auto& train = *objects_.train;
  const long long length = train.is_stream() ? -1 : train.length();
  loop.plan = make_plan(args_, length < 0 ? std::nullopt : std::optional<long long>(length));
  loop.steps_in_epoch =
      length < 0 ? loop.plan.max_steps * args_.gradient_accumulation_steps : length;
  state_ = TrainerState();
  state_.max_steps = loop.plan.max_steps;
  state_.num_train_epochs = loop.plan.num_train_epochs;
  state_.logging_steps = loop.plan.logging_steps;
  state_.eval_steps = loop.plan.eval_steps;
  state_.save_steps = loop.plan.save_steps;
  state_.train_batch_size = train.batch_size();
  state_.epoch = Number::of_int(0);
  state_.is_world_process_zero = acc_.runtime().is_main_process();
  state_.is_local_process_zero = acc_.runtime().is_local_main_process();
  window_ = LossWindow();
  early_.set_counter(0);
}

void Trainer::train_once() {
  Loop loop;
  struct Running {  // loop_ points at `loop` while it lives
    Loop*& at;
    ~Running() { at = nullptr; }
  } running{loop_ = &loop};
  begin_state(loop);
  if (!args_.resume_from_checkpoint.empty()) resume(loop);
  loop.start = seconds_now();
  const bool bar =
      acc_.runtime().is_main_process() && args_.progress_bar.value_or(isatty(STDERR_FILENO) != 0);
  loop.progress = std::make_unique<ProgressBar>(bar, state_.max_steps, state_.global_step);
  emit(Event::train_begin);
  for (long long epoch = loop.epoch; epoch < loop.plan.num_train_epochs; ++epoch) {
    loop.epoch = epoch;
    if (loop.epoch_done) {  // resumed from a save at this epoch's end
      loop.epoch_done = false;
      continue;
    }
    run_epoch(loop, epoch);
    if (control_.should_training_stop) break;
  }
  finish_training(loop);
}

void Trainer::run_epoch(Loop& loop, long long epoch) {
  auto& train = *objects_.train;
  if (!loop.resumed_mid_epoch) {
    train.set_epoch(epoch);
    loop.batch = -1;
  }
  loop.resumed_mid_epoch = false;
  emit(Event::epoch_begin);
  if (args_.num_items_in_batch) {
    run_windows(loop, epoch);
  } else {
    std::vector<at::Tensor> batch;
    while (train.next(batch)) {
      micro_step(loop, epoch, batch, Window::accelerator);
      if (control_.should_epoch_stop || control_.should_training_stop) break;
    }
  }
  on_epoch_end(args_, state_, control_);
  loop.epoch_done = true;
  emit(Event::epoch_end);
  log_save_evaluate(loop);
  loop.epoch_done = false;
}

// transformers' windows with num_items_in_batch: the window's batches first (the accumulation's
// number, or what is left of the epoch), their label tokens counted over every rank, then each
// micro-batch with the count as its last field.
void Trainer::run_windows(Loop& loop, long long epoch) {
  auto& train = *objects_.train;
  for (;;) {
    std::vector<std::vector<at::Tensor>> window;
    std::vector<at::Tensor> batch;
    while (static_cast<long long>(window.size()) < args_.gradient_accumulation_steps &&
           train.next(batch))
      window.push_back(std::move(batch));
    if (window.empty()) return;
    const at::Tensor items = label_tokens(window);
    for (size_t i = 0; i < window.size(); ++i) {
      window[i].push_back(items);
      micro_step(loop, epoch, window[i], i + 1 == window.size() ? Window::last : Window::inner);
      if (control_.should_epoch_stop || control_.should_training_stop) return;
    }
  }
}

at::Tensor Trainer::label_tokens(const std::vector<std::vector<at::Tensor>>& window) const {
  int64_t count = 0;
  for (const auto& b : window) {
    const long long field =
        args_.labels_field < 0 ? static_cast<long long>(b.size()) - 1 : args_.labels_field;
    if (field < 0 || field >= static_cast<long long>(b.size()))
      fail(Errc::invalid_argument, "trainer: labels_field=" + std::to_string(field) +
                                       " but a batch has " + std::to_string(b.size()) + " fields");
    count += b[static_cast<size_t>(field)].ne(-100).sum().item<int64_t>();
  }
  at::Tensor total = at::full({1}, static_cast<double>(count), at::kDouble);
  if (auto* comm = acc_.runtime().communicator()) comm->all_reduce(total, runtime::ReduceOp::kSum);
  return at::scalar_tensor(static_cast<int64_t>(total.item<double>()), at::kLong);
}

void Trainer::micro_step(Loop& loop, long long epoch, const std::vector<at::Tensor>& batch,
                         Window window) {
  interrupt::check("trainer: train");
  auto& s = acc_.session();
  ++loop.batch;
  if (window == Window::accelerator)
    s.accumulate();
  else
    s.accumulate_as(window == Window::last);
  if (loop.window_micro++ == 0) emit(Event::step_begin);
  if (!objects_.model->is_training()) objects_.model->train(true);
  at::Tensor loss = steps_.training_step(batch);
  if (!loss.defined() || loss.numel() != 1 || !loss.is_floating_point())
    fail(Errc::invalid_argument,
         "trainer: the training step must return the loss, one floating number");
  float micro = 0;
  if (window == Window::accelerator) {
    s.backward(loss);
    // The Trainer's training_step returns loss / gradient_accumulation_steps for the logs.
    micro = loss.detach().to(at::kFloat).item<float>() /
            static_cast<float>(args_.gradient_accumulation_steps);
  } else {
    // Normalised over the window's tokens of every rank: times the processes (their gradients
    // are averaged), not divided by the accumulation; logged as it is (transformers).
    const int world = acc_.runtime().place().world_size;
    if (world > 1) loss = loss * static_cast<double>(world);
    s.backward(loss, true);
    micro = loss.detach().to(at::kFloat).item<float>();
  }
  window_.add(micro, state_.global_step);
  if (s.sync_gradients()) {
    loop.window_micro = 0;
    optimizer_update(loop, epoch);
  } else {
    emit(Event::substep_end);
  }
}

void Trainer::optimizer_update(Loop& loop, long long epoch) {
  auto& s = acc_.session();
  auto& opt = *objects_.optimizer;
  loop.grad_norm.reset();
  if (args_.max_grad_norm > 0)
    loop.grad_norm = s.clip_grad_norm(*objects_.model, args_.max_grad_norm, 2.0);
  emit(Event::pre_optimizer_step);
  s.optimizer_step(opt);
  emit(Event::optimizer_step);
  loop.learning_rate = objects_.scheduler ? objects_.scheduler->lr() : opt.lr();
  if (objects_.scheduler && !s.step_was_skipped(opt)) s.scheduler_step(*objects_.scheduler);
  s.optimizer_zero_grad(opt);
  ++state_.global_step;
  state_.epoch = Number::of_real(epoch_progress(epoch, loop.batch, loop.steps_in_epoch));
  on_step_end(args_, state_, control_);
  emit(Event::step_end);
  log_save_evaluate(loop);
  std::optional<double> loss;
  const auto& last = state_.log_history;
  if (!last.empty() && last.back().count("loss")) loss = last.back().at("loss").value();
  loop.progress->update(state_.global_step, loss);
}

void Trainer::log(Metrics& logs) {
  // Trainer.log adds the epoch to the caller's dict: on_log, on_evaluate and evaluate()'s
  // result see it.
  if (state_.epoch) logs["epoch"] = state_.epoch->value();
  state_.append_log(logs);
  const auto& entry = state_.log_history.back();
  emit(Event::log, &logs);
  if (acc_.trackers_started()) {
    tracking::Values values;
    for (const auto& [k, v] : entry)
      if (k != "step") values.push_back({tracker_key(k), false, v.value(), ""});
    acc_.log(values, state_.global_step);
  }
  acc_.log_message(logging::kInfo, 0, logs_text(entry));
}

void Trainer::log_save_evaluate(Loop& loop) {
  if (window_.due(control_, state_)) {
    const double mean = ranks_mean(window_.sum());
    loop.total_loss += mean;
    Metrics logs = window_.take(state_, loop.grad_norm ? &*loop.grad_norm : nullptr,
                                loop.learning_rate, &mean);
    log(logs);
  }
  std::optional<Metrics> metrics;
  if (control_.should_evaluate) {
    metrics = evaluate();
    if (args_.save_strategy == Interval::best)
      control_.should_save = update_would_be_best(*metrics);
  }
  if (control_.should_save) {
    save_checkpoint(loop, metrics ? &*metrics : nullptr);
    emit(Event::save);
  }
}

bool Trainer::update_would_be_best(const Metrics& metrics) const {
  return is_new_best(args_, state_, metrics);
}

}  // namespace accel::trainer
