// Strict UTF-8, the category look-ups and NFD over the generated tables (unicode_tables.cpp).
#include "text/unicode.hpp"

#include <algorithm>

#include "common/error.hpp"

namespace accel::text {
namespace {

bool in_ranges(const tables::Range* ranges, size_t count, char32_t c) {
  const auto* end = ranges + count;
  const auto* it = std::upper_bound(ranges, end, static_cast<uint32_t>(c),
                                    [](uint32_t v, const tables::Range& r) { return v < r.lo; });
  return it != ranges && c <= (it - 1)->hi;
}

const tables::Mapping* find_mapping(const tables::Mapping* table, size_t count, char32_t c) {
  const auto* end = table + count;
  const auto* it = std::lower_bound(table, end, static_cast<uint32_t>(c),
                                    [](const tables::Mapping& m, uint32_t v) { return m.cp < v; });
  return it != end && it->cp == c ? it : nullptr;
}

uint8_t combining_class(char32_t c) {
  const auto* end = tables::kCombiningClass + tables::kCombiningClass_count;
  const auto* it =
      std::lower_bound(tables::kCombiningClass, end, static_cast<uint32_t>(c),
                       [](const tables::CombiningClass& e, uint32_t v) { return e.cp < v; });
  return it != end && it->cp == c ? it->ccc : 0;
}

[[noreturn]] void bad_utf8(size_t offset, const char* why) {
  fail(Errc::invalid_argument,
       "text is not valid UTF-8: " + std::string(why) + " at byte " + std::to_string(offset));
}

// Hangul syllables decompose by arithmetic (Unicode's chapter 3.12), not from the tables.
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kVCount = 21, kTCount = 28, kSCount = 11172;

void append_decomposition(char32_t c, std::u32string& out) {
  if (c >= kSBase && c < kSBase + kSCount) {
    const char32_t s = c - kSBase;
    out += kLBase + s / (kVCount * kTCount);
    out += kVBase + (s % (kVCount * kTCount)) / kTCount;
    if (s % kTCount) out += kTBase + s % kTCount;
    return;
  }
  if (const auto* m = find_mapping(tables::kDecomposition, tables::kDecomposition_count, c))
    out.append(tables::kDecompositionPool + m->offset, m->length);
  else
    out += c;
}

}  // namespace

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      out += b;
      ++i;
      continue;
    }
    size_t n;
    char32_t cp, min;
    if ((b & 0xE0) == 0xC0) {
      n = 2, cp = b & 0x1F, min = 0x80;
    } else if ((b & 0xF0) == 0xE0) {
      n = 3, cp = b & 0x0F, min = 0x800;
    } else if ((b & 0xF8) == 0xF0) {
      n = 4, cp = b & 0x07, min = 0x10000;
    } else {
      bad_utf8(i, "an unexpected byte");
    }
    if (i + n > s.size()) bad_utf8(i, "a truncated sequence");
    for (size_t k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) bad_utf8(i, "a truncated sequence");
      cp = (cp << 6) | (c & 0x3F);
    }
    if (cp < min) bad_utf8(i, "an overlong form");
    if (cp >= 0xD800 && cp <= 0xDFFF) bad_utf8(i, "a surrogate");
    if (cp > 0x10FFFF) bad_utf8(i, "a value above U+10FFFF");
    out += cp;
    i += n;
  }
  return out;
}

void append_utf8(char32_t c, std::string& out) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::string encode_utf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) append_utf8(c, out);
  return out;
}

bool is_whitespace(char32_t c) {
  switch (c) {
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return (c >= 0x9 && c <= 0xD) || (c >= 0x2000 && c <= 0x200A);
  }
}

bool is_other(char32_t c) {
  return in_ranges(tables::kOther, tables::kOther_count, c);
}

bool is_nonspacing_mark(char32_t c) {
  return in_ranges(tables::kNonspacingMark, tables::kNonspacingMark_count, c);
}

bool is_punctuation(char32_t c) {
  const bool ascii = (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
                     (c >= 123 && c <= 126);
  return ascii || in_ranges(tables::kPunctuation, tables::kPunctuation_count, c);
}

bool is_cjk(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

std::u32string nfd(std::u32string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (char32_t c : text) append_decomposition(c, out);
  // Canonical ordering: each run of non-starters sorted stably by combining class.
  for (size_t i = 0; i < out.size();) {
    if (combining_class(out[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < out.size() && combining_class(out[j]) != 0) ++j;
    std::stable_sort(out.begin() + i, out.begin() + j, [](char32_t a, char32_t b) {
      return combining_class(a) < combining_class(b);
    });
    i = j;
  }
  return out;
}

void append_lowercase(char32_t c, std::u32string& out) {
  if (c < 0x80) {
    out += (c >= 'A' && c <= 'Z') ? c + 32 : c;
    return;
  }
  if (const auto* m = find_mapping(tables::kLowercase, tables::kLowercase_count, c))
    out.append(tables::kLowercasePool + m->offset, m->length);
  else
    out += c;
}

}  // namespace accel::text
