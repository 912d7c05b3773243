// The Trainer's pure rules (src/trainer): settings and transformers' checks, the flow decisions,
// early stopping, the best checkpoint, rotation, the logged loss and trainer_state.json's text.
// transformers_trainer_diff.py compares the same pieces with transformers 4.40.2 itself.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/error.hpp"
#include "trainer/args.hpp"
#include "trainer/flow.hpp"
#include "trainer/python_json.hpp"
#include "trainer/rotation.hpp"
#include "trainer/state.hpp"

using namespace accel::trainer;

namespace {

TrainingArgs args_of(const std::string& text) {
  TrainingArgs a;
  a.set_all(text);
  a.finalize();
  return a;
}

std::string error_of(const std::string& text) {
  try {
    args_of(text);
  } catch (const accel::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(TrainerArgs, DefaultsFollowTransformers) {
  auto a = args_of("eval_strategy=steps, logging_steps=50, metric_for_best_model=accuracy");
  EXPECT_EQ(*a.eval_steps, 50);  // eval_steps defaults to logging_steps
  EXPECT_EQ(a.metric_key(), "eval_accuracy");
  EXPECT_TRUE(*a.greater_is_better);
  a = args_of("load_best_model_at_end=true; eval_strategy=epoch; save_strategy=epoch");
  EXPECT_EQ(*a.metric_for_best_model, "loss");  // load_best's default metric
  EXPECT_FALSE(*a.greater_is_better);
  EXPECT_EQ(a.metric_key(), "eval_loss");
  EXPECT_FALSE(*args_of("metric_for_best_model=eval_loss").greater_is_better);
  EXPECT_EQ(args_of("metric_for_best_model=eval_f1").metric_key(), "eval_f1");
}

TEST(TrainerArgs, BadValuesAreClearErrors) {
  EXPECT_NE(error_of("max_steps=ten").find("'max_steps=ten': is not a whole number"),
            std::string::npos);
  EXPECT_NE(error_of("eval_strategy=sometimes").find("is no, steps or epoch"), std::string::npos);
  EXPECT_NE(error_of("logging_steps=-1").find("must be >= 0"), std::string::npos);
  EXPECT_NE(error_of("logging_first_step=maybe").find("is true or false"), std::string::npos);
  EXPECT_NE(error_of("warmup=3").find("unknown setting 'warmup'"), std::string::npos);
  EXPECT_NE(error_of("max_steps").find("is not key=value"), std::string::npos);
  EXPECT_NE(error_of("gradient_accumulation_steps=0").find("must be >= 1"), std::string::npos);
}

TEST(TrainerArgs, TransformersChecks) {
  EXPECT_EQ(error_of("logging_steps=0"),
            "logging strategy IntervalStrategy.STEPS requires non-zero --logging_steps");
  EXPECT_EQ(error_of("logging_steps=2.5"),
            "--logging_steps must be an integer if bigger than 1: 2.5");
  EXPECT_EQ(error_of("eval_strategy=steps, logging_steps=0, logging_strategy=no"),
            "evaluation strategy IntervalStrategy.STEPS requires either non-zero --eval_steps or "
            "--logging_steps");
  EXPECT_EQ(
      error_of("load_best_model_at_end=true, eval_strategy=steps, save_strategy=epoch"),
      "--load_best_model_at_end requires the save and eval strategy to match, but found\n"
      "- Evaluation strategy: IntervalStrategy.STEPS\n- Save strategy: IntervalStrategy.EPOCH");
  EXPECT_EQ(
      error_of("load_best_model_at_end=true, eval_strategy=steps, eval_steps=30, save_steps=50"),
      "--load_best_model_at_end requires the saving steps to be a round multiple of the "
      "evaluation steps, but found 50, which is not a round multiple of 30.");
  EXPECT_EQ(
      error_of("load_best_model_at_end=true, eval_strategy=steps, eval_steps=25, save_steps=50"),
      "");
  EXPECT_NE(
      error_of("load_best_model_at_end=true, eval_strategy=steps, eval_steps=0.1, save_steps=50")
          .find("mixing ratio and absolute steps"),
      std::string::npos);
  EXPECT_NE(error_of("early_stopping_patience=2, metric_for_best_model=loss").find("eval_strategy"),
            std::string::npos);
  EXPECT_NE(error_of("save_strategy=best").find("metric_for_best_model"), std::string::npos);
  // Early stopping no longer needs load_best_model_at_end (transformers PR #35101), but saves
  // that record the best it compares with (#16620: without them it never stopped).
  EXPECT_EQ(error_of("early_stopping_patience=2, metric_for_best_model=loss, eval_strategy=epoch,"
                     "save_strategy=epoch"),
            "");
  EXPECT_EQ(error_of("early_stopping_patience=2, metric_for_best_model=loss, eval_strategy=steps,"
                     "eval_steps=10, save_steps=30"),
            "");
  EXPECT_EQ(error_of("early_stopping_patience=2, metric_for_best_model=f1, eval_strategy=epoch,"
                     "save_strategy=best"),
            "");
  EXPECT_NE(error_of("early_stopping_patience=2, metric_for_best_model=loss, eval_strategy=epoch")
                .find("save_strategy=steps (save_steps 500) never saves after "
                      "eval_strategy=epoch's evaluations"),
            std::string::npos);
  EXPECT_NE(error_of("early_stopping_patience=2, metric_for_best_model=loss, eval_strategy=steps,"
                     "eval_steps=10, save_steps=25")
                .find("never saves after"),
            std::string::npos);
}

TEST(TrainerArgs, PlanFollowsTheTrainersArithmetic) {
  auto p =
      make_plan(args_of("num_train_epochs=2.5, gradient_accumulation_steps=4, logging_steps=0.1,"
                        "save_steps=0.25"),
                std::optional<long long>(42));
  EXPECT_EQ(p.update_steps_per_epoch, 10);  // 42 // 4
  EXPECT_EQ(p.max_steps, 25);               // ceil(2.5 * 10)
  EXPECT_EQ(p.num_train_epochs, 3);
  EXPECT_EQ(p.logging_steps, 3);  // ceil(25 * 0.1)
  EXPECT_EQ(p.save_steps, 7);     // ceil(25 * 0.25)
  EXPECT_EQ(p.eval_steps, 500);   // untouched without eval_steps
  p = make_plan(args_of("max_steps=23"), std::optional<long long>(10));
  EXPECT_EQ(p.num_train_epochs, 3);
  p = make_plan(args_of("max_steps=23"), std::nullopt);
  EXPECT_EQ(p.update_steps_per_epoch, 23);
  EXPECT_THROW(make_plan(args_of(""), std::nullopt), accel::Error);
  // Resuming at step 37 of 10 update steps (40 batches, accumulation 4) per epoch.
  const auto a4 = args_of("num_train_epochs=5, gradient_accumulation_steps=4");
  const auto p4 = make_plan(a4, std::optional<long long>(42));
  const auto r = resume_point(a4, p4, 37);
  EXPECT_EQ(r.epochs_trained, 3);
  EXPECT_EQ(r.batches_to_skip, 28);
  EXPECT_THROW(resume_point(a4, p4, 51), accel::Error);
}

TEST(TrainerFlow, StepAndEpochDecisions) {
  auto a = args_of(
      "logging_steps=5, logging_first_step=true, eval_strategy=steps, eval_steps=4,"
      "eval_delay=8, save_steps=6");
  TrainerState s;
  s.max_steps = 12, s.logging_steps = 5, s.eval_steps = 4, s.save_steps = 6;
  std::vector<std::string> seen;
  for (s.global_step = 1; s.global_step <= 12; ++s.global_step) {
    TrainerControl c;
    on_step_end(a, s, c);
    std::string d = std::string(c.should_log ? "L" : "") + (c.should_evaluate ? "E" : "") +
                    (c.should_save ? "S" : "") + (c.should_training_stop ? "X" : "");
    if (!d.empty()) seen.push_back(std::to_string(s.global_step) + d);
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"1L", "5L", "6S", "8E", "10L", "12ESX"}));
  auto e =
      args_of("logging_strategy=epoch, eval_strategy=epoch, eval_delay=2, save_strategy=epoch");
  TrainerControl c;
  s.epoch = Number::of_real(1.0);
  on_epoch_end(e, s, c);
  EXPECT_TRUE(c.should_log && c.should_save && !c.should_evaluate);
  s.epoch = Number::of_real(2.0);
  on_epoch_end(e, s, c);
  EXPECT_TRUE(c.should_evaluate);
  c.step_begin();
  EXPECT_FALSE(c.should_log || c.should_save || c.should_evaluate);
}

TEST(TrainerFlow, EarlyStoppingAndBest) {
  auto a = args_of(
      "eval_strategy=steps, eval_steps=1, save_steps=1, metric_for_best_model=accuracy,"
      "early_stopping_patience=2, early_stopping_threshold=0.01");
  TrainerState s;
  EarlyStopping es(2, 0.01);
  TrainerControl c;
  const std::vector<double> acc = {0.5, 0.6, 0.605, 0.7, 0.69, 0.695};
  std::vector<long long> counters;
  for (size_t i = 0; i < acc.size() && !c.should_training_stop; ++i) {
    s.global_step = static_cast<long long>(i) + 1;
    const std::map<std::string, double> m = {{"eval_accuracy", acc[i]}, {"eval_loss", 1.0}};
    es.on_evaluate(a, s, m, c);
    counters.push_back(es.counter());
    update_best(a, s, &m, checkpoint_dir(a, s));
  }
  // 0.605 beats 0.6 but not by more than 0.01: counted, though it becomes the best.
  EXPECT_EQ(counters, (std::vector<long long>{0, 0, 1, 0, 1, 2}));
  EXPECT_TRUE(c.should_training_stop);
  EXPECT_EQ(s.best_metric->value(), 0.7);
  EXPECT_EQ(*s.best_model_checkpoint, "trainer_output/checkpoint-4");
  // A missing metric names the ones there (transformers 4.40 warned and stopped checking).
  try {
    es.on_evaluate(a, s, {{"eval_loss", 0.3}, {"eval_f1", 0.9}}, c);
    FAIL();
  } catch (const accel::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no 'eval_accuracy'; its metrics: eval_f1, eval_loss"),
              std::string::npos);
  }
  EXPECT_FALSE(update_best(a, s, nullptr, "x"));
  // save_strategy=best saves exactly when update_best would record a new best.
  EXPECT_FALSE(is_new_best(a, s, {{"eval_accuracy", 0.7}}));
  EXPECT_TRUE(is_new_best(a, s, {{"eval_accuracy", 0.71}}));
  EXPECT_TRUE(is_new_best(a, TrainerState(), {{"eval_accuracy", 0.0}}));
}

