// The C ABI as a binding sees it: every function against NULL and wrong-kind handles, the free
// functions from any thread, the buffer convention, tensors by copy, and a world of one.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <thread>

#include "accel/accel.h"
#include "accelerator_env.hpp"

namespace {

accel_tensor* make_f32(std::vector<float> values, std::vector<int64_t> shape) {
  accel_tensor* t = nullptr;
  EXPECT_EQ(accel_tensor_from_data(values.data(), values.size() * sizeof(float), ACCEL_DTYPE_F32,
                                   shape.data(), shape.size(), &t),
            ACCEL_OK)
      << accel_last_error_message();
  return t;
}

void expect_status(accel_status got, accel_status want, const std::string& what,
                   const std::string& in_message = "") {
  EXPECT_EQ(got, want) << what << ": got " << accel_status_name(got) << " ("
                       << accel_last_error_message() << ")";
  if (got == want && got != ACCEL_OK) {
    EXPECT_EQ(accel_last_error_status(), want) << what;
    EXPECT_NE(std::string(accel_last_error_message()).find(in_message), std::string::npos)
        << what << ": message '" << accel_last_error_message() << "' lacks '" << in_message << "'";
  }
}

// A WordPiece tokenizer from a vocab.txt of a few words, written here.
accel_tokenizer* tiny_tokenizer() {
  const std::string path = "/tmp/accel_capi_test_vocab_" + std::to_string(::getpid()) + ".txt";
  std::ofstream(path) << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\n##s\n,\n";
  accel_tokenizer* tok = nullptr;
  EXPECT_EQ(accel_tokenizer_load(path.c_str(), &tok), ACCEL_OK) << accel_last_error_message();
  std::remove(path.c_str());
  return tok;
}

// The objects the table below calls functions on.
struct Objects {
  accel_config* config = nullptr;
  accel_tensor* tensor = nullptr;
  accel_bytes_list* list = nullptr;
  accel_tensor_list* tlist = nullptr;
  accel_dataset* dataset = nullptr;
  accel_dataloader* loader = nullptr;
  accel_model* model = nullptr;
  accel_optimizer* optimizer = nullptr;
  accel_scheduler* scheduler = nullptr;
  accel_values* values = nullptr;
  accel_local_sgd* local_sgd = nullptr;
  accel_profiler* profiler = nullptr;
  accel_tokenizer* tokenizer = nullptr;
  Objects() {
    EXPECT_EQ(accel_model_new(&model), ACCEL_OK);
    EXPECT_EQ(accel_model_add_layer(model, "fc", "linear", "in_features=3 out_features=1"),
              ACCEL_OK);
    EXPECT_EQ(accel_model_define(model, "def forward(self, x):\n    return self.fc.forward(x)\n"),
              ACCEL_OK);
    EXPECT_EQ(accel_optimizer_new(model, "sgd", &optimizer), ACCEL_OK);
    EXPECT_EQ(accel_scheduler_new(optimizer, "constant", &scheduler), ACCEL_OK);
    EXPECT_EQ(accel_config_new(&config), ACCEL_OK);
    tensor = make_f32({1, 2, 3}, {3});
    EXPECT_EQ(accel_gather_object(g_acc, "ab", 2, &list), ACCEL_OK);
    accel_tensor* row = make_f32({1, 2, 3}, {1, 3});
    const accel_tensor* in[] = {row};
    EXPECT_EQ(accel_model_call(model, "forward", in, 1, &tlist), ACCEL_OK);
    accel_tensor_free(row);
    EXPECT_EQ(accel_dataset_from_tensors(&tensor, 1, &dataset), ACCEL_OK);
    EXPECT_EQ(accel_dataloader_new(g_acc, dataset, &loader), ACCEL_OK);
    EXPECT_EQ(accel_values_new(&values), ACCEL_OK);
    EXPECT_EQ(accel_values_set_number(values, "loss", 0.5), ACCEL_OK);
    EXPECT_EQ(accel_local_sgd_begin(g_acc, model, 2, &local_sgd), ACCEL_OK);
    EXPECT_EQ(accel_profiler_new(g_acc, &profiler), ACCEL_OK);
    tokenizer = tiny_tokenizer();
  }
  ~Objects() {
    accel_tokenizer_free(tokenizer);
    accel_profiler_free(profiler);
    accel_local_sgd_free(local_sgd);
    accel_values_free(values);
    accel_config_free(config);
    accel_tensor_free(tensor);
    accel_bytes_list_free(list);
    accel_tensor_list_free(tlist);
    accel_dataloader_free(loader);
    accel_dataset_free(dataset);
    accel_scheduler_free(scheduler);
    accel_optimizer_free(optimizer);
    accel_model_free(model);
  }
  // A live handle of some other kind, cast as the wrong type.
  template <class T>
  T* wrong() const {
    if constexpr (std::is_same_v<T, accel_config>)
      return reinterpret_cast<T*>(tensor);
    else
      return reinterpret_cast<T*>(config);
  }
};

// One spoiled argument: `arg` NULL (want ACCEL_ERR_INVALID_ARGUMENT) or a handle of another kind
// (ACCEL_ERR_WRONG_HANDLE). The message must name that very argument, so a probe that spoils
// another one than it says cannot pass.
struct Probe {
  const char* arg;
  accel_status want;
  std::function<accel_status(const Objects&)> call;
};

struct Case {
  const char* symbol;
  std::vector<Probe> probes;
};

using Call = std::function<accel_status(const Objects&)>;
Probe null(const char* arg, Call c) {
  return {arg, ACCEL_ERR_INVALID_ARGUMENT, std::move(c)};
}
Probe wrong(const char* arg, Call c) {
  return {arg, ACCEL_ERR_WRONG_HANDLE, std::move(c)};
}

// A name map for accel_load_pretrained_mapped's probes: every name as it is.
int32_t same_name(const char* name, char* out, size_t capacity, void*) {
  std::snprintf(out, capacity, "%s", name);
  return 0;
}

std::vector<Case> cases() {
  using O = const Objects&;
  static int32_t i32;
  static bool b;
  static int64_t i64, i64b;
  static size_t st;
  static double d;
  static accel_dtype dt;
  static void* vp;
  static const void* cvp;
  static accel_distribution dist;
  static accel_precision prec;
  static accel_tensor* t_out;
  static accel_tensor_list* tl_out;
  static accel_bytes_list* l_out;
  static accel_accelerator* a_out;
  static accel_dataset* d_out;
  static accel_dataloader* dl_out;
  static accel_model* m_out;
  static accel_optimizer* op_out;
  static accel_scheduler* s_out;
  static char text[8];
  static float f3[3];
  static int64_t shape[4];
  static accel_tensor* fields[1];
  static const char* idx_path = "/nonexistent.idx";
  static const char* null_path = nullptr;
  static accel_sample_fn noop = [](int64_t, void* const*, const size_t*, size_t, void*) -> int32_t {
    return 0;
  };
  static accel_sample_length_fn length_noop = [](int64_t, int64_t*, size_t, void*) -> int32_t {
    return 0;
  };
  static accel_stream_fn stream_noop = [](int64_t, int64_t, accel_sample*, void*) -> int32_t {
    return 1;
  };
  static int64_t idx[4];
  static const char* lines_path = "/nonexistent.txt";
  static accel_state_save_fn save_noop = [](accel_state_writer*, void*) -> int32_t { return 0; };
  static accel_state_load_fn load_noop = [](const void*, size_t, void*) -> int32_t { return 0; };
  static const accel_dtype f32 = ACCEL_DTYPE_F32;
  static const size_t zero_dims = 0, one_dim = 1;
  static const int64_t three = 3;
  auto A = [](O o) { return o.wrong<accel_accelerator>(); };
  auto T = [](O o) { return o.wrong<accel_tensor>(); };
  auto C = [](O o) { return o.wrong<accel_config>(); };
  auto L = [](O o) { return o.wrong<accel_bytes_list>(); };
  auto TL = [](O o) { return o.wrong<accel_tensor_list>(); };
  auto D = [](O o) { return o.wrong<accel_dataset>(); };
  auto DL = [](O o) { return o.wrong<accel_dataloader>(); };
  auto M = [](O o) { return o.wrong<accel_model>(); };
  auto OP = [](O o) { return o.wrong<accel_optimizer>(); };
  auto S = [](O o) { return o.wrong<accel_scheduler>(); };
  auto W = [](O o) { return o.wrong<accel_state_writer>(); };
  auto SA = [](O o) { return o.wrong<accel_sample>(); };
  auto V = [](O o) { return o.wrong<accel_values>(); };
  auto LS = [](O o) { return o.wrong<accel_local_sgd>(); };
  auto PR = [](O o) { return o.wrong<accel_profiler>(); };
  auto LR = [](O o) { return o.wrong<accel_load_report>(); };
  auto TK = [](O o) { return o.wrong<accel_tokenizer>(); };
  auto TR = [](O o) { return o.wrong<accel_trainer>(); };
  static accel_trainer* tr_out;
  static double dbl;
  static bool flag;
  static accel_trainer_callback_fn on_any = [](accel_trainer*, accel_trainer_event,
                                               const accel_values*, void*) -> int32_t { return 0; };
  static const char* two_texts[] = {"hello", "world"};
  static accel_local_sgd* ls_out;
  static accel_profiler* pr_out;
  static accel_batch_size_fn size_ok = [](void*, int64_t) -> accel_status { return ACCEL_OK; };
  static accel_tracker_log_fn log_noop = [](const accel_values*, int64_t, void*) -> int32_t {
    return 0;
  };
  // Queries of one handle that write one output: NULL handle, wrong handle, NULL output.
  auto query = [](const char* symbol, const char* arg, auto wrong_of, auto valid_of, auto fn) {
    return Case{symbol,
                {null(arg, [fn](O) { return fn(nullptr, true); }),
                 wrong(arg, [fn, wrong_of](O o) { return fn(wrong_of(o), true); }),
                 null("out", [fn, valid_of](O o) { return fn(valid_of(o), false); })}};
  };
  auto acc_of = [](O) { return g_acc; };
  auto tensor_of = [](O o) { return o.tensor; };
  auto loader_of = [](O o) { return o.loader; };
  auto model_of = [](O o) { return o.model; };
  auto opt_of = [](O o) { return o.optimizer; };
  return {
      {"accel_config_new", {null("out", [](O) { return accel_config_new(nullptr); })}},
      {"accel_config_set",
       {null("config", [](O) { return accel_config_set(nullptr, "use_cpu", "1"); }),
        wrong("config", [C](O o) { return accel_config_set(C(o), "use_cpu", "1"); }),
        null("key", [](O o) { return accel_config_set(o.config, nullptr, "1"); }),
        null("value", [](O o) { return accel_config_set(o.config, "use_cpu", nullptr); })}},
      {"accel_config_load_file",
       {null("config", [](O) { return accel_config_load_file(nullptr, nullptr); }),
        wrong("config", [C](O o) { return accel_config_load_file(C(o), nullptr); })}},
      {"accel_config_get",
       {null("config", [](O) { return accel_config_get(nullptr, "use_cpu", text, 8, &st); }),
        wrong("config", [C](O o) { return accel_config_get(C(o), "use_cpu", text, 8, &st); }),
        null("key", [](O o) { return accel_config_get(o.config, nullptr, text, 8, &st); }),
        null("out_size",
             [](O o) { return accel_config_get(o.config, "use_cpu", text, 8, nullptr); })}},
      {"accel_config_dump",
       {null("config", [](O) { return accel_config_dump(nullptr, text, 8, &st); }),
        wrong("config", [C](O o) { return accel_config_dump(C(o), text, 8, &st); }),
        null("out_size", [](O o) { return accel_config_dump(o.config, text, 8, nullptr); })}},
      {"accel_tensor_from_data",
       {null("data", [](O) { return accel_tensor_from_data(nullptr, 4, f32, &three, 0, &t_out); }),
        null("shape", [](O) { return accel_tensor_from_data(f3, 12, f32, nullptr, 1, &t_out); }),
        null("out", [](O) { return accel_tensor_from_data(f3, 12, f32, &three, 1, nullptr); })}},
      {"accel_tensor_to_data",
       {null("tensor", [](O) { return accel_tensor_to_data(nullptr, f3, 12, &st); }),
        wrong("tensor", [T](O o) { return accel_tensor_to_data(T(o), f3, 12, &st); }),
        null("out_size", [](O o) { return accel_tensor_to_data(o.tensor, f3, 12, nullptr); })}},
      query("accel_tensor_dim_count", "tensor", T, tensor_of,
            [](const accel_tensor* t, bool out) {
              return accel_tensor_dim_count(t, out ? &st : nullptr);
            }),
      {"accel_tensor_shape",
       {null("tensor", [](O) { return accel_tensor_shape(nullptr, shape, 4, &st); }),
        wrong("tensor", [T](O o) { return accel_tensor_shape(T(o), shape, 4, &st); }),
        null("out_count", [](O o) { return accel_tensor_shape(o.tensor, shape, 4, nullptr); })}},
      query("accel_tensor_dtype", "tensor", T, tensor_of,
            [](const accel_tensor* t, bool out) {
              return accel_tensor_dtype(t, out ? &dt : nullptr);
            }),
      query("accel_tensor_element_count", "tensor", T, tensor_of,
            [](const accel_tensor* t, bool out) {
              return accel_tensor_element_count(t, out ? &i64 : nullptr);
            }),
      query("accel_tensor_data_size", "tensor", T, tensor_of,
            [](const accel_tensor* t, bool out) {
              return accel_tensor_data_size(t, out ? &st : nullptr);
            }),
      query("accel_tensor_item_f64", "tensor", T, tensor_of,
            [](const accel_tensor* t, bool out) {
              return accel_tensor_item_f64(t, out ? &d : nullptr);
            }),
      query("accel_tensor_item_i64", "tensor", T, tensor_of,
            [](const accel_tensor* t, bool out) {
              return accel_tensor_item_i64(t, out ? &i64 : nullptr);
            }),
      {"accel_tensor_wrap_torch",
       {null("torch_tensor", [](O) { return accel_tensor_wrap_torch(nullptr, &t_out); }),
        null("out", [](O) { return accel_tensor_wrap_torch(&vp, nullptr); })}},
      {"accel_torch_check",
       {null("version", [](O) { return accel_torch_check(nullptr, -1, nullptr); })}},
      {"accel_tensor_set_requires_grad",
       {null("tensor", [](O) { return accel_tensor_set_requires_grad(nullptr, true); }),
        wrong("tensor", [T](O o) { return accel_tensor_set_requires_grad(T(o), true); })}},
      query("accel_tensor_borrow_torch", "tensor", T, tensor_of,
            [](const accel_tensor* t, bool out) {
              return accel_tensor_borrow_torch(t, out ? &vp : nullptr);
            }),
      query(
          "accel_tensor_list_count", "list", TL, [](O o) { return o.tlist; },
          [](const accel_tensor_list* l, bool out) {
            return accel_tensor_list_count(l, out ? &st : nullptr);
          }),
      query(
          "accel_tensor_list_get", "list", TL, [](O o) { return o.tlist; },
          [](const accel_tensor_list* l, bool out) {
            return accel_tensor_list_get(l, 0, out ? &t_out : nullptr);
          }),
      {"accel_init",
       {wrong("config", [C](O o) { return accel_init(C(o), &a_out); }),
        null("out", [](O) { return accel_init(nullptr, nullptr); })}},
      query("accel_process_index", "accelerator", A, acc_of,
            [](const accel_accelerator* a, bool out) {
              return accel_process_index(a, out ? &i32 : nullptr);
            }),
      query("accel_local_process_index", "accelerator", A, acc_of,
            [](const accel_accelerator* a, bool out) {
              return accel_local_process_index(a, out ? &i32 : nullptr);
            }),
      query("accel_num_processes", "accelerator", A, acc_of,
            [](const accel_accelerator* a, bool out) {
              return accel_num_processes(a, out ? &i32 : nullptr);
            }),
      query("accel_is_main_process", "accelerator", A, acc_of,
            [](const accel_accelerator* a, bool out) {
              return accel_is_main_process(a, out ? &b : nullptr);
            }),
      query("accel_is_local_main_process", "accelerator", A, acc_of,
            [](const accel_accelerator* a, bool out) {
              return accel_is_local_main_process(a, out ? &b : nullptr);
            }),
      query("accel_distributed_type", "accelerator", A, acc_of,
            [](const accel_accelerator* a, bool out) {
              return accel_distributed_type(a, out ? &dist : nullptr);
            }),
      query("accel_mixed_precision", "accelerator", A, acc_of,
            [](const accel_accelerator* a, bool out) {
              return accel_mixed_precision(a, out ? &prec : nullptr);
            }),
      query("accel_sync_gradients", "accelerator", A, acc_of,
            [](const accel_accelerator* a, bool out) {
              return accel_sync_gradients(a, out ? &b : nullptr);
            }),
      {"accel_device",
       {null("accelerator", [](O) { return accel_device(nullptr, text, 8, &st); }),
        wrong("accelerator", [A](O o) { return accel_device(A(o), text, 8, &st); }),
        null("out_size", [](O) { return accel_device(g_acc, text, 8, nullptr); })}},
      {"accel_effective_config",
       {null("accelerator", [](O) { return accel_effective_config(nullptr, text, 8, &st); }),
        wrong("accelerator", [A](O o) { return accel_effective_config(A(o), text, 8, &st); }),
        null("out_size", [](O) { return accel_effective_config(g_acc, text, 8, nullptr); })}},
      {"accel_wait_for_everyone",
       {null("accelerator", [](O) { return accel_wait_for_everyone(nullptr); }),
        wrong("accelerator", [A](O o) { return accel_wait_for_everyone(A(o)); })}},
      {"accel_set_interrupted",
       {null("accelerator", [](O) { return accel_set_interrupted(nullptr, 1); }),
        wrong("accelerator", [A](O o) { return accel_set_interrupted(A(o), 1); })}},
      {"accel_set_trigger",
       {null("accelerator", [](O) { return accel_set_trigger(nullptr); }),
        wrong("accelerator", [A](O o) { return accel_set_trigger(A(o)); })}},
      query("accel_check_trigger", "accelerator", A, acc_of,
            [](accel_accelerator* a, bool out) {
              return accel_check_trigger(a, out ? &b : nullptr);
            }),
      {"accel_join_uneven_inputs_begin",
       {null("accelerator", [](O) { return accel_join_uneven_inputs_begin(nullptr, -1); }),
        wrong("accelerator", [A](O o) { return accel_join_uneven_inputs_begin(A(o), -1); })}},
      {"accel_join_uneven_inputs_end",
       {null("accelerator", [](O) { return accel_join_uneven_inputs_end(nullptr); }),
        wrong("accelerator", [A](O o) { return accel_join_uneven_inputs_end(A(o)); })}},
      {"accel_split_between_processes",
       {null("accelerator",
             [](O) { return accel_split_between_processes(nullptr, 4, false, idx, 4, &st); }),
        wrong("accelerator",
              [A](O o) { return accel_split_between_processes(A(o), 4, false, idx, 4, &st); }),
        null("out_count",
             [](O) { return accel_split_between_processes(g_acc, 4, false, idx, 4, nullptr); })}},
      {"accel_split_tensor_between_processes",
       {null("accelerator",
             [](O o) {
               return accel_split_tensor_between_processes(nullptr, o.tensor, false, &t_out);
             }),
        wrong("accelerator",
              [A](O o) {
                return accel_split_tensor_between_processes(A(o), o.tensor, false, &t_out);
              }),
        null("tensor",
             [](O) { return accel_split_tensor_between_processes(g_acc, nullptr, false, &t_out); }),
        wrong(
            "tensor",
            [T](O o) { return accel_split_tensor_between_processes(g_acc, T(o), false, &t_out); }),
        null("out",
             [](O o) {
               return accel_split_tensor_between_processes(g_acc, o.tensor, false, nullptr);
             })}},
      {"accel_print",
       {null("accelerator", [](O) { return accel_print(nullptr, "x"); }),
        wrong("accelerator", [A](O o) { return accel_print(A(o), "x"); }),
        null("message", [](O) { return accel_print(g_acc, nullptr); })}},
      {"accel_main_process_first_begin",
       {null("accelerator", [](O) { return accel_main_process_first_begin(nullptr); }),
        wrong("accelerator", [A](O o) { return accel_main_process_first_begin(A(o)); })}},
      {"accel_main_process_first_end",
       {null("accelerator", [](O) { return accel_main_process_first_end(nullptr); }),
        wrong("accelerator", [A](O o) { return accel_main_process_first_end(A(o)); })}},
      {"accel_set_seed",
       {null("accelerator", [](O) { return accel_set_seed(nullptr, 1, false); }),
        wrong("accelerator", [A](O o) { return accel_set_seed(A(o), 1, false); })}},
      {"accel_accumulate",
       {null("accelerator", [](O) { return accel_accumulate(nullptr); }),
        wrong("accelerator", [A](O o) { return accel_accumulate(A(o)); })}},
      {"accel_gather",
       {null("accelerator", [](O o) { return accel_gather(nullptr, o.tensor, &t_out); }),
        wrong("accelerator", [A](O o) { return accel_gather(A(o), o.tensor, &t_out); }),
        null("tensor", [](O) { return accel_gather(g_acc, nullptr, &t_out); }),
        wrong("tensor", [T](O o) { return accel_gather(g_acc, T(o), &t_out); }),
        null("out", [](O o) { return accel_gather(g_acc, o.tensor, nullptr); })}},
      {"accel_gather_for_metrics",
       {null("accelerator",
             [](O o) { return accel_gather_for_metrics(nullptr, o.tensor, &t_out); }),
        wrong("accelerator", [A](O o) { return accel_gather_for_metrics(A(o), o.tensor, &t_out); }),
        null("tensor", [](O) { return accel_gather_for_metrics(g_acc, nullptr, &t_out); }),
        wrong("tensor", [T](O o) { return accel_gather_for_metrics(g_acc, T(o), &t_out); }),
        null("out", [](O o) { return accel_gather_for_metrics(g_acc, o.tensor, nullptr); })}},
      {"accel_pad_across_processes",
       {null(
            "accelerator",
            [](O o) { return accel_pad_across_processes(nullptr, o.tensor, 0, 0, false, &t_out); }),
        wrong("accelerator",
              [A](O o) { return accel_pad_across_processes(A(o), o.tensor, 0, 0, false, &t_out); }),
        null("tensor",
             [](O) { return accel_pad_across_processes(g_acc, nullptr, 0, 0, false, &t_out); }),
        wrong("tensor",
              [T](O o) { return accel_pad_across_processes(g_acc, T(o), 0, 0, false, &t_out); }),
        null("out",
             [](O o) {
               return accel_pad_across_processes(g_acc, o.tensor, 0, 0, false, nullptr);
             })}},
      {"accel_reduce",
       {null("accelerator",
             [](O o) { return accel_reduce(nullptr, o.tensor, ACCEL_REDUCE_SUM, &t_out); }),
        wrong("accelerator",
              [A](O o) { return accel_reduce(A(o), o.tensor, ACCEL_REDUCE_SUM, &t_out); }),
        null("tensor", [](O) { return accel_reduce(g_acc, nullptr, ACCEL_REDUCE_SUM, &t_out); }),
        wrong("tensor", [T](O o) { return accel_reduce(g_acc, T(o), ACCEL_REDUCE_SUM, &t_out); }),
        null("out", [](O o) { return accel_reduce(g_acc, o.tensor, ACCEL_REDUCE_SUM, nullptr); })}},
      {"accel_broadcast",
       {null("accelerator", [](O o) { return accel_broadcast(nullptr, o.tensor, 0, &t_out); }),
        wrong("accelerator", [A](O o) { return accel_broadcast(A(o), o.tensor, 0, &t_out); }),
        null("tensor (on the source rank)",
             [](O) { return accel_broadcast(g_acc, nullptr, 0, &t_out); }),
        wrong("tensor", [T](O o) { return accel_broadcast(g_acc, T(o), 0, &t_out); }),
        null("out", [](O o) { return accel_broadcast(g_acc, o.tensor, 0, nullptr); })}},
      {"accel_gather_object",
       {null("accelerator", [](O) { return accel_gather_object(nullptr, "a", 1, &l_out); }),
        wrong("accelerator", [A](O o) { return accel_gather_object(A(o), "a", 1, &l_out); }),
        null("data", [](O) { return accel_gather_object(g_acc, nullptr, 1, &l_out); }),
        null("out", [](O) { return accel_gather_object(g_acc, "a", 1, nullptr); })}},
      query(
          "accel_bytes_list_count", "list", L, [](O o) { return o.list; },
          [](const accel_bytes_list* l, bool out) {
            return accel_bytes_list_count(l, out ? &st : nullptr);
          }),
      {"accel_bytes_list_get",
       {null("list", [](O) { return accel_bytes_list_get(nullptr, 0, &cvp, &st); }),
        wrong("list", [L](O o) { return accel_bytes_list_get(L(o), 0, &cvp, &st); }),
        null("out_data", [](O o) { return accel_bytes_list_get(o.list, 0, nullptr, &st); }),
        null("out_size", [](O o) { return accel_bytes_list_get(o.list, 0, &cvp, nullptr); })}},
      {"accel_dataset_from_tensors",
       {null("tensors", [](O) { return accel_dataset_from_tensors(nullptr, 1, &d_out); }),
        wrong("tensors[0]",
              [T](O o) {
                const accel_tensor* w = T(o);
                return accel_dataset_from_tensors(&w, 1, &d_out);
              }),
        null("out", [](O o) { return accel_dataset_from_tensors(&o.tensor, 1, nullptr); })}},
      {"accel_dataset_from_callback",
       {null("dtypes",
             [](O) {
               return accel_dataset_from_callback(4, 1, nullptr, &zero_dims, nullptr, noop, nullptr,
                                                  nullptr, &d_out);
             }),
        null("dim_counts",
             [](O) {
               return accel_dataset_from_callback(4, 1, &f32, nullptr, nullptr, noop, nullptr,
                                                  nullptr, &d_out);
             }),
        null("dims",
             [](O) {
               return accel_dataset_from_callback(4, 1, &f32, &one_dim, nullptr, noop, nullptr,
                                                  nullptr, &d_out);
             }),
        null("fn",
             [](O) {
               return accel_dataset_from_callback(4, 1, &f32, &zero_dims, nullptr, nullptr, nullptr,
                                                  nullptr, &d_out);
             }),
        null("out",
             [](O) {
               return accel_dataset_from_callback(4, 1, &f32, &zero_dims, nullptr, noop, nullptr,
                                                  nullptr, nullptr);
             })}},
      {"accel_dataset_from_ragged_callback",
       {null("dtypes",
             [](O) {
               return accel_dataset_from_ragged_callback(
                   4, 1, nullptr, &zero_dims, nullptr, length_noop, noop, nullptr, nullptr, &d_out);
             }),
        null("fn",
             [](O) {
               return accel_dataset_from_ragged_callback(
                   4, 1, &f32, &zero_dims, nullptr, length_noop, nullptr, nullptr, nullptr, &d_out);
             }),
        null("out",
             [](O) {
               return accel_dataset_from_ragged_callback(
                   4, 1, &f32, &zero_dims, nullptr, length_noop, noop, nullptr, nullptr, nullptr);
             })}},
      {"accel_dataset_from_stream",
       {null("dtypes",
             [](O) {
               return accel_dataset_from_stream(1, nullptr, &zero_dims, nullptr, stream_noop,
                                                nullptr, nullptr, &d_out);
             }),
        null("fn",
             [](O) {
               return accel_dataset_from_stream(1, &f32, &zero_dims, nullptr, nullptr, nullptr,
                                                nullptr, &d_out);
             }),
        null("out",
             [](O) {
               return accel_dataset_from_stream(1, &f32, &zero_dims, nullptr, stream_noop, nullptr,
                                                nullptr, nullptr);
             })}},
      {"accel_dataset_from_text_lines",
       {null("path", [](O) { return accel_dataset_from_text_lines(nullptr, &d_out); }),
        null("out", [](O) { return accel_dataset_from_text_lines(lines_path, nullptr); })}},
      {"accel_sample_set_field",
       {null("sample", [](O) { return accel_sample_set_field(nullptr, 0, f3, 4); }),
        wrong("sample", [SA](O o) { return accel_sample_set_field(SA(o), 0, f3, 4); })}},
      {"accel_dataset_from_idx",
       {null("paths", [](O) { return accel_dataset_from_idx(nullptr, 1, &d_out); }),
        null("paths[0]", [](O) { return accel_dataset_from_idx(&null_path, 1, &d_out); }),
        null("out", [](O) { return accel_dataset_from_idx(&idx_path, 1, nullptr); })}},
      query(
          "accel_dataset_sample_count", "dataset", D, [](O o) { return o.dataset; },
          [](const accel_dataset* x, bool out) {
            return accel_dataset_sample_count(x, out ? &i64 : nullptr);
          }),
      query(
          "accel_dataset_field_count", "dataset", D, [](O o) { return o.dataset; },
          [](const accel_dataset* x, bool out) {
            return accel_dataset_field_count(x, out ? &st : nullptr);
          }),
      {"accel_dataloader_new",
       {null("accelerator", [](O o) { return accel_dataloader_new(nullptr, o.dataset, &dl_out); }),
        wrong("accelerator", [A](O o) { return accel_dataloader_new(A(o), o.dataset, &dl_out); }),
        null("dataset", [](O) { return accel_dataloader_new(g_acc, nullptr, &dl_out); }),
        wrong("dataset", [D](O o) { return accel_dataloader_new(g_acc, D(o), &dl_out); }),
        null("out", [](O o) { return accel_dataloader_new(g_acc, o.dataset, nullptr); })}},
      {"accel_dataloader_set",
       {null("loader", [](O) { return accel_dataloader_set(nullptr, "shuffle", "1"); }),
        wrong("loader", [DL](O o) { return accel_dataloader_set(DL(o), "shuffle", "1"); }),
        null("key", [](O o) { return accel_dataloader_set(o.loader, nullptr, "1"); }),
        null("value", [](O o) { return accel_dataloader_set(o.loader, "shuffle", nullptr); })}},
      {"accel_dataloader_set_field",
       {null("loader", [](O) { return accel_dataloader_set_field(nullptr, 0, "mask", "none"); }),
        wrong("loader", [DL](O o) { return accel_dataloader_set_field(DL(o), 0, "mask", "none"); }),
        null("key", [](O o) { return accel_dataloader_set_field(o.loader, 0, nullptr, "none"); }),
        null("value",
             [](O o) { return accel_dataloader_set_field(o.loader, 0, "mask", nullptr); })}},
      {"accel_dataloader_next",
       {null("loader", [](O) { return accel_dataloader_next(nullptr, fields, 1, &st); }),
        wrong("loader", [DL](O o) { return accel_dataloader_next(DL(o), fields, 1, &st); }),
        null("out_count",
             [](O o) { return accel_dataloader_next(o.loader, fields, 1, nullptr); })}},
      query("accel_dataloader_field_count", "loader", DL, loader_of,
            [](const accel_dataloader* l, bool out) {
              return accel_dataloader_field_count(l, out ? &st : nullptr);
            }),
      query("accel_dataloader_batch_count", "loader", DL, loader_of,
            [](const accel_dataloader* l, bool out) {
              return accel_dataloader_batch_count(l, out ? &i64 : nullptr);
            }),
      query("accel_dataloader_epoch", "loader", DL, loader_of,
            [](const accel_dataloader* l, bool out) {
              return accel_dataloader_epoch(l, out ? &i64 : nullptr);
            }),
      query("accel_dataloader_end_of_epoch", "loader", DL, loader_of,
            [](const accel_dataloader* l, bool out) {
              return accel_dataloader_end_of_epoch(l, out ? &b : nullptr);
            }),
      query("accel_dataloader_remainder", "loader", DL, loader_of,
            [](const accel_dataloader* l, bool out) {
              return accel_dataloader_remainder(l, out ? &i64 : nullptr);
            }),
      {"accel_dataloader_set_epoch",
       {null("loader", [](O) { return accel_dataloader_set_epoch(nullptr, 1); }),
        wrong("loader", [DL](O o) { return accel_dataloader_set_epoch(DL(o), 1); })}},
      {"accel_dataloader_skip_first_batches",
       {null("loader", [](O) { return accel_dataloader_skip_first_batches(nullptr, 1); }),
        wrong("loader", [DL](O o) { return accel_dataloader_skip_first_batches(DL(o), 1); })}},
      {"accel_dataloader_position",
       {null("loader", [](O) { return accel_dataloader_position(nullptr, &i64, &i64b); }),
        wrong("loader", [DL](O o) { return accel_dataloader_position(DL(o), &i64, &i64b); }),
        null("out_epoch", [](O o) { return accel_dataloader_position(o.loader, nullptr, &i64b); }),
        null("out_samples",
             [](O o) { return accel_dataloader_position(o.loader, &i64, nullptr); })}},
      {"accel_dataloader_set_position",
       {null("loader", [](O) { return accel_dataloader_set_position(nullptr, 0, 0); }),
        wrong("loader", [DL](O o) { return accel_dataloader_set_position(DL(o), 0, 0); })}},
      {"accel_dataloader_close",
       {null("loader", [](O) { return accel_dataloader_close(nullptr); }),
        wrong("loader", [DL](O o) { return accel_dataloader_close(DL(o)); })}},
      {"accel_model_new", {null("out", [](O) { return accel_model_new(nullptr); })}},
      {"accel_model_new_empty",
       {null("out", [](O) { return accel_model_new_empty(false, nullptr); })}},
      {"accel_model_load_torchscript",
       {null("path", [](O) { return accel_model_load_torchscript(nullptr, &m_out); }),
        null("out", [](O) { return accel_model_load_torchscript("/nonexistent.pt", nullptr); })}},
      {"accel_model_add_layer",
       {null("model", [](O) { return accel_model_add_layer(nullptr, "a", "linear", ""); }),
        wrong("model", [M](O o) { return accel_model_add_layer(M(o), "a", "linear", ""); }),
        null("name", [](O o) { return accel_model_add_layer(o.model, nullptr, "linear", ""); }),
        null("kind", [](O o) { return accel_model_add_layer(o.model, "a", nullptr, ""); })}},
      {"accel_model_add_parameter",
       {null("model", [](O o) { return accel_model_add_parameter(nullptr, "w", o.tensor); }),
        wrong("model", [M](O o) { return accel_model_add_parameter(M(o), "w", o.tensor); }),
        null("name", [](O o) { return accel_model_add_parameter(o.model, nullptr, o.tensor); }),
        null("tensor", [](O o) { return accel_model_add_parameter(o.model, "w", nullptr); }),
        wrong("tensor", [T](O o) { return accel_model_add_parameter(o.model, "w", T(o)); })}},
      {"accel_model_add_buffer",
       {null("model", [](O o) { return accel_model_add_buffer(nullptr, "b", o.tensor); }),
        wrong("model", [M](O o) { return accel_model_add_buffer(M(o), "b", o.tensor); }),
        null("name", [](O o) { return accel_model_add_buffer(o.model, nullptr, o.tensor); }),
        null("tensor", [](O o) { return accel_model_add_buffer(o.model, "b", nullptr); }),
        wrong("tensor", [T](O o) { return accel_model_add_buffer(o.model, "b", T(o)); })}},
      {"accel_model_forward_begin",
       {null("model", [](O) { return accel_model_forward_begin(nullptr); }),
        wrong("model", [M](O o) { return accel_model_forward_begin(M(o)); })}},
      {"accel_model_forward_end",
       {null("model", [](O) { return accel_model_forward_end(nullptr); }),
        wrong("model", [M](O o) { return accel_model_forward_end(M(o)); })}},
      {"accel_model_define",
       {null("model", [](O) { return accel_model_define(nullptr, "def f(self):\n  pass\n"); }),
        wrong("model", [M](O o) { return accel_model_define(M(o), ""); }),
        null("source", [](O o) { return accel_model_define(o.model, nullptr); })}},
      {"accel_model_call",
       {null("model", [](O) { return accel_model_call(nullptr, "forward", nullptr, 0, &tl_out); }),
        wrong("model", [M](O o) { return accel_model_call(M(o), "forward", nullptr, 0, &tl_out); }),
        null("method", [](O o) { return accel_model_call(o.model, nullptr, nullptr, 0, &tl_out); }),
        null("inputs",
             [](O o) { return accel_model_call(o.model, "forward", nullptr, 1, &tl_out); }),
        wrong("inputs[0]",
              [T](O o) {
                const accel_tensor* w = T(o);
                return accel_model_call(o.model, "forward", &w, 1, &tl_out);
              }),
        null("out",
             [](O o) {
               const accel_tensor* in = o.tensor;
               return accel_model_call(o.model, "forward", &in, 1, nullptr);
             })}},
      {"accel_model_train",
       {null("model", [](O) { return accel_model_train(nullptr, true); }),
        wrong("model", [M](O o) { return accel_model_train(M(o), true); })}},
      query("accel_model_parameter_element_count", "model", M, model_of,
            [](const accel_model* m, bool out) {
              return accel_model_parameter_element_count(m, out ? &i64 : nullptr);
            }),
      query("accel_model_tensor_count", "model", M, model_of,
            [](const accel_model* m, bool out) {
              return accel_model_tensor_count(m, out ? &st : nullptr);
            }),
      {"accel_model_tensor_name",
       {null("model", [](O) { return accel_model_tensor_name(nullptr, 0, text, 8, &st); }),
        wrong("model", [M](O o) { return accel_model_tensor_name(M(o), 0, text, 8, &st); }),
        null("out_size",
             [](O o) { return accel_model_tensor_name(o.model, 0, text, 8, nullptr); })}},
      {"accel_model_tensor",
       {null("model", [](O) { return accel_model_tensor(nullptr, "fc.weight", &t_out); }),
        wrong("model", [M](O o) { return accel_model_tensor(M(o), "fc.weight", &t_out); }),
        null("name", [](O o) { return accel_model_tensor(o.model, nullptr, &t_out); }),
        null("out", [](O o) { return accel_model_tensor(o.model, "fc.weight", nullptr); })}},
      {"accel_model_save_torchscript",
       {null("model", [](O) { return accel_model_save_torchscript(nullptr, "/tmp/x.pt"); }),
        wrong("model", [M](O o) { return accel_model_save_torchscript(M(o), "/tmp/x.pt"); }),
        null("path", [](O o) { return accel_model_save_torchscript(o.model, nullptr); })}},
      {"accel_optimizer_new",
       {null("model", [](O) { return accel_optimizer_new(nullptr, "sgd", &op_out); }),
        wrong("model", [M](O o) { return accel_optimizer_new(M(o), "sgd", &op_out); }),
        null("kind", [](O o) { return accel_optimizer_new(o.model, nullptr, &op_out); }),
        null("out", [](O o) { return accel_optimizer_new(o.model, "sgd", nullptr); })}},
      {"accel_optimizer_from_torch",
       {null("model", [](O) { return accel_optimizer_from_torch(nullptr, &vp, &op_out); }),
        wrong("model", [M](O o) { return accel_optimizer_from_torch(M(o), &vp, &op_out); }),
        null("torch_optimizer",
             [](O o) { return accel_optimizer_from_torch(o.model, nullptr, &op_out); }),
        null("out", [](O o) { return accel_optimizer_from_torch(o.model, &vp, nullptr); })}},
      {"accel_optimizer_set",
       {null("optimizer", [](O) { return accel_optimizer_set(nullptr, "lr", "1"); }),
        wrong("optimizer", [OP](O o) { return accel_optimizer_set(OP(o), "lr", "1"); }),
        null("key", [](O o) { return accel_optimizer_set(o.optimizer, nullptr, "1"); }),
        null("value", [](O o) { return accel_optimizer_set(o.optimizer, "lr", nullptr); })}},
      {"accel_optimizer_step",
       {null("optimizer", [](O) { return accel_optimizer_step(nullptr); }),
        wrong("optimizer", [OP](O o) { return accel_optimizer_step(OP(o)); })}},
      {"accel_optimizer_zero_grad",
       {null("optimizer", [](O) { return accel_optimizer_zero_grad(nullptr); }),
        wrong("optimizer", [OP](O o) { return accel_optimizer_zero_grad(OP(o)); })}},
      {"accel_optimizer_set_lr",
       {null("optimizer", [](O) { return accel_optimizer_set_lr(nullptr, 0.1); }),
        wrong("optimizer", [OP](O o) { return accel_optimizer_set_lr(OP(o), 0.1); })}},
      query("accel_optimizer_lr", "optimizer", OP, opt_of,
            [](const accel_optimizer* x, bool out) {
              return accel_optimizer_lr(x, out ? &d : nullptr);
            }),
      query("accel_optimizer_step_was_skipped", "optimizer", OP, opt_of,
            [](const accel_optimizer* x, bool out) {
              return accel_optimizer_step_was_skipped(x, out ? &b : nullptr);
            }),
      {"accel_optimizer_add_group",
       {null("optimizer",
             [](O) {
               const char* names[] = {"fc.bias"};
               return accel_optimizer_add_group(nullptr, names, 1, &st);
             }),
        wrong("optimizer",
              [OP](O o) {
                const char* names[] = {"fc.bias"};
                return accel_optimizer_add_group(OP(o), names, 1, &st);
              }),
        null("names", [](O o) { return accel_optimizer_add_group(o.optimizer, nullptr, 1, &st); }),
        null("names[0]",
             [](O o) {
               const char* names[] = {nullptr};
               return accel_optimizer_add_group(o.optimizer, names, 1, &st);
             }),
        null("out_group",
             [](O o) {
               const char* names[] = {"fc.bias"};
               return accel_optimizer_add_group(o.optimizer, names, 1, nullptr);
             })}},
      query("accel_optimizer_group_count", "optimizer", OP, opt_of,
            [](const accel_optimizer* x, bool out) {
              return accel_optimizer_group_count(x, out ? &st : nullptr);
            }),
      {"accel_optimizer_set_group",
       {null("optimizer", [](O) { return accel_optimizer_set_group(nullptr, 0, "lr", "1"); }),
        wrong("optimizer", [OP](O o) { return accel_optimizer_set_group(OP(o), 0, "lr", "1"); }),
        null("key", [](O o) { return accel_optimizer_set_group(o.optimizer, 0, nullptr, "1"); }),
        null("value",
             [](O o) { return accel_optimizer_set_group(o.optimizer, 0, "lr", nullptr); })}},
      query("accel_optimizer_group_lr", "optimizer", OP, opt_of,
            [](const accel_optimizer* x, bool out) {
              return accel_optimizer_group_lr(x, 0, out ? &d : nullptr);
            }),
      {"accel_scheduler_new",
       {null("optimizer", [](O) { return accel_scheduler_new(nullptr, "constant", &s_out); }),
        wrong("optimizer", [OP](O o) { return accel_scheduler_new(OP(o), "constant", &s_out); }),
        null("kind", [](O o) { return accel_scheduler_new(o.optimizer, nullptr, &s_out); }),
        null("out", [](O o) { return accel_scheduler_new(o.optimizer, "constant", nullptr); })}},
      {"accel_scheduler_set",
       {null("scheduler", [](O) { return accel_scheduler_set(nullptr, "gamma", "1"); }),
        wrong("scheduler", [S](O o) { return accel_scheduler_set(S(o), "gamma", "1"); }),
        null("key", [](O o) { return accel_scheduler_set(o.scheduler, nullptr, "1"); }),
        null("value", [](O o) { return accel_scheduler_set(o.scheduler, "gamma", nullptr); })}},
      {"accel_scheduler_step",
       {null("scheduler", [](O) { return accel_scheduler_step(nullptr); }),
        wrong("scheduler", [S](O o) { return accel_scheduler_step(S(o)); })}},
      query(
          "accel_scheduler_lr", "scheduler", S, [](O o) { return o.scheduler; },
          [](const accel_scheduler* x, bool out) {
            return accel_scheduler_lr(x, out ? &d : nullptr);
          }),
      {"accel_prepare",
       {null("accelerator", [](O) { return accel_prepare(nullptr, nullptr, 0); }),
        wrong("accelerator", [A](O o) { return accel_prepare(A(o), nullptr, 0); }),
        null("objects", [](O) { return accel_prepare(g_acc, nullptr, 1); }),
        null("objects[0]",
             [](O) {
               void* none[] = {nullptr};
               return accel_prepare(g_acc, none, 1);
             }),
        wrong("objects[0]",
              [](O o) {
                void* cfg[] = {o.config};
                return accel_prepare(g_acc, cfg, 1);
              })}},
      {"accel_backward",
       {null("accelerator", [](O o) { return accel_backward(nullptr, o.tensor); }),
        wrong("accelerator", [A](O o) { return accel_backward(A(o), o.tensor); }),
        null("loss", [](O) { return accel_backward(g_acc, nullptr); }),
        wrong("loss", [T](O o) { return accel_backward(g_acc, T(o)); })}},
      {"accel_clip_grad_norm",
       {null("accelerator", [](O o) { return accel_clip_grad_norm(nullptr, o.model, 1, 2, &d); }),
        wrong("accelerator", [A](O o) { return accel_clip_grad_norm(A(o), o.model, 1, 2, &d); }),
        null("model", [](O) { return accel_clip_grad_norm(g_acc, nullptr, 1, 2, &d); }),
        wrong("model", [M](O o) { return accel_clip_grad_norm(g_acc, M(o), 1, 2, &d); })}},
      {"accel_clip_grad_value",
       {null("accelerator", [](O o) { return accel_clip_grad_value(nullptr, o.model, 1); }),
        wrong("accelerator", [A](O o) { return accel_clip_grad_value(A(o), o.model, 1); }),
        null("model", [](O) { return accel_clip_grad_value(g_acc, nullptr, 1); }),
        wrong("model", [M](O o) { return accel_clip_grad_value(g_acc, M(o), 1); })}},
      {"accel_save_model",
       {null("accelerator",
             [](O o) { return accel_save_model(nullptr, o.model, "/tmp/x", nullptr); }),
        wrong("accelerator",
              [A](O o) { return accel_save_model(A(o), o.model, "/tmp/x", nullptr); }),
        null("model", [](O) { return accel_save_model(g_acc, nullptr, "/tmp/x", nullptr); }),
        wrong("model", [M](O o) { return accel_save_model(g_acc, M(o), "/tmp/x", nullptr); }),
        null("dir", [](O o) { return accel_save_model(g_acc, o.model, nullptr, nullptr); })}},
      {"accel_load_checkpoint_in_model",
       {null("model", [](O) { return accel_load_checkpoint_in_model(nullptr, "/tmp/x"); }),
        wrong("model", [M](O o) { return accel_load_checkpoint_in_model(M(o), "/tmp/x"); }),
        null("path", [](O o) { return accel_load_checkpoint_in_model(o.model, nullptr); })}},
      {"accel_save_state",
       {null("accelerator", [](O) { return accel_save_state(nullptr, "/tmp/x"); }),
        wrong("accelerator", [A](O o) { return accel_save_state(A(o), "/tmp/x"); })}},
      {"accel_load_state",
       {null("accelerator", [](O) { return accel_load_state(nullptr, "/tmp/x"); }),
        wrong("accelerator", [A](O o) { return accel_load_state(A(o), "/tmp/x"); })}},
      {"accel_state_writer_write",
       {null("writer", [](O) { return accel_state_writer_write(nullptr, "a", 1); }),
        wrong("writer", [W](O o) { return accel_state_writer_write(W(o), "a", 1); })}},
      {"accel_register_for_checkpointing",
       {null("accelerator",
             [](O) {
               return accel_register_for_checkpointing(nullptr, save_noop, load_noop, nullptr,
                                                       nullptr);
             }),
        wrong("accelerator",
              [A](O o) {
                return accel_register_for_checkpointing(A(o), save_noop, load_noop, nullptr,
                                                        nullptr);
              }),
        null("save",
             [](O) {
               return accel_register_for_checkpointing(g_acc, nullptr, load_noop, nullptr, nullptr);
             }),
        null("load",
             [](O) {
               return accel_register_for_checkpointing(g_acc, save_noop, nullptr, nullptr, nullptr);
             })}},
      {"accel_values_new", {null("out", [](O) { return accel_values_new(nullptr); })}},
      {"accel_values_set_number",
       {null("values", [](O) { return accel_values_set_number(nullptr, "k", 1); }),
        wrong("values", [V](O o) { return accel_values_set_number(V(o), "k", 1); }),
        null("key", [](O o) { return accel_values_set_number(o.values, nullptr, 1); })}},
      {"accel_values_set_text",
       {null("values", [](O) { return accel_values_set_text(nullptr, "k", "t"); }),
        wrong("values", [V](O o) { return accel_values_set_text(V(o), "k", "t"); }),
        null("key", [](O o) { return accel_values_set_text(o.values, nullptr, "t"); }),
        null("text", [](O o) { return accel_values_set_text(o.values, "k", nullptr); })}},
      query(
          "accel_values_count", "values", V, [](O o) { return o.values; },
          [](const accel_values* v, bool out) {
            size_t n;
            return accel_values_count(v, out ? &n : nullptr);
          }),
      {"accel_values_get",
       {null("values",
             [](O) { return accel_values_get(nullptr, 0, nullptr, nullptr, nullptr, nullptr); }),
        wrong("values",
              [V](O o) { return accel_values_get(V(o), 0, nullptr, nullptr, nullptr, nullptr); })}},
      {"accel_init_trackers",
       {null("accelerator", [](O) { return accel_init_trackers(nullptr, "p", nullptr); }),
        wrong("accelerator", [A](O o) { return accel_init_trackers(A(o), "p", nullptr); }),
        null("project_name", [](O) { return accel_init_trackers(g_acc, nullptr, nullptr); }),
        wrong("config", [V](O o) { return accel_init_trackers(g_acc, "p", V(o)); })}},
      {"accel_log",
       {null("accelerator", [](O o) { return accel_log(nullptr, o.values, 1); }),
        wrong("accelerator", [A](O o) { return accel_log(A(o), o.values, 1); }),
        null("values", [](O) { return accel_log(g_acc, nullptr, 1); }),
        wrong("values", [V](O o) { return accel_log(g_acc, V(o), 1); })}},
      {"accel_end_training",
       {null("accelerator", [](O) { return accel_end_training(nullptr); }),
        wrong("accelerator", [A](O o) { return accel_end_training(A(o)); })}},
      {"accel_add_tracker",
       {null("accelerator",
             [](O) {
               return accel_add_tracker(nullptr, "t", nullptr, log_noop, nullptr, nullptr, nullptr);
             }),
        wrong("accelerator",
              [A](O o) {
                return accel_add_tracker(A(o), "t", nullptr, log_noop, nullptr, nullptr, nullptr);
              }),
        null("name",
             [](O) {
               return accel_add_tracker(g_acc, nullptr, nullptr, log_noop, nullptr, nullptr,
                                        nullptr);
             }),
        null("log",
             [](O) {
               return accel_add_tracker(g_acc, "t", nullptr, nullptr, nullptr, nullptr, nullptr);
             })}},
      {"accel_set_log_sink",
       {null("accelerator",
             [](O) { return accel_set_log_sink(nullptr, nullptr, nullptr, nullptr); }),
        wrong("accelerator",
              [A](O o) { return accel_set_log_sink(A(o), nullptr, nullptr, nullptr); })}},
      {"accel_get_log_level",
       {null("accelerator",
             [](O) {
               accel_log_level l;
               return accel_get_log_level(nullptr, &l);
             }),
        wrong("accelerator",
              [A](O o) {
                accel_log_level l;
                return accel_get_log_level(A(o), &l);
              }),
        null("out", [](O) { return accel_get_log_level(g_acc, nullptr); })}},
      {"accel_set_log_level",
       {null("accelerator", [](O) { return accel_set_log_level(nullptr, ACCEL_LOG_INFO); }),
        wrong("accelerator", [A](O o) { return accel_set_log_level(A(o), ACCEL_LOG_INFO); })}},
      {"accel_log_message",
       {null("accelerator", [](O) { return accel_log_message(nullptr, ACCEL_LOG_INFO, 0, "m"); }),
        wrong("accelerator", [A](O o) { return accel_log_message(A(o), ACCEL_LOG_INFO, 0, "m"); }),
        null("message", [](O) { return accel_log_message(g_acc, ACCEL_LOG_INFO, 0, nullptr); })}},
      {"accel_local_main_process_first_begin",
       {null("accelerator", [](O) { return accel_local_main_process_first_begin(nullptr); }),
        wrong("accelerator", [A](O o) { return accel_local_main_process_first_begin(A(o)); })}},
      {"accel_local_main_process_first_end",
       {null("accelerator", [](O) { return accel_local_main_process_first_end(nullptr); }),
        wrong("accelerator", [A](O o) { return accel_local_main_process_first_end(A(o)); })}},
      {"accel_is_last_process",
       {null("accelerator", [](O) { return accel_is_last_process(nullptr, &b); }),
        wrong("accelerator", [A](O o) { return accel_is_last_process(A(o), &b); }),
        null("out", [](O) { return accel_is_last_process(g_acc, nullptr); })}},
      {"accel_no_sync_begin",
       {null("accelerator", [](O o) { return accel_no_sync_begin(nullptr, o.model); }),
        wrong("accelerator", [A](O o) { return accel_no_sync_begin(A(o), o.model); }),
        null("model", [](O) { return accel_no_sync_begin(g_acc, nullptr); }),
        wrong("model", [M](O o) { return accel_no_sync_begin(g_acc, M(o)); })}},
      {"accel_no_sync_end",
       {null("accelerator", [](O o) { return accel_no_sync_end(nullptr, o.model); }),
        wrong("accelerator", [A](O o) { return accel_no_sync_end(A(o), o.model); }),
        null("model", [](O) { return accel_no_sync_end(g_acc, nullptr); }),
        wrong("model", [M](O o) { return accel_no_sync_end(g_acc, M(o)); })}},
      {"accel_find_executable_batch_size",
       {null(
            "accelerator",
            [](O) { return accel_find_executable_batch_size(nullptr, 8, size_ok, nullptr, &i64); }),
        wrong(
            "accelerator",
            [A](O o) { return accel_find_executable_batch_size(A(o), 8, size_ok, nullptr, &i64); }),
        null("fn",
             [](O) { return accel_find_executable_batch_size(g_acc, 8, nullptr, nullptr, &i64); }),
        null("out_batch_size",
             [](O) {
               return accel_find_executable_batch_size(g_acc, 8, size_ok, nullptr, nullptr);
             })}},
      {"accel_local_sgd_begin",
       {null("accelerator",
             [](O o) { return accel_local_sgd_begin(nullptr, o.model, 2, &ls_out); }),
        wrong("accelerator", [A](O o) { return accel_local_sgd_begin(A(o), o.model, 2, &ls_out); }),
        null("model", [](O) { return accel_local_sgd_begin(g_acc, nullptr, 2, &ls_out); }),
        wrong("model", [M](O o) { return accel_local_sgd_begin(g_acc, M(o), 2, &ls_out); }),
        null("out", [](O o) { return accel_local_sgd_begin(g_acc, o.model, 2, nullptr); })}},
      {"accel_local_sgd_set",
       {null("local_sgd", [](O) { return accel_local_sgd_set(nullptr, "outer_lr", "1"); }),
        wrong("local_sgd", [LS](O o) { return accel_local_sgd_set(LS(o), "outer_lr", "1"); }),
        null("key", [](O o) { return accel_local_sgd_set(o.local_sgd, nullptr, "1"); }),
        null("value", [](O o) { return accel_local_sgd_set(o.local_sgd, "outer_lr", nullptr); })}},
      {"accel_local_sgd_step",
       {null("local_sgd", [](O) { return accel_local_sgd_step(nullptr); }),
        wrong("local_sgd", [LS](O o) { return accel_local_sgd_step(LS(o)); })}},
      {"accel_local_sgd_end",
       {null("local_sgd", [](O) { return accel_local_sgd_end(nullptr); }),
        wrong("local_sgd", [LS](O o) { return accel_local_sgd_end(LS(o)); })}},
      {"accel_local_sgd_average_count",
       {null("local_sgd", [](O) { return accel_local_sgd_average_count(nullptr, &i64); }),
        wrong("local_sgd", [LS](O o) { return accel_local_sgd_average_count(LS(o), &i64); }),
        null("out", [](O o) { return accel_local_sgd_average_count(o.local_sgd, nullptr); })}},
      {"accel_local_sgd_free",
       {wrong("local_sgd",
              [LS](O o) {
                accel_local_sgd_free(LS(o));
                return accel_last_error_status();
              })}},
      {"accel_profiler_new",
       {null("accelerator", [](O) { return accel_profiler_new(nullptr, &pr_out); }),
        wrong("accelerator", [A](O o) { return accel_profiler_new(A(o), &pr_out); }),
        null("out", [](O) { return accel_profiler_new(g_acc, nullptr); })}},
      {"accel_profiler_set",
       {null("profiler", [](O) { return accel_profiler_set(nullptr, "wait", "1"); }),
        wrong("profiler", [PR](O o) { return accel_profiler_set(PR(o), "wait", "1"); }),
        null("key", [](O o) { return accel_profiler_set(o.profiler, nullptr, "1"); }),
        null("value", [](O o) { return accel_profiler_set(o.profiler, "wait", nullptr); })}},
      {"accel_profiler_set_on_trace_ready",
       {null("profiler",
             [](O) { return accel_profiler_set_on_trace_ready(nullptr, nullptr, nullptr); }),
        wrong("profiler",
              [PR](O o) { return accel_profiler_set_on_trace_ready(PR(o), nullptr, nullptr); })}},
      {"accel_profiler_start",
       {null("profiler", [](O) { return accel_profiler_start(nullptr); }),
        wrong("profiler", [PR](O o) { return accel_profiler_start(PR(o)); })}},
      {"accel_profiler_step",
       {null("profiler", [](O) { return accel_profiler_step(nullptr); }),
        wrong("profiler", [PR](O o) { return accel_profiler_step(PR(o)); })}},
      {"accel_profiler_stop",
       {null("profiler", [](O) { return accel_profiler_stop(nullptr); }),
        wrong("profiler", [PR](O o) { return accel_profiler_stop(PR(o)); })}},
      {"accel_profiler_table",
       {null("profiler",
             [](O) { return accel_profiler_table(nullptr, nullptr, -1, text, 8, &st); }),
        wrong("profiler",
              [PR](O o) { return accel_profiler_table(PR(o), nullptr, -1, text, 8, &st); })}},
      {"accel_profiler_export_chrome_trace",
       {null("profiler",
             [](O) { return accel_profiler_export_chrome_trace(nullptr, "/tmp/x.json"); }),
        wrong("profiler",
              [PR](O o) { return accel_profiler_export_chrome_trace(PR(o), "/tmp/x.json"); }),
        null("path", [](O o) { return accel_profiler_export_chrome_trace(o.profiler, nullptr); })}},
      {"accel_profiler_window_count",
       {null("profiler", [](O) { return accel_profiler_window_count(nullptr, &i64); }),
        wrong("profiler", [PR](O o) { return accel_profiler_window_count(PR(o), &i64); }),
        null("out", [](O o) { return accel_profiler_window_count(o.profiler, nullptr); })}},
      {"accel_load_pretrained",
       {null("model", [](O) { return accel_load_pretrained(nullptr, "/x", nullptr, nullptr); }),
        wrong("model", [M](O o) { return accel_load_pretrained(M(o), "/x", nullptr, nullptr); }),
        null("path",
             [](O o) { return accel_load_pretrained(o.model, nullptr, nullptr, nullptr); })}},
      {"accel_load_pretrained_mapped",
       {null("model",
             [](O) {
               return accel_load_pretrained_mapped(nullptr, "/x", nullptr, same_name, nullptr,
                                                   nullptr);
             }),
        wrong("model",
              [M](O o) {
                return accel_load_pretrained_mapped(M(o), "/x", nullptr, same_name, nullptr,
                                                    nullptr);
              }),
        null("path",
             [](O o) {
               return accel_load_pretrained_mapped(o.model, nullptr, nullptr, same_name, nullptr,
                                                   nullptr);
             })}},
      {"accel_infer_device_map",
       {null("model", [](O) { return accel_infer_device_map(nullptr, "max_memory=disk", &l_out); }),
        wrong("model",
              [M](O o) { return accel_infer_device_map(M(o), "max_memory=disk", &l_out); }),
        null("options", [](O o) { return accel_infer_device_map(o.model, nullptr, &l_out); }),
        null("out",
             [](O o) { return accel_infer_device_map(o.model, "max_memory=disk", nullptr); })}},
      {"accel_dispatch_model",
       {null("model", [](O) { return accel_dispatch_model(nullptr, "/x", "=cpu"); }),
        wrong("model", [M](O o) { return accel_dispatch_model(M(o), "/x", "=cpu"); }),
        null("checkpoint", [](O o) { return accel_dispatch_model(o.model, nullptr, "=cpu"); }),
        null("device_map_or_options",
             [](O o) { return accel_dispatch_model(o.model, "/x", nullptr); })}},
      {"accel_load_report_keys",
       {null("report", [](O) { return accel_load_report_keys(nullptr, "missing", &l_out); }),
        wrong("report", [LR](O o) { return accel_load_report_keys(LR(o), "missing", &l_out); })}},
      {"accel_load_report_text",
       {null("report", [](O) { return accel_load_report_text(nullptr, false, text, 8, &st); }),
        wrong("report", [LR](O o) { return accel_load_report_text(LR(o), false, text, 8, &st); })}},
      {"accel_load_report_free",
       {wrong("report",
              [LR](O o) {
                accel_load_report_free(LR(o));
                return accel_last_error_status();
              })}},
      {"accel_tokenizer_load",
       {null("path", [](O) { return accel_tokenizer_load(nullptr, nullptr); }),
        null("out", [](O) { return accel_tokenizer_load("/nonexistent", nullptr); })}},
      {"accel_tokenizer_encode",
       {null("tok", [](O) { return accel_tokenizer_encode(nullptr, "hi", 0, idx, 4, &st); }),
        wrong("tok", [TK](O o) { return accel_tokenizer_encode(TK(o), "hi", 0, idx, 4, &st); }),
        null("text",
             [](O o) { return accel_tokenizer_encode(o.tokenizer, nullptr, 0, idx, 4, &st); }),
        null("out_count",
             [](O o) { return accel_tokenizer_encode(o.tokenizer, "hi", 0, idx, 4, nullptr); })}},
      {"accel_tokenizer_encode_batch",
       {null("tok",
             [](O) {
               return accel_tokenizer_encode_batch(nullptr, two_texts, 2, 0, &t_out, &t_out);
             }),
        wrong("tok",
              [TK](O o) {
                return accel_tokenizer_encode_batch(TK(o), two_texts, 2, 0, &t_out, &t_out);
              }),
        null("texts",
             [](O o) {
               return accel_tokenizer_encode_batch(o.tokenizer, nullptr, 2, 0, &t_out, &t_out);
             }),
        null("input_ids",
             [](O o) {
               return accel_tokenizer_encode_batch(o.tokenizer, two_texts, 2, 0, nullptr, &t_out);
             }),
        null("attention_mask",
             [](O o) {
               return accel_tokenizer_encode_batch(o.tokenizer, two_texts, 2, 0, &t_out, nullptr);
             })}},
      {"accel_tokenizer_token_id",
       {null("tok", [](O) { return accel_tokenizer_token_id(nullptr, "[CLS]", &i64); }),
        wrong("tok", [TK](O o) { return accel_tokenizer_token_id(TK(o), "[CLS]", &i64); }),
        null("token", [](O o) { return accel_tokenizer_token_id(o.tokenizer, nullptr, &i64); }),
        null("out", [](O o) { return accel_tokenizer_token_id(o.tokenizer, "[CLS]", nullptr); })}},
      query(
          "accel_tokenizer_vocab_size", "tok", TK, [](O o) { return o.tokenizer; },
          [](const accel_tokenizer* t, bool out) {
            return accel_tokenizer_vocab_size(t, out ? &st : nullptr);
          }),
      {"accel_tokenizer_free",
       {wrong("tok",
              [TK](O o) {
                accel_tokenizer_free(TK(o));
                return accel_last_error_status();
              })}},
      {"accel_profiler_free",
       {wrong("profiler",
              [PR](O o) {
                accel_profiler_free(PR(o));
                return accel_last_error_status();
              })}},
      // The Trainer: every argument is checked before any object is prepared.
      {"accel_trainer_new",
       {null("accelerator",
             [](O o) {
               return accel_trainer_new(nullptr, o.model, o.optimizer, nullptr, o.loader, nullptr,
                                        nullptr, &tr_out);
             }),
        wrong("model",
              [M](O o) {
                return accel_trainer_new(g_acc, M(o), o.optimizer, nullptr, o.loader, nullptr,
                                         nullptr, &tr_out);
              }),
        null("optimizer",
             [](O o) {
               return accel_trainer_new(g_acc, o.model, nullptr, nullptr, o.loader, nullptr,
                                        nullptr, &tr_out);
             }),
        wrong("scheduler",
              [S](O o) {
                return accel_trainer_new(g_acc, o.model, o.optimizer, S(o), o.loader, nullptr,
                                         nullptr, &tr_out);
              }),
        null("train",
             [](O o) {
               return accel_trainer_new(g_acc, o.model, o.optimizer, nullptr, nullptr, nullptr,
                                        nullptr, &tr_out);
             }),
        null("out",
             [](O o) {
               return accel_trainer_new(g_acc, o.model, o.optimizer, nullptr, o.loader, nullptr,
                                        nullptr, nullptr);
             })}},
      {"accel_trainer_set_training_step",
       {null("trainer",
             [](O) { return accel_trainer_set_training_step(nullptr, nullptr, nullptr, nullptr); }),
        wrong("trainer",
              [TR](O o) {
                return accel_trainer_set_training_step(TR(o), nullptr, nullptr, nullptr);
              })}},
      {"accel_trainer_set_eval_step",
       {null("trainer",
             [](O) { return accel_trainer_set_eval_step(nullptr, nullptr, nullptr, nullptr); }),
        wrong(
            "trainer",
            [TR](O o) { return accel_trainer_set_eval_step(TR(o), nullptr, nullptr, nullptr); })}},
      {"accel_trainer_set_compute_metrics",
       {null("trainer",
             [](O) {
               return accel_trainer_set_compute_metrics(nullptr, nullptr, nullptr, nullptr);
             }),
        wrong("trainer",
              [TR](O o) {
                return accel_trainer_set_compute_metrics(TR(o), nullptr, nullptr, nullptr);
              })}},
      {"accel_trainer_add_callback",
       {null("trainer",
             [](O) { return accel_trainer_add_callback(nullptr, on_any, nullptr, nullptr); }),
        wrong("trainer",
              [TR](O o) { return accel_trainer_add_callback(TR(o), on_any, nullptr, nullptr); })}},
      {"accel_trainer_train",
       {null("trainer", [](O) { return accel_trainer_train(nullptr); }),
        wrong("trainer", [TR](O o) { return accel_trainer_train(TR(o)); })}},
      {"accel_trainer_evaluate",
       {null("trainer", [](O) { return accel_trainer_evaluate(nullptr, nullptr); }),
        wrong("trainer", [TR](O o) { return accel_trainer_evaluate(TR(o), nullptr); })}},
      {"accel_trainer_predict",
       {null("trainer",
             [](O o) {
               return accel_trainer_predict(nullptr, o.loader, nullptr, nullptr, nullptr);
             }),
        wrong("trainer",
              [TR](O o) {
                return accel_trainer_predict(TR(o), o.loader, nullptr, nullptr, nullptr);
              })}},
      {"accel_trainer_state_json",
       {null("trainer", [](O) { return accel_trainer_state_json(nullptr, text, 8, &st); }),
        wrong("trainer", [TR](O o) { return accel_trainer_state_json(TR(o), text, 8, &st); })}},
      {"accel_trainer_global_step",
       {null("trainer", [](O) { return accel_trainer_global_step(nullptr, &i64); }),
        wrong("trainer", [TR](O o) { return accel_trainer_global_step(TR(o), &i64); })}},
      {"accel_trainer_epoch",
       {null("trainer", [](O) { return accel_trainer_epoch(nullptr, &dbl); }),
        wrong("trainer", [TR](O o) { return accel_trainer_epoch(TR(o), &dbl); })}},
      {"accel_trainer_control",
       {null("trainer", [](O) { return accel_trainer_control(nullptr, "should_log", &flag); }),
        wrong("trainer", [TR](O o) { return accel_trainer_control(TR(o), "should_log", &flag); })}},
      {"accel_trainer_set_control",
       {null("trainer", [](O) { return accel_trainer_set_control(nullptr, "should_log", true); }),
        wrong("trainer",
              [TR](O o) { return accel_trainer_set_control(TR(o), "should_log", true); })}},
      {"accel_trainer_free",
       {wrong("trainer",
              [TR](O o) {
                accel_trainer_free(TR(o));
                return accel_last_error_status();
              })}},
  };
}

// Functions with nothing to pass NULL to, and the free functions (tested on their own below).
const std::set<std::string> kNoHandleFunctions = {
    "accel_version",           "accel_version_number",  "accel_last_error_message",
    "accel_last_error_status", "accel_status_name",     "accel_dtype_size",
    "accel_config_free",       "accel_tensor_free",     "accel_tensor_list_free",
    "accel_accelerator_free",  "accel_bytes_list_free", "accel_dataset_free",
    "accel_dataloader_free",   "accel_model_free",      "accel_optimizer_free",
    "accel_scheduler_free",    "accel_values_free",     "accel_trainer_event_name"};

}  // namespace

