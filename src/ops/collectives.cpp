#include "ops/collectives.hpp"

#include <ATen/ATen.h>

#include <algorithm>

#include "common/error.hpp"

namespace accel::ops {

namespace {

constexpr int64_t kMaxDims = 16;
// A rank's description of its tensor, exchanged before any data moves:
// [status, ndim, dtype, on_device, size_0 .. size_15]. status 0 is fine; 1 means "this rank has no
// tensor" (a broadcast root without one), so that every rank fails together instead of waiting.
// on_device 1: the data travels on the rank's GPU (NCCL), 0: through host memory (TCP, shared
// memory); every rank must use the same process group, so they must agree.
constexpr int64_t kHeaderLen = 4 + kMaxDims;
constexpr int64_t kSizes = 4;

at::Tensor header_of(const at::Tensor& t, bool on_device) {
  auto h = at::zeros({kHeaderLen}, at::kLong);
  auto* p = h.data_ptr<int64_t>();
  if (!t.defined()) {
    p[0] = 1;
    return h;
  }
  if (t.dim() > kMaxDims)
    fail(Errc::shape, "tensors crossing processes may have at most 16 dimensions, got " +
                          std::to_string(t.dim()));
  p[1] = t.dim();
  p[2] = static_cast<int64_t>(t.scalar_type());
  p[3] = on_device ? 1 : 0;
  for (int64_t d = 0; d < t.dim(); ++d) p[kSizes + d] = t.size(d);
  return h;
}

std::vector<int64_t> shape_in(const at::Tensor& header) {
  const auto* p = header.data_ptr<int64_t>();
  return std::vector<int64_t>(p + kSizes, p + kSizes + p[1]);
}

bool on_device_in(const at::Tensor& header) {
  return header.data_ptr<int64_t>()[3] != 0;
}

at::ScalarType dtype_in(const at::Tensor& header) {
  return static_cast<at::ScalarType>(header.data_ptr<int64_t>()[2]);
}

// std::to_string, not an ostream: under a host's global C++ locale (de_DE) 1000 prints as "1.000".
std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

std::string ranks_text(const std::vector<at::Tensor>& headers) {
  std::string out;
  for (size_t r = 0; r < headers.size(); ++r) {
    out += (r ? ", " : "") + std::string("rank ") + std::to_string(r) + " " +
           shape_text(shape_in(headers[r])) + " " + c10::toString(dtype_in(headers[r]));
  }
  return out;
}

// The host's transports move CPU tensors, NCCL those on this rank's GPU; results go back to the
// caller's device.
bool on_device(runtime::Communicator* comm, const at::Tensor& t) {
  return t.defined() && comm->wire_device(t).is_cuda();
}

at::Tensor to_wire(runtime::Communicator* comm, const at::Tensor& t) {
  return t.to(comm->wire_device(t)).contiguous();
}

// Every rank's header; fails on every rank alike when the ranks disagree on `what` must match.
enum class Agree { kShapeAndDtype, kNdimAndDtype };

std::vector<at::Tensor> exchange_headers(runtime::Communicator* comm, const at::Tensor& t,
                                         Agree agree, const char* op, const char* hint) {
  auto headers = comm->all_gather(header_of(t, on_device(comm, t)));
  const auto& first = headers[0];
  for (size_t r = 1; r < headers.size(); ++r) {
    const auto& h = headers[r];
    if (on_device_in(h) != on_device_in(first))
      fail(Errc::invalid_argument,
           std::string(op) + ": rank 0 holds its tensor " +
               (on_device_in(first) ? "on its GPU" : "in host memory") + " and rank " +
               std::to_string(r) + " " + (on_device_in(h) ? "on its GPU" : "in host memory") +
               ": every rank must pass its tensor on the same kind of device");
    if (dtype_in(h) != dtype_in(first))
      fail(Errc::dtype, std::string(op) + ": ranks hold tensors of different dtypes (" +
                            ranks_text(headers) + ")");
    const bool same = agree == Agree::kShapeAndDtype ? shape_in(h) == shape_in(first)
                                                     : shape_in(h).size() == shape_in(first).size();
    if (!same)
      fail(Errc::shape, std::string(op) + ": ranks hold tensors of different shapes (" +
                            ranks_text(headers) + ")" + hint);
  }
  return headers;
}

// Bytes move the same whatever they mean: one path for every dtype.
at::Tensor as_bytes(const at::Tensor& contiguous) {
  return contiguous.reshape({-1}).view(at::kByte);
}

// Failures deep inside (the shape exchange is itself an all_gather) are reported under the name of
// the collective the caller asked for.
template <class F>
auto as_op(const char* op, F&& body) {
  try {
    return body();
  } catch (const accel::Error& e) {
    const std::string msg = e.what();
    if (msg.rfind(op, 0) == 0) throw;
    throw accel::Error(e.code(), std::string(op) + ": " + msg);
  }
}

}  // namespace

static at::Tensor gather_impl(runtime::Communicator* comm, const at::Tensor& tensor) {
  at::Tensor t = tensor.dim() == 0 ? tensor.reshape({1}) : tensor;
  if (!comm) return t.clone();
  exchange_headers(comm, t, Agree::kShapeAndDtype, "gather",
                   "; gather needs the same shape on every rank: call pad_across_processes first "
                   "to pad the first dimension to the largest size");
  at::Tensor local = to_wire(comm, t);
  std::vector<at::Tensor> parts;
  if (local.numel() == 0) {
    for (int r = 0; r < comm->size(); ++r) parts.push_back(local);
  } else {
    for (auto& p : comm->all_gather(as_bytes(local)))
      parts.push_back(p.view(local.scalar_type()).view(local.sizes()));
  }
  return at::cat(parts, 0).to(tensor.device());
}

static at::Tensor pad_impl(runtime::Communicator* comm, const at::Tensor& tensor, int64_t dim,
                           double pad_value, bool pad_first) {
  const int64_t ndim = tensor.dim();
  if (ndim == 0) fail(Errc::shape, "pad_across_processes: cannot pad a scalar (0-d tensor)");
  if (dim < -ndim || dim >= ndim)
    fail(Errc::invalid_argument, "pad_across_processes: dim " + std::to_string(dim) +
                                     " is out of range for a tensor of " + std::to_string(ndim) +
                                     " dimensions");
  if (dim < 0) dim += ndim;
  if (!comm) return tensor.clone();
  auto headers = exchange_headers(comm, tensor, Agree::kNdimAndDtype, "pad_across_processes",
                                  "; every rank needs the same number of dimensions");
  int64_t longest = 0;
  for (const auto& h : headers) longest = std::max(longest, shape_in(h)[dim]);
  std::vector<int64_t> shape(tensor.sizes().begin(), tensor.sizes().end());
  const int64_t mine = shape[dim];
  shape[dim] = longest;
  at::Tensor out = at::full(shape, pad_value, tensor.options());
  out.narrow(dim, pad_first ? longest - mine : 0, mine).copy_(tensor);
  return out;
}

static at::Tensor reduce_impl(runtime::Communicator* comm, const at::Tensor& tensor,
                              Reduction reduction) {
  if (tensor.scalar_type() == at::kBool)
    fail(Errc::dtype, "reduce: bool tensors cannot be reduced; convert to an integer dtype");
  if (reduction == Reduction::kMean && !at::isFloatingType(tensor.scalar_type()))
    fail(Errc::dtype, std::string("reduce: mean needs a floating point tensor, got ") +
                          c10::toString(tensor.scalar_type()) + "; use sum");
  if (!comm) return tensor.clone();
  exchange_headers(comm, tensor, Agree::kShapeAndDtype, "reduce", "");
  // Half-width floats are summed in fp32: more exact than summing in their own width.
  const bool widen = tensor.scalar_type() == at::kBFloat16 || tensor.scalar_type() == at::kHalf;
  at::Tensor work = widen ? to_wire(comm, tensor).to(at::kFloat) : to_wire(comm, tensor).clone();
  if (work.numel() > 0) {
    const auto op = reduction == Reduction::kMax   ? runtime::ReduceOp::kMax
                    : reduction == Reduction::kMin ? runtime::ReduceOp::kMin
                                                   : runtime::ReduceOp::kSum;
    comm->all_reduce(work, op);
  }
  if (reduction == Reduction::kMean) work.div_(comm->size());
  return work.to(tensor.device(), tensor.scalar_type());
}

static at::Tensor broadcast_impl(runtime::Communicator* comm, const at::Tensor& tensor, int root) {
  const int size = comm ? comm->size() : 1;
  if (root < 0 || root >= size)
    fail(Errc::invalid_argument, "broadcast: from_process " + std::to_string(root) +
                                     " is not a rank (0.." + std::to_string(size - 1) + ")");
  const int rank = comm ? comm->rank() : 0;
  if (!comm) {
    if (!tensor.defined()) fail(Errc::invalid_argument, "broadcast: the source rank has no tensor");
    return tensor.clone();
  }
  at::Tensor header = rank == root ? header_of(tensor, on_device(comm, tensor))
                                   : at::zeros({kHeaderLen}, at::kLong);
  comm->broadcast(header, root);
  if (header.data_ptr<int64_t>()[0] != 0)
    fail(Errc::invalid_argument,
         "broadcast: rank " + std::to_string(root) + " (the source) passed no tensor");
  const auto shape = shape_in(header);
  const auto dtype = dtype_in(header);
  const c10::Device wire = on_device_in(header) ? comm->attached_device() : c10::Device(at::kCPU);
  at::Tensor data = rank == root ? to_wire(comm, tensor).clone()
                                 : at::empty(shape, at::TensorOptions().dtype(dtype).device(wire));
  if (data.numel() > 0) {
    at::Tensor bytes = as_bytes(data);
    comm->broadcast(bytes, root);
  }
  return tensor.defined() && rank == root ? data.to(tensor.device()) : data;
}

static at::Tensor gather_for_metrics_impl(runtime::Communicator* comm, const at::Tensor& tensor,
                                          const runtime::GradientState& state) {
  at::Tensor t = tensor.dim() == 0 ? tensor.reshape({1}) : tensor;
  at::Tensor all;
  if (!comm) {
    all = t;
  } else {
    // Rows may differ across ranks (even_batches off); everything else must agree.
    auto headers = exchange_headers(comm, t, Agree::kNdimAndDtype, "gather_for_metrics",
                                    "; every rank needs the same number of dimensions");
    const auto mine = shape_in(headers[static_cast<size_t>(comm->rank())]);
    int64_t longest = 0;
    for (const auto& h : headers) {
      const auto shape = shape_in(h);
      if (!std::equal(shape.begin() + 1, shape.end(), mine.begin() + 1))
        fail(Errc::shape, "gather_for_metrics: ranks disagree beyond the first dimension (" +
                              ranks_text(headers) + ")");
      longest = std::max(longest, shape[0]);
    }
    at::Tensor local = to_wire(comm, t);
    std::vector<int64_t> padded_shape = mine;
    padded_shape[0] = longest;
    at::Tensor padded = at::zeros(padded_shape, local.options());
    padded.narrow(0, 0, mine[0]).copy_(local);
    std::vector<at::Tensor> parts;
    if (padded.numel() > 0) {
      auto gathered = comm->all_gather(as_bytes(padded));
      for (size_t r = 0; r < gathered.size(); ++r)
        parts.push_back(gathered[r]
                            .view(local.scalar_type())
                            .view(padded_shape)
                            .narrow(0, 0, shape_in(headers[r])[0]));
    } else {
      for (const auto& h : headers) {
        auto shape = shape_in(h);
        parts.push_back(at::empty(shape, local.options()));
      }
    }
    all = at::cat(parts, 0).to(tensor.device());
  }
  if (auto active = state.active(); active && active->end_of_dataloader && active->remainder > 0 &&
                                    all.size(0) > active->remainder)
    all = all.narrow(0, 0, active->remainder);
  return all.clone();
}

static std::vector<std::string> gather_object_impl(runtime::Communicator* comm,
                                                   const std::string& bytes) {
  if (!comm) return {bytes};
  auto size = at::full({1}, static_cast<int64_t>(bytes.size()), at::kLong);
  std::vector<int64_t> sizes;
  int64_t longest = 0;
  for (const auto& s : comm->all_gather(size)) {
    sizes.push_back(s.item<int64_t>());
    longest = std::max(longest, sizes.back());
  }
  std::vector<std::string> out(sizes.size());
  if (longest == 0) return out;
  at::Tensor mine = at::zeros({longest}, at::kByte);
  std::copy(bytes.begin(), bytes.end(), mine.data_ptr<uint8_t>());
  auto parts = comm->all_gather(mine);
  for (size_t r = 0; r < parts.size(); ++r) {
    const auto* p = parts[r].data_ptr<uint8_t>();
    out[r].assign(reinterpret_cast<const char*>(p), static_cast<size_t>(sizes[r]));
  }
  return out;
}

at::Tensor gather(runtime::Communicator* comm, const at::Tensor& tensor) {
  return as_op("gather", [&] { return gather_impl(comm, tensor); });
}

at::Tensor pad_across_processes(runtime::Communicator* comm, const at::Tensor& tensor, int64_t dim,
                                double pad_value, bool pad_first) {
  return as_op("pad_across_processes",
               [&] { return pad_impl(comm, tensor, dim, pad_value, pad_first); });
}

at::Tensor reduce(runtime::Communicator* comm, const at::Tensor& tensor, Reduction reduction) {
  return as_op("reduce", [&] { return reduce_impl(comm, tensor, reduction); });
}

at::Tensor broadcast(runtime::Communicator* comm, const at::Tensor& tensor, int root) {
  return as_op("broadcast", [&] { return broadcast_impl(comm, tensor, root); });
}

at::Tensor gather_for_metrics(runtime::Communicator* comm, const at::Tensor& tensor,
                              const runtime::GradientState& state) {
  return as_op("gather_for_metrics", [&] { return gather_for_metrics_impl(comm, tensor, state); });
}

std::vector<std::string> gather_object(runtime::Communicator* comm, const std::string& bytes) {
  return as_op("gather_object", [&] { return gather_object_impl(comm, bytes); });
}

}  // namespace accel::ops
