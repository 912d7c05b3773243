// accel_tensor_*: tensors across the ABI, by copy (and one named zero-copy interop pair).
#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <dlfcn.h>

#include <cstring>
#include <utility>

#include "capi/handles.hpp"
#include "compat/torch_version.hpp"

using accel::Errc;
using accel::fail;
using accel::capi::checked;
using accel::capi::from_scalar_type;
using accel::capi::guarded;
using accel::capi::require;
using accel::capi::to_scalar_type;

namespace {

size_t nbytes_of(const at::Tensor& t) {
  return static_cast<size_t>(t.numel()) * t.element_size();
}

// The shared object that holds `address` ("?" when the loader cannot say).
std::string library_of(const void* address) {
  Dl_info info{};
  return dladdr(address, &info) && info.dli_fname ? info.dli_fname : "?";
}

}  // namespace

namespace accel::capi {

// The one mapping between the ABI's dtypes and LibTorch's, read in both directions.
constexpr std::pair<accel_dtype, at::ScalarType> kDtypes[] = {
    {ACCEL_DTYPE_F32, at::kFloat},     {ACCEL_DTYPE_F64, at::kDouble}, {ACCEL_DTYPE_F16, at::kHalf},
    {ACCEL_DTYPE_BF16, at::kBFloat16}, {ACCEL_DTYPE_I64, at::kLong},   {ACCEL_DTYPE_I32, at::kInt},
    {ACCEL_DTYPE_I16, at::kShort},     {ACCEL_DTYPE_I8, at::kChar},    {ACCEL_DTYPE_U8, at::kByte},
    {ACCEL_DTYPE_BOOL, at::kBool}};

bool to_scalar_type(accel_dtype d, at::ScalarType* out) {
  for (const auto& [ours, theirs] : kDtypes)
    if (ours == d) {
      *out = theirs;
      return true;
    }
  return false;
}

accel_dtype from_scalar_type(at::ScalarType t) {
  for (const auto& [ours, theirs] : kDtypes)
    if (theirs == t) return ours;
  fail(Errc::dtype,
       std::string("the tensor's dtype ") + c10::toString(t) + " has no accel_dtype equivalent");
}

accel_tensor* new_tensor(at::Tensor t) {
  auto* h = new accel_tensor();
  h->tensor = std::move(t);
  return h;
}
}  // namespace accel::capi

extern "C" {

ACCEL_API size_t accel_dtype_size(accel_dtype dtype) {
  at::ScalarType t;
  return to_scalar_type(dtype, &t) ? c10::elementSize(t) : 0;
}

ACCEL_API accel_status accel_tensor_from_data(const void* data, size_t size, accel_dtype dtype,
                                              const int64_t* shape, size_t dim_count,
                                              accel_tensor** out) {
  const size_t nbytes = size, ndim = dim_count;
  return guarded([&] {
    require(out, "out");
    at::ScalarType type;
    if (!to_scalar_type(dtype, &type))
      fail(Errc::dtype,
           "dtype " + std::to_string(static_cast<int>(dtype)) + " is not an accel_dtype value");
    if (ndim > ACCEL_MAX_DIMS)
      fail(Errc::shape, "dim_count " + std::to_string(ndim) + " exceeds ACCEL_MAX_DIMS (16)");
    if (ndim > 0) require(shape, "shape");
    std::vector<int64_t> sizes(shape, shape + ndim);
    size_t numel = 1;
    for (size_t i = 0; i < ndim; ++i) {
      if (sizes[i] < 0)
        fail(Errc::shape,
             "shape[" + std::to_string(i) + "] is negative (" + std::to_string(sizes[i]) + ")");
      if (sizes[i] != 0 && numel > (SIZE_MAX / 16) / static_cast<size_t>(sizes[i]))
        fail(Errc::shape, "shape is too large");
      numel *= static_cast<size_t>(sizes[i]);
    }
    const size_t expected = numel * c10::elementSize(type);
    if (nbytes != expected)
      fail(Errc::invalid_argument, "size is " + std::to_string(nbytes) +
                                       " but the shape and dtype need " + std::to_string(expected) +
                                       " bytes");
    if (expected > 0) require(data, "data");
    at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(type));
    if (expected > 0) std::memcpy(t.data_ptr(), data, expected);
    *out = accel::capi::new_tensor(std::move(t));
  });
}

ACCEL_API accel_status accel_tensor_to_data(const accel_tensor* tensor, void* buf, size_t capacity,
                                            size_t* out_size) {
  return guarded([&] {
    checked(tensor, "tensor");
    // Checked before the copy to the host: a too-small buffer costs nothing.
    const size_t needed = nbytes_of(tensor->tensor);
    accel::capi::require_capacity(needed, buf, capacity, out_size, "out_size",
                                  "tensor data (bytes)");
    if (needed == 0) return;
    const at::Tensor host = tensor->tensor.to(at::kCPU).contiguous();
    std::memcpy(buf, host.data_ptr(), needed);
  });
}

ACCEL_API void accel_tensor_free(accel_tensor* tensor) {
  accel::capi::free_handle(tensor, "tensor");
}

ACCEL_API accel_status accel_tensor_dim_count(const accel_tensor* tensor, size_t* out) {
  return accel::capi::query(tensor, "tensor", out,
                            [](const auto& h) { return static_cast<size_t>(h.tensor.dim()); });
}