TEST(CApi, EveryFunctionRejectsNullAndWrongHandles) {
  Objects o;
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.symbol);
    for (const auto& p : c.probes) {
      const std::string named =
          std::string(p.arg) +
          (p.want == ACCEL_ERR_INVALID_ARGUMENT ? " is NULL" : " is not an accel_");
      expect_status(p.call(o), p.want, std::string(c.symbol) + " (" + p.arg + ")", named);
    }
  }
  // The objects are intact after all that.
  EXPECT_EQ(values_of<float>(o.tensor), (std::vector<float>{1, 2, 3}));
  size_t n = 0;
  EXPECT_EQ(accel_tensor_list_count(o.tlist, &n), ACCEL_OK);
  EXPECT_EQ(n, 1u);
}

// accel_load_pretrained_mapped's other bad inputs: each named before the map is ever called.
TEST(CApi, LoadPretrainedMappedRejectsBadArguments) {
  accel_model* model = nullptr;
  ASSERT_EQ(accel_model_new(&model), ACCEL_OK);
  int calls = 0;
  const accel_name_map_fn counting = [](const char* name, char* out, size_t capacity, void* n) {
    ++*static_cast<int*>(n);
    return same_name(name, out, capacity, nullptr);
  };
  accel_load_report* report = nullptr;
  EXPECT_EQ(accel_load_pretrained_mapped(model, "/x", "strictness=1", counting, &calls, &report),
            ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(accel_last_error_message()).find("strictness"), std::string::npos);
  EXPECT_EQ(accel_load_pretrained_mapped(model, "/no/such/checkpoint", nullptr, counting, &calls,
                                         &report),
            ACCEL_ERR_IO);
  EXPECT_NE(std::string(accel_last_error_message()).find("/no/such/checkpoint"), std::string::npos)
      << accel_last_error_message();
  // NULL map: the plain load, its errors alike.
  EXPECT_EQ(accel_load_pretrained_mapped(model, "/no/such/checkpoint", nullptr, nullptr, nullptr,
                                         &report),
            ACCEL_ERR_IO);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(report, nullptr);
  accel_model_free(model);
}

