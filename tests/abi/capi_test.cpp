// The C ABI as a binding sees it: every function against NULL and wrong-kind handles, the free
// functions from any thread, the buffer convention, tensors by copy, and a world of one.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <sched.h>

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

std::vector<float> values_of(const accel_tensor* t) {
  int64_t n = 0;
  EXPECT_EQ(accel_tensor_numel(t, &n), ACCEL_OK);
  std::vector<float> v(static_cast<size_t>(n));
  EXPECT_EQ(accel_tensor_to_data(t, v.data(), v.size() * sizeof(float)), ACCEL_OK)
      << accel_last_error_message();
  return v;
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

// The objects the table below calls functions on.
struct Objects {
  accel_config* config = nullptr;
  accel_tensor* tensor = nullptr;
  accel_bytes_list* list = nullptr;
  accel_dataset* dataset = nullptr;
  accel_dataloader* loader = nullptr;
  accel_model* model = nullptr;
  accel_optimizer* optimizer = nullptr;
  accel_scheduler* scheduler = nullptr;
  Objects() {
    EXPECT_EQ(accel_model_new(&model), ACCEL_OK);
    EXPECT_EQ(accel_model_add_layer(model, "fc", "linear", "in_features=3 out_features=1"),
              ACCEL_OK);
    EXPECT_EQ(accel_optimizer_new(model, "sgd", &optimizer), ACCEL_OK);
    EXPECT_EQ(accel_scheduler_new(optimizer, "constant", &scheduler), ACCEL_OK);
    EXPECT_EQ(accel_config_new(&config), ACCEL_OK);
    tensor = make_f32({1, 2, 3}, {3});
    EXPECT_EQ(accel_gather_object(g_acc, "ab", 2, &list), ACCEL_OK);
    EXPECT_EQ(accel_dataset_from_tensors(&tensor, 1, &dataset), ACCEL_OK);
    EXPECT_EQ(accel_dataloader_new(g_acc, dataset, &loader), ACCEL_OK);
  }
  ~Objects() {
    accel_config_free(config);
    accel_tensor_free(tensor);
    accel_bytes_list_free(list);
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

// For each function that takes handles or pointers: a call with the handle NULL, with a handle of
// the wrong kind, and with a required output pointer NULL. Each must fail with the right status.
struct Case {
  const char* symbol;
  std::function<accel_status(const Objects&)> null_handle;
  std::function<accel_status(const Objects&)> wrong_handle;
  std::function<accel_status(const Objects&)> null_out;
};

std::vector<Case> cases() {
  using O = const Objects&;
  size_t sz;
  char buf[8];
  static int i_out;
  static bool b_out;
  static int64_t i64;
  static size_t st;
  static double d;
  static accel_dtype dt;
  static void* vp;
  static const void* cvp;
  static accel_distributed_type dist;
  static accel_mixed_precision mp;
  static accel_tensor* t_out;
  static accel_bytes_list* l_out;
  static accel_accelerator* a_out;
  (void)sz;
  (void)buf;
  auto A = [](O o) { return o.wrong<accel_accelerator>(); };
  auto T = [](O o) { return o.wrong<accel_tensor>(); };
  auto C = [](O o) { return o.wrong<accel_config>(); };
  auto L = [](O o) { return o.wrong<accel_bytes_list>(); };
  auto D = [](O o) { return o.wrong<accel_dataset>(); };
  auto DL = [](O o) { return o.wrong<accel_dataloader>(); };
  static accel_dataset* d_out;
  static accel_dataloader* dl_out;
  static const char* idx_path = "/nonexistent.idx";
  static accel_sample_fn noop = [](int64_t, void* const*, const size_t*, size_t, void*) {
    return 0;
  };
  static const accel_dtype f32 = ACCEL_DTYPE_F32;
  static const size_t zero_dims = 0;
  auto M = [](O o) { return o.wrong<accel_model>(); };
  auto OP = [](O o) { return o.wrong<accel_optimizer>(); };
  auto S = [](O o) { return o.wrong<accel_scheduler>(); };
  static accel_model* m_out;
  static accel_optimizer* op_out;
  static accel_scheduler* s_out;
  return {
      {"accel_config_new", nullptr, nullptr, [](O) { return accel_config_new(nullptr); }},
      {"accel_config_set", [](O) { return accel_config_set(nullptr, "use_cpu", "1"); },
       [C](O o) { return accel_config_set(C(o), "use_cpu", "1"); },
       [](O o) { return accel_config_set(o.config, nullptr, "1"); }},
      {"accel_config_load_file", [](O) { return accel_config_load_file(nullptr, nullptr); },
       [C](O o) { return accel_config_load_file(C(o), nullptr); }, nullptr},
      {"accel_config_get",
       [](O) {
         size_t n;
         char b[8];
         return accel_config_get(nullptr, "use_cpu", b, 8, &n);
       },
       [C](O o) {
         size_t n;
         char b[8];
         return accel_config_get(C(o), "use_cpu", b, 8, &n);
       },
       [](O o) {
         char b[8];
         return accel_config_get(o.config, "use_cpu", b, 8, nullptr);
       }},
      {"accel_config_dump",
       [](O) {
         size_t n;
         return accel_config_dump(nullptr, nullptr, 0, &n);
       },
       [C](O o) {
         size_t n;
         return accel_config_dump(C(o), nullptr, 0, &n);
       },
       [](O o) { return accel_config_dump(o.config, nullptr, 0, nullptr); }},
      {"accel_tensor_from_data", nullptr, nullptr,
       [](O) {
         float f = 1;
         return accel_tensor_from_data(&f, 4, ACCEL_DTYPE_F32, nullptr, 0, nullptr);
       }},
      {"accel_tensor_to_data",
       [](O) {
         float f[3];
         return accel_tensor_to_data(nullptr, f, 12);
       },
       [T](O o) {
         float f[3];
         return accel_tensor_to_data(T(o), f, 12);
       },
       [](O o) { return accel_tensor_to_data(o.tensor, nullptr, 12); }},
      {"accel_tensor_ndim", [](O) { return accel_tensor_ndim(nullptr, &st); },
       [T](O o) { return accel_tensor_ndim(T(o), &st); },
       [](O o) { return accel_tensor_ndim(o.tensor, nullptr); }},
      {"accel_tensor_shape", [](O) { return accel_tensor_shape(nullptr, &i64, 1); },
       [T](O o) { return accel_tensor_shape(T(o), &i64, 1); },
       [](O o) { return accel_tensor_shape(o.tensor, nullptr, 4); }},
      {"accel_tensor_dtype", [](O) { return accel_tensor_dtype(nullptr, &dt); },
       [T](O o) { return accel_tensor_dtype(T(o), &dt); },
       [](O o) { return accel_tensor_dtype(o.tensor, nullptr); }},
      {"accel_tensor_numel", [](O) { return accel_tensor_numel(nullptr, &i64); },
       [T](O o) { return accel_tensor_numel(T(o), &i64); },
       [](O o) { return accel_tensor_numel(o.tensor, nullptr); }},
      {"accel_tensor_nbytes", [](O) { return accel_tensor_nbytes(nullptr, &st); },
       [T](O o) { return accel_tensor_nbytes(T(o), &st); },
       [](O o) { return accel_tensor_nbytes(o.tensor, nullptr); }},
      {"accel_tensor_item_f64", [](O) { return accel_tensor_item_f64(nullptr, &d); },
       [T](O o) { return accel_tensor_item_f64(T(o), &d); },
       [](O o) { return accel_tensor_item_f64(o.tensor, nullptr); }},
      {"accel_tensor_item_i64", [](O) { return accel_tensor_item_i64(nullptr, &i64); },
       [T](O o) { return accel_tensor_item_i64(T(o), &i64); },
       [](O o) { return accel_tensor_item_i64(o.tensor, nullptr); }},
      {"accel_tensor_wrap_torch", [](O) { return accel_tensor_wrap_torch(nullptr, &t_out); },
       nullptr, [](O o) { return accel_tensor_wrap_torch(&vp, nullptr); }},
      {"accel_tensor_borrow_torch", [](O) { return accel_tensor_borrow_torch(nullptr, &vp); },
       [T](O o) { return accel_tensor_borrow_torch(T(o), &vp); },
       [](O o) { return accel_tensor_borrow_torch(o.tensor, nullptr); }},
      {"accel_init", nullptr, [C](O o) { return accel_init(C(o), &a_out); },
       [](O) { return accel_init(nullptr, nullptr); }},
      {"accel_process_index", [](O) { return accel_process_index(nullptr, &i_out); },
       [A](O o) { return accel_process_index(A(o), &i_out); },
       [](O) { return accel_process_index(g_acc, nullptr); }},
      {"accel_local_process_index", [](O) { return accel_local_process_index(nullptr, &i_out); },
       [A](O o) { return accel_local_process_index(A(o), &i_out); },
       [](O) { return accel_local_process_index(g_acc, nullptr); }},
      {"accel_num_processes", [](O) { return accel_num_processes(nullptr, &i_out); },
       [A](O o) { return accel_num_processes(A(o), &i_out); },
       [](O) { return accel_num_processes(g_acc, nullptr); }},
      {"accel_is_main_process", [](O) { return accel_is_main_process(nullptr, &b_out); },
       [A](O o) { return accel_is_main_process(A(o), &b_out); },
       [](O) { return accel_is_main_process(g_acc, nullptr); }},
      {"accel_is_local_main_process",
       [](O) { return accel_is_local_main_process(nullptr, &b_out); },
       [A](O o) { return accel_is_local_main_process(A(o), &b_out); },
       [](O) { return accel_is_local_main_process(g_acc, nullptr); }},
      {"accel_device",
       [](O) {
         size_t n;
         return accel_device(nullptr, nullptr, 0, &n);
       },
       [A](O o) {
         size_t n;
         return accel_device(A(o), nullptr, 0, &n);
       },
       [](O) { return accel_device(g_acc, nullptr, 0, nullptr); }},
      {"accel_distributed_type_get", [](O) { return accel_distributed_type_get(nullptr, &dist); },
       [A](O o) { return accel_distributed_type_get(A(o), &dist); },
       [](O) { return accel_distributed_type_get(g_acc, nullptr); }},
      {"accel_mixed_precision_get", [](O) { return accel_mixed_precision_get(nullptr, &mp); },
       [A](O o) { return accel_mixed_precision_get(A(o), &mp); },
       [](O) { return accel_mixed_precision_get(g_acc, nullptr); }},
      {"accel_config_dump_effective",
       [](O) {
         size_t n;
         return accel_config_dump_effective(nullptr, nullptr, 0, &n);
       },
       [A](O o) {
         size_t n;
         return accel_config_dump_effective(A(o), nullptr, 0, &n);
       },
       [](O) { return accel_config_dump_effective(g_acc, nullptr, 0, nullptr); }},
      {"accel_wait_for_everyone", [](O) { return accel_wait_for_everyone(nullptr); },
       [A](O o) { return accel_wait_for_everyone(A(o)); }, nullptr},
      {"accel_print", [](O) { return accel_print(nullptr, "x"); },
       [A](O o) { return accel_print(A(o), "x"); }, [](O) { return accel_print(g_acc, nullptr); }},
      {"accel_main_process_first_begin", [](O) { return accel_main_process_first_begin(nullptr); },
       [A](O o) { return accel_main_process_first_begin(A(o)); }, nullptr},
      {"accel_main_process_first_end", [](O) { return accel_main_process_first_end(nullptr); },
       [A](O o) { return accel_main_process_first_end(A(o)); }, nullptr},
      {"accel_set_seed", [](O) { return accel_set_seed(nullptr, 1, false); },
       [A](O o) { return accel_set_seed(A(o), 1, false); }, nullptr},
      {"accel_gather", [](O o) { return accel_gather(nullptr, o.tensor, &t_out); },
       [A](O o) { return accel_gather(A(o), o.tensor, &t_out); },
       [](O o) { return accel_gather(g_acc, o.tensor, nullptr); }},
      {"accel_pad_across_processes",
       [](O o) { return accel_pad_across_processes(nullptr, o.tensor, 0, 0, false, &t_out); },
       [T](O o) { return accel_pad_across_processes(g_acc, T(o), 0, 0, false, &t_out); },
       [](O o) { return accel_pad_across_processes(g_acc, o.tensor, 0, 0, false, nullptr); }},
      {"accel_reduce", [](O o) { return accel_reduce(g_acc, nullptr, ACCEL_REDUCE_SUM, &t_out); },
       [A](O o) { return accel_reduce(A(o), o.tensor, ACCEL_REDUCE_SUM, &t_out); },
       [](O o) { return accel_reduce(g_acc, o.tensor, ACCEL_REDUCE_SUM, nullptr); }},
      {"accel_broadcast", [](O o) { return accel_broadcast(nullptr, o.tensor, 0, &t_out); },
       [T](O o) { return accel_broadcast(g_acc, T(o), 0, &t_out); },
       [](O o) { return accel_broadcast(g_acc, o.tensor, 0, nullptr); }},
      {"accel_gather_object", [](O) { return accel_gather_object(nullptr, "a", 1, &l_out); },
       [A](O o) { return accel_gather_object(A(o), "a", 1, &l_out); },
       [](O) { return accel_gather_object(g_acc, "a", 1, nullptr); }},
      {"accel_bytes_list_count", [](O) { return accel_bytes_list_count(nullptr, &st); },
       [L](O o) { return accel_bytes_list_count(L(o), &st); },
       [](O o) { return accel_bytes_list_count(o.list, nullptr); }},
      {"accel_dataset_from_tensors",
       [](O) { return accel_dataset_from_tensors(nullptr, 1, &d_out); },
       [T](O o) {
         const accel_tensor* wrong = T(o);
         return accel_dataset_from_tensors(&wrong, 1, &d_out);
       },
       [](O o) { return accel_dataset_from_tensors(&o.tensor, 1, nullptr); }},
      {"accel_dataset_from_callback", nullptr, nullptr,
       [](O) {
         return accel_dataset_from_callback(4, 1, &f32, nullptr, &zero_dims, noop, nullptr,
                                            nullptr);
       }},
      {"accel_dataset_from_idx", [](O) { return accel_dataset_from_idx(nullptr, 1, &d_out); },
       nullptr, [](O) { return accel_dataset_from_idx(&idx_path, 1, nullptr); }},
      {"accel_dataset_length", [](O) { return accel_dataset_length(nullptr, &i64); },
       [D](O o) { return accel_dataset_length(D(o), &i64); },
       [](O o) { return accel_dataset_length(o.dataset, nullptr); }},
      {"accel_dataloader_new", [](O o) { return accel_dataloader_new(g_acc, nullptr, &dl_out); },
       [D](O o) { return accel_dataloader_new(g_acc, D(o), &dl_out); },
       [](O o) { return accel_dataloader_new(g_acc, o.dataset, nullptr); }},
      {"accel_dataloader_set", [](O) { return accel_dataloader_set(nullptr, "shuffle", "1"); },
       [DL](O o) { return accel_dataloader_set(DL(o), "shuffle", "1"); },
       [](O o) { return accel_dataloader_set(o.loader, nullptr, "1"); }},
      {"accel_dataloader_next",
       [](O) {
         accel_tensor* f[1];
         return accel_dataloader_next(nullptr, f, 1, &b_out);
       },
       [DL](O o) {
         accel_tensor* f[1];
         return accel_dataloader_next(DL(o), f, 1, &b_out);
       },
       [](O o) {
         accel_tensor* f[1];
         return accel_dataloader_next(o.loader, f, 1, nullptr);
       }},
      {"accel_dataloader_num_fields", [](O) { return accel_dataloader_num_fields(nullptr, &st); },
       [DL](O o) { return accel_dataloader_num_fields(DL(o), &st); },
       [](O o) { return accel_dataloader_num_fields(o.loader, nullptr); }},
      {"accel_dataloader_length", [](O) { return accel_dataloader_length(nullptr, &i64); },
       [DL](O o) { return accel_dataloader_length(DL(o), &i64); },
       [](O o) { return accel_dataloader_length(o.loader, nullptr); }},
      {"accel_dataloader_set_epoch", [](O) { return accel_dataloader_set_epoch(nullptr, 1); },
       [DL](O o) { return accel_dataloader_set_epoch(DL(o), 1); }, nullptr},
      {"accel_dataloader_epoch", [](O) { return accel_dataloader_epoch(nullptr, &i64); },
       [DL](O o) { return accel_dataloader_epoch(DL(o), &i64); },
       [](O o) { return accel_dataloader_epoch(o.loader, nullptr); }},
      {"accel_dataloader_end_of_epoch",
       [](O) { return accel_dataloader_end_of_epoch(nullptr, &b_out); },
       [DL](O o) { return accel_dataloader_end_of_epoch(DL(o), &b_out); },
       [](O o) { return accel_dataloader_end_of_epoch(o.loader, nullptr); }},
      {"accel_dataloader_remainder", [](O) { return accel_dataloader_remainder(nullptr, &i64); },
       [DL](O o) { return accel_dataloader_remainder(DL(o), &i64); },
       [](O o) { return accel_dataloader_remainder(o.loader, nullptr); }},
      {"accel_dataloader_skip_first_batches",
       [](O) { return accel_dataloader_skip_first_batches(nullptr, 1); },
       [DL](O o) { return accel_dataloader_skip_first_batches(DL(o), 1); }, nullptr},
      {"accel_dataloader_position",
       [](O) { return accel_dataloader_position(nullptr, &i64, &i64); },
       [DL](O o) { return accel_dataloader_position(DL(o), &i64, &i64); },
       [](O o) { return accel_dataloader_position(o.loader, nullptr, &i64); }},
      {"accel_dataloader_set_position",
       [](O) { return accel_dataloader_set_position(nullptr, 0, 0); },
       [DL](O o) { return accel_dataloader_set_position(DL(o), 0, 0); }, nullptr},
      {"accel_dataloader_close", [](O) { return accel_dataloader_close(nullptr); },
       [DL](O o) { return accel_dataloader_close(DL(o)); }, nullptr},
      {"accel_gather_for_metrics",
       [](O o) { return accel_gather_for_metrics(nullptr, o.tensor, &t_out); },
       [A](O o) { return accel_gather_for_metrics(A(o), o.tensor, &t_out); },
       [](O o) { return accel_gather_for_metrics(g_acc, o.tensor, nullptr); }},
      {"accel_model_new", nullptr, nullptr, [](O) { return accel_model_new(nullptr); }},
      {"accel_model_load", [](O) { return accel_model_load(nullptr, &m_out); }, nullptr,
       [](O) { return accel_model_load("/nonexistent.pt", nullptr); }},
      {"accel_model_add_layer", [](O) { return accel_model_add_layer(nullptr, "a", "linear", ""); },
       [M](O o) { return accel_model_add_layer(M(o), "a", "linear", ""); },
       [](O o) { return accel_model_add_layer(o.model, nullptr, "linear", ""); }},
      {"accel_model_define",
       [](O) { return accel_model_define(nullptr, "def f(self):\n  pass\n"); },
       [M](O o) { return accel_model_define(M(o), ""); },
       [](O o) { return accel_model_define(o.model, nullptr); }},
      {"accel_model_call",
       [](O o) {
         size_t n;
         return accel_model_call(nullptr, "forward", nullptr, 0, nullptr, 0, &n);
       },
       [M](O o) {
         size_t n;
         return accel_model_call(M(o), "forward", nullptr, 0, nullptr, 0, &n);
       },
       [](O o) { return accel_model_call(o.model, "forward", nullptr, 0, nullptr, 0, nullptr); }},
      {"accel_model_train", [](O) { return accel_model_train(nullptr, true); },
       [M](O o) { return accel_model_train(M(o), true); }, nullptr},
      {"accel_model_num_parameters", [](O) { return accel_model_num_parameters(nullptr, &i64); },
       [M](O o) { return accel_model_num_parameters(M(o), &i64); },
       [](O o) { return accel_model_num_parameters(o.model, nullptr); }},
      {"accel_model_tensor_count", [](O) { return accel_model_tensor_count(nullptr, &st); },
       [M](O o) { return accel_model_tensor_count(M(o), &st); },
       [](O o) { return accel_model_tensor_count(o.model, nullptr); }},
      {"accel_model_tensor_name",
       [](O) {
         size_t n;
         return accel_model_tensor_name(nullptr, 0, nullptr, 0, &n);
       },
       [M](O o) {
         size_t n;
         return accel_model_tensor_name(M(o), 0, nullptr, 0, &n);
       },
       [](O o) { return accel_model_tensor_name(o.model, 0, nullptr, 0, nullptr); }},
      {"accel_model_tensor", [](O) { return accel_model_tensor(nullptr, "fc.weight", &t_out); },
       [M](O o) { return accel_model_tensor(M(o), "fc.weight", &t_out); },
       [](O o) { return accel_model_tensor(o.model, "fc.weight", nullptr); }},
      {"accel_model_save", [](O) { return accel_model_save(nullptr, "/tmp/x.pt"); },
       [M](O o) { return accel_model_save(M(o), "/tmp/x.pt"); },
       [](O o) { return accel_model_save(o.model, nullptr); }},
      {"accel_optimizer_new", [](O) { return accel_optimizer_new(nullptr, "sgd", &op_out); },
       [M](O o) { return accel_optimizer_new(M(o), "sgd", &op_out); },
       [](O o) { return accel_optimizer_new(o.model, "sgd", nullptr); }},
      {"accel_optimizer_set", [](O) { return accel_optimizer_set(nullptr, "lr", "1"); },
       [OP](O o) { return accel_optimizer_set(OP(o), "lr", "1"); },
       [](O o) { return accel_optimizer_set(o.optimizer, nullptr, "1"); }},
      {"accel_optimizer_step", [](O) { return accel_optimizer_step(nullptr); },
       [OP](O o) { return accel_optimizer_step(OP(o)); }, nullptr},
      {"accel_optimizer_zero_grad", [](O) { return accel_optimizer_zero_grad(nullptr); },
       [OP](O o) { return accel_optimizer_zero_grad(OP(o)); }, nullptr},
      {"accel_optimizer_lr", [](O) { return accel_optimizer_lr(nullptr, &d); },
       [OP](O o) { return accel_optimizer_lr(OP(o), &d); },
       [](O o) { return accel_optimizer_lr(o.optimizer, nullptr); }},
      {"accel_optimizer_set_lr", [](O) { return accel_optimizer_set_lr(nullptr, 0.1); },
       [OP](O o) { return accel_optimizer_set_lr(OP(o), 0.1); }, nullptr},
      {"accel_optimizer_step_was_skipped",
       [](O) { return accel_optimizer_step_was_skipped(nullptr, &b_out); },
       [OP](O o) { return accel_optimizer_step_was_skipped(OP(o), &b_out); },
       [](O o) { return accel_optimizer_step_was_skipped(o.optimizer, nullptr); }},
      {"accel_scheduler_new", [](O) { return accel_scheduler_new(nullptr, "constant", &s_out); },
       [OP](O o) { return accel_scheduler_new(OP(o), "constant", &s_out); },
       [](O o) { return accel_scheduler_new(o.optimizer, "constant", nullptr); }},
      {"accel_scheduler_set", [](O) { return accel_scheduler_set(nullptr, "gamma", "1"); },
       [S](O o) { return accel_scheduler_set(S(o), "gamma", "1"); },
       [](O o) { return accel_scheduler_set(o.scheduler, nullptr, "1"); }},
      {"accel_scheduler_step", [](O) { return accel_scheduler_step(nullptr); },
       [S](O o) { return accel_scheduler_step(S(o)); }, nullptr},
      {"accel_scheduler_lr", [](O) { return accel_scheduler_lr(nullptr, &d); },
       [S](O o) { return accel_scheduler_lr(S(o), &d); },
       [](O o) { return accel_scheduler_lr(o.scheduler, nullptr); }},
      {"accel_prepare", [](O) { return accel_prepare(nullptr, nullptr, 0); },
       [A](O o) { return accel_prepare(A(o), nullptr, 0); },
       [](O) { return accel_prepare(g_acc, nullptr, 1); }},
      {"accel_accumulate", [](O) { return accel_accumulate(nullptr); },
       [A](O o) { return accel_accumulate(A(o)); }, nullptr},
      {"accel_sync_gradients", [](O) { return accel_sync_gradients(nullptr, &b_out); },
       [A](O o) { return accel_sync_gradients(A(o), &b_out); },
       [](O) { return accel_sync_gradients(g_acc, nullptr); }},
      {"accel_backward", [](O o) { return accel_backward(nullptr, o.tensor); },
       [T](O o) { return accel_backward(g_acc, T(o)); },
       [](O) { return accel_backward(g_acc, nullptr); }},
      {"accel_clip_grad_norm", [](O o) { return accel_clip_grad_norm(nullptr, o.model, 1, 2, &d); },
       [M](O o) { return accel_clip_grad_norm(g_acc, M(o), 1, 2, &d); },
       [](O) { return accel_clip_grad_norm(g_acc, nullptr, 1, 2, &d); }},
      {"accel_clip_grad_value", [](O o) { return accel_clip_grad_value(nullptr, o.model, 1); },
       [M](O o) { return accel_clip_grad_value(g_acc, M(o), 1); }, nullptr},
      {"accel_save_model",
       [](O o) { return accel_save_model(nullptr, o.model, "/tmp/x", nullptr); },
       [M](O o) { return accel_save_model(g_acc, M(o), "/tmp/x", nullptr); },
       [](O o) { return accel_save_model(g_acc, o.model, nullptr, nullptr); }},
      {"accel_save_state", [](O) { return accel_save_state(nullptr, "/tmp/x"); },
       [A](O o) { return accel_save_state(A(o), "/tmp/x"); }, nullptr},
      {"accel_load_state", [](O) { return accel_load_state(nullptr, "/tmp/x"); },
       [A](O o) { return accel_load_state(A(o), "/tmp/x"); }, nullptr},
      {"accel_register_for_checkpointing",
       [](O) { return accel_register_for_checkpointing(nullptr, nullptr, nullptr, nullptr); },
       [A](O o) { return accel_register_for_checkpointing(A(o), nullptr, nullptr, nullptr); },
       [](O) { return accel_register_for_checkpointing(g_acc, nullptr, nullptr, nullptr); }},
      {"accel_load_checkpoint_in_model",
       [](O) { return accel_load_checkpoint_in_model(nullptr, "/tmp/x"); },
       [M](O o) { return accel_load_checkpoint_in_model(M(o), "/tmp/x"); },
       [](O o) { return accel_load_checkpoint_in_model(o.model, nullptr); }},
      {"accel_bytes_list_get", [](O) { return accel_bytes_list_get(nullptr, 0, &cvp, &st); },
       [L](O o) { return accel_bytes_list_get(L(o), 0, &cvp, &st); },
       [](O o) { return accel_bytes_list_get(o.list, 0, nullptr, &st); }},
  };
}

// Functions with nothing to pass NULL to, and the free functions (tested on their own below).
const std::set<std::string> kNoHandleFunctions = {"accel_model_free",
                                                  "accel_optimizer_free",
                                                  "accel_scheduler_free",
                                                  "accel_version",
                                                  "accel_last_error_message",
                                                  "accel_last_error_status",
                                                  "accel_status_name",
                                                  "accel_dtype_size",
                                                  "accel_config_free",
                                                  "accel_tensor_free",
                                                  "accel_free",
                                                  "accel_bytes_list_free",
                                                  "accel_dataset_free",
                                                  "accel_dataloader_free"};

}  // namespace

TEST(CApi, EveryFunctionRejectsNullAndWrongHandles) {
  Objects o;
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.symbol);
    if (c.null_handle)
      expect_status(c.null_handle(o), ACCEL_ERR_INVALID_ARGUMENT, c.symbol, "NULL");
    if (c.wrong_handle)
      expect_status(c.wrong_handle(o), ACCEL_ERR_WRONG_HANDLE, c.symbol, "is not an accel_");
    if (c.null_out) expect_status(c.null_out(o), ACCEL_ERR_INVALID_ARGUMENT, c.symbol, "NULL");
  }
  // The objects are intact after all that.
  EXPECT_EQ(values_of(o.tensor), (std::vector<float>{1, 2, 3}));
}

