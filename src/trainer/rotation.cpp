#include "trainer/rotation.hpp"

#include <algorithm>
#include <cctype>
#include <utility>

namespace accel::trainer {

namespace {

const std::string kPrefix = "checkpoint-";

// re.match(".*checkpoint-([0-9]+)", path): the digits after the last "checkpoint-" followed by
// one (greedy .*), which need not end the name ("checkpoint-12b" is step 12).
std::optional<long long> step_of(const std::string& path) {
  for (size_t at = path.rfind(kPrefix); at != std::string::npos;
       at = at == 0 ? std::string::npos : path.rfind(kPrefix, at - 1)) {
    size_t i = at + kPrefix.size(), j = i;
    while (j < path.size() && std::isdigit(static_cast<unsigned char>(path[j]))) ++j;
    if (j > i) {
      const std::string digits = path.substr(i, std::min<size_t>(j - i, 18));
      return std::stoll(digits);  // a longer run of digits than 18 is no step libaccel writes
    }
  }
  return std::nullopt;
}

std::string join(const std::string& dir, const std::string& name) {
  return normal_path(dir + "/" + name);
}

}  // namespace

std::string normal_path(const std::string& path) {
  if (path.empty()) return ".";
  std::string out;
  if (path[0] == '/')
    out = (path.size() > 1 && path[1] == '/' && (path.size() == 2 || path[2] != '/')) ? "//" : "/";
  std::string part;
  bool first = true;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      if (!part.empty() && part != ".") {
        out += (first ? "" : "/") + part;
        first = false;
      }
      part.clear();
    } else {
      part += path[i];
    }
  }
  return out.empty() ? "." : out;
}

std::vector<std::string> sorted_checkpoints(const std::string& output_dir,
                                            const std::vector<std::string>& dirs,
                                            const std::optional<std::string>& best) {
  std::vector<std::pair<long long, std::string>> found;
  for (const auto& name : dirs) {
    if (name.rfind(kPrefix, 0) != 0) continue;  // the glob "checkpoint-*"
    const std::string path = join(output_dir, name);
    if (const auto step = step_of(path)) found.emplace_back(*step, path);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> sorted;
  for (auto& f : found) sorted.push_back(std::move(f.second));
  if (best) {
    const auto it = std::find(sorted.begin(), sorted.end(), normal_path(*best));
    if (it != sorted.end())  // bubble the best to next-to-last (transformers' swap loop)
      for (size_t i = static_cast<size_t>(it - sorted.begin()); i + 2 < sorted.size(); ++i)
        std::swap(sorted[i], sorted[i + 1]);
  }
  return sorted;
}

std::vector<std::string> checkpoints_to_delete(const std::string& output_dir,
                                               const std::vector<std::string>& dirs,
                                               const std::optional<std::string>& best,
                                               std::optional<long long> save_total_limit) {
  if (!save_total_limit || *save_total_limit <= 0) return {};
  const auto sorted = sorted_checkpoints(output_dir, dirs, best);
  if (static_cast<long long>(sorted.size()) <= *save_total_limit) return {};
  long long limit = *save_total_limit;
  // transformers compares the unnormalised best here.
  if (best && limit == 1 && sorted.back() != *best) limit = 2;
  const long long n = std::max(0LL, static_cast<long long>(sorted.size()) - limit);
  return {sorted.begin(), sorted.begin() + n};
}

std::vector<std::string> checkpoints_to_delete_at_end(const std::string& output_dir,
                                                      const std::vector<std::string>& dirs,
                                                      const std::optional<std::string>& best,
                                                      std::optional<long long> save_total_limit) {
  std::vector<std::string> out;
  if (!best || save_total_limit != 1) return out;
  for (const auto& path : sorted_checkpoints(output_dir, dirs, best))
    if (path != normal_path(*best)) out.push_back(path);
  return out;
}

std::optional<std::string> latest_checkpoint(const std::string& output_dir,
                                             const std::vector<std::string>& dirs) {
  std::optional<std::string> latest;
  long long latest_step = -1;
  for (const auto& name : dirs) {
    if (name.size() <= kPrefix.size() || name.rfind(kPrefix, 0) != 0 ||
        name.size() > kPrefix.size() + 18)
      continue;
    const std::string digits = name.substr(kPrefix.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const long long step = std::stoll(digits);
    if (step > latest_step) latest_step = step, latest = join(output_dir, name);
  }
  return latest;
}

std::string drop_stale_best(TrainerState& state,
                            const std::function<bool(const std::string&)>& exists) {
  if (!state.best_model_checkpoint || exists(*state.best_model_checkpoint)) return "";
  const std::string warning = "the resumed trainer state's best checkpoint " +
                              *state.best_model_checkpoint +
                              " no longer exists; it is ignored and the next save with metrics "
                              "records a new best";
  state.best_model_checkpoint.reset();
  return warning;
}

}  // namespace accel::trainer