TEST(TrainerRotation, KeepsTheBestAndTheNewest) {
  const std::vector<std::string> dirs = {"checkpoint-10", "checkpoint-2",  "runs",
                                         "checkpoint-30", "checkpoint-20", "checkpoint-x",
                                         "checkpoint-5b"};
  EXPECT_EQ(sorted_checkpoints("out/", dirs, std::nullopt),
            (std::vector<std::string>{"out/checkpoint-2", "out/checkpoint-5b", "out/checkpoint-10",
                                      "out/checkpoint-20", "out/checkpoint-30"}));
  const std::optional<std::string> best = "out//checkpoint-5b/";
  EXPECT_EQ(sorted_checkpoints("out", dirs, best),
            (std::vector<std::string>{"out/checkpoint-2", "out/checkpoint-10", "out/checkpoint-20",
                                      "out/checkpoint-5b", "out/checkpoint-30"}));
  EXPECT_EQ(
      checkpoints_to_delete("out", dirs, best, 2),
      (std::vector<std::string>{"out/checkpoint-2", "out/checkpoint-10", "out/checkpoint-20"}));
  // save_total_limit=1 with a best that is not the newest keeps 2.
  EXPECT_EQ(checkpoints_to_delete("out", dirs, std::string("out/checkpoint-5b"), 1).size(), 3u);
  EXPECT_EQ(checkpoints_to_delete("out", dirs, std::nullopt, 1).size(), 4u);
  EXPECT_TRUE(checkpoints_to_delete("out", dirs, best, std::nullopt).empty());
  EXPECT_EQ(checkpoints_to_delete_at_end("out", dirs, best, 1).size(), 4u);
  EXPECT_EQ(*latest_checkpoint("out", dirs), "out/checkpoint-30");
  TrainerState s;
  s.best_model_checkpoint = "out/checkpoint-7";
  s.best_metric = Number::of_real(0.5);
  EXPECT_NE(drop_stale_best(s, [](const std::string&) { return false; }).find("checkpoint-7"),
            std::string::npos);
  EXPECT_FALSE(s.best_model_checkpoint);
  EXPECT_TRUE(s.best_metric);
  EXPECT_EQ(normal_path("./a//b/./c/"), "a/b/c");
}