TEST(CApi, TableCoversEverySymbol) {
  std::ifstream in(ACCEL_SYMBOLS_FILE);
  ASSERT_TRUE(in) << ACCEL_SYMBOLS_FILE;
  std::set<std::string> covered(kNoHandleFunctions);
  for (const auto& c : cases()) {
    covered.insert(c.symbol);
    EXPECT_FALSE(c.probes.empty()) << c.symbol;
  }
  int count = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("accel_", 0) != 0) continue;
    ++count;
    EXPECT_TRUE(covered.count(line)) << line << " has no NULL/wrong-handle case";
  }
  EXPECT_GT(count, 100);
}

TEST(CApi, FreeAcceptsNullAndIgnoresWrongKinds) {
  accel_config_free(nullptr);
  accel_tensor_free(nullptr);
  accel_accelerator_free(nullptr);
  accel_bytes_list_free(nullptr);
  accel_dataset_free(nullptr);
  accel_dataloader_free(nullptr);
  accel_model_free(nullptr);
  accel_optimizer_free(nullptr);
  accel_scheduler_free(nullptr);
  accel_tensor* t = make_f32({5}, {1});
  accel_config_free(reinterpret_cast<accel_config*>(t));  // refused, recorded, nothing freed
  EXPECT_EQ(accel_last_error_status(), ACCEL_ERR_WRONG_HANDLE);
  accel_accelerator_free(reinterpret_cast<accel_accelerator*>(t));
  EXPECT_EQ(values_of<float>(t), std::vector<float>{5});
  accel_tensor_free(t);
}

