// minilm_dispatch PYTHON TRACE_SCRIPT MODEL_DIR FORTUNES_FILE: big-model inference on a real model,
// through the C API. transformers' BertModel of the MiniLM folder traced to TorchScript
// (TRACE_SCRIPT, minilm_trace.py, run with PYTHON, the test venv) is loaded twice: once as it is,
// once dispatched (accel_dispatch_model) from the folder's model.safetensors with a quarter of the
// model's bytes as the cpu budget and the rest on disk. Four padded batches of fortunes, tokenised
// with the folder's tokenizer.json, go through both: every output must be bitwise the same. And
// the peak anonymous memory of the dispatched forwards must stay under budget + largest offloaded
// unit + activations + 64 MB, the process's own memory included (VmHWM less RssFile and RssShmem,
// as bench/load_memory.c measures it; 130 MB against 148 MB measured, 57 MB of it the process's
// start-up).
//
// A TorchScript archive is read whole when it is loaded (docs/checkpoints.md: there is no empty
// load of an archive), so the peak is measured from after the dispatch. Exits 77 (skipped, saying
// why) without the model folder, the venv, transformers in it, or the fortunes.
#include "accel/accel.h"

#include <malloc.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace {

constexpr int kSkip = 77;
constexpr size_t kBatches = 4, kBatch = 8, kMaxLength = 64;
constexpr double kMB = 1024.0 * 1024.0;

// The temporary directory of the traced archive, removed at exit whatever happens.
std::string g_archive, g_dir;
void remove_archive() {
  if (!g_archive.empty()) std::remove(g_archive.c_str());
  if (!g_dir.empty()) rmdir(g_dir.c_str());
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "minilm_dispatch: %s\n", what.c_str());
  std::exit(1);
}

void check(accel_status s, const char* call) {
  if (s != ACCEL_OK) die(std::string(call) + ": " + accel_last_error_message());
}
#define CHECK(call) check((call), #call)

bool exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

// A /proc/self/status field, in MB.
double status_mb(const char* field) {
  std::ifstream in("/proc/self/status");
  const std::string prefix = std::string(field) + ":";
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) return std::atof(line.c_str() + prefix.size()) / 1024.0;
  die(std::string("no ") + field + " in /proc/self/status");
}

// Resets VmHWM to the current resident size (Linux 4.0 and later).
void reset_peak() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f || std::fputs("5", f) < 0 || std::fclose(f) != 0)
    die("cannot reset the peak RSS (/proc/self/clear_refs)");
}

// The first kBatches * kBatch entries of a fortune file, their newlines made spaces.
std::vector<std::string> entries(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  std::string line, entry;
  while (out.size() < kBatches * kBatch && std::getline(in, line)) {
    if (line != "%") {
      entry += (entry.empty() ? "" : " ") + line;
      continue;
    }
    if (!entry.empty()) out.push_back(entry);
    entry.clear();
  }
  if (out.size() < kBatches * kBatch) die("fewer than 32 entries in " + path);
  return out;
}

std::string tensor_name(const accel_model* m, size_t i) {
  char buf[512];
  size_t size = 0;
  CHECK(accel_model_tensor_name(m, i, buf, sizeof buf, &size));
  return buf;
}

// Each tensor's bytes, by name (before dispatch: afterwards the offloaded ones cannot be read).
std::map<std::string, size_t> tensor_bytes(const accel_model* m) {
  size_t count = 0;
  CHECK(accel_model_tensor_count(m, &count));
  std::map<std::string, size_t> out;
  for (size_t i = 0; i < count; ++i) {
    const std::string name = tensor_name(m, i);
    accel_tensor* t = nullptr;
    CHECK(accel_model_tensor(m, name.c_str(), &t));
    CHECK(accel_tensor_data_size(t, &out[name]));
    accel_tensor_free(t);
  }
  return out;
}

std::vector<char> data_of(const accel_tensor* t) {
  size_t size = 0;
  CHECK(accel_tensor_data_size(t, &size));
  std::vector<char> out(size);
  CHECK(accel_tensor_to_data(t, out.data(), size, &size));
  return out;
}

struct Batch {
  accel_tensor *ids = nullptr, *mask = nullptr;
};

// The outputs of forward (last_hidden_state, pooler_output) for every batch, as bytes.
std::vector<std::vector<char>> run(accel_model* m, const std::vector<Batch>& batches) {
  std::vector<std::vector<char>> out;
  for (const auto& b : batches) {
    const accel_tensor* inputs[2] = {b.ids, b.mask};
    accel_tensor_list* list = nullptr;
    CHECK(accel_model_call(m, "forward", inputs, 2, &list));
    size_t n = 0;
    CHECK(accel_tensor_list_count(list, &n));
    if (n != 2) die("forward returned " + std::to_string(n) + " tensors, not 2");
    for (size_t i = 0; i < n; ++i) {
      accel_tensor* t = nullptr;
      CHECK(accel_tensor_list_get(list, i, &t));
      out.push_back(data_of(t));
      accel_tensor_free(t);
    }
    accel_tensor_list_free(list);
  }
  return out;
}

