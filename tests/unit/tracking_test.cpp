// The trackers' pure layer: CRC32C, TensorBoard's record framing and Event bytes, the text
// spellings, log_with, and the files each file tracker leaves.
#include <dirent.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "checkpoint/atomic_dir.hpp"
#include "common/error.hpp"
#include "common/files.hpp"
#include "tracking/crc32c.hpp"
#include "tracking/event_file.hpp"
#include "tracking/formats.hpp"
#include "tracking/tracker.hpp"

using namespace accel::tracking;

namespace {

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int c : b) s.push_back(static_cast<char>(c));
  return s;
}

std::string le(const void* p, size_t n) {
  return std::string(static_cast<const char*>(p), n);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') names.push_back(e->d_name);
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + name;
  accel::checkpoint::remove_tree(dir);
  return dir;
}

Value number(const std::string& k, double v) {
  return Value{k, false, v, ""};
}
Value text(const std::string& k, const std::string& t) {
  return Value{k, true, 0, t};
}

}  // namespace

TEST(Crc32c, KnownVectors) {
  // RFC 3720 (iSCSI) B.4 and the common check value.
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(crc32c("", 0), 0u);
  const uint32_t c = crc32c("123456789", 9);
  EXPECT_EQ(masked_crc32c("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST(EventFile, ScalarEventIsTheProtobufTensorBoardReads) {
  const double wall = 1.0;
  const float value = 0.5f;
  // Value{tag "loss", simple_value 0.5} inside Summary{value} inside Event{wall_time, step 3,
  // summary}.
  const std::string v = bytes({0x0A, 4}) + "loss" + bytes({0x15}) + le(&value, 4);
  const std::string summary = bytes({0x0A, static_cast<int>(v.size())}) + v;
  const std::string expected = bytes({0x09}) + le(&wall, 8) + bytes({0x10, 3}) +
                               bytes({0x2A, static_cast<int>(summary.size())}) + summary;
  EXPECT_EQ(scalar_event("loss", value, 3, wall), expected);
  // No step (Accelerate's step=None): the field is left out, as an unset int64.
  EXPECT_EQ(scalar_event("loss", value, kNoStep, wall).find(bytes({0x10, 3})), std::string::npos);
  // A step of 300 is a two-byte varint.
  EXPECT_NE(scalar_event("loss", value, 300, wall).find(bytes({0x10, 0xAC, 0x02})),
            std::string::npos);
}

TEST(EventFile, RecordsAreFramedWithMaskedChecksums) {
  const std::string data = version_event(2.0);
  EXPECT_NE(data.find("brain.Event:2"), std::string::npos);
  const std::string rec = frame_record(data);
  ASSERT_EQ(rec.size(), data.size() + 16);
  uint64_t length;
  uint32_t length_crc, data_crc;
  std::memcpy(&length, rec.data(), 8);
  std::memcpy(&length_crc, rec.data() + 8, 4);
  std::memcpy(&data_crc, rec.data() + 12 + data.size(), 4);
  EXPECT_EQ(length, data.size());
  EXPECT_EQ(length_crc, masked_crc32c(rec.data(), 8));
  EXPECT_EQ(rec.substr(12, data.size()), data);
  EXPECT_EQ(data_crc, masked_crc32c(data.data(), data.size()));
}

TEST(TrackerFormats, NumbersTextsAndFields) {
  EXPECT_EQ(number_text(0.1), "0.1");
  EXPECT_EQ(number_text(64), "64");
  EXPECT_EQ(number_text(-2.5e-8), "-2.5e-08");
  EXPECT_EQ(number_text(1.0 / 3), "0.3333333333333333");  // as Python's repr
  EXPECT_EQ(std::stod(number_text(1.0 / 3)), 1.0 / 3);
  EXPECT_EQ(number_text(std::nan("")), "nan");
  EXPECT_EQ(number_text(-std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(json_number(std::numeric_limits<double>::infinity()), "Infinity");
  EXPECT_EQ(json_number(std::nan("")), "NaN");
  EXPECT_EQ(json_string("a\"b\\c\nd\x01"), "\"a\\\"b\\\\c\\nd\\u0001\"");
  EXPECT_EQ(csv_field("loss"), "loss");
  EXPECT_EQ(csv_field("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(csv_field("two\nlines"), "\"two\nlines\"");
}

TEST(LogWith, NamesAllAndUnknownTrackers) {
  EXPECT_EQ(parse_log_with("all"), (std::vector<std::string>{"tensorboard", "jsonl", "csv"}));
  EXPECT_EQ(parse_log_with(" csv, tensorboard ,csv"),
            (std::vector<std::string>{"csv", "tensorboard"}));
  EXPECT_TRUE(parse_log_with("").empty());
  try {
    parse_log_with("tensorboard,wandb");
    FAIL() << "an unknown tracker was accepted";
  } catch (const accel::Error& e) {
    EXPECT_EQ(e.code(), accel::Errc::config);
    EXPECT_NE(std::string(e.what()).find("'wandb'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tensorboard, jsonl and csv"), std::string::npos);
  }
}

TEST(FileTrackers, EachLeavesItsFilesAndAppendsEveryLogAtOnce) {
  const std::string dir = fresh_dir("trackers_run") + "/project";
  auto trackers = make_file_trackers("all", dir, {});
  ASSERT_EQ(trackers.size(), 3u);
  const Values config = {number("lr", 0.001), text("optimizer", "adamw, betas \"0.9\"")};
  for (auto& t : trackers) t->start("project", config);
  const double inf = std::numeric_limits<double>::infinity();
  for (auto& t : trackers) {
    t->log({number("loss", 0.25), number("lr", 0.001)}, 1, 100.5);
    t->log({number("loss", std::nan("")), number("grad", -inf), text("note", "a,b")}, 2, 101.5);
    t->log({number("loss", 0.125)}, kNoStep, 102.5);
    t->finish();
    t->finish();  // a second finish is a no-op
  }
  const auto names = files_in(dir);
  ASSERT_EQ(names.size(), 6u) << ::testing::PrintToString(names);
  EXPECT_EQ(names[0].rfind("events.out.tfevents.", 0), 0u) << names[0];
  EXPECT_EQ(names[1], "hparams.csv");
  EXPECT_EQ(names[2], "hparams.json");
  EXPECT_EQ(names[3], "hparams.yml");
  EXPECT_EQ(slurp(dir + "/hparams.yml"), "lr: 0.001\noptimizer: \"adamw, betas \\\"0.9\\\"\"\n");
  EXPECT_EQ(slurp(dir + "/hparams.json"),
            "{\"lr\": 0.001, \"optimizer\": \"adamw, betas \\\"0.9\\\"\"}\n");
  EXPECT_EQ(slurp(dir + "/hparams.csv"),
            "key,value\nlr,0.001\noptimizer,\"adamw, betas \"\"0.9\"\"\"\n");
  EXPECT_EQ(slurp(dir + "/metrics.jsonl"),
            "{\"step\": 1, \"wall_time\": 100.5, \"values\": {\"loss\": 0.25, \"lr\": 0.001}}\n"
            "{\"step\": 2, \"wall_time\": 101.5, \"values\": {\"loss\": NaN, \"grad\": -Infinity, "
            "\"note\": \"a,b\"}}\n"
            "{\"step\": null, \"wall_time\": 102.5, \"values\": {\"loss\": 0.125}}\n");
  EXPECT_EQ(slurp(dir + "/metrics.csv"),
            "wall_time,step,tag,value\n100.5,1,loss,0.25\n100.5,1,lr,0.001\n101.5,2,loss,nan\n"
            "101.5,2,grad,-inf\n101.5,2,note,\"a,b\"\n102.5,,loss,0.125\n");
  // A second run in the same directory goes on in the same JSONL and CSV files (no second header)
  // and starts a new event file.
  for (auto& t : make_file_trackers("all", dir, {})) {
    t->start("project", {});
    t->log({number("loss", 0.5)}, 3, 103.5);
    t->finish();
  }
  EXPECT_EQ(files_in(dir).size(), 7u);
  const std::string csv = slurp(dir + "/metrics.csv");
  EXPECT_EQ(csv.substr(csv.size() - 17), "103.5,3,loss,0.5\n");
  EXPECT_EQ(csv.rfind("wall_time"), 0u);
  EXPECT_NE(slurp(dir + "/metrics.jsonl").find("{\"step\": 3,"), std::string::npos);
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A run killed mid-append leaves a last record without its newline; the next run moves it aside,
// says so, and appends after the last whole record (nothing whole lost, nothing torn inside).
TEST(FileTrackers, ATornLastRecordIsMovedAsideBeforeTheNextRunAppends) {
  const std::string dir = fresh_dir("trackers_torn") + "/project";
  accel::make_directories(dir, 0755);
  const std::string whole_jsonl = "{\"step\": 1, \"wall_time\": 1.5, \"values\": {\"loss\": 1}}\n";
  const std::string torn_jsonl = "{\"step\": 2, \"wall_time\": 2.5, \"values\": {\"lo";
  write_file(dir + "/metrics.jsonl", whole_jsonl + torn_jsonl);
  const std::string whole_csv = "wall_time,step,tag,value\n1.5,1,loss,1\n";
  write_file(dir + "/metrics.csv", whole_csv + "2.5,2,lo");
  write_file(dir + "/metrics.csv.torn-1", "an earlier tear");  // kept: the next free name
  std::vector<std::string> warnings;
  for (auto& t :
       make_file_trackers("jsonl,csv", dir, [&](const std::string& m) { warnings.push_back(m); })) {
    t->start("project", {});
    t->log({number("loss", 0.5)}, 3, 3.5);
    t->finish();
  }
  EXPECT_EQ(slurp(dir + "/metrics.jsonl"),
            whole_jsonl + "{\"step\": 3, \"wall_time\": 3.5, \"values\": {\"loss\": 0.5}}\n");
  EXPECT_EQ(slurp(dir + "/metrics.jsonl.torn-1"), torn_jsonl);
  EXPECT_EQ(slurp(dir + "/metrics.csv"), whole_csv + "3.5,3,loss,0.5\n");
  EXPECT_EQ(slurp(dir + "/metrics.csv.torn-1"), "an earlier tear");
  EXPECT_EQ(slurp(dir + "/metrics.csv.torn-2"), "2.5,2,lo");
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find(dir + "/metrics.jsonl ended in a record cut short (" +
                             std::to_string(torn_jsonl.size()) + " bytes"),
            std::string::npos)
      << warnings[0];
  EXPECT_NE(warnings[0].find("moved to " + dir + "/metrics.jsonl.torn-1"), std::string::npos);
  EXPECT_NE(warnings[1].find("moved to " + dir + "/metrics.csv.torn-2"), std::string::npos);
  // A whole file is left as it is and nothing is said.
  warnings.clear();
  for (auto& t :
       make_file_trackers("jsonl,csv", dir, [&](const std::string& m) { warnings.push_back(m); })) {
    t->start("project", {});
    t->finish();
  }
  EXPECT_TRUE(warnings.empty());
  EXPECT_FALSE(std::ifstream(dir + "/metrics.jsonl.torn-2").good());
}

// A CSV file whose header itself was cut gets the whole header again; a record longer than the
// repair's read buffer is moved aside whole.
TEST(FileTrackers, ATornHeaderAndALongTornRecordAreRepairedToo) {
  const std::string dir = fresh_dir("trackers_torn_long") + "/project";
  accel::make_directories(dir, 0755);
  write_file(dir + "/metrics.csv", "wall_ti");
  const std::string long_torn =
      "{\"step\": 1, \"values\": {\"text\": \"" + std::string(200000, 'x');
  write_file(dir + "/metrics.jsonl", long_torn);
  for (auto& t : make_file_trackers("jsonl,csv", dir, {})) {
    t->start("project", {});
    t->log({number("loss", 2)}, 4, 4.5);
    t->finish();
  }
  EXPECT_EQ(slurp(dir + "/metrics.csv"), "wall_time,step,tag,value\n4.5,4,loss,2\n");
  EXPECT_EQ(slurp(dir + "/metrics.csv.torn-1"), "wall_ti");
  EXPECT_EQ(slurp(dir + "/metrics.jsonl"),
            "{\"step\": 4, \"wall_time\": 4.5, \"values\": {\"loss\": 2}}\n");
  EXPECT_EQ(slurp(dir + "/metrics.jsonl.torn-1"), long_torn);
}

// PyYAML reads "1e-05" as a string: hparams.yml writes exponents with a point, as PyYAML does.
TEST(FileTrackers, HparamsYamlKeepsNumbersWithExponentsFloats) {
  const std::string dir = fresh_dir("trackers_yaml") + "/project";
  auto trackers = make_file_trackers("tensorboard", dir, {});
  trackers.at(0)->start("project", {number("wd", 1e-05), number("big", 1e20), number("count", 3),
                                    number("eps", 2.5e-08)});
  trackers.at(0)->finish();
  EXPECT_EQ(slurp(dir + "/hparams.yml"), "wd: 1.0e-05\nbig: 1.0e+20\ncount: 3\neps: 2.5e-08\n");
}

TEST(FileTrackers, AnUnwritableDirectoryIsAnIoErrorAtStart) {
  for (const char* log_with : {"tensorboard", "jsonl", "csv"}) {
    auto trackers = make_file_trackers(log_with, "/dev/null/runs/project", {});
    ASSERT_EQ(trackers.size(), 1u);
    try {
      trackers[0]->start("project", {});
      FAIL() << log_with << " started in a directory under a file";
    } catch (const accel::Error& e) {
      EXPECT_EQ(e.code(), accel::Errc::io);
      EXPECT_NE(std::string(e.what()).find("/dev/null is not a directory"), std::string::npos)
          << e.what();
    }
  }
}