TEST(CApi, FreeFromAnotherThread) {
  accel_config* c = nullptr;
  ASSERT_EQ(accel_config_new(&c), ACCEL_OK);
  accel_tensor* t = make_f32({1, 2}, {2});
  accel_bytes_list* l = nullptr;
  ASSERT_EQ(accel_gather_object(g_acc, "xyz", 3, &l), ACCEL_OK);
  accel_dataset* d = nullptr;
  ASSERT_EQ(accel_dataset_from_tensors(&t, 1, &d), ACCEL_OK);
  accel_dataloader* dl = nullptr;
  ASSERT_EQ(accel_dataloader_new(g_acc, d, &dl), ACCEL_OK);
  ASSERT_EQ(accel_dataloader_set(dl, "num_workers", "2"), ACCEL_OK);
  accel_tensor* batch[1];
  size_t fields = 0;
  ASSERT_EQ(accel_dataloader_next(dl, batch, 1, &fields), ACCEL_OK);  // workers are running
  ASSERT_EQ(fields, 1u);
  accel_tensor_free(batch[0]);
  std::thread([&] {
    accel_config_free(c);
    accel_tensor_free(t);
    accel_bytes_list_free(l);
    accel_dataset_free(d);
    accel_dataloader_free(dl);
  }).join();
  // An accelerator, too: create it on a worker thread, free it on this one.
  accel_accelerator_free(g_acc);
  g_acc = nullptr;
  std::thread([] {
    ASSERT_EQ(accel_init(nullptr, &g_acc), ACCEL_OK) << accel_last_error_message();
  }).join();
  ASSERT_NE(g_acc, nullptr);
}