TEST(TrainerLog, LossAsTransformersLogsIt) {
  LossWindow w;
  TrainerState s;
  for (int i = 0; i < 3; ++i) w.add(0.1f * static_cast<float>(i + 1), i);
  s.global_step = 3;
  TrainerControl c;
  c.should_log = true;
  EXPECT_TRUE(w.due(c, s));
  const double g = 1.5;
  auto logs = w.take(s, &g, 1e-3);
  EXPECT_EQ(logs["loss"], 0.2);  // round(0.6f / 3, 4)
  EXPECT_EQ(logs["grad_norm"], 1.5);
  EXPECT_FALSE(w.due(c, s));
  w.add(1.0f, 3);
  // A NaN adds sum / (1 + steps since the log) = 1 / 2 (transformers' filter), not the mean 1.
  w.add(std::numeric_limits<float>::quiet_NaN(), 4);
  s.global_step = 5;
  EXPECT_EQ(w.take(s, nullptr, 0)["loss"], 0.75);
  EXPECT_EQ(python_round4(0.12345), 0.1235);  // the double just above .12345
  EXPECT_EQ(python_round4(2.00005), 2.0);     // the double just below 2.00005
  EXPECT_DOUBLE_EQ(epoch_progress(1, 4, 10), 1.5);
}