std::vector<std::string> map_lines(const accel_model* m, const std::string& options) {
  accel_bytes_list* list = nullptr;
  CHECK(accel_infer_device_map(m, options.c_str(), &list));
  size_t n = 0;
  CHECK(accel_bytes_list_count(list, &n));
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) {
    const void* data = nullptr;
    size_t size = 0;
    CHECK(accel_bytes_list_get(list, i, &data, &size));
    out.emplace_back(static_cast<const char*>(data), size);
  }
  accel_bytes_list_free(list);
  return out;
}

bool under(const std::string& name, const std::string& module) {
  return module.empty() || name == module || name.rfind(module + ".", 0) == 0;
}

// The largest offloaded unit's bytes, units as accel_dispatch_model makes them: a disk entry's
// module, a tensor entry's parent module, the root entry's top-level modules.
size_t largest_unit(const std::vector<std::string>& map,
                    const std::map<std::string, size_t>& bytes) {
  size_t largest = 0;
  for (const auto& line : map) {
    const auto eq = line.rfind('=');
    if (line.substr(eq + 1) != "disk") continue;
    const std::string entry = line.substr(0, eq);
    std::map<std::string, size_t> units;
    for (const auto& [name, b] : bytes) {
      if (!under(name, entry)) continue;
      // The root's entry: each top-level module is a unit; a tensor's entry: its parent module.
      if (entry.empty())
        units[name.substr(0, name.find('.'))] += b;
      else
        units[name == entry ? entry.substr(0, entry.rfind('.')) : entry] += b;
    }
    for (const auto& u : units) largest = std::max(largest, u.second);
  }
  return largest;
}

// Every float finite and some nonzero: bitwise equality of garbage would prove nothing.
void check_sane(const std::vector<char>& bytes) {
  const auto* v = reinterpret_cast<const float*>(bytes.data());
  bool nonzero = false;
  for (size_t i = 0; i < bytes.size() / 4; ++i) {
    if (!std::isfinite(v[i])) die("a non-finite output");
    nonzero = nonzero || v[i] != 0;
  }
  if (!nonzero) die("an output of zeros");
}