TEST(CApi, ThreadSettingsReachLibTorchAndOpenBlas) {
  using BlasGetter = int (*)();
  auto blas_threads = reinterpret_cast<BlasGetter>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  cpu_set_t set;
  sched_getaffinity(0, sizeof set, &set);
  EXPECT_EQ(at::get_num_threads(), CPU_COUNT(&set)) << "a world of one uses every CPU";
  accel_accelerator_free(g_acc);
  g_acc = nullptr;
  accel_config* c = nullptr;
  ASSERT_EQ(accel_config_new(&c), ACCEL_OK);
  ASSERT_EQ(accel_config_set(c, "num_threads", "1"), ACCEL_OK);
  ASSERT_EQ(accel_init(c, &g_acc), ACCEL_OK) << accel_last_error_message();
  accel_config_free(c);
  EXPECT_EQ(at::get_num_threads(), 1);
  if (ACCEL_TORCH_SYSTEM_BLAS) {
    ASSERT_NE(blas_threads, nullptr) << "libblas.so.3 is not OpenBLAS: run tools/setup.sh";
    EXPECT_EQ(blas_threads(), 1) << "at::set_num_threads alone does not limit OpenBLAS";
  } else {
    // LibTorch's own BLAS (MKL in the wheels) follows at::set_num_threads; no second one loaded.
    EXPECT_EQ(blas_threads, nullptr) << "a LibTorch with its own BLAS loaded OpenBLAS as well";
  }
  accel_accelerator_free(g_acc);
  g_acc = nullptr;
  ASSERT_EQ(accel_init(nullptr, &g_acc), ACCEL_OK);
}

