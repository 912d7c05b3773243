// fortunes.hpp - Debian's fortunes as a classification task: each entry labelled by the category
// file it comes from (art, computers, food, ...), one entry in five held out for evaluation.
#pragma once

#include <cstdint>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace fortunes {

struct Entry {
  std::string text;
  int64_t label;
};

struct Split {
  std::vector<Entry> train, held_out;
};

// The entries of one fortune file: text between lines holding a single '%', trailing blank lines
// dropped, empty entries skipped.
inline std::vector<std::string> read_entries(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path + " (Debian's fortunes-min/fortunes)");
  std::vector<std::string> entries;
  std::string line, entry;
  auto flush = [&] {
    while (!entry.empty() && (entry.back() == '\n' || entry.back() == ' ')) entry.pop_back();
    if (!entry.empty()) entries.push_back(entry);
    entry.clear();
  };
  while (std::getline(in, line)) {
    if (line == "%") {
      flush();
      continue;
    }
    entry += line;
    entry += '\n';
  }
  flush();
  return entries;
}

// Label i for categories[i]; entry n of a file is held out when n % 5 == 4.
inline Split read(const std::string& dir, const std::vector<std::string>& categories) {
  Split s;
  for (size_t label = 0; label < categories.size(); ++label) {
    const auto entries = read_entries(dir + "/" + categories[label]);
    for (size_t n = 0; n < entries.size(); ++n)
      (n % 5 == 4 ? s.held_out : s.train).push_back({entries[n], static_cast<int64_t>(label)});
  }
  return s;
}

inline std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream s(list);
  std::string item;
  while (std::getline(s, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace fortunes
