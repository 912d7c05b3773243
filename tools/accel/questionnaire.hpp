// `accel config`'s questions: Python Accelerate's `accelerate config` flow for what libaccel
// supports, answered by typing (a number or a choice's text, Enter for the default) so that it
// works through a pipe as well as on a terminal. Pure C++ (no LibTorch).
#pragma once

#include <functional>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace accel::cli {

// The keys of a configuration file and their canonical values (as config::normalize gives them),
// sorted by name as Accelerate (PyYAML's sort_keys) writes them.
using FileEntries = std::map<std::string, std::string>;

// Asks questions on `out` and reads one answer per line from `in`. A bad answer is explained and
// the question asked again; the end of `in` throws accel::Error (Errc::io).
class Prompter {
 public:
  // `echo`: print each answer read, so that a transcript of piped answers stays readable.
  Prompter(std::istream& in, std::ostream& out, bool echo) : in_(in), out_(out), echo_(echo) {}

  struct Choice {
    std::string label;                 // shown, and accepted typed in any case
    std::vector<std::string> aliases;  // also accepted (e.g. Accelerate's value: MULTI_CPU)
  };
  // Choices Accelerate offers that libaccel does not: named in the menu, refused with `why`.
  struct Refused {
    std::string label;
    std::vector<std::string> aliases;
    std::string why;
  };
  // A menu, numbered from 0 as Accelerate's number keys; returns the index chosen.
  size_t choose(const std::string& question, const std::vector<Choice>& choices,
                size_t default_index, const std::vector<Refused>& refused = {});

  // A free answer. `check` returns the value to keep, or nothing after setting `*error`. An empty
  // answer is given to `check` as it is: the default is the check's business.
  std::string ask(const std::string& prompt,
                  const std::function<std::optional<std::string>(const std::string& answer,
                                                                 std::string* error)>& check);
  // An integer in [min, max]; Enter gives `default_value` when there is one. `extra` may refuse a
  // value in range (returns the message) or accept it (returns "").
  long long ask_int(const std::string& prompt, std::optional<long long> default_value,
                    long long min, long long max,
                    const std::function<std::string(long long)>& extra = nullptr);
  bool ask_yes_no(const std::string& prompt, bool default_value);
  // A yes/no question about a feature libaccel lacks: "yes" is explained with `why` and refused.
  void ask_only_no(const std::string& prompt, const std::string& why);

 private:
  std::string read_answer();

  std::istream& in_;
  std::ostream& out_;
  bool echo_;
};

// Runs the questionnaire and returns the entries `accelerate config` writes for these answers.
FileEntries run_questionnaire(Prompter& prompter);

}  // namespace accel::cli
