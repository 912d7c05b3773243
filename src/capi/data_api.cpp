// accel_dataset_*, accel_dataloader_* and accel_gather_for_metrics.
#include <ATen/ATen.h>

#include <algorithm>
#include <type_traits>

#include "capi/handles.hpp"
#include "data/split.hpp"
#include "ops/collectives.hpp"

using accel::Errc;
using accel::fail;
using accel::capi::checked;
using accel::capi::FamilyLock;
using accel::capi::guarded;
using accel::capi::require;

// The data layer declares the callback types itself (it does not see this header): same ABI.
static_assert(std::is_same_v<accel_sample_fn, accel::data::SampleFn>);
static_assert(std::is_same_v<accel_release_fn, accel::data::ReleaseFn>);
static_assert(std::is_same_v<accel_sample_length_fn, accel::data::LengthFn>);

namespace {

accel::data::DataLoader& loader_of(accel_dataloader* l) {
  return *checked(l, "loader")->loader;
}
const accel::data::DataLoader& loader_of(const accel_dataloader* l) {
  return *checked(l, "loader")->loader;
}

// A new dataset handle, made before the dataset so that a failure cannot leave a dataset (and its
// release callback) behind.
template <class Make>
accel_dataset* new_dataset(Make&& make) {
  auto h = std::make_unique<accel_dataset>();
  h->dataset = make();
  return h.release();
}

}  // namespace