TEST(TrainerState, JsonAsPythonWritesIt) {
  EXPECT_EQ(python_float_repr(0.1), "0.1");
  EXPECT_EQ(python_float_repr(1e-05), "1e-05");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(python_float_repr(2.0), "2.0");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(123456789012345.6), "123456789012345.6");
  EXPECT_EQ(python_float_repr(-2.5e-7), "-2.5e-07");
  TrainerState s;
  s.epoch = Number::of_real(0.5);
  s.global_step = 2;
  s.max_steps = 4;
  s.append_log({{"loss", 0.25}, {"learning_rate", 5e-05}});
  s.best_model_checkpoint = "out/checkpoint-\xc3\xa9";
  const std::string text = s.to_json();
  EXPECT_EQ(
      text,
      "{\n  \"best_metric\": null,\n  \"best_model_checkpoint\": \"out/checkpoint-\\u00e9\",\n"
      "  \"epoch\": 0.5,\n  \"eval_steps\": 500,\n  \"global_step\": 2,\n"
      "  \"is_hyper_param_search\": false,\n  \"is_local_process_zero\": true,\n"
      "  \"is_world_process_zero\": true,\n  \"log_history\": [\n    {\n      \"epoch\": 0.5,\n"
      "      \"learning_rate\": 5e-05,\n      \"loss\": 0.25,\n      \"step\": 2\n    }\n  ],\n"
      "  \"logging_steps\": 500,\n  \"max_steps\": 4,\n  \"num_input_tokens_seen\": 0,\n"
      "  \"num_train_epochs\": 0,\n  \"save_steps\": 500,\n  \"total_flos\": 0,\n"
      "  \"train_batch_size\": null,\n  \"trial_name\": null,\n  \"trial_params\": null\n}\n");
  EXPECT_EQ(TrainerState::from_json(text).to_json(), text);
  EXPECT_THROW(TrainerState::from_json("{\"global_step\": 1.5}"), accel::Error);
  EXPECT_THROW(TrainerState::from_json("[1"), accel::Error);
  // NaN and infinities as Python writes them, read back and written again.
  const auto odd = TrainerState::from_json(
      "{\"best_metric\": NaN, \"log_history\": [{\"grad_norm\": Infinity, \"loss\": -Infinity, "
      "\"step\": 1}], \"trial_name\": \"NaN\"}");
  EXPECT_TRUE(std::isnan(odd.best_metric->value()));
  EXPECT_EQ(odd.log_history[0].at("grad_norm").value(), std::numeric_limits<double>::infinity());
  const std::string again = odd.to_json();
  EXPECT_NE(again.find("\"best_metric\": NaN,"), std::string::npos);
  EXPECT_NE(again.find("\"loss\": -Infinity,"), std::string::npos);
  EXPECT_NE(again.find("\"trial_name\": \"NaN\""), std::string::npos);
  EXPECT_EQ(TrainerState::from_json(again).to_json(), again);
  // Keys of a newer transformers are kept.
  const auto newer = TrainerState::from_json("{\"stateful_callbacks\": {\"a\": 1}}");
  EXPECT_NE(newer.to_json().find("\"stateful_callbacks\": {\n    \"a\": 1\n  }"),
            std::string::npos);
}