TEST(CApi, ErrorMessageIsPerThread) {
  ASSERT_EQ(accel_config_set(nullptr, "a", "b"), ACCEL_ERR_INVALID_ARGUMENT);
  std::string other;
  std::thread([&] {
    accel_config* c = nullptr;
    accel_config_new(&c);
    EXPECT_EQ(accel_config_set(c, "mixed_precision", "fp32"), ACCEL_ERR_CONFIG);
    other = accel_last_error_message();
    accel_config_free(c);
  }).join();
  EXPECT_NE(other.find("fp32"), std::string::npos);
  EXPECT_NE(std::string(accel_last_error_message()).find("config is NULL"), std::string::npos);
}

TEST(CApi, VersionAndStatusNames) {
  const std::string expected = std::to_string(ACCEL_VERSION_MAJOR) + "." +
                               std::to_string(ACCEL_VERSION_MINOR) + "." +
                               std::to_string(ACCEL_VERSION_PATCH);
  EXPECT_EQ(accel_version(), expected) << "the library loaded is the header's";
  EXPECT_EQ(accel_version_number(), static_cast<uint32_t>(ACCEL_VERSION_NUMBER));
  EXPECT_EQ(ACCEL_VERSION_NUMBER,
            ACCEL_VERSION_MAJOR * 10000 + ACCEL_VERSION_MINOR * 100 + ACCEL_VERSION_PATCH);
  EXPECT_TRUE(ACCEL_VERSION_CHECK(ACCEL_VERSION_MAJOR, ACCEL_VERSION_MINOR, ACCEL_VERSION_PATCH));
  EXPECT_FALSE(ACCEL_VERSION_CHECK(ACCEL_VERSION_MAJOR, ACCEL_VERSION_MINOR + 1, 0));
  EXPECT_FALSE(ACCEL_VERSION_CHECK(ACCEL_VERSION_MAJOR + 1, 0, 0));
  // The ABI's fixed-width types: what a binding declares for them.
  static_assert(sizeof(accel_status) == 4 && sizeof(accel_dtype) == 4 &&
                sizeof(accel_reduction) == 4 && sizeof(accel_distribution) == 4 &&
                sizeof(accel_precision) == 4);
  EXPECT_STREQ(accel_status_name(ACCEL_OK), "ACCEL_OK");
  EXPECT_STREQ(accel_status_name(ACCEL_ERR_RENDEZVOUS), "ACCEL_ERR_RENDEZVOUS");
  EXPECT_STREQ(accel_status_name(static_cast<accel_status>(999)), "ACCEL_ERR_UNKNOWN_STATUS");
}