ACCEL_API accel_status accel_tensor_shape(const accel_tensor* tensor, int64_t* shape,
                                          size_t capacity, size_t* out_count) {
  return guarded([&] {
    checked(tensor, "tensor");
    const size_t ndim = static_cast<size_t>(tensor->tensor.dim());
    accel::capi::require_capacity(ndim, shape, capacity, out_count, "out_count",
                                  "tensor shape (dimensions)");
    for (size_t i = 0; i < ndim; ++i) shape[i] = tensor->tensor.size(static_cast<int64_t>(i));
  });
}

ACCEL_API accel_status accel_tensor_dtype(const accel_tensor* tensor, accel_dtype* out) {
  return accel::capi::query(tensor, "tensor", out,
                            [](const auto& h) { return from_scalar_type(h.tensor.scalar_type()); });
}

ACCEL_API accel_status accel_tensor_element_count(const accel_tensor* tensor, int64_t* out) {
  return accel::capi::query(tensor, "tensor", out, [](const auto& h) { return h.tensor.numel(); });
}

ACCEL_API accel_status accel_tensor_data_size(const accel_tensor* tensor, size_t* out) {
  return accel::capi::query(tensor, "tensor", out,
                            [](const auto& h) { return nbytes_of(h.tensor); });
}

ACCEL_API accel_status accel_tensor_item_f64(const accel_tensor* tensor, double* out) {
  return guarded([&] {
    checked(tensor, "tensor");
    require(out, "out");
    if (tensor->tensor.numel() != 1)
      fail(Errc::shape, "item needs a one-element tensor; this one has " +
                            std::to_string(tensor->tensor.numel()) + " elements");
    *out = tensor->tensor.item<double>();
  });
}

ACCEL_API accel_status accel_tensor_item_i64(const accel_tensor* tensor, int64_t* out) {
  return guarded([&] {
    checked(tensor, "tensor");
    require(out, "out");
    if (tensor->tensor.numel() != 1)
      fail(Errc::shape, "item needs a one-element tensor; this one has " +
                            std::to_string(tensor->tensor.numel()) + " elements");
    if (at::isFloatingType(tensor->tensor.scalar_type()))
      fail(Errc::dtype, "item_i64 needs an integer or bool tensor; use accel_tensor_item_f64");
    *out = tensor->tensor.item<int64_t>();
  });
}

ACCEL_API accel_status accel_tensor_wrap_torch(void* torch_tensor, accel_tensor** out) {
  return guarded([&] {
    require(torch_tensor, "torch_tensor");
    require(out, "out");
    const at::Tensor& source = *static_cast<const at::Tensor*>(torch_tensor);
    if (!source.defined()) fail(Errc::invalid_argument, "torch_tensor is an undefined tensor");
    *out = accel::capi::new_tensor(source);
  });
}

ACCEL_API accel_status accel_torch_check(const char* version, int32_t cxx11_abi,
                                         const void* cpu_allocator_fn) {
  return guarded([&] {
    require(version, "version");
    const std::string ours =
        std::string(TORCH_VERSION) + " (C++11 ABI " + std::to_string(_GLIBCXX_USE_CXX11_ABI) + ")";
    const std::string theirs =
        std::string(version) +
        (cxx11_abi >= 0 ? " (C++11 ABI " + std::to_string(cxx11_abi) + ")" : std::string());
    if (std::strcmp(version, TORCH_VERSION) != 0 ||
        (cxx11_abi >= 0 && cxx11_abi != _GLIBCXX_USE_CXX11_ABI))
      fail(Errc::unsupported, "the program is built against LibTorch " + theirs +
                                  " but libaccel runs on LibTorch " + ours +
                                  ": LibTorch objects cannot cross between two builds; build the "
                                  "program against the LibTorch libaccel was built with");
    const void* own = reinterpret_cast<const void*>(&c10::GetCPUAllocator);
    if (cpu_allocator_fn && cpu_allocator_fn != own)
      fail(Errc::unsupported, "the program's LibTorch " + theirs + " is loaded from " +
                                  library_of(cpu_allocator_fn) + " but libaccel's from " +
                                  library_of(own) +
                                  ": two copies of LibTorch in one process cannot share tensors");
  });
}

ACCEL_API accel_status accel_tensor_borrow_torch(const accel_tensor* tensor, void** out) {
  return accel::capi::query(tensor, "tensor", out,
                            [](const auto& h) { return const_cast<at::Tensor*>(&h.tensor); });
}

ACCEL_API accel_status accel_tensor_list_count(const accel_tensor_list* list, size_t* out) {
  return accel::capi::query(list, "list", out, [](const auto& h) { return h.items.size(); });
}

ACCEL_API accel_status accel_tensor_list_get(const accel_tensor_list* list, size_t index,
                                             accel_tensor** out) {
  return guarded([&] {
    checked(list, "list");
    require(out, "out");
    if (index >= list->items.size())
      fail(Errc::invalid_argument, "index " + std::to_string(index) + " is out of range (" +
                                       std::to_string(list->items.size()) + " tensors)");
    *out = accel::capi::new_tensor(list->items[index]);
  });
}

ACCEL_API void accel_tensor_list_free(accel_tensor_list* list) {
  accel::capi::free_handle(list, "list");
}

}  // extern "C"