// A trainer_state.json transformers 4.40.2 wrote (TrainerState.save_to_json), kept here so the
// check runs without the venv too.
const char* const kTransformersState = R"({
  "best_metric": 0.8125,
  "best_model_checkpoint": "out/checkpoint-8",
  "epoch": 1.3333333333333333,
  "eval_steps": 4,
  "global_step": 8,
  "is_hyper_param_search": false,
  "is_local_process_zero": true,
  "is_world_process_zero": true,
  "log_history": [
    {
      "epoch": 0.6666666666666666,
      "grad_norm": NaN,
      "learning_rate": 4.1666666666666665e-05,
      "loss": 2.3026,
      "step": 4
    },
    {
      "epoch": 1.3333333333333333,
      "eval_accuracy": 0.8125,
      "eval_loss": 1.9,
      "eval_runtime": 0.0123,
      "step": 8
    }
  ],
  "logging_steps": 4,
  "max_steps": 12,
  "num_input_tokens_seen": 0,
  "num_train_epochs": 2,
  "save_steps": 4,
  "total_flos": 1234567890123.0,
  "train_batch_size": 16,
  "trial_name": null,
  "trial_params": null
}
)";

TEST(TrainerState, ReadsWhatTransformersWrote) {
  const auto s = TrainerState::from_json(kTransformersState);
  EXPECT_EQ(s.global_step, 8);
  EXPECT_EQ(s.epoch->value(), 4.0 / 3.0);
  EXPECT_EQ(*s.train_batch_size, 16);
  EXPECT_EQ(s.best_metric->value(), 0.8125);
  EXPECT_EQ(*s.best_model_checkpoint, "out/checkpoint-8");
  ASSERT_EQ(s.log_history.size(), 2u);
  EXPECT_TRUE(std::isnan(s.log_history[0].at("grad_norm").value()));
  EXPECT_EQ(s.log_history[1].at("eval_runtime").value(), 0.0123);
  EXPECT_TRUE(s.log_history[1].at("step").is_int);
  EXPECT_FALSE(s.total_flos.is_int);
  EXPECT_EQ(s.to_json(), kTransformersState);
}