int skip(const std::string& why) {
  std::printf("skipped: %s\n", why.c_str());
  return kSkip;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: minilm_dispatch PYTHON TRACE_SCRIPT MODEL_DIR FORTUNES_FILE\n");
    return 2;
  }
  const std::string python = argv[1], script = argv[2], model_dir = argv[3], fortunes = argv[4];
  const std::string checkpoint = model_dir + "/model.safetensors";
  if (!exists(checkpoint))
    return skip("no MiniLM model folder at " + model_dir + " (tools/fetch_minilm.sh)");
  if (access(python.c_str(), X_OK) != 0)
    return skip("no test venv at " + python + " (tools/setup.sh)");
  if (!exists(fortunes)) return skip("no " + fortunes + " (Debian's fortunes-min)");
  // glibc returns freed blocks above 1 MB to the kernel: resident memory then measures what is
  // live, not malloc's cache (as bench/load_memory.py runs its programs).
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  const double anon_start = status_mb("RssAnon");  // LibTorch's and libaccel's start-up

  char dir_template[] = "/tmp/accel-minilm-dispatch-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (!dir) die("mkdtemp failed");
  g_dir = dir;
  g_archive = g_dir + "/minilm.pt";
  std::atexit(remove_archive);
  const std::string archive = g_archive;
  const std::string command = "'" + python + "' '" + script + "' '" + model_dir + "' '" + dir + "'";
  const int traced = std::system(command.c_str());
  if (WIFEXITED(traced) && WEXITSTATUS(traced) == kSkip) return kSkip;
  if (!WIFEXITED(traced) || WEXITSTATUS(traced) != 0) die("minilm_trace.py failed: " + command);

  accel_tokenizer* tok = nullptr;
  CHECK(accel_tokenizer_load(model_dir.c_str(), &tok));
  const auto texts = entries(fortunes);
  std::vector<Batch> batches(kBatches);
  for (size_t i = 0; i < kBatches; ++i) {
    std::vector<const char*> rows;
    for (size_t j = 0; j < kBatch; ++j) rows.push_back(texts[i * kBatch + j].c_str());
    CHECK(accel_tokenizer_encode_batch(tok, rows.data(), kBatch, kMaxLength, &batches[i].ids,
                                       &batches[i].mask));
  }
  int64_t shape[2] = {0, 0};
  size_t dims = 0;
  int64_t longest = 0;
  for (const auto& b : batches) {
    CHECK(accel_tensor_shape(b.ids, shape, 2, &dims));
    longest = std::max(longest, shape[1]);
  }

  // The dispatched model first, in a process that has run no forward yet: what the whole model's
  // forwards leave in malloc's free heap would count as the dispatched one's.
  accel_model* m = nullptr;
  CHECK(accel_model_load_torchscript(archive.c_str(), &m));
  const auto bytes = tensor_bytes(m);
  size_t model_bytes = 0;
  for (const auto& [name, b] : bytes) model_bytes += b;
  const size_t budget = model_bytes / 4;
  const std::string options =
      "max_memory=cpu:" + std::to_string(budget) + ",disk no_split_module_classes=BertLayer";
  const auto map = map_lines(m, options);
  std::printf("device map for %s:", options.c_str());
  for (const auto& l : map) std::printf(" %s", l.c_str());
  std::printf("\n");
  CHECK(accel_dispatch_model(m, checkpoint.c_str(), options.c_str()));
  const double anon_dispatched = status_mb("RssAnon");
  // The first call of a TorchScript method also profiles and optimises it (LibTorch's profiling
  // executor): ~65 MB more at its peak on this model, whether dispatched or not (plain LibTorch
  // from Python alike), which glibc then keeps as free heap. A one-off of TorchScript's, measured
  // apart; the forwards are measured after it (as bench/load_memory.c measures its second
  // forward), that free heap given back first. Its outputs are checked too.
  reset_peak();
  const auto first = run(m, {batches[0]});
  const double first_peak = status_mb("VmHWM") - status_mb("RssFile") - status_mb("RssShmem");
  malloc_trim(0);
  reset_peak();
  const auto got = run(m, batches);
  const double peak = status_mb("VmHWM") - status_mb("RssFile") - status_mb("RssShmem");
  accel_model_free(m);

  accel_model* full = nullptr;
  CHECK(accel_model_load_torchscript(archive.c_str(), &full));
  remove_archive();
  const auto expected = run(full, batches);
  accel_model_free(full);
  for (const auto& e : expected) check_sane(e);

  int failures = 0;
  for (size_t i = 0; i < expected.size(); ++i)
    if (got[i] != expected[i] || (i < first.size() && first[i] != expected[i])) {
      std::printf("batch %zu, output %zu: the dispatched model's differs\n", i / 2, i % 2);
      ++failures;
    }
  // A layer's live tensors, generously: hidden states, q, k, v and their views (8 x hidden), the
  // intermediate and its GELU (2 x intermediate) per token; scores, probabilities and the mask's
  // broadcast (3 x heads x length) per token pair; fp32, the longest batch.
  const double tokens = static_cast<double>(kBatch * longest);
  const double activations =
      4.0 * (tokens * (8 * 384 + 2 * 1536) + 3.0 * tokens * 12 * static_cast<double>(longest)) /
      kMB;
  const double unit = static_cast<double>(largest_unit(map, bytes)) / kMB;
  const double bound = budget / kMB + unit + activations + 64;
  std::printf(
      "model %.1f MB; cpu budget %.1f MB (25 %%), largest offloaded unit %.1f MB, activations "
      "%.1f MB (%zu x %lld tokens); bound (these + 64 MB) %.1f MB\n"
      "anonymous memory: %.1f MB at start-up, %.1f MB after dispatch, peak %.1f MB during the "
      "first forward (TorchScript's profiling run), peak %.1f MB during the %zu forwards after it\n"
      "outputs of %zu batches: %s\n",
      model_bytes / kMB, budget / kMB, unit, activations, kBatch, static_cast<long long>(longest),
      bound, anon_start, anon_dispatched, first_peak, peak, kBatches, kBatches,
      failures ? "DIFFER" : "bitwise equal to the archive loaded whole");
  if (unit <= 0) {
    std::printf("nothing was offloaded to disk\n");
    ++failures;
  }
#if defined(__SANITIZE_ADDRESS__)
  std::printf("memory not checked: AddressSanitizer's allocator makes it measure ASan\n");
#else
  if (peak > bound) {
    std::printf("the peak is over the bound\n");
    ++failures;
  }
#endif
  for (auto& b : batches) {
    accel_tensor_free(b.ids);
    accel_tensor_free(b.mask);
  }
  accel_tokenizer_free(tok);
  return failures ? 1 : 0;
}