TEST(CApi, TableCoversEverySymbol) {
  std::ifstream in(ACCEL_SYMBOLS_FILE);
  ASSERT_TRUE(in) << ACCEL_SYMBOLS_FILE;
  std::set<std::string> covered(kNoHandleFunctions);
  for (const auto& c : cases()) covered.insert(c.symbol);
  int count = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("accel_", 0) != 0) continue;
    ++count;
    EXPECT_TRUE(covered.count(line)) << line << " has no NULL/wrong-handle case";
  }
  EXPECT_GT(count, 60);
}

TEST(CApi, FreeAcceptsNullAndIgnoresWrongKinds) {
  accel_config_free(nullptr);
  accel_tensor_free(nullptr);
  accel_free(nullptr);
  accel_bytes_list_free(nullptr);
  accel_dataset_free(nullptr);
  accel_dataloader_free(nullptr);
  accel_model_free(nullptr);
  accel_optimizer_free(nullptr);
  accel_scheduler_free(nullptr);
  accel_tensor* t = make_f32({5}, {1});
  accel_config_free(reinterpret_cast<accel_config*>(t));  // refused, recorded, nothing freed
  EXPECT_EQ(accel_last_error_status(), ACCEL_ERR_WRONG_HANDLE);
  accel_free(reinterpret_cast<accel_accelerator*>(t));
  EXPECT_EQ(values_of(t), std::vector<float>{5});
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
  bool has = false;
  ASSERT_EQ(accel_dataloader_next(dl, batch, 1, &has), ACCEL_OK);  // workers are running
  ASSERT_TRUE(has);
  accel_tensor_free(batch[0]);
  std::thread([&] {
    accel_config_free(c);
    accel_tensor_free(t);
    accel_bytes_list_free(l);
    accel_dataset_free(d);
    accel_dataloader_free(dl);
  }).join();
  // An accelerator, too: create it on a worker thread, free it on this one.
  accel_free(g_acc);
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
  accel_free(g_acc);
  g_acc = nullptr;
  accel_config* c = nullptr;
  ASSERT_EQ(accel_config_new(&c), ACCEL_OK);
  ASSERT_EQ(accel_config_set(c, "num_threads", "1"), ACCEL_OK);
  ASSERT_EQ(accel_init(c, &g_acc), ACCEL_OK) << accel_last_error_message();
  accel_config_free(c);
  EXPECT_EQ(at::get_num_threads(), 1);
  ASSERT_NE(blas_threads, nullptr) << "libblas.so.3 is not OpenBLAS: run tools/setup.sh";
  EXPECT_EQ(blas_threads(), 1) << "at::set_num_threads alone does not limit OpenBLAS";
  accel_free(g_acc);
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
  EXPECT_STREQ(accel_version(), "0.1.0");
  EXPECT_TRUE(ACCEL_VERSION_CHECK(0, 1, 0));
  EXPECT_FALSE(ACCEL_VERSION_CHECK(0, 2, 0));
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
  int v = -1;
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
  accel_distributed_type dist;
  ASSERT_EQ(accel_distributed_type_get(g_acc, &dist), ACCEL_OK);
  EXPECT_EQ(dist, ACCEL_DISTRIBUTED_NO);
  EXPECT_EQ(accel_wait_for_everyone(g_acc), ACCEL_OK);
  EXPECT_EQ(accel_main_process_first_begin(g_acc), ACCEL_OK);
  EXPECT_EQ(accel_main_process_first_end(g_acc), ACCEL_OK);
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
    ASSERT_EQ(accel_tensor_nbytes(t, &nb), ACCEL_OK);
    EXPECT_EQ(nb, bytes.size());
    std::vector<uint8_t> back(bytes.size());
    ASSERT_EQ(accel_tensor_to_data(t, back.data(), back.size()), ACCEL_OK);
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
  expect_status(accel_tensor_to_data(t, small, sizeof small), ACCEL_ERR_BUFFER_TOO_SMALL,
                "small buffer", "16 are needed");
  int64_t s1[1];
  expect_status(accel_tensor_shape(t, s1, 1), ACCEL_ERR_BUFFER_TOO_SMALL, "shape capacity", "2");
  double d;
  expect_status(accel_tensor_item_f64(t, &d), ACCEL_ERR_SHAPE, "item of 4", "4 elements");
  accel_tensor_free(t);
  accel_tensor* empty = nullptr;
  const int64_t zero[] = {0, 3};
  ASSERT_EQ(accel_tensor_from_data(nullptr, 0, ACCEL_DTYPE_F32, zero, 2, &empty), ACCEL_OK);
  size_t nd = 0;
  ASSERT_EQ(accel_tensor_ndim(empty, &nd), ACCEL_OK);
  EXPECT_EQ(nd, 2u);
  EXPECT_EQ(accel_tensor_to_data(empty, nullptr, 0), ACCEL_OK);
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
  EXPECT_EQ(values_of(t), (std::vector<float>{0, 2, 4, 6, 8, 10}));
  void* borrowed = nullptr;
  ASSERT_EQ(accel_tensor_borrow_torch(t, &borrowed), ACCEL_OK);
  EXPECT_TRUE(static_cast<at::Tensor*>(borrowed)->is_same(original));
  original = at::Tensor();  // the handle keeps its own reference
  EXPECT_EQ(values_of(t).size(), 6u);
  accel_tensor_free(t);
  at::Tensor undefined;
  expect_status(accel_tensor_wrap_torch(&undefined, &t), ACCEL_ERR_INVALID_ARGUMENT, "undefined",
                "undefined");
}