extern "C" {

ACCEL_API accel_status accel_dataset_from_tensors(const accel_tensor* const* tensors, size_t count,
                                                  accel_dataset** out) {
  return guarded([&] {
    require(out, "out");
    if (count == 0) fail(Errc::invalid_argument, "count is 0: a dataset needs at least one tensor");
    require(tensors, "tensors");
    std::vector<at::Tensor> fields;
    for (size_t i = 0; i < count; ++i)
      fields.push_back(checked(tensors[i], ("tensors[" + std::to_string(i) + "]").c_str())->tensor);
    *out = new_dataset([&] { return accel::data::tensor_dataset(std::move(fields)); });
  });
}

namespace {

// The field layouts of a callback dataset from the C arrays; ACCEL_RAGGED first marks a ragged
// field where `allow_ragged`.
std::vector<accel::data::FieldSpec> field_specs(size_t field_count, const accel_dtype* dtypes,
                                                const size_t* dim_counts, const int64_t* dims,
                                                bool allow_ragged) {
  if (field_count == 0)
    fail(Errc::invalid_argument, "field_count is 0: a dataset needs at least one field");
  require(dtypes, "dtypes");
  require(dim_counts, "dim_counts");
  std::vector<accel::data::FieldSpec> fields;
  size_t next_dim = 0;
  for (size_t f = 0; f < field_count; ++f) {
    accel::data::FieldSpec spec;
    if (!accel::capi::to_scalar_type(dtypes[f], &spec.dtype))
      fail(Errc::dtype, "dtypes[" + std::to_string(f) + "] is " + std::to_string(dtypes[f]) +
                            ", not an accel_dtype value");
    if (dim_counts[f] > ACCEL_MAX_DIMS - 1)
      fail(Errc::shape, "field " + std::to_string(f) + " has " + std::to_string(dim_counts[f]) +
                            " dimensions per sample; at most " +
                            std::to_string(ACCEL_MAX_DIMS - 1) + " are allowed");
    if (dim_counts[f] > 0) {
      require(dims, "dims");
      spec.shape.assign(dims + next_dim, dims + next_dim + dim_counts[f]);
      next_dim += dim_counts[f];
      spec.ragged = allow_ragged && spec.shape[0] == ACCEL_RAGGED;
    }
    fields.push_back(std::move(spec));
  }
  return fields;
}

}  // namespace

ACCEL_API accel_status accel_dataset_from_callback(int64_t sample_count, size_t field_count,
                                                   const accel_dtype* dtypes,
                                                   const size_t* dim_counts, const int64_t* dims,
                                                   accel_sample_fn fn, void* user_data,
                                                   accel_release_fn release, accel_dataset** out) {
  return guarded([&] {
    require(out, "out");
    auto fields = field_specs(field_count, dtypes, dim_counts, dims, false);
    if (!fn) fail(Errc::invalid_argument, "fn is NULL");
    *out = new_dataset([&] {
      return accel::data::callback_dataset(sample_count, std::move(fields), nullptr, fn, user_data,
                                           release);
    });
  });
}

ACCEL_API accel_status accel_dataset_from_ragged_callback(
    int64_t sample_count, size_t field_count, const accel_dtype* dtypes, const size_t* dim_counts,
    const int64_t* dims, accel_sample_length_fn lengths, accel_sample_fn fn, void* user_data,
    accel_release_fn release, accel_dataset** out) {
  return guarded([&] {
    require(out, "out");
    auto fields = field_specs(field_count, dtypes, dim_counts, dims, true);
    if (!fn) fail(Errc::invalid_argument, "fn is NULL");
    *out = new_dataset([&] {
      return accel::data::callback_dataset(sample_count, std::move(fields), lengths, fn, user_data,
                                           release);
    });
  });
}

ACCEL_API accel_status accel_sample_set_field(accel_sample* sample, size_t field, const void* data,
                                              size_t size) {
  return guarded([&] { checked(sample, "sample")->writer->set_field(field, data, size); });
}

ACCEL_API accel_status accel_dataset_from_stream(size_t field_count, const accel_dtype* dtypes,
                                                 const size_t* dim_counts, const int64_t* dims,
                                                 accel_stream_fn fn, void* user_data,
                                                 accel_release_fn release, accel_dataset** out) {
  return guarded([&] {
    require(out, "out");
    auto fields = field_specs(field_count, dtypes, dim_counts, dims, true);
    if (!fn) fail(Errc::invalid_argument, "fn is NULL");
    auto call = [fn, user_data](int64_t epoch, int64_t position, accel::data::SampleWriter& w) {
      accel_sample sample;
      sample.writer = &w;
      return fn(epoch, position, &sample, user_data);
    };
    *out = new_dataset(
        [&] { return accel::data::callback_stream(std::move(fields), call, release, user_data); });
  });
}

ACCEL_API accel_status accel_dataset_from_text_lines(const char* path, accel_dataset** out) {
  return guarded([&] {
    require(out, "out");
    require(path, "path");
    *out = new_dataset([&] { return accel::data::text_lines_stream(path); });
  });
}

ACCEL_API accel_status accel_dataset_from_idx(const char* const* paths, size_t count,
                                              accel_dataset** out) {
  return guarded([&] {
    require(out, "out");
    require(paths, "paths");
    std::vector<std::string> list;
    for (size_t i = 0; i < count; ++i) {
      require(paths[i], ("paths[" + std::to_string(i) + "]").c_str());
      list.emplace_back(paths[i]);
    }
    *out = new_dataset([&] { return accel::data::idx_dataset(list); });
  });
}

ACCEL_API accel_status accel_dataset_sample_count(const accel_dataset* dataset, int64_t* out) {
  return accel::capi::query(dataset, "dataset", out,
                            [](const auto& h) { return h.dataset->size(); });
}

ACCEL_API accel_status accel_dataset_field_count(const accel_dataset* dataset, size_t* out) {
  return accel::capi::query(dataset, "dataset", out,
                            [](const auto& h) { return h.dataset->num_fields(); });
}

ACCEL_API void accel_dataset_free(accel_dataset* dataset) {
  accel::capi::free_handle(dataset, "dataset");
}

ACCEL_API accel_status accel_dataloader_new(const accel_accelerator* accelerator,
                                            accel_dataset* dataset, accel_dataloader** out) {
  return guarded([&] {
    const auto& session = accel::capi::core_of(accelerator).session();
    checked(dataset, "dataset");
    require(out, "out");
    auto h = std::make_unique<accel_dataloader>();
    h->loader = session.make_dataloader(dataset->dataset);
    *out = h.release();
  });
}

ACCEL_API accel_status accel_dataloader_set(accel_dataloader* loader, const char* key,
                                            const char* value) {
  return guarded([&] {
    auto& l = loader_of(loader);
    require(key, "key");
    require(value, "value");
    l.set_option(key, value);
  });
}

ACCEL_API accel_status accel_dataloader_set_field(accel_dataloader* loader, size_t field,
                                                  const char* key, const char* value) {
  return guarded([&] {
    auto& l = loader_of(loader);
    require(key, "key");
    require(value, "value");
    l.set_field_option(field, key, value);
  });
}

ACCEL_API accel_status accel_dataloader_next(accel_dataloader* loader, accel_tensor** fields,
                                             size_t capacity, size_t* out_count) {
  return guarded([&] {
    auto& l = loader_of(loader);
    accel::capi::require_capacity(l.num_fields(), fields, capacity, out_count, "out_count",
                                  "batch fields");
    std::vector<at::Tensor> batch;
    if (!l.next(batch)) {
      *out_count = 0;
      return;
    }
    std::vector<std::unique_ptr<accel_tensor>> made;
    for (auto& t : batch) made.emplace_back(accel::capi::new_tensor(std::move(t)));
    for (size_t i = 0; i < made.size(); ++i) fields[i] = made[i].release();
    *out_count = batch.size();
  });
}

ACCEL_API accel_status accel_dataloader_field_count(const accel_dataloader* loader, size_t* out) {
  return accel::capi::query(loader, "loader", out,
                            [](const auto& h) { return h.loader->num_fields(); });
}

ACCEL_API accel_status accel_dataloader_batch_count(const accel_dataloader* loader, int64_t* out) {
  return accel::capi::query(loader, "loader", out,
                            [](const auto& h) { return h.loader->length(); });
}

ACCEL_API accel_status accel_dataloader_set_epoch(accel_dataloader* loader, int64_t epoch) {
  return guarded([&] {
    auto& l = loader_of(loader);
    if (epoch < 0) fail(Errc::invalid_argument, "epoch is negative");
    l.set_epoch(epoch);
  });
}

ACCEL_API accel_status accel_dataloader_epoch(const accel_dataloader* loader, int64_t* out) {
  return accel::capi::query(loader, "loader", out, [](const auto& h) { return h.loader->epoch(); });
}

ACCEL_API accel_status accel_dataloader_end_of_epoch(const accel_dataloader* loader, bool* out) {
  return accel::capi::query(loader, "loader", out,
                            [](const auto& h) { return h.loader->end_of_dataloader(); });
}

ACCEL_API accel_status accel_dataloader_remainder(const accel_dataloader* loader, int64_t* out) {
  return accel::capi::query(loader, "loader", out,
                            [](const auto& h) { return h.loader->remainder(); });
}

ACCEL_API accel_status accel_dataloader_skip_first_batches(accel_dataloader* loader, int64_t n) {
  return guarded([&] { loader_of(loader).skip_first_batches(n); });
}

ACCEL_API accel_status accel_dataloader_position(const accel_dataloader* loader, int64_t* out_epoch,
                                                 int64_t* out_samples) {
  return guarded([&] {
    const auto& l = loader_of(loader);
    require(out_epoch, "out_epoch");
    require(out_samples, "out_samples");
    const auto [epoch, samples] = l.position();
    *out_epoch = epoch;
    *out_samples = samples;
  });
}

ACCEL_API accel_status accel_dataloader_set_position(accel_dataloader* loader, int64_t epoch,
                                                     int64_t samples) {
  return guarded([&] { loader_of(loader).set_position(epoch, samples); });
}

ACCEL_API accel_status accel_dataloader_close(accel_dataloader* loader) {
  return guarded([&] { loader_of(loader).close(); });
}

ACCEL_API void accel_dataloader_free(accel_dataloader* loader) {
  if (!loader) return;
  // Closed first, also when the accelerator holds the loader too (it was prepared): its workers
  // stop here, so the dataset's callback is never entered once this returns.
  if (guarded([&] { loader_of(loader).close(); }) != ACCEL_OK) return;
  accel::capi::free_handle(loader, "loader");
}

ACCEL_API accel_status accel_gather_for_metrics(accel_accelerator* accelerator,
                                                const accel_tensor* tensor, accel_tensor** out) {
  return guarded([&] {
    auto& a = accel::capi::core_of(accelerator).runtime();
    checked(tensor, "tensor");
    require(out, "out");
    FamilyLock lock(accelerator->family);
    *out = accel::capi::new_tensor(
        accel::ops::gather_for_metrics(a.communicator(), tensor->tensor, *a.gradient_state()));
  });
}

ACCEL_API accel_status accel_split_between_processes(const accel_accelerator* accelerator,
                                                     int64_t count, bool apply_padding,
                                                     int64_t* indices, size_t capacity,
                                                     size_t* out_count) {
  return guarded([&] {
    const auto& place = accel::capi::core_of(accelerator).runtime().place();
    require(out_count, "out_count");
    const auto mine =
        accel::data::split_list_indices(count, place.world_size, place.rank, apply_padding);
    accel::capi::require_capacity(mine.size(), indices, capacity, out_count, "out_count",
                                  "indices");
    std::copy(mine.begin(), mine.end(), indices);
    *out_count = mine.size();
  });
}

ACCEL_API accel_status accel_split_tensor_between_processes(const accel_accelerator* accelerator,
                                                            const accel_tensor* tensor,
                                                            bool apply_padding,
                                                            accel_tensor** out) {
  return guarded([&] {
    const auto& place = accel::capi::core_of(accelerator).runtime().place();
    const at::Tensor& t = checked(tensor, "tensor")->tensor;
    require(out, "out");
    if (t.dim() == 0)
      fail(Errc::shape,
           "split_between_processes splits rows (dimension 0), and the tensor is a "
           "scalar");
    const auto rows =
        accel::data::split_tensor_indices(t.size(0), place.world_size, place.rank, apply_padding);
    const at::Tensor mine = t.index_select(
        0, at::tensor(rows, at::TensorOptions().dtype(at::kLong).device(t.device())));
    *out = accel::capi::new_tensor(mine.contiguous());
  });
}

}  // extern "C"