TEST(CApi, ConfigBufferConvention) {
  accel_config* c = nullptr;
  ASSERT_EQ(accel_config_new(&c), ACCEL_OK);
  ASSERT_EQ(accel_config_set(c, "mixed_precision", "BF16"), ACCEL_OK);
  size_t needed = 0;
  expect_status(accel_config_get(c, "mixed_precision", nullptr, 0, &needed),
                ACCEL_ERR_BUFFER_TOO_SMALL, "query size", "5 are needed");
  EXPECT_EQ(needed, 5u);
  char small[3] = {'x', 'x', 'x'};
  EXPECT_EQ(accel_config_get(c, "mixed_precision", small, sizeof small, &needed),
            ACCEL_ERR_BUFFER_TOO_SMALL);
  EXPECT_EQ(small[0], 'x') << "nothing written on failure";
  char buf[16];
  ASSERT_EQ(accel_config_get(c, "mixed_precision", buf, sizeof buf, &needed), ACCEL_OK);
  EXPECT_STREQ(buf, "bf16");
  expect_status(accel_config_get(c, "no_such_key", buf, sizeof buf, &needed), ACCEL_ERR_CONFIG,
                "unknown key", "no_such_key");
  ASSERT_EQ(accel_config_dump(c, nullptr, 0, &needed), ACCEL_ERR_BUFFER_TOO_SMALL);
  std::string dump(needed, '\0');
  ASSERT_EQ(accel_config_dump(c, dump.data(), dump.size(), &needed), ACCEL_OK);
  EXPECT_NE(dump.find("mixed_precision: bf16"), std::string::npos) << dump;
  EXPECT_NE(dump.find("# setter"), std::string::npos);
  accel_config_free(c);
}

TEST(CApi, ConfigFileErrors) {
  accel_config* c = nullptr;
  ASSERT_EQ(accel_config_new(&c), ACCEL_OK);
  expect_status(accel_config_load_file(c, "/nonexistent/accel.yaml"), ACCEL_ERR_IO, "missing",
                "/nonexistent/accel.yaml");
  const std::string path = ::testing::TempDir() + "capi_bad.yaml";
  std::ofstream(path) << "use_cpu: true\nnum_procesess: 2\n";
  expect_status(accel_config_load_file(c, path.c_str()), ACCEL_ERR_CONFIG, "typo", path + ":2");
  accel_config_free(c);
}

TEST(CApi, InitRejectsBadSettingsWithTheirSource) {
  accel_config* c = nullptr;
  ASSERT_EQ(accel_config_new(&c), ACCEL_OK);
  ASSERT_EQ(accel_config_set(c, "mixed_precision", "fp16"), ACCEL_OK);
  accel_accelerator* a = nullptr;
  expect_status(accel_init(c, &a), ACCEL_ERR_UNSUPPORTED, "fp16 on cpu", "bf16");
  EXPECT_EQ(a, nullptr) << "out untouched on failure";
  accel_config_free(c);
  setenv("ACCEL_NUM_THREADS", "lots", 1);
  expect_status(accel_init(nullptr, &a), ACCEL_ERR_CONFIG, "bad env", "ACCEL_NUM_THREADS");
  unsetenv("ACCEL_NUM_THREADS");
  setenv("WORLD_SIZE", "2", 1);
  expect_status(accel_init(nullptr, &a), ACCEL_ERR_CONFIG, "no RANK", "RANK");
  unsetenv("WORLD_SIZE");
  expect_status(accel_init(nullptr, &a), ACCEL_ERR_STATE, "second accelerator", "already exists");
}

TEST(CApi, AcceleratorQueriesAlone) {
  int32_t v = -1;
  bool b = false;
  ASSERT_EQ(accel_process_index(g_acc, &v), ACCEL_OK);
  EXPECT_EQ(v, 0);
  ASSERT_EQ(accel_num_processes(g_acc, &v), ACCEL_OK);
  EXPECT_EQ(v, 1);
  ASSERT_EQ(accel_is_main_process(g_acc, &b), ACCEL_OK);
  EXPECT_TRUE(b);
  char dev[16];
  size_t n = 0;
  ASSERT_EQ(accel_device(g_acc, dev, sizeof dev, &n), ACCEL_OK);
  EXPECT_STREQ(dev, "cpu");
  accel_distribution dist;
  ASSERT_EQ(accel_distributed_type(g_acc, &dist), ACCEL_OK);
  EXPECT_EQ(dist, ACCEL_DISTRIBUTED_NO);
  EXPECT_EQ(accel_wait_for_everyone(g_acc), ACCEL_OK);
  EXPECT_EQ(accel_main_process_first_begin(g_acc), ACCEL_OK);
  EXPECT_EQ(accel_main_process_first_end(g_acc), ACCEL_OK);
}

TEST(CApi, DistributedTypeIsDeepSpeedOrFsdpWhenTheirConfigurationChoseTheStage) {
  // As Accelerate's distributed_type, also on one process.
  const std::pair<std::vector<std::pair<const char*, const char*>>, accel_distribution> cases[] = {
      {{{"distributed_type", "DEEPSPEED"}, {"deepspeed_config", "{zero_stage: 1}"}},
       ACCEL_DISTRIBUTED_DEEPSPEED},
      {{{"distributed_type", "FSDP"}, {"fsdp_config", "{fsdp_sharding_strategy: SHARD_GRAD_OP}"}},
       ACCEL_DISTRIBUTED_FSDP},
      {{{"use_cpu", "true"}}, ACCEL_DISTRIBUTED_NO}};
  for (const auto& [settings, expected] : cases) {
    accel_accelerator_free(g_acc);
    g_acc = nullptr;
    accel_config* c = nullptr;
    ASSERT_EQ(accel_config_new(&c), ACCEL_OK);
    for (const auto& [key, value] : settings) ASSERT_EQ(accel_config_set(c, key, value), ACCEL_OK);
    ASSERT_EQ(accel_init(c, &g_acc), ACCEL_OK) << accel_last_error_message();
    accel_config_free(c);
    accel_distribution dist = -1;
    ASSERT_EQ(accel_distributed_type(g_acc, &dist), ACCEL_OK);
    EXPECT_EQ(dist, expected) << settings.front().second;
  }
}

TEST(CApi, SetSeedMakesLibTorchRepeatable) {
  ASSERT_EQ(accel_set_seed(g_acc, 1234, false), ACCEL_OK);
  const at::Tensor a = at::randn({4});
  ASSERT_EQ(accel_set_seed(g_acc, 1234, true), ACCEL_OK);  // rank 0 adds 0
  EXPECT_TRUE(at::equal(a, at::randn({4})));
  ASSERT_EQ(accel_set_seed(g_acc, 1235, false), ACCEL_OK);
  EXPECT_FALSE(at::equal(a, at::randn({4})));
}

TEST(CApi, TensorRoundTripEveryDtype) {
  const accel_dtype all[] = {ACCEL_DTYPE_F32, ACCEL_DTYPE_F64, ACCEL_DTYPE_F16, ACCEL_DTYPE_BF16,
                             ACCEL_DTYPE_I64, ACCEL_DTYPE_I32, ACCEL_DTYPE_I16, ACCEL_DTYPE_I8,
                             ACCEL_DTYPE_U8,  ACCEL_DTYPE_BOOL};
  for (accel_dtype d : all) {
    const size_t es = accel_dtype_size(d);
    ASSERT_GT(es, 0u);
    std::vector<uint8_t> bytes(6 * es);
    for (size_t i = 0; i < bytes.size(); ++i)
      bytes[i] = static_cast<uint8_t>(i % 2);  // valid bools
    const int64_t shape[] = {2, 3};
    accel_tensor* t = nullptr;
    ASSERT_EQ(accel_tensor_from_data(bytes.data(), bytes.size(), d, shape, 2, &t), ACCEL_OK);
    accel_dtype got;
    ASSERT_EQ(accel_tensor_dtype(t, &got), ACCEL_OK);
    EXPECT_EQ(got, d);
    size_t nb = 0;
    ASSERT_EQ(accel_tensor_data_size(t, &nb), ACCEL_OK);
    EXPECT_EQ(nb, bytes.size());
    std::vector<uint8_t> back(bytes.size());
    size_t size = 0;
    ASSERT_EQ(accel_tensor_to_data(t, back.data(), back.size(), &size), ACCEL_OK);
    EXPECT_EQ(size, bytes.size());
    EXPECT_EQ(back, bytes);
    accel_tensor_free(t);
  }
  EXPECT_EQ(accel_dtype_size(static_cast<accel_dtype>(0)), 0u);
}

