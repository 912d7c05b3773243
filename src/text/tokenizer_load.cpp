// Tokenizer::load: tokenizer.json (tokenizers' serialisation), or vocab.txt with transformers'
// tokenizer_config.json, as transformers builds a fast BertTokenizer from them.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.hpp"
#include "text/tokenizer.hpp"

namespace accel::text {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(Errc::io, "cannot open the tokenizer file " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail(Errc::io, "cannot read the tokenizer file " + path.string());
  return ss.str();
}

json parse_json(const fs::path& path) {
  try {
    return json::parse(read_file(path));
  } catch (const json::exception& e) {
    fail(Errc::io, path.string() + " is not valid JSON: " + e.what());
  }
}

[[noreturn]] void unsupported(const fs::path& path, const std::string& what) {
  fail(Errc::invalid_argument,
       path.string() + ": " + what + " (libaccel reads BERT WordPiece tokenizers only)");
}

std::string type_of(const json& node) {
  return node.is_object() && node.contains("type") && node["type"].is_string()
             ? node["type"].get<std::string>()
             : "(no type)";
}

BertNormalizerOptions normalizer_of(const json& n, const fs::path& path) {
  if (type_of(n) != "BertNormalizer")
    unsupported(path, "normalizer " + type_of(n) + " is not supported");
  BertNormalizerOptions o;
  o.clean_text = n.value("clean_text", true);
  o.handle_chinese_chars = n.value("handle_chinese_chars", true);
  if (n.contains("strip_accents") && !n["strip_accents"].is_null())
    o.strip_accents = n["strip_accents"].get<bool>();
  o.lowercase = n.value("lowercase", true);
  return o;
}

void read_added(Tokenizer& t, const json& list, const fs::path& path) {
  for (const auto& a : list) {
    const std::string content = a.at("content").get<std::string>();
    for (const char* option : {"normalized", "lstrip", "rstrip", "single_word"})
      if (a.value(option, false))
        unsupported(path,
                    "added token '" + content + "' with " + option + " true is not supported");
    t.added.push_back({content, a.at("id").get<int64_t>()});
  }
}

// The single-sequence template: ids of the special tokens before and after sequence A.
void read_post_processor(Tokenizer& t, const json& p, const fs::path& path) {
  if (p.is_null()) return;
  const std::string type = type_of(p);
  if (type == "BertProcessing") {
    t.prefix = {p.at("cls").at(1).get<int64_t>()};
    t.suffix = {p.at("sep").at(1).get<int64_t>()};
    return;
  }
  if (type != "TemplateProcessing")
    unsupported(path, "post-processor " + type + " is not supported");
  bool seen_a = false;
  for (const auto& piece : p.at("single")) {
    if (piece.contains("Sequence")) {
      if (seen_a || piece["Sequence"].at("id") != "A")
        unsupported(path, "a single template other than specials around sequence A");
      seen_a = true;
      continue;
    }
    const std::string name = piece.at("SpecialToken").at("id").get<std::string>();
    const auto& special = p.at("special_tokens").at(name);
    for (const auto& id : special.at("ids"))
      (seen_a ? t.suffix : t.prefix).push_back(id.get<int64_t>());
  }
  if (!seen_a) unsupported(path, "a single template without sequence A");
}

Tokenizer from_tokenizer_json(const fs::path& path) {
  const json j = parse_json(path);
  Tokenizer t;
  try {
    const json& model = j.at("model");
    if (type_of(model) != "WordPiece")
      unsupported(path, "model " + type_of(model) + " is not supported");
    if (!j.value("normalizer", json()).is_null())
      t.normalizer = normalizer_of(j["normalizer"], path);
    const json pre = j.value("pre_tokenizer", json());
    if (type_of(pre) != "BertPreTokenizer")
      unsupported(path, "pre-tokenizer " + type_of(pre) + " is not supported");
    for (const auto& [token, id] : model.at("vocab").items())
      t.model.vocab[token] = id.get<int64_t>();
    const std::string unk = model.value("unk_token", "[UNK]");
    const auto unk_it = t.model.vocab.find(unk);
    if (unk_it == t.model.vocab.end())
      fail(Errc::invalid_argument,
           path.string() + ": the unknown token " + unk + " is not in the vocabulary");
    t.model.unk_id = unk_it->second;
    t.model.continuing_prefix = model.value("continuing_subword_prefix", "##");
    t.model.max_input_chars_per_word = model.value("max_input_chars_per_word", size_t{100});
    read_added(t, j.value("added_tokens", json::array()), path);
    read_post_processor(t, j.value("post_processor", json()), path);
    const json padding = j.value("padding", json());
    const std::string pad = padding.is_object() ? padding.value("pad_token", "[PAD]") : "[PAD]";
    t.pad_id = t.token_id(pad);
  } catch (const json::exception& e) {
    fail(Errc::io, path.string() + " is not a tokenizer.json tokenizers can read: " + e.what());
  }
  return t;
}

// vocab.txt, one token a line (its line number the id), as transformers' BertTokenizerFast.
Tokenizer from_vocab_txt(const fs::path& path) {
  Tokenizer t;
  std::istringstream in(read_file(path));
  std::string line;
  for (int64_t id = 0; std::getline(in, line); ++id) t.model.vocab[line] = id;
  json config = json::object();
  const fs::path config_path = path.parent_path() / "tokenizer_config.json";
  if (fs::exists(config_path)) config = parse_json(config_path);
  auto name = [&](const char* key, const char* fallback) {
    const json v = config.value(key, json());
    return v.is_string() ? v.get<std::string>() : std::string(fallback);
  };
  BertNormalizerOptions n;
  n.lowercase = config.value("do_lower_case", true);
  n.handle_chinese_chars = config.value("tokenize_chinese_chars", true);
  if (config.contains("strip_accents") && !config["strip_accents"].is_null())
    n.strip_accents = config["strip_accents"].get<bool>();
  t.normalizer = n;
  const std::string unk = name("unk_token", "[UNK]"), cls = name("cls_token", "[CLS]"),
                    sep = name("sep_token", "[SEP]");
  for (const std::string& special :
       {std::string(name("pad_token", "[PAD]")), unk, cls, sep, name("mask_token", "[MASK]")})
    if (t.model.vocab.count(special)) t.added.push_back({special, t.model.vocab[special]});
  for (const auto& required : {unk, cls, sep})
    if (!t.model.vocab.count(required))
      fail(Errc::invalid_argument,
           path.string() + ": the token " + required + " is not in the vocabulary");
  t.model.unk_id = t.model.vocab[unk];
  t.prefix = {t.model.vocab[cls]};
  t.suffix = {t.model.vocab[sep]};
  t.pad_id = t.token_id(name("pad_token", "[PAD]"));
  return t;
}

}  // namespace

Tokenizer Tokenizer::load(const std::string& path_text) {
  fs::path path(path_text);
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(path / "tokenizer.json")) return from_tokenizer_json(path / "tokenizer.json");
    if (fs::exists(path / "vocab.txt")) return from_vocab_txt(path / "vocab.txt");
    fail(Errc::io, path_text + " holds neither tokenizer.json nor vocab.txt");
  }
  if (!fs::exists(path, ec)) fail(Errc::io, "no tokenizer file " + path_text);
  if (path.extension() == ".txt") return from_vocab_txt(path);
  return from_tokenizer_json(path);
}

}  // namespace accel::text
