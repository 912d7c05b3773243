#include "checkpoint/model_io.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <locale>
#include <set>
#include <sstream>

#include "checkpoint/safetensors.hpp"
#include "checkpoint/tensor_reader.hpp"
#include "common/error.hpp"
#include "common/files.hpp"
#include "model/materialize.hpp"
#include "ops/main_process.hpp"

namespace accel::checkpoint {

namespace {

const std::pair<at::ScalarType, const char*> kDtypes[] = {
    {at::kFloat, "F32"}, {at::kDouble, "F64"}, {at::kHalf, "F16"},  {at::kBFloat16, "BF16"},
    {at::kLong, "I64"},  {at::kInt, "I32"},    {at::kShort, "I16"}, {at::kChar, "I8"},
    {at::kByte, "U8"},   {at::kBool, "BOOL"}};

std::string dtype_name(at::ScalarType t) {
  for (const auto& [ours, name] : kDtypes)
    if (ours == t) return name;
  fail(Errc::dtype, std::string("dtype ") + c10::toString(t) + " has no safetensors equivalent");
}

// The checkpoint's view of a model: parameters then buffers, by name.
NamedTensors state_of(const model::Model& m) {
  NamedTensors all = m.named_parameters();
  for (auto& b : m.named_buffers()) all.push_back(std::move(b));
  return all;
}

std::string shard_name(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i, n);
  return buf;
}

}  // namespace

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<TensorEntry> entries;
  std::vector<at::Tensor> data;
  for (const auto& [name, t] : tensors) {
    TensorEntry e;
    e.name = name;
    e.dtype = dtype_name(t.scalar_type());
    e.shape.assign(t.sizes().begin(), t.sizes().end());
    entries.push_back(std::move(e));
    data.push_back(t.detach().to(at::kCPU).contiguous());
  }
  const std::string header = make_header(entries, metadata);
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  errno = 0;
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail(Errc::io, "cannot write '" + tmp + "'");
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    for (const auto& t : data)
      out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
    out.flush();
    if (!out) {
      const int err = errno;  // what the failed write said (ENOSPC, EFBIG, EIO, ...)
      std::remove(tmp.c_str());
      fail(Errc::io, "error while writing '" + tmp +
                         "': " + (err ? std::strerror(err) : "the stream failed"));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail(Errc::io, "cannot rename '" + tmp + "' to '" + path + "'");
  }
}

NamedTensors read_safetensors(const std::string& path) {
  TensorReader reader({path});
  NamedTensors out;
  for (const auto& name : reader.names_in_data_order()) out.emplace_back(name, reader.read(name));
  return out;
}

std::map<std::string, std::string> read_safetensors_metadata(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(Errc::io, sys_error("cannot read '" + path + "'", errno));
  in.seekg(0, std::ios::end);
  const auto file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  std::string prefix(static_cast<size_t>(std::min<uint64_t>(file_size, 8)), '\0');
  in.read(prefix.data(), static_cast<std::streamsize>(prefix.size()));
  if (prefix.size() == 8) {
    uint64_t length = 0;
    for (int i = 7; i >= 0; --i) length = length << 8 | static_cast<uint8_t>(prefix[i]);
    // A length past the file or over 100 MB is parse_header's to refuse: read nothing more then.
    if (length <= file_size - 8 && length <= (uint64_t{100} << 20)) {
      prefix.resize(static_cast<size_t>(8 + length));
      in.read(prefix.data() + 8, static_cast<std::streamsize>(length));
    }
  }
  if (!in) fail(Errc::io, "cannot read '" + path + "': it ended early");
  return parse_header(reinterpret_cast<const uint8_t*>(prefix.data()), prefix.size(), file_size,
                      path)
      .metadata;
}

std::vector<std::string> save_model(const model::Model& m, const std::string& dir,
                                    uint64_t max_shard_bytes) {
  m.require_filled("saving the model");
  make_directories(dir, 0755);  // as Accelerate's os.makedirs(exist_ok=True)
  const NamedTensors state = state_of(m);
  // Greedy in parameter order: a tensor that does not fit starts the next shard.
  std::vector<NamedTensors> shards(1);
  uint64_t current = 0, total = 0;
  for (const auto& nt : state) {
    const uint64_t bytes = nt.second.nbytes();
    if (current > 0 && current + bytes > max_shard_bytes) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(nt);
    current += bytes;
    total += bytes;
  }
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  std::vector<std::string> files;
  if (shards.size() == 1) {
    files.push_back(dir + "/model.safetensors");
    write_safetensors(files.back(), shards[0], meta);
    return files;
  }
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = nlohmann::ordered_json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = shard_name(i + 1, shards.size());
    files.push_back(dir + "/" + name);
    write_safetensors(files.back(), shards[i], meta);
    for (const auto& [n, t] : shards[i]) index["weight_map"][n] = name;
  }
  const std::string path = dir + "/model.safetensors.index.json";
  // Named by the process: with save_on_each_node, machines that share `dir` write it alike.
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  std::ofstream out(tmp);
  out << index.dump(2) << "\n";
  out.close();
  if (!out || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail(Errc::io, "cannot write '" + path + "'");
  }
  files.push_back(path);
  return files;
}

void save_model_from_main(runtime::Accelerator& acc, const model::Model& m, const std::string& dir,
                          const std::string& max_shard_size) {
  const uint64_t shard = parse_size(max_shard_size);  // the same text on every rank: fails alike
  const auto body = [&] {
    m.require_whole("accel_save_model");
    save_model(m, dir, shard);
  };
  if (ops::save_on_each_node(acc))
    ops::run_on_local_main(acc, body);  // a copy on each machine
  else
    ops::run_on_main(acc, body);
}