TEST(CApi, TensorBadInputs) {
  float f[4] = {1, 2, 3, 4};
  const int64_t shape[] = {2, 2};
  const int64_t negative[] = {-2, 2};
  accel_tensor* t = nullptr;
  expect_status(accel_tensor_from_data(f, 12, ACCEL_DTYPE_F32, shape, 2, &t),
                ACCEL_ERR_INVALID_ARGUMENT, "short data", "16 bytes");
  expect_status(accel_tensor_from_data(f, 16, static_cast<accel_dtype>(77), shape, 2, &t),
                ACCEL_ERR_DTYPE, "bad dtype", "77");
  expect_status(accel_tensor_from_data(f, 16, ACCEL_DTYPE_F32, negative, 2, &t), ACCEL_ERR_SHAPE,
                "negative", "negative");
  expect_status(accel_tensor_from_data(f, 16, ACCEL_DTYPE_F32, nullptr, 2, &t),
                ACCEL_ERR_INVALID_ARGUMENT, "no shape", "shape");
  expect_status(accel_tensor_from_data(nullptr, 16, ACCEL_DTYPE_F32, shape, 2, &t),
                ACCEL_ERR_INVALID_ARGUMENT, "no data", "data");
  expect_status(accel_tensor_from_data(f, 16, ACCEL_DTYPE_F32, shape, 17, &t), ACCEL_ERR_SHAPE,
                "too many dims", "ACCEL_MAX_DIMS");
  EXPECT_EQ(t, nullptr);
  ASSERT_EQ(accel_tensor_from_data(f, 16, ACCEL_DTYPE_F32, shape, 2, &t), ACCEL_OK);
  float small[2];
  size_t needed = 0;
  small[0] = -1;
  expect_status(accel_tensor_to_data(t, small, sizeof small, &needed), ACCEL_ERR_BUFFER_TOO_SMALL,
                "small buffer", "16 are needed");
  EXPECT_EQ(needed, 16u) << "the size needed, as for text";
  EXPECT_EQ(small[0], -1) << "nothing written on failure";
  expect_status(accel_tensor_to_data(t, nullptr, 0, &needed), ACCEL_ERR_BUFFER_TOO_SMALL,
                "size query", "16 are needed");
  int64_t s1[1];
  size_t dims = 0;
  expect_status(accel_tensor_shape(t, s1, 1, &dims), ACCEL_ERR_BUFFER_TOO_SMALL, "shape capacity",
                "2 are needed");
  EXPECT_EQ(dims, 2u);
  int64_t s4[4];
  ASSERT_EQ(accel_tensor_shape(t, s4, 4, &dims), ACCEL_OK);
  EXPECT_EQ(dims, 2u);
  EXPECT_EQ(s4[0], 2);
  double d;
  expect_status(accel_tensor_item_f64(t, &d), ACCEL_ERR_SHAPE, "item of 4", "4 elements");
  accel_tensor_free(t);
  accel_tensor* empty = nullptr;
  const int64_t zero[] = {0, 3};
  ASSERT_EQ(accel_tensor_from_data(nullptr, 0, ACCEL_DTYPE_F32, zero, 2, &empty), ACCEL_OK);
  size_t nd = 0;
  ASSERT_EQ(accel_tensor_dim_count(empty, &nd), ACCEL_OK);
  EXPECT_EQ(nd, 2u);
  size_t none = 9;
  EXPECT_EQ(accel_tensor_to_data(empty, nullptr, 0, &none), ACCEL_OK);
  EXPECT_EQ(none, 0u);
  accel_tensor_free(empty);
}

TEST(CApi, ScalarItems) {
  int64_t v = 42, got = 0;
  accel_tensor* t = nullptr;
  ASSERT_EQ(accel_tensor_from_data(&v, sizeof v, ACCEL_DTYPE_I64, nullptr, 0, &t), ACCEL_OK);
  ASSERT_EQ(accel_tensor_item_i64(t, &got), ACCEL_OK);
  EXPECT_EQ(got, 42);
  double d = 0;
  ASSERT_EQ(accel_tensor_item_f64(t, &d), ACCEL_OK);
  EXPECT_EQ(d, 42.0);
  accel_tensor_free(t);
  accel_tensor* f = make_f32({2.5f}, {});
  expect_status(accel_tensor_item_i64(f, &got), ACCEL_ERR_DTYPE, "float item_i64", "item_f64");
  accel_tensor_free(f);
}

TEST(CApi, TorchInteropSharesStorage) {
  at::Tensor original = at::arange(6, at::kFloat).reshape({2, 3});
  accel_tensor* t = nullptr;
  ASSERT_EQ(accel_tensor_wrap_torch(&original, &t), ACCEL_OK);
  original.mul_(2);  // visible through the handle: no copy was made
  EXPECT_EQ(values_of<float>(t), (std::vector<float>{0, 2, 4, 6, 8, 10}));
  void* borrowed = nullptr;
  ASSERT_EQ(accel_tensor_borrow_torch(t, &borrowed), ACCEL_OK);
  EXPECT_TRUE(static_cast<at::Tensor*>(borrowed)->is_same(original));
  original = at::Tensor();  // the handle keeps its own reference
  EXPECT_EQ(values_of<float>(t).size(), 6u);
  accel_tensor_free(t);
  at::Tensor undefined;
  expect_status(accel_tensor_wrap_torch(&undefined, &t), ACCEL_ERR_INVALID_ARGUMENT, "undefined",
                "undefined");
}

TEST(CApi, CollectivesInAWorldOfOne) {
  accel_tensor* t = make_f32({1, 2, 3, 4}, {2, 2});
  accel_tensor* out = nullptr;
  ASSERT_EQ(accel_gather(g_acc, t, &out), ACCEL_OK);
  EXPECT_EQ(values_of<float>(out), (std::vector<float>{1, 2, 3, 4}));
  accel_tensor_free(out);
  ASSERT_EQ(accel_reduce(g_acc, t, ACCEL_REDUCE_MEAN, &out), ACCEL_OK);
  EXPECT_EQ(values_of<float>(out), (std::vector<float>{1, 2, 3, 4}));
  accel_tensor_free(out);
  ASSERT_EQ(accel_pad_across_processes(g_acc, t, -1, 0, true, &out), ACCEL_OK);
  accel_tensor_free(out);
  expect_status(accel_pad_across_processes(g_acc, t, 2, 0, false, &out), ACCEL_ERR_INVALID_ARGUMENT,
                "dim out of range", "dim 2");
  ASSERT_EQ(accel_broadcast(g_acc, t, 0, &out), ACCEL_OK);
  EXPECT_EQ(values_of<float>(out), (std::vector<float>{1, 2, 3, 4}));
  accel_tensor_free(out);
  expect_status(accel_broadcast(g_acc, t, 1, &out), ACCEL_ERR_INVALID_ARGUMENT, "bad root",
                "from_process 1");
  expect_status(accel_broadcast(g_acc, nullptr, 0, &out), ACCEL_ERR_INVALID_ARGUMENT,
                "root without tensor", "source");
  expect_status(accel_reduce(g_acc, t, static_cast<accel_reduction>(9), &out),
                ACCEL_ERR_INVALID_ARGUMENT, "bad reduction", "9");
  accel_tensor_free(t);
  int64_t ints[2] = {3, 4};
  const int64_t s[] = {2};
  accel_tensor* it = nullptr;
  ASSERT_EQ(accel_tensor_from_data(ints, sizeof ints, ACCEL_DTYPE_I64, s, 1, &it), ACCEL_OK);
  expect_status(accel_reduce(g_acc, it, ACCEL_REDUCE_MEAN, &out), ACCEL_ERR_DTYPE, "int mean",
                "floating point");
  accel_tensor_free(it);
  accel_tensor* scalar = make_f32({7}, {});
  ASSERT_EQ(accel_gather(g_acc, scalar, &out), ACCEL_OK);
  size_t nd = 0;
  accel_tensor_dim_count(out, &nd);
  EXPECT_EQ(nd, 1u) << "a scalar gathers as a one-element vector";
  accel_tensor_free(out);
  accel_tensor_free(scalar);
  accel_bytes_list* l = nullptr;
  ASSERT_EQ(accel_gather_object(g_acc, nullptr, 0, &l), ACCEL_OK);
  size_t count = 0;
  ASSERT_EQ(accel_bytes_list_count(l, &count), ACCEL_OK);
  EXPECT_EQ(count, 1u);
  const void* data = nullptr;
  size_t size = 9;
  ASSERT_EQ(accel_bytes_list_get(l, 0, &data, &size), ACCEL_OK);
  EXPECT_EQ(size, 0u);
  expect_status(accel_bytes_list_get(l, 1, &data, &size), ACCEL_ERR_INVALID_ARGUMENT, "index",
                "out of range");
  accel_bytes_list_free(l);
}

// The tokenizer's calls as a binding sees them: the buffer convention, the batch tensors, errors.
TEST(CApi, TokenizerEncodeAndBatch) {
  accel_tokenizer* tok = tiny_tokenizer();
  ASSERT_NE(tok, nullptr);
  int64_t ids[8] = {0};
  size_t n = 0;
  // Too small: the needed count, nothing written; then the ids.
  expect_status(accel_tokenizer_encode(tok, "Hello, worlds", 0, ids, 2, &n),
                ACCEL_ERR_BUFFER_TOO_SMALL, "small buffer", "6 are needed");
  EXPECT_EQ(n, 6u);
  EXPECT_EQ(ids[0], 0);
  ASSERT_EQ(accel_tokenizer_encode(tok, "Hello, worlds", 0, ids, 8, &n), ACCEL_OK);
  EXPECT_EQ(std::vector<int64_t>(ids, ids + n), (std::vector<int64_t>{2, 5, 8, 6, 7, 3}));
  ASSERT_EQ(accel_tokenizer_encode(tok, "Hello, worlds", 4, ids, 8, &n), ACCEL_OK);
  EXPECT_EQ(std::vector<int64_t>(ids, ids + n), (std::vector<int64_t>{2, 5, 8, 3}));
  expect_status(accel_tokenizer_encode(tok, "hello", 1, ids, 8, &n), ACCEL_ERR_INVALID_ARGUMENT,
                "max_length 1", "max_length 1");
  expect_status(accel_tokenizer_encode(tok, "he\xC3llo", 0, ids, 8, &n), ACCEL_ERR_INVALID_ARGUMENT,
                "bad UTF-8", "not valid UTF-8");
  // A batch: padded on the right to the longest row, with its mask.
  const char* texts[] = {"hello", "Hello, worlds"};
  accel_tensor *input_ids = nullptr, *mask = nullptr;
  ASSERT_EQ(accel_tokenizer_encode_batch(tok, texts, 2, 0, &input_ids, &mask), ACCEL_OK);
  std::vector<int64_t> got(12), got_mask(12);
  size_t size = 0;
  ASSERT_EQ(accel_tensor_to_data(input_ids, got.data(), 12 * sizeof(int64_t), &size), ACCEL_OK);
  ASSERT_EQ(accel_tensor_to_data(mask, got_mask.data(), 12 * sizeof(int64_t), &size), ACCEL_OK);
  EXPECT_EQ(got, (std::vector<int64_t>{2, 5, 3, 0, 0, 0, 2, 5, 8, 6, 7, 3}));
  EXPECT_EQ(got_mask, (std::vector<int64_t>{1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1}));
  int64_t shape[2];
  ASSERT_EQ(accel_tensor_shape(input_ids, shape, 2, &n), ACCEL_OK);
  EXPECT_EQ(std::vector<int64_t>(shape, shape + 2), (std::vector<int64_t>{2, 6}));
  accel_tensor_free(input_ids);
  accel_tensor_free(mask);
  const char* bad[] = {"fine", "not \xFF fine"};
  input_ids = mask = nullptr;
  expect_status(accel_tokenizer_encode_batch(tok, bad, 2, 0, &input_ids, &mask),
                ACCEL_ERR_INVALID_ARGUMENT, "bad text", "texts[1]");
  EXPECT_EQ(input_ids, nullptr);
  expect_status(accel_tokenizer_encode_batch(tok, texts, 0, 0, &input_ids, &mask),
                ACCEL_ERR_INVALID_ARGUMENT, "count 0", "count is 0");
  int64_t id = -1;
  ASSERT_EQ(accel_tokenizer_token_id(tok, "[SEP]", &id), ACCEL_OK);
  EXPECT_EQ(id, 3);
  expect_status(accel_tokenizer_token_id(tok, "nope", &id), ACCEL_ERR_INVALID_ARGUMENT,
                "unknown token", "nope");
  size_t vocab = 0;
  ASSERT_EQ(accel_tokenizer_vocab_size(tok, &vocab), ACCEL_OK);
  EXPECT_EQ(vocab, 9u);
  accel_tokenizer* none = nullptr;
  expect_status(accel_tokenizer_load("/nonexistent/tokenizer.json", &none), ACCEL_ERR_IO,
                "missing file", "/nonexistent");
  EXPECT_EQ(none, nullptr);
  // One tokenizer, several threads at once; freed on another thread than it was made on.
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&] {
      for (int k = 0; k < 200; ++k) {
        int64_t mine[8];
        size_t count = 0;
        if (accel_tokenizer_encode(tok, "Hello, worlds", 0, mine, 8, &count) != ACCEL_OK ||
            count != 6 || mine[3] != 6)
          ++wrong;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  accel_tokenizer_free(nullptr);
  std::thread([tok] { accel_tokenizer_free(tok); }).join();
}
