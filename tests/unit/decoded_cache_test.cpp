// Decoded copies in the cache directory: made once per source version, whole or not at all, by one
// process at a time; and the IDX reader they serve.
#include <dirent.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <fstream>
#include <map>
#include <thread>

#include "common/error.hpp"
#include "data/decoded_cache.hpp"
#include "data/idx_file.hpp"

using accel::data::DecodedCopy;
using accel::data::open_decoded;

namespace {

std::string fresh_dir() {
  std::string d = ::testing::TempDir() + "decoded_cacheXXXXXX";
  return mkdtemp(d.data());
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (const dirent* e = readdir(d))
      if (e->d_name[0] != '.') out.push_back(e->d_name);
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> copies(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : entries(dir))
    if (e.find(".lock") == std::string::npos) out.push_back(e);
  return out;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// A "decoder" that fills the copy with `text` repeated, counting its calls.
struct Filler {
  std::string text;
  int calls = 0;
  void operator()(const accel::data::ByteSink& sink, size_t bytes) {
    ++calls;
    std::string out(bytes, '\0');
    for (size_t i = 0; i < bytes; ++i) out[i] = text[i % text.size()];
    sink(reinterpret_cast<const unsigned char*>(out.data()), 1);  // in two pieces
    sink(reinterpret_cast<const unsigned char*>(out.data()) + 1, bytes - 1);
  }
};

std::optional<DecodedCopy> map(const std::string& cache, const std::string& source, size_t bytes,
                               Filler& f, std::string* why) {
  return open_decoded(
      cache, source, bytes, [&](const accel::data::ByteSink& sink) { f(sink, bytes); }, why);
}

std::string read_all(const DecodedCopy& c) {
  std::string out(c.bytes, '\0');
  accel::data::read_copy(c, 0, c.bytes, out.data());
  return out;
}

}  // namespace

TEST(DecodedCache, DecodesOnceAndMapsTheCopyAfter) {
  const std::string dir = fresh_dir(), cache = dir + "/a/b", source = dir + "/data.gz";
  write_file(source, "compressed bytes");
  Filler f{"decoded"};
  std::string why;
  auto first = map(cache, source, 5000, f, &why);
  ASSERT_TRUE(first) << why;
  auto second = map(cache, source, 5000, f, &why);
  ASSERT_TRUE(second) << why;
  EXPECT_EQ(f.calls, 1);
  EXPECT_EQ(read_all(*first), read_all(*second));
  EXPECT_EQ(read_all(*second).substr(0, 7), "decoded");
  ASSERT_EQ(copies(cache).size(), 1u);
  struct stat st {};
  ASSERT_EQ(stat((cache + "/" + copies(cache)[0]).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "a copy is the user's alone";
  ASSERT_EQ(stat(cache.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST(DecodedCache, AChangedSourceIsDecodedAgainAndTheOldCopyGoes) {
  const std::string dir = fresh_dir(), cache = dir + "/c", source = dir + "/data.gz";
  write_file(source, "version one");
  Filler one{"one"}, two{"two"};
  std::string why;
  auto old_copy = map(cache, source, 4096, one, &why);
  ASSERT_TRUE(old_copy) << why;
  write_file(source, "version two, longer");
  auto new_copy = map(cache, source, 4096, two, &why);
  ASSERT_TRUE(new_copy) << why;
  EXPECT_EQ(two.calls, 1);
  EXPECT_EQ(read_all(*new_copy).substr(0, 3), "two");
  EXPECT_EQ(read_all(*old_copy).substr(0, 3), "one")
      << "a removed copy stays readable to whoever opened it";
  EXPECT_EQ(copies(cache).size(), 1u) << "the older version is removed";
}

TEST(DecodedCache, AFailedDecodeLeavesNothing) {
  const std::string dir = fresh_dir(), cache = dir + "/c", source = dir + "/data.gz";
  write_file(source, "x");
  std::string why;
  EXPECT_THROW(open_decoded(
                   cache, source, 4096,
                   [](const accel::data::ByteSink& sink) {
                     const unsigned char half[2048] = {};
                     sink(half, sizeof half);
                     accel::fail(accel::Errc::io, "corrupt source");
                   },
                   &why),
               accel::Error);
  EXPECT_TRUE(copies(cache).empty());
  Filler f{"good"};
  auto m = map(cache, source, 4096, f, &why);  // and the next attempt succeeds
  ASSERT_TRUE(m) << why;
  EXPECT_EQ(f.calls, 1);
}

TEST(DecodedCache, AFileUnderTheNameThatIsNotAGoodCopyIsReplaced) {
  const std::string dir = fresh_dir(), cache = dir + "/c", source = dir + "/data.gz";
  write_file(source, "x");
  Filler f{"abc"};
  std::string why;
  ASSERT_TRUE(map(cache, source, 8192, f, &why)) << why;
  const std::string name = cache + "/" + copies(cache)[0];
  ASSERT_EQ(truncate(name.c_str(), 100), 0);  // cut by someone
  auto m = map(cache, source, 8192, f, &why);
  ASSERT_TRUE(m) << why;
  EXPECT_EQ(f.calls, 2);
  EXPECT_EQ(read_all(*m)[8191], 'b');  // 8191 % 3 == 1
}

TEST(DecodedCache, ADirectoryOthersMayWriteToIsNotUsed) {
  const std::string dir = fresh_dir(), source = dir + "/data.gz";
  write_file(source, "x");
  ASSERT_EQ(chmod(dir.c_str(), 0777), 0);
  Filler f{"abc"};
  std::string why;
  EXPECT_FALSE(map(dir, source, 4096, f, &why));
  EXPECT_NE(why.find("others may write"), std::string::npos) << why;
  EXPECT_EQ(f.calls, 0) << "the caller decodes into its own memory instead";
}

TEST(DecodedCache, ADirectoryThatCannotBeMadeSaysWhy) {
  const std::string dir = fresh_dir(), source = dir + "/data.gz";
  write_file(source, "x");
  Filler f{"abc"};
  std::string why;
  EXPECT_FALSE(map(source + "/cache", source, 4096, f, &why));
  EXPECT_NE(why.find("is not a directory"), std::string::npos) << why;
  EXPECT_FALSE(map("", source, 4096, f, &why));
  EXPECT_NE(why.find("ACCEL_DATASETS_CACHE=off"), std::string::npos) << why;
}

TEST(DecodedCache, ProcessesOpeningTheSameFileAtOnceDecodeItOnce) {
  const std::string dir = fresh_dir(), cache = dir + "/c", source = dir + "/data.gz";
  const std::string counter = dir + "/decodes";
  write_file(source, "x");
  std::vector<pid_t> children;
  for (int i = 0; i < 3; ++i) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      std::string why;
      auto m = open_decoded(
          cache, source, 1 << 20,
          [&](const accel::data::ByteSink& sink) {
            std::ofstream(counter, std::ios::app) << "d";
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            const std::string sevens(1 << 20, '\7');
            sink(reinterpret_cast<const unsigned char*>(sevens.data()), sevens.size());
          },
          &why);
      _exit(m && read_all(*m) == std::string(1 << 20, '\7') ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::ifstream in(counter);
  std::string calls;
  in >> calls;
  EXPECT_EQ(calls, "d") << "one process decoded, the others waited and mapped its copy";
}

TEST(DecodedCache, ItsDirectoryComesFromTheEnvironment) {
  auto dir_with = [](std::map<std::string, std::string> env) {
    return accel::data::decoded_cache_dir([&](const char* name) -> const char* {
      auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    });
  };
  EXPECT_EQ(dir_with({{"ACCEL_DATASETS_CACHE", "/d"}, {"HOME", "/h"}}), "/d");
  EXPECT_EQ(dir_with({{"ACCEL_DATASETS_CACHE", "off"}, {"HOME", "/h"}}), "");
  EXPECT_EQ(dir_with({{"XDG_CACHE_HOME", "/x"}, {"HOME", "/h"}}), "/x/libaccel/datasets");
  EXPECT_EQ(dir_with({{"HOME", "/h"}}), "/h/.cache/libaccel/datasets");
  EXPECT_EQ(dir_with({}), "");
}

namespace {

// An IDX file of int32 values 0..count-1 (big-endian, as IDX stores them), gzip-compressed or not.
std::string idx_bytes(int count) {
  std::string b = {0, 0, 0x0C, 1, 0, 0, static_cast<char>(count >> 8), static_cast<char>(count)};
  for (int i = 0; i < count; ++i)
    b += std::string{0, 0, static_cast<char>(i >> 8), static_cast<char>(i & 0xff)};
  return b;
}

void write_gz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

}  // namespace

TEST(IdxFile, PlainAndCompressedDecodeAlike) {
  const std::string dir = fresh_dir();
  write_file(dir + "/plain.idx", idx_bytes(300));
  write_gz(dir + "/packed.idx.gz", idx_bytes(300));
  for (const char* name : {"/plain.idx", "/packed.idx.gz"}) {
    const auto layout = accel::data::read_idx_layout(dir + name);
    EXPECT_EQ(layout.compressed, std::string(name).find(".gz") != std::string::npos) << name;
    EXPECT_EQ(layout.shape, std::vector<int64_t>{300});
    EXPECT_EQ(layout.data_bytes, 1200u);
    std::vector<int32_t> values;
    accel::data::decode_idx(dir + name, layout, [&](const unsigned char* data, size_t size) {
      const auto* v = reinterpret_cast<const int32_t*>(data);
      values.insert(values.end(), v, v + size / 4);
    });
    ASSERT_EQ(values.size(), 300u);
    EXPECT_EQ(values[0], 0);
    EXPECT_EQ(values[299], 299) << "turned into this machine's byte order";
  }
}

TEST(IdxFile, CorruptCompressedDataIsNamedAsSuch) {
  const std::string dir = fresh_dir(), path = dir + "/bad.idx.gz";
  write_gz(path, idx_bytes(5000));
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  for (size_t i = bytes.size() / 3; i < bytes.size() / 2; ++i)
    bytes[i] = static_cast<char>(~bytes[i]);
  write_file(path, bytes);
  try {
    const auto layout = accel::data::read_idx_layout(path);
    accel::data::decode_idx(path, layout, [](const unsigned char*, size_t) {});
    FAIL() << "decoded corrupt data";
  } catch (const accel::Error& e) {
    EXPECT_EQ(e.code(), accel::Errc::io);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("corrupt"), std::string::npos) << e.what();
  }
}
