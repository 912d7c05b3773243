// The BERT WordPiece tokenizer's pieces (src/text): the normaliser, the pre-tokeniser, WordPiece on
// a vocabulary written here, the template and truncation, loading and its errors. The whole
// against Hugging Face's tokenizers: text.tokenizer_differential.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/error.hpp"
#include "text/bert_normalizer.hpp"
#include "text/bert_pre_tokenizer.hpp"
#include "text/tokenizer.hpp"
#include "text/unicode.hpp"

namespace fs = std::filesystem;
using accel::Errc;
using namespace accel::text;

namespace {

std::u32string U(const std::string& utf8) {
  return decode_utf8(utf8);
}

std::string normalized(const std::string& utf8, BertNormalizerOptions o = {}) {
  return encode_utf8(bert_normalize(U(utf8), o));
}

std::vector<std::string> words(const std::string& utf8) {
  std::vector<std::string> out;
  for (const auto& w : bert_pre_tokenize(U(utf8))) out.push_back(encode_utf8(w));
  return out;
}

Errc code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const accel::Error& e) {
    return e.code();
  }
  return Errc::internal;  // nothing thrown
}

// A directory of its own per test, removed afterwards.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("accel_tokenizer_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
    return path / name;
  }
};

const char* kVocab =
    "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nun\n##aff\n##able\nhello\n,\n!\nworld\na\n##b\n";