void load_checkpoint_in_model(model::Model& m, const std::string& path) {
  m.require_whole("accel_load_checkpoint_in_model");
  PlannedLoad planned = plan_strict_load(m, path);
  write_planned(m, planned);
}

bool held_here(const at::Tensor& t) {
  return t.numel() == 0 || t.storage().nbytes() > 0;
}

// Written in place as read: staging the whole model first would cost a second model in memory,
// the very thing this avoids. Every failure that can be known before the bytes (a missing or
// unreadable shard, a corrupt or truncated file, an unknown dtype, a mismatch) was caught by the
// reader and the plan before this runs; what remains is a read failing midway (an I/O error, a
// file changed after it was checked), reported with what was already loaded.
void write_planned(model::Model& m, PlannedLoad& planned) {
  std::map<std::string, at::Tensor> live;
  for (auto& [n, t] : state_of(m)) live.emplace(n, std::move(t));
  size_t done = 0;
  std::string first;
  for (const auto& [model_name, checkpoint_name] : planned.copies) {
    const at::Tensor& target = live.at(model_name);
    try {
      if (model::is_empty(target)) {
        // Built empty: this tensor's storage is made now, read into, then given to it in place.
        // A tensor named twice (tied) is filled by the first copy and read into by the next.
        at::Tensor value = at::empty(target.sizes(), target.options().device(at::kCPU));
        planned.reader->read_into(checkpoint_name, value);
        m.fill(target, value);
      } else if (held_here(target)) {  // not held: ZeRO stage 3, another rank owns it
        planned.reader->read_into(checkpoint_name, target);
      } else {
        continue;
      }
    } catch (const accel::Error& e) {
      fail(e.code(), std::string(e.what()) + "; the model is partly loaded: " +
                         std::to_string(done) + " tensor(s) were read into it" +
                         (first.empty() ? ""
                                        : " ('" + first + "' to the one before '" + model_name +
                                              "', in the load's order)") +
                         ", '" + model_name + "' and those after it keep their values; load again");
    }
    if (first.empty()) first = model_name;
    ++done;
  }
  // An empty build's tensors the checkpoint had no value for (a new head, a size ignored as
  // mismatched): their layer's own initialisation now, as transformers initialises the weights
  // a low_cpu_mem_usage load left missing.
  m.initialize_empty();
}

void apply_weights(const StagedWeights& staged) {
  c10::NoGradGuard no_grad;
  for (const auto& [live, value] : staged) at::Tensor(live).copy_(value);
}

std::string safetensors_dtype(at::ScalarType t) {
  return dtype_name(t);
}

at::ScalarType torch_dtype(const std::string& dtype, const std::string& file) {
  for (const auto& [ours, n] : kDtypes)
    if (dtype == n) return ours;
  fail(Errc::io, "safetensors file '" + file + "': dtype " + dtype + " is not supported here");
}

NamedTensors model_state(const model::Model& m) {
  return state_of(m);
}

namespace {

// load_checkpoint_in_model's rule: every name, shape and dtype matches, or accel::Error(shape)
// lists what does not.
void check_strict(const NamedTensors& state, const std::vector<TensorSpec>& specs,
                  const std::string& path) {
  std::map<std::string, const TensorSpec*> loaded;
  for (const auto& spec : specs) loaded[spec.name] = &spec;
  std::string missing, mismatched, unexpected;
  std::set<std::string> known;
  for (const auto& [n, t] : state) {
    known.insert(n);
    auto it = loaded.find(n);
    if (it == loaded.end()) {
      missing += (missing.empty() ? "" : ", ") + n;
      continue;
    }
    const TensorSpec& c = *it->second;
    const at::ScalarType type = torch_dtype(c.dtype, path);
    if (c.shape != t.sizes().vec() || type != t.scalar_type()) {
      std::ostringstream d;
      d.imbue(std::locale::classic());  // sizes as [1000, 3], not the host locale's [1.000, 3]
      d << n << " (checkpoint " << c10::toString(type) << at::IntArrayRef(c.shape) << ", model "
        << c10::toString(t.scalar_type()) << t.sizes() << ")";
      mismatched += (mismatched.empty() ? "" : ", ") + d.str();
    }
  }
  for (const auto& [n, spec] : loaded)
    if (!known.count(n)) unexpected += (unexpected.empty() ? "" : ", ") + n;
  if (!missing.empty() || !mismatched.empty() || !unexpected.empty())
    fail(Errc::shape, "the checkpoint '" + path + "' does not match the model:" +
                          (missing.empty() ? "" : " missing: " + missing + ";") +
                          (unexpected.empty() ? "" : " unexpected: " + unexpected + ";") +
                          (mismatched.empty() ? "" : " shape/dtype mismatch: " + mismatched + ";"));
}

}  // namespace

PlannedLoad plan_strict_load(const model::Model& m, const std::string& path) {
  PlannedLoad planned;
  planned.reader = std::make_shared<TensorReader>(checkpoint_files(path));
  const NamedTensors state = state_of(m);
  check_strict(state, planned.reader->specs(), path);
  for (const auto& [n, t] : state) planned.copies.emplace_back(n, n);
  return planned;
}

StagedWeights stage_checkpoint_for_model(const model::Model& m, const std::string& path) {
  PlannedLoad planned = plan_strict_load(m, path);
  std::map<std::string, at::Tensor> live;
  for (auto& [n, t] : state_of(m)) live.emplace(n, std::move(t));
  StagedWeights staged;  // load_state checks every file before it changes anything
  for (const auto& [model_name, checkpoint_name] : planned.copies)
    staged.emplace_back(live.at(model_name), planned.reader->read(checkpoint_name));
  return staged;
}

}  // namespace accel::checkpoint
