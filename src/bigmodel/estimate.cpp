#include "bigmodel/estimate.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <regex>

#include "common/error.hpp"
#include "zero/partition.hpp"

namespace accel::bigmodel {

namespace {

bool is_floating(const std::string& dtype) {
  return dtype == "F64" || dtype == "F32" || dtype == "F16" || dtype == "BF16";
}

uint64_t element_count(const checkpoint::TensorEntry& t) {
  uint64_t n = 1;
  for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
  return n;
}

// The layer a tensor belongs to: the outermost module matching `no_split`, else its own module;
// a tensor of the root is a layer by itself (Accelerate's modules_to_treat holds the root's
// parameters and buffers one by one).
std::string layer_of(const std::string& name, const std::regex* no_split) {
  const auto dot = name.rfind('.');
  if (dot == std::string::npos) return name;
  if (no_split)
    for (size_t at = name.find('.'); at != std::string::npos && at <= dot;
         at = name.find('.', at + 1))
      if (std::regex_match(name.begin(), name.begin() + static_cast<std::ptrdiff_t>(at), *no_split))
        return name.substr(0, at);
  return name.substr(0, dot);
}

// Python's len(): code points of UTF-8 text.
size_t py_len(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Python's str.center (CPython's pad(): the odd space goes left when both margin and width are
// odd).
std::string py_center(const std::string& s, size_t width) {
  const size_t len = py_len(s);
  if (width <= len) return s;
  const size_t marg = width - len;
  const size_t left = marg / 2 + (marg & width & 1);
  return std::string(left, ' ') + s + std::string(marg - left, ' ');
}

std::string repeat(const std::string& unit, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += unit;
  return out;
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

// repr() of a float from its shortest round-trip digits: fixed notation from 1e-4 to 1e16,
// "d.ddde+XX" outside, as Python's float_repr_style 'short'.
std::string python_repr(double y) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, y, std::chars_format::scientific);
  const std::string sci(buf, res.ptr);
  const auto e_at = sci.find('e');
  std::string digits = sci.substr(0, e_at);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp = std::stoi(sci.substr(e_at + 1));
  if (exp < -4 || exp >= 16) {
    std::string mant = digits.substr(0, 1);
    if (digits.size() > 1) mant += "." + digits.substr(1);
    const std::string e = std::to_string(exp < 0 ? -exp : exp);
    return mant + (exp < 0 ? "e-" : "e+") + (e.size() < 2 ? "0" : "") + e;
  }
  if (exp < 0) return "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  const size_t whole = static_cast<size_t>(exp) + 1;
  if (digits.size() <= whole) return digits + std::string(whole - digits.size(), '0') + ".0";
  return digits.substr(0, whole) + "." + digits.substr(whole);
}

}  // namespace

ModelSizes model_sizes(const std::vector<checkpoint::TensorEntry>& tensors,
                       const std::string& no_split) {
  std::regex pattern;
  if (!no_split.empty()) {
    try {
      pattern = std::regex(no_split, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      fail(Errc::invalid_argument,
           "--no-split '" + no_split + "' is not a regular expression: " + e.what());
    }
  }
  struct Layer {
    uint64_t bytes = 0, floating = 0;
    bool root = false;  // a tensor of the root module, a layer by itself
  };
  ModelSizes s;
  std::vector<std::string> order;  // layers, first seen first
  std::map<std::string, Layer> by;
  for (const auto& t : tensors) {
    const bool floating = is_floating(t.dtype);
    const uint64_t bytes = element_count(t) * (floating ? 4 : checkpoint::dtype_size(t.dtype));
    s.total += bytes;
    if (floating)
      s.param_bytes.push_back(static_cast<int64_t>(bytes));
    else
      s.buffer_bytes += bytes;
    const std::string layer = layer_of(t.name, no_split.empty() ? nullptr : &pattern);
    if (!by.count(layer)) order.push_back(layer);
    Layer& l = by[layer];
    l.bytes += bytes;
    l.floating += floating ? bytes : 0;
    l.root = t.name.find('.') == std::string::npos;
  }
  for (const auto& name : order) {
    const Layer& l = by[name];
    if (l.bytes > s.largest_layer || s.largest_names.empty()) {
      s.largest_layer = l.bytes;
      s.largest_names = {name};
    } else if (l.bytes == s.largest_layer) {
      s.largest_names.push_back(name);
    }
    if (l.root)
      s.root_param_bytes += l.floating;
    else if (l.floating > 0)
      s.unit_param_bytes.push_back(l.floating);
  }
  return s;
}

std::string python_round2(double x) {
  // to_chars's fixed precision rounds the exact binary value, ties to even, as Python's round()
  // (dtoa mode 3); the rounded text read back is the float round() returns.
  char buf[400];
  const auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::fixed, 2);
  double y = 0;
  std::from_chars(buf, res.ptr, y);
  return python_repr(y);
}

std::string convert_bytes(PyNumber size) {
  for (const char* unit : {"bytes", "KB", "MB", "GB", "TB"}) {
    if (size.value < 1024.0) {
      if (size.is_integer) return std::to_string(static_cast<uint64_t>(size.value)) + " " + unit;
      return python_round2(size.value) + " " + unit;
    }
    size = {size.value / 1024.0, false};
  }
  return python_round2(size.value) + " PB";
}

std::string ascii_table(const std::vector<std::string>& headers,
                        const std::vector<std::vector<std::string>>& rows,
                        const std::string& title) {
  const std::string sep = "│", line = "─";
  std::vector<size_t> widths;
  for (size_t i = 0; i < headers.size(); ++i) {
    size_t w = py_len(headers[i]);
    for (const auto& row : rows) w = std::max(w, py_len(row[i]));
    widths.push_back(w);
  }
  const std::vector<size_t> formats = widths;  // the "%Ns" of each column, fixed here
  size_t diff = 0;
  auto make_row = [&](const std::string& left, const std::string& middle,
                      const std::string& right) {
    std::vector<std::string> parts;
    for (size_t w : widths) parts.push_back(repeat(line, w));
    return left + join(parts, middle) + repeat(line, diff) + right;
  };
  auto pattern = [&](const std::vector<std::string>& cells) {
    std::string out = sep;
    for (size_t i = 0; i < cells.size(); ++i) {
      const size_t len = py_len(cells[i]);
      out += std::string(formats[i] > len ? formats[i] - len : 0, ' ') + cells[i] + sep;
    }
    return out;
  };
  auto centered = [&](const std::vector<std::string>& cells) {
    std::vector<std::string> out;
    for (size_t i = 0; i < cells.size(); ++i) out.push_back(py_center(cells[i], widths[i]));
    return out;
  };
  std::string separator = make_row("├", "┼", "┤");
  size_t sum = 0;
  for (size_t w : widths) sum += w;
  if (py_len(title) > sum) {
    const size_t a = py_len(title), b = py_len(separator);
    diff = a > b ? a - b : b - a;
    widths.back() += diff;
  }
  separator = make_row("├", "┼", "┤");
  std::string table = make_row("┌", line, "┐") + "\n" + sep +
                      py_center(title, py_len(separator) - 2) + sep + "\n" +
                      make_row("├", "┬", "┤") + "\n";
  widths.back() += diff;
  table += pattern(centered(headers)) + "\n" + separator + "\n";
  for (const auto& row : rows) table += pattern(centered(row)) + "\n";
  std::vector<std::string> bottom;
  for (size_t w : widths) bottom.push_back(repeat(line, w));
  return table + "└" + join(bottom, "┴") + "┘";
}

bool known_dtype(const std::string& d) {
  return d == "float32" || d == "float16" || d == "bfloat16" || d == "int8" || d == "int4";
}

std::string accelerate_table(const ModelSizes& sizes, const std::vector<std::string>& dtypes,
                             const std::string& name) {
  std::vector<std::vector<std::string>> rows;
  const double total = static_cast<double>(sizes.total);
  const double largest = static_cast<double>(sizes.largest_layer);
  for (const auto& dtype : dtypes) {
    if (!known_dtype(dtype))
      fail(Errc::invalid_argument,
           "--dtypes: '" + dtype + "' is not one of float32, float16, bfloat16, int8, int4");
    // estimate_training_usage: fp32 4 x (weights, gradients, two Adam moments); fp16 and bf16
    // mixed precision the largest of its parts, 2 x (the two moments); nothing for int8/int4.
    std::string training = "N/A";
    if (dtype == "float32") training = convert_bytes({4.0 * total, true});
    if (dtype == "float16" || dtype == "bfloat16") training = convert_bytes({2.0 * total, true});
    const double divisor = dtype == "float32" ? 1 : dtype == "int8" ? 4 : dtype == "int4" ? 8 : 2;
    const bool whole = dtype == "float32";  // the others are Python's true division: floats
    rows.push_back({dtype, convert_bytes({largest / divisor, whole}),
                    convert_bytes({total / divisor, whole}), training});
  }
  return ascii_table({"dtype", "Largest Layer", "Total Size", "Training using Adam"}, rows,
                     "Memory Usage for loading `" + name + "`");
}

namespace {

constexpr uint64_t kDirectGradient = uint64_t{1} << 20;  // zero::GradShard: its own bucket above
constexpr uint64_t kBucket = uint64_t{25} << 20;         // zero::GradShard's bucket size

// Rank r's figures given who owns each parameter (`owners` empty: every rank holds everything).
ZeroFigures rank_figures(const ModelSizes& s, int stage, const std::vector<int>& owners, int r) {
  uint64_t all = 0, owned = 0, largest = 0, largest_owned = 0, largest_other = 0, small = 0;
  for (size_t k = 0; k < s.param_bytes.size(); ++k) {
    const auto b = static_cast<uint64_t>(s.param_bytes[k]);
    const bool mine = owners.empty() || owners[k] == r;
    all += b;
    largest = std::max(largest, b);
    if (b < kDirectGradient) small += b;
    if (mine) {
      owned += b;
      largest_owned = std::max(largest_owned, b);
    } else if (b >= kDirectGradient) {
      largest_other = std::max(largest_other, b);
    }
  }
  ZeroFigures f;
  f.stage = stage;
  // The AdamW step makes one temporary of each parameter it steps in turn (optim::LeanAdamW's
  // denominator): the largest parameter this rank steps.
  f.transient = largest_owned;
  f.parameters = (stage == 3 ? owned : all) + s.buffer_bytes;
  f.gradients = stage >= 2 ? owned : all;
  f.optimizer = 2 * (stage >= 1 ? owned : all);  // exp_avg and exp_avg_sq
  if (stage == 2) {
    // Backward: a gradient another rank owns is whole here until its reduce-scatter (one of a
    // megabyte or more where autograd made it, smaller ones in a bucket).
    f.transient = std::max({f.transient, largest_other, std::min(small, kBucket)});
  } else if (stage == 3) {
    // Backward: the root unit and the unit being computed gathered with their whole gradients, and
    // the next unit's parameters prefetched (backward_prefetch, on by default).
    std::vector<uint64_t> units = s.unit_param_bytes;
    std::sort(units.rbegin(), units.rend());
    const uint64_t u1 = units.empty() ? 0 : units[0], u2 = units.size() > 1 ? units[1] : 0;
    f.transient = std::max(f.transient, 2 * s.root_param_bytes + 2 * u1 + u2);
  }
  return f;
}

}  // namespace

ZeroFigures zero_per_rank(const ModelSizes& sizes, int stage, int processes) {
  if (stage < 0 || stage > 3) fail(Errc::invalid_argument, "--zero-stage must be 0, 1, 2 or 3");
  if (processes < 1) fail(Errc::invalid_argument, "--num-processes must be at least 1");
  std::vector<int> owners;
  if (stage > 0) owners = zero::assign_owners(sizes.param_bytes, processes);
  ZeroFigures most;
  for (int r = 0; r < (stage > 0 ? processes : 1); ++r) {
    const ZeroFigures f = rank_figures(sizes, stage, owners, r);
    if (r == 0 || f.total() > most.total()) most = f;
  }
  return most;
}

std::string zero_table(const ModelSizes& sizes, const std::vector<int>& stages, int processes) {
  std::vector<std::vector<std::string>> rows;
  auto bytes = [](uint64_t n) { return convert_bytes({static_cast<double>(n), true}); };
  for (int stage : stages) {
    const ZeroFigures f = zero_per_rank(sizes, stage, processes);
    rows.push_back({std::to_string(stage), bytes(f.parameters), bytes(f.gradients),
                    bytes(f.optimizer), bytes(f.transient), bytes(f.total())});
  }
  return ascii_table(
      {"ZeRO stage", "Parameters", "Gradients", "AdamW state", "In flight", "Per rank"}, rows,
      "libaccel per rank on " + std::to_string(processes) + " process" +
          (processes == 1 ? "" : "es") + " (fp32 AdamW)");
}

}  // namespace accel::bigmodel
