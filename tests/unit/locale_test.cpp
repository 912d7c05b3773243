// Numbers in text under a host locale with a decimal comma: libaccel runs inside Julia, Go, Rust
// and C++ programs that may call setlocale(LC_ALL, "de_DE.UTF-8") or std::locale::global(...).
// Every parse and format must still use '.', never ',' and never digit grouping.
#include <gtest/gtest.h>

#include <clocale>
#include <cmath>
#include <limits>
#include <locale>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>

#include "checkpoint/safetensors.hpp"
#include "common/error.hpp"
#include "common/parse.hpp"
#include "config/config.hpp"
#include "optim/scheduler.hpp"

using accel::format_real;
using accel::parse_int;
using accel::parse_real;
using accel::parse_uint;

namespace {

constexpr const char* kLocale = "de_DE.UTF-8";
constexpr const char* kHowToGetIt =
    " is not available on this machine, so the locale tests cannot run. Run tools/setup.sh (it "
    "installs Debian's 'locales' and generates it with localedef -i de_DE -f UTF-8 de_DE.UTF-8).";

// Both the C locale (what setlocale changes: strtod, printf, std::to_string(double)) and the global
// C++ locale (what every new stream uses) are German for the test's duration, then restored.
class GermanLocale : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* c_now = std::setlocale(LC_ALL, nullptr);
    saved_c_ = c_now ? c_now : "C";
    if (!std::setlocale(LC_ALL, kLocale)) GTEST_FAIL() << "setlocale: " << kLocale << kHowToGetIt;
    try {
      saved_cxx_ = std::locale::global(std::locale(kLocale));
      changed_cxx_ = true;
    } catch (const std::runtime_error& e) {
      GTEST_FAIL() << "std::locale(\"" << kLocale << "\"): " << e.what() << "; " << kLocale
                   << kHowToGetIt;
    }
    // The hazard is real here: otherwise these tests would pass for the wrong reason.
    ASSERT_STREQ(std::localeconv()->decimal_point, ",");
    ASSERT_EQ(std::stod("0.5"), 0.0);
    std::ostringstream probe;
    probe << 0.5;
    ASSERT_EQ(probe.str(), "0,5");
  }
  void TearDown() override {
    if (changed_cxx_) std::locale::global(saved_cxx_);  // also resets the C locale to the C++ one
    std::setlocale(LC_ALL, saved_c_.c_str());
  }

 private:
  std::string saved_c_;
  std::locale saved_cxx_;
  bool changed_cxx_ = false;
};

double real(const std::string& text) {
  double v = -12345;
  EXPECT_TRUE(parse_real(text, &v)) << "'" << text << "' rejected";
  return v;
}

bool rejects_real(const std::string& text) {
  double v = -12345;
  const bool ok = parse_real(text, &v);
  return !ok && v == -12345;  // a rejected text leaves the output alone
}

bool rejects_int(const std::string& text) {
  long long v = -12345;
  const bool ok = parse_int(text, &v);
  return !ok && v == -12345;
}

}  // namespace

TEST_F(GermanLocale, ParseRealReadsTheDecimalPoint) {
  EXPECT_EQ(real("0.01"), 0.01);
  EXPECT_EQ(real("1e-3"), 1e-3);
  EXPECT_EQ(real("+2.5"), 2.5);
  EXPECT_EQ(real("+1e-3"), 1e-3);
  EXPECT_EQ(real("-0.25"), -0.25);
  EXPECT_EQ(real(".5"), 0.5);
  EXPECT_EQ(real("5."), 5.0);
  EXPECT_EQ(real("1E+05"), 1e5);
  EXPECT_EQ(real("120"), 120.0);
  EXPECT_EQ(real("0.1"), 0.1);
  EXPECT_EQ(real("1.7976931348623157e308"), std::numeric_limits<double>::max());
}

TEST_F(GermanLocale, ParseRealRejectsCommaAndTrailingText) {
  EXPECT_TRUE(rejects_real("0,01"));  // the locale's own spelling: still not a number here
  EXPECT_TRUE(rejects_real("1,5"));
  EXPECT_TRUE(rejects_real("1.5x"));
  EXPECT_TRUE(rejects_real("1.000,5"));
  EXPECT_TRUE(rejects_real(""));
  EXPECT_TRUE(rejects_real("+"));
  EXPECT_TRUE(rejects_real("+-1"));
  EXPECT_TRUE(rejects_real("++1"));
  EXPECT_TRUE(rejects_real("-+1"));
  EXPECT_TRUE(rejects_real(" 1"));  // whitespace is the caller's to trim
  EXPECT_TRUE(rejects_real("1 "));
  EXPECT_TRUE(rejects_real("+ 1"));
  EXPECT_TRUE(rejects_real("1e"));
  EXPECT_TRUE(rejects_real("1e400"));   // overflow
  EXPECT_TRUE(rejects_real("1e-400"));  // underflows to zero
  EXPECT_TRUE(rejects_real("inf"));
  EXPECT_TRUE(rejects_real("-inf"));
  EXPECT_TRUE(rejects_real("nan"));
  EXPECT_TRUE(rejects_real("0x10"));
}