std::string tokenizer_json(const std::string& model_type = "WordPiece",
                           const std::string& normalizer_type = "BertNormalizer") {
  return R"({"version":"1.0","truncation":null,"padding":null,
  "added_tokens":[{"id":0,"content":"[PAD]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
    {"id":1,"content":"[UNK]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
    {"id":2,"content":"[CLS]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
    {"id":3,"content":"[SEP]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
  "normalizer":{"type":")" +
         normalizer_type +
         R"(","clean_text":true,"handle_chinese_chars":true,"strip_accents":null,"lowercase":true},
  "pre_tokenizer":{"type":"BertPreTokenizer"},
  "post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"[CLS]","type_id":0}},{"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":"[SEP]","type_id":0}}],
    "pair":[],"special_tokens":{"[CLS]":{"id":"[CLS]","ids":[2],"tokens":["[CLS]"]},"[SEP]":{"id":"[SEP]","ids":[3],"tokens":["[SEP]"]}}},
  "decoder":null,
  "model":{"type":")" +
         model_type +
         R"(","unk_token":"[UNK]","continuing_subword_prefix":"##","max_input_chars_per_word":9,
    "vocab":{"[PAD]":0,"[UNK]":1,"[CLS]":2,"[SEP]":3,"un":4,"##aff":5,"##able":6,"hello":7,",":8,"a":9,"##b":10}}})";
}

}  // namespace

TEST(TokenizerUtf8, StrictDecoding) {
  EXPECT_EQ(U("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"), std::u32string(U"a\u00E9\u20AC\U0001F600"));
  for (const std::string bad :
       {"\xC3", "\x80", "\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "ab\xE2\x82", "\xFF"})
    EXPECT_EQ(code_of([&] { decode_utf8(bad); }), Errc::invalid_argument) << bad;
  EXPECT_EQ(encode_utf8(U"\u00E9\U0001F600"), "\xC3\xA9\xF0\x9F\x98\x80");
}

TEST(BertNormalizer, CleansControlsAndWhitespace) {
  BertNormalizerOptions o;
  o.lowercase = false;
  o.handle_chinese_chars = false;
  // NUL, U+FFFD, a zero-width space (Cf) and U+0001 go; \v, \f and U+0085 are controls and go too
  // (tokenizers filters before it maps); \t \n \r, U+00A0 and U+3000 become spaces.
  EXPECT_EQ(normalized(std::string("a\0b", 3) + "\xEF\xBF\xBD"
                                                "c\xE2\x80\x8B"
                                                "d\x01",
                       o),
            "abcd");
  EXPECT_EQ(normalized("a\vb\fc\xC2\x85"
                       "d",
                       o),
            "abcd");
  EXPECT_EQ(normalized("a\tb\nc\rd\xC2\xA0"
                       "e\xE3\x80\x80"
                       "f",
                       o),
            "a b c d e f");
  // Unassigned code points are kept (tokenizers' is_control has no Cn).
  EXPECT_EQ(normalized("\xCD\xB8", o), "\xCD\xB8");
}

TEST(BertNormalizer, ChineseCharsLowercaseAccents) {
  EXPECT_EQ(normalized("ab\xE4\xB8\xAD"
                       "c"),
            "ab \xE4\xB8\xAD c");
  EXPECT_EQ(normalized("\xC3\x89t\xC3\xA9 Na\xC3\xAFve"), "ete naive");  // Été Naïve
  // strip_accents unset follows lowercase; set false keeps the accents.
  BertNormalizerOptions keep;
  keep.strip_accents = false;
  EXPECT_EQ(normalized("\xC3\x89t\xC3\xA9", keep), "\xC3\xA9t\xC3\xA9");
  // İ: NFD (I + U+0307), the mark dropped, then lowercased; alone it lowercases to i + U+0307.
  EXPECT_EQ(normalized("\xC4\xB0stanbul"), "istanbul");
  EXPECT_EQ(normalized("\xC4\xB0stanbul", keep), "i\xCC\x87stanbul");
  // Σ lowercases per character (no final-sigma rule): ΣΑΣ -> σασ.
  EXPECT_EQ(normalized("\xCE\xA3\xCE\x91\xCE\xA3"), "\xCF\x83\xCE\xB1\xCF\x83");
  // Hangul decomposes to its jamo under NFD.
  EXPECT_EQ(normalized("\xEA\xB0\x80"), "\xE1\x84\x80\xE1\x85\xA1");
}

TEST(BertPreTokenizer, WhitespaceAndPunctuation) {
  EXPECT_EQ(words("  Hello,  world!!  "),
            (std::vector<std::string>{"Hello", ",", "world", "!", "!"}));
  // ASCII symbols count as punctuation ($, +, ^), as does Unicode P* (¿, «); S* outside ASCII not.
  EXPECT_EQ(
      words("a$b+c^d \xC2\xBFx\xC2\xBBy \xE2\x82\xAC"
            "5"),
      (std::vector<std::string>{"a", "$", "b", "+", "c", "^", "d", "\xC2\xBF", "x", "\xC2\xBB", "y",
                                "\xE2\x82\xAC"
                                "5"}));
  EXPECT_TRUE(words(" \t\n").empty());
}

TEST(WordPieceModel, GreedyLongestMatchAndUnknown) {
  TempDir dir;
  const auto t = Tokenizer::load(dir.write("tokenizer.json", tokenizer_json()).string());
  EXPECT_EQ(t.encode("unaffable"), (std::vector<int64_t>{2, 4, 5, 6, 3}));
  EXPECT_EQ(t.encode("Hello, abb"), (std::vector<int64_t>{2, 7, 8, 9, 10, 10, 3}));
  // A word with a part no entry matches is [UNK] alone; one over max_input_chars_per_word (9) too.
  EXPECT_EQ(t.encode("unx hello"), (std::vector<int64_t>{2, 1, 7, 3}));
  EXPECT_EQ(t.encode("abbbbbbbb abbbbbbbbb"),
            (std::vector<int64_t>{2, 9, 10, 10, 10, 10, 10, 10, 10, 10, 1, 3}));
  // Special tokens are matched in the raw text, before lowercasing and splitting.
  EXPECT_EQ(t.encode("a[SEP]a [sep]"), (std::vector<int64_t>{2, 9, 3, 9, 1, 1, 1, 3}));
  EXPECT_EQ(t.encode(""), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t.token_id("##aff"), 5);
  EXPECT_EQ(t.token_id("[CLS]"), 2);
  EXPECT_FALSE(t.token_id("nope"));
  EXPECT_EQ(t.vocab_size(), 11u);
  EXPECT_EQ(t.pad_id, 0);
}

TEST(WordPieceModel, TruncationCountsTheSpecialTokens) {
  TempDir dir;
  const auto t = Tokenizer::load(dir.write("tokenizer.json", tokenizer_json()).string());
  EXPECT_EQ(t.encode("unaffable hello", 0), (std::vector<int64_t>{2, 4, 5, 6, 7, 3}));
  EXPECT_EQ(t.encode("unaffable hello", 4), (std::vector<int64_t>{2, 4, 5, 3}));
  EXPECT_EQ(t.encode("unaffable hello", 6), (std::vector<int64_t>{2, 4, 5, 6, 7, 3}));
  EXPECT_EQ(t.encode("unaffable hello", 2), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(code_of([&] { t.encode("hello", 1); }), Errc::invalid_argument);
  EXPECT_EQ(code_of([&] { t.encode("he\xC3llo"); }), Errc::invalid_argument);
}

TEST(TokenizerLoad, VocabTxtAndDirectories) {
  TempDir dir;
  dir.write("vocab.txt", kVocab);
  const auto from_dir = Tokenizer::load(dir.path.string());
  EXPECT_EQ(from_dir.encode("Un-affable, hello!"),
            (std::vector<int64_t>{2, 5, 1, 1, 9, 8, 10, 3}));  // "-" and "affable" are unknown
  EXPECT_EQ(from_dir.encode("UNAFFABLE"), (std::vector<int64_t>{2, 5, 6, 7, 3}));
  EXPECT_EQ(from_dir.vocab_size(), 14u);
  // do_lower_case false in tokenizer_config.json: the case is kept (and so are the accents).
  dir.write("tokenizer_config.json", R"({"do_lower_case": false})");
  EXPECT_EQ(Tokenizer::load((dir.path / "vocab.txt").string()).encode("UN hello"),
            (std::vector<int64_t>{2, 1, 8, 3}));
  // tokenizer.json is preferred to vocab.txt in a directory.
  dir.write("tokenizer.json", tokenizer_json());
  EXPECT_EQ(Tokenizer::load(dir.path.string()).encode("hello"), (std::vector<int64_t>{2, 7, 3}));
}

TEST(TokenizerLoad, BadFilesAreClearErrors) {
  TempDir dir;
  auto load_error = [](const fs::path& p) -> std::pair<Errc, std::string> {
    try {
      Tokenizer::load(p.string());
    } catch (const accel::Error& e) {
      return {e.code(), e.what()};
    }
    return {Errc::internal, "loaded"};
  };
  EXPECT_EQ(load_error(dir.path / "missing.json").first, Errc::io);
  EXPECT_EQ(load_error(dir.path).first, Errc::io);  // neither tokenizer.json nor vocab.txt
  EXPECT_EQ(load_error(dir.write("corrupt.json", "{\"model\": {")).first, Errc::io);
  const auto bpe = load_error(dir.write("bpe.json", tokenizer_json("BPE")));
  EXPECT_EQ(bpe.first, Errc::invalid_argument);
  EXPECT_NE(bpe.second.find("model BPE is not supported"), std::string::npos) << bpe.second;
  const auto nfc = load_error(dir.write("nfc.json", tokenizer_json("WordPiece", "NFC")));
  EXPECT_EQ(nfc.first, Errc::invalid_argument);
  EXPECT_NE(nfc.second.find("normalizer NFC is not supported"), std::string::npos) << nfc.second;
  std::string no_unk = tokenizer_json();
  no_unk.replace(no_unk.find("\"[UNK]\":1,"), 10, "");
  EXPECT_EQ(load_error(dir.write("no_unk.json", no_unk)).first, Errc::invalid_argument);
}