TEST(CApi, CollectivesInAWorldOfOne) {
  accel_tensor* t = make_f32({1, 2, 3, 4}, {2, 2});
  accel_tensor* out = nullptr;
  ASSERT_EQ(accel_gather(g_acc, t, &out), ACCEL_OK);
  EXPECT_EQ(values_of(out), (std::vector<float>{1, 2, 3, 4}));
  accel_tensor_free(out);
  ASSERT_EQ(accel_reduce(g_acc, t, ACCEL_REDUCE_MEAN, &out), ACCEL_OK);
  EXPECT_EQ(values_of(out), (std::vector<float>{1, 2, 3, 4}));
  accel_tensor_free(out);
  ASSERT_EQ(accel_pad_across_processes(g_acc, t, -1, 0, true, &out), ACCEL_OK);
  accel_tensor_free(out);
  expect_status(accel_pad_across_processes(g_acc, t, 2, 0, false, &out), ACCEL_ERR_INVALID_ARGUMENT,
                "dim out of range", "dim 2");
  ASSERT_EQ(accel_broadcast(g_acc, t, 0, &out), ACCEL_OK);
  EXPECT_EQ(values_of(out), (std::vector<float>{1, 2, 3, 4}));
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
  accel_tensor_ndim(out, &nd);
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
