// libaccel's side of tokenizers_diff.py: loads each tokenizer path given on the command line, then
// reads texts from standard input, each as "<byte count>\n<bytes>", and writes for each text, for
// each tokenizer, for each max_length in 256 then 0 (none), one line of ids ("error: ..." when
// encoding fails).
#include <iostream>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "text/tokenizer.hpp"

int main(int argc, char** argv) {
  std::vector<accel::text::Tokenizer> tokenizers;
  for (int i = 1; i < argc; ++i) tokenizers.push_back(accel::text::Tokenizer::load(argv[i]));
  std::ios::sync_with_stdio(false);
  std::string out;
  for (size_t size; std::cin >> size;) {
    std::cin.get();  // the newline after the count
    std::string text(size, '\0');
    std::cin.read(text.data(), static_cast<std::streamsize>(size));
    for (const auto& t : tokenizers)
      for (size_t max_length : {size_t{256}, size_t{0}}) {
        try {
          for (int64_t id : t.encode(text, max_length)) out += std::to_string(id) + ' ';
        } catch (const accel::Error& e) {
          out += std::string("error: ") + e.what();
        }
        out += '\n';
      }
  }
  std::cout << out;
  return 0;
}
