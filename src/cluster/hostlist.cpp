#include "cluster/hostlist.hpp"

#include <cctype>
#include <cstdint>

#include "common/error.hpp"
#include "common/parse.hpp"

namespace accel::cluster {

namespace {

[[noreturn]] void bad(const std::string& text, size_t at, const std::string& why) {
  fail(Errc::config, "the host list '" + text + "' does not parse at character " +
                         std::to_string(at + 1) + ": " + why);
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// The names a bracket body ("001-003,7") stands for, zero-padded as the lower bound is written.
std::vector<std::string> expand_ranges(const std::string& text, size_t open,
                                       const std::string& body, size_t max_hosts) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= body.size()) {
    size_t comma = body.find(',', start);
    if (comma == std::string::npos) comma = body.size();
    const std::string item = body.substr(start, comma - start);
    const size_t at = open + 1 + start;
    const size_t dash = item.find('-');
    const std::string lo = item.substr(0, dash);
    const std::string hi = dash == std::string::npos ? lo : item.substr(dash + 1);
    if (!all_digits(lo) || !all_digits(hi))
      bad(text, at, "'" + item + "' is not a number or a range like 001-003");
    uint64_t a = 0, b = 0;
    if (lo.size() > 18 || hi.size() > 18 || !parse_uint(lo, &a) || !parse_uint(hi, &b))
      bad(text, at, "'" + item + "' is too large");
    if (b < a) bad(text, at, "the range '" + item + "' runs backwards");
    if (b - a >= max_hosts || out.size() + (b - a) >= max_hosts)
      bad(text, at, "more than " + std::to_string(max_hosts) + " hosts");
    for (uint64_t v = a; v <= b; ++v) {
      std::string digits = std::to_string(v);
      if (digits.size() < lo.size()) digits.insert(0, lo.size() - digits.size(), '0');
      out.push_back(digits);
    }
    start = comma + 1;
  }
  return out;
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& text, size_t max_hosts) {
  std::vector<std::string> hosts;
  size_t i = 0;
  if (text.empty()) bad(text, 0, "it is empty");
  while (i < text.size()) {
    // One item: name pieces and bracket groups up to a top-level comma.
    std::vector<std::string> names{""};
    const size_t item_start = i;
    while (i < text.size() && text[i] != ',') {
      const char c = text[i];
      if (c == '[') {
        const size_t close = text.find(']', i);
        if (close == std::string::npos) bad(text, i, "'[' is never closed");
        const std::string body = text.substr(i + 1, close - i - 1);
        if (body.find('[') != std::string::npos) bad(text, i, "brackets do not nest");
        const auto parts = expand_ranges(text, i, body, max_hosts);
        if (names.size() * parts.size() > max_hosts)
          bad(text, i, "more than " + std::to_string(max_hosts) + " hosts");
        std::vector<std::string> product;
        product.reserve(names.size() * parts.size());
        for (const auto& n : names)
          for (const auto& p : parts) product.push_back(n + p);
        names.swap(product);
        i = close + 1;
      } else if (c == ']') {
        bad(text, i, "']' without '['");
      } else if (std::isspace(static_cast<unsigned char>(c)) ||
                 std::iscntrl(static_cast<unsigned char>(c))) {
        bad(text, i, "a host name has no spaces or control characters");
      } else {
        for (auto& n : names) n += c;
        ++i;
      }
    }
    if (i == item_start) bad(text, i, "an empty host name");
    if (hosts.size() + names.size() > max_hosts)
      bad(text, item_start, "more than " + std::to_string(max_hosts) + " hosts");
    hosts.insert(hosts.end(), names.begin(), names.end());
    if (i < text.size()) {
      ++i;  // the comma
      if (i == text.size()) bad(text, i - 1, "it ends with a comma");
    }
  }
  return hosts;
}

std::vector<int> expand_task_counts(const std::string& text, size_t max_nodes) {
  auto bad_counts = [&](const std::string& why) -> void {
    fail(Errc::config, "the task counts '" + text + "' do not parse: " + why +
                           " (SLURM writes them like 2(x3),1)");
  };
  std::vector<int> out;
  if (text.empty()) bad_counts("they are empty");
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(start, comma - start);
    std::string count = item, times = "1";
    const size_t paren = item.find("(x");
    if (paren != std::string::npos) {
      if (item.back() != ')') bad_counts("'" + item + "' lacks its ')'");
      count = item.substr(0, paren);
      times = item.substr(paren + 2, item.size() - paren - 3);
    }
    long long c = 0, t = 0;
    if (!all_digits(count) || !parse_int(count, &c) || c < 1 || c > (1 << 20))
      bad_counts("'" + item + "' is not a positive task count");
    if (!all_digits(times) || !parse_int(times, &t) || t < 1 ||
        static_cast<unsigned long long>(t) > max_nodes - out.size())
      bad_counts("'" + item + "' repeats a count an impossible number of times");
    out.insert(out.end(), static_cast<size_t>(t), static_cast<int>(c));
    start = comma + 1;
  }
  return out;
}

}  // namespace accel::cluster