TEST_F(GermanLocale, ParseIntHasNoGrouping) {
  long long v = 0;
  ASSERT_TRUE(parse_int("42", &v));
  EXPECT_EQ(v, 42);
  ASSERT_TRUE(parse_int("+7", &v));
  EXPECT_EQ(v, 7);
  ASSERT_TRUE(parse_int("-3", &v));
  EXPECT_EQ(v, -3);
  ASSERT_TRUE(parse_int("9223372036854775807", &v));
  EXPECT_EQ(v, std::numeric_limits<long long>::max());
  EXPECT_TRUE(rejects_int("1.000"));  // German grouping
  EXPECT_TRUE(rejects_int("1,000"));
  EXPECT_TRUE(rejects_int("1.5"));
  EXPECT_TRUE(rejects_int("1e3"));
  EXPECT_TRUE(rejects_int(""));
  EXPECT_TRUE(rejects_int(" 1"));
  EXPECT_TRUE(rejects_int("1 "));
  EXPECT_TRUE(rejects_int("+-1"));
  EXPECT_TRUE(rejects_int("9223372036854775808"));
  std::uint64_t u = 0;
  ASSERT_TRUE(parse_uint("18446744073709551615", &u));
  EXPECT_EQ(u, std::numeric_limits<std::uint64_t>::max());
  EXPECT_FALSE(parse_uint("-1", &u));
  EXPECT_FALSE(parse_uint("18446744073709551616", &u));
}

TEST_F(GermanLocale, FormatRealWritesShortestRoundTrip) {
  EXPECT_EQ(format_real(0.1), "0.1");
  EXPECT_EQ(format_real(0.5), "0.5");
  EXPECT_EQ(format_real(-0.25), "-0.25");
  EXPECT_EQ(format_real(120.0), "120");
  EXPECT_EQ(format_real(1e-5), "1e-05");
  EXPECT_EQ(format_real(1234567.0), "1234567");  // no grouping
  const double values[] = {0.1,
                           1e-5,
                           1.0 / 3,
                           2.0 / 3,
                           6.02214076e23,
                           1e300,
                           5e-324,
                           2.2250738585072014e-308,
                           std::numeric_limits<double>::max(),
                           -123456789.125,
                           0.0,
                           3e-3};
  for (double v : values) {
    const std::string text = format_real(v);
    EXPECT_EQ(text.find(','), std::string::npos) << text;
    double back = 0;
    ASSERT_TRUE(parse_real(text, &back)) << text;
    EXPECT_EQ(back, v) << text;
  }
}

TEST_F(GermanLocale, ConfigSecondsFromSetterEnvironmentAndFile) {
  accel::config::Config c;
  c.set("rendezvous_timeout", "0.5");
  c.set("collective_timeout", "+2.5e1");
  c.set("gradient_accumulation_steps", "+4");
  auto r = c.resolve({});
  EXPECT_EQ(r.seconds("rendezvous_timeout"), 0.5);
  EXPECT_EQ(r.seconds("collective_timeout"), 25.0);
  EXPECT_EQ(r.integer("gradient_accumulation_steps"), 4);

  accel::config::Config e;
  r = e.resolve({{"ACCEL_RENDEZVOUS_TIMEOUT", " 0.75 "}});  // values are trimmed first
  EXPECT_EQ(r.seconds("rendezvous_timeout"), 0.75);

  try {
    c.set("rendezvous_timeout", "0,5");
    ADD_FAILURE() << "'0,5' accepted as seconds";
  } catch (const accel::Error& err) {
    EXPECT_EQ(err.code(), accel::Errc::config);
  }
}

TEST_F(GermanLocale, ConfigYamlWithFloats) {
  accel::config::Config c;
  c.load_yaml_text(
      "rendezvous_timeout: 0.25\n"
      "collective_timeout: 1.5e2\n"
      "num_processes: 2\n"
      "total_limit: +3\n",
      "german.yaml");
  const auto r = c.resolve({});
  EXPECT_EQ(r.seconds("rendezvous_timeout"), 0.25);
  EXPECT_EQ(r.seconds("collective_timeout"), 150.0);
  EXPECT_EQ(r.integer("num_processes"), 2);
  EXPECT_EQ(r.integer("total_limit"), 3);
  const std::string dump = r.dump_yaml();
  EXPECT_NE(dump.find("rendezvous_timeout: 0.25 "), std::string::npos) << dump;
  EXPECT_EQ(dump.find("0,25"), std::string::npos) << dump;

  accel::config::Config bad;
  EXPECT_THROW(bad.load_yaml_text("rendezvous_timeout: 0,5\n", "comma.yaml"), accel::Error);
}

TEST_F(GermanLocale, ShardSizes) {
  using accel::checkpoint::parse_size;
  EXPECT_EQ(parse_size("1.5GB"), 1500000000ull);
  EXPECT_EQ(parse_size("0.5MiB"), 524288ull);
  EXPECT_EQ(parse_size("500MB"), 500000000ull);
  EXPECT_THROW(parse_size("1,5GB"), accel::Error);
}

TEST_F(GermanLocale, ScheduleOptions) {
  accel::optim::Schedule s("step");
  s.set("step_size", "2");
  s.set("gamma", "0.5");
  s.validate();
  EXPECT_DOUBLE_EQ(s.lr_at(2, 0.01), 0.005);
  EXPECT_THROW(s.set("gamma", "0,5"), accel::Error);
}

// Checkpoint JSON (optimizer and scheduler state, safetensors headers) goes through nlohmann::json,
// which writes doubles with its own formatter and reads them whatever the C locale's decimal point.
TEST_F(GermanLocale, JsonNumbers) {
  const nlohmann::json j = nlohmann::json::parse(R"({"lr": 0.01, "betas": [0.9, 0.999]})");
  EXPECT_EQ(j["lr"].get<double>(), 0.01);
  EXPECT_EQ(j["betas"][1].get<double>(), 0.999);
  EXPECT_EQ(nlohmann::json(0.1).dump(), "0.1");
  EXPECT_EQ(nlohmann::json(1234567.5).dump(), "1234567.5");
}
