// accel_dataset_*, accel_dataloader_* and accel_gather_for_metrics.
#include "capi/handles.hpp"
#include "ops/collectives.hpp"

using accel::Errc;
using accel::fail;
using accel::capi::checked;
using accel::capi::guarded;
using accel::capi::require;

namespace {

accel_dataset* new_dataset(std::shared_ptr<accel::data::Dataset> ds) {
  auto* h = new accel_dataset();
  h->dataset = std::move(ds);
  return h;
}

accel::data::DataLoader& loader_of(accel_dataloader* l) {
  return *checked(l, "loader")->loader;
}
const accel::data::DataLoader& loader_of(const accel_dataloader* l) {
  return *checked(l, "loader")->loader;
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
    *out = new_dataset(accel::data::tensor_dataset(std::move(fields)));
  });
}

ACCEL_API accel_status accel_dataset_from_callback(int64_t length, size_t count,
                                                   const accel_dtype* dtypes,
                                                   const int64_t* const* shapes,
                                                   const size_t* ndims, accel_sample_fn fn,
                                                   void* user_data, accel_dataset** out) {
  return guarded([&] {
    require(out, "out");
    require(dtypes, "dtypes");
    require(ndims, "ndims");
    if (!fn) fail(Errc::invalid_argument, "fn is NULL");
    std::vector<accel::data::FieldSpec> fields;
    for (size_t f = 0; f < count; ++f) {
      accel::data::FieldSpec spec;
      if (!accel::capi::to_scalar_type(dtypes[f], &spec.dtype))
        fail(Errc::dtype, "dtypes[" + std::to_string(f) + "] is not an accel_dtype value");
      if (ndims[f] > ACCEL_MAX_DIMS - 1)
        fail(Errc::shape, "field " + std::to_string(f) + " has too many dimensions");
      if (ndims[f] > 0) {
        require(shapes, "shapes");
        require(shapes[f], "shapes[f]");
        spec.shape.assign(shapes[f], shapes[f] + ndims[f]);
      }
      fields.push_back(std::move(spec));
    }
    *out = new_dataset(accel::data::callback_dataset(length, std::move(fields), fn, user_data));
  });
}

ACCEL_API accel_status accel_dataset_from_idx(const char* const* paths, size_t count,
                                              accel_dataset** out) {
  return guarded([&] {
    require(out, "out");
    require(paths, "paths");
    std::vector<std::string> list;
    for (size_t i = 0; i < count; ++i) {
      require(paths[i], "paths[i]");
      list.emplace_back(paths[i]);
    }
    *out = new_dataset(accel::data::idx_dataset(list));
  });
}

ACCEL_API accel_status accel_dataset_length(const accel_dataset* dataset, int64_t* out) {
  return guarded([&] {
    checked(dataset, "dataset");
    require(out, "out");
    *out = dataset->dataset->size();
  });
}

ACCEL_API void accel_dataset_free(accel_dataset* dataset) {
  accel::capi::free_handle(dataset, "dataset");
}

ACCEL_API accel_status accel_dataloader_new(const accel_accelerator* accelerator,
                                            accel_dataset* dataset, accel_dataloader** out) {
  return guarded([&] {
    const auto& acc = *checked(accelerator, "accelerator")->impl;
    checked(dataset, "dataset");
    require(out, "out");
    accel::data::LoaderPlace place;
    place.rank = acc.place().rank;
    place.world_size = acc.place().world_size;
    place.device = acc.device();
    place.state = acc.gradient_state();
    accel::data::LoaderOptions defaults;
    defaults.split_batches = acc.settings().flag("split_batches");
    defaults.even_batches = acc.settings().flag("even_batches");
    auto h = std::make_unique<accel_dataloader>();
    h->loader = std::make_shared<accel::data::DataLoader>(dataset->dataset, place, defaults);
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

ACCEL_API accel_status accel_dataloader_next(accel_dataloader* loader, accel_tensor** fields,
                                             size_t capacity, bool* out_has_batch) {
  return guarded([&] {
    auto& l = loader_of(loader);
    require(out_has_batch, "out_has_batch");
    if (capacity < l.num_fields())
      fail(Errc::buffer_too_small, "fields has room for " + std::to_string(capacity) +
                                       " tensors; the dataset has " +
                                       std::to_string(l.num_fields()) + " fields");
    require(fields, "fields");
    std::vector<at::Tensor> batch;
    if (!l.next(batch)) {
      *out_has_batch = false;
      return;
    }
    std::vector<std::unique_ptr<accel_tensor>> made;
    for (auto& t : batch) made.emplace_back(accel::capi::new_tensor(std::move(t)));
    for (size_t i = 0; i < made.size(); ++i) fields[i] = made[i].release();
    *out_has_batch = true;
  });
}

ACCEL_API accel_status accel_dataloader_num_fields(const accel_dataloader* loader, size_t* out) {
  return guarded([&] {
    const auto& l = loader_of(loader);
    require(out, "out");
    *out = l.num_fields();
  });
}

ACCEL_API accel_status accel_dataloader_length(const accel_dataloader* loader, int64_t* out) {
  return guarded([&] {
    const auto& l = loader_of(loader);
    require(out, "out");
    *out = l.length();
  });
}

ACCEL_API accel_status accel_dataloader_set_epoch(accel_dataloader* loader, int64_t epoch) {
  return guarded([&] {
    if (epoch < 0) fail(Errc::invalid_argument, "epoch is negative");
    loader_of(loader).set_epoch(epoch);
  });
}

ACCEL_API accel_status accel_dataloader_epoch(const accel_dataloader* loader, int64_t* out) {
  return guarded([&] {
    const auto& l = loader_of(loader);
    require(out, "out");
    *out = l.position().first;
  });
}

ACCEL_API accel_status accel_dataloader_end_of_epoch(const accel_dataloader* loader, bool* out) {
  return guarded([&] {
    const auto& l = loader_of(loader);
    require(out, "out");
    *out = l.end_of_dataloader();
  });
}

ACCEL_API accel_status accel_dataloader_remainder(const accel_dataloader* loader, int64_t* out) {
  return guarded([&] {
    const auto& l = loader_of(loader);
    require(out, "out");
    *out = l.remainder();
  });
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
  accel::capi::free_handle(loader, "loader");
}

ACCEL_API accel_status accel_gather_for_metrics(accel_accelerator* accelerator,
                                                const accel_tensor* tensor, accel_tensor** out) {
  return guarded([&] {
    auto& a = *checked(accelerator, "accelerator")->impl;
    checked(tensor, "tensor");
    require(out, "out");
    *out = accel::capi::new_tensor(
        accel::ops::gather_for_metrics(a.communicator(), tensor->tensor, *a.gradient_state()));
  });
}

}  // extern "C"
