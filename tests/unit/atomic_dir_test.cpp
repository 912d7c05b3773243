// Directories that appear complete or not at all.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "checkpoint/atomic_dir.hpp"
#include "common/error.hpp"

using accel::checkpoint::AtomicDir;

namespace {
bool exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}
std::string slurp(const std::string& p) {
  std::ifstream in(p);
  std::string s;
  std::getline(in, s);
  return s;
}
}  // namespace

TEST(AtomicDir, CommitPutsItInPlaceAndAbandonLeavesNothing) {
  const std::string final_path = ::testing::TempDir() + "atomic_ckpt";
  accel::checkpoint::remove_tree(final_path);
  {
    AtomicDir d(final_path);
    std::ofstream(d.path() + "/a.txt") << "first";
    EXPECT_FALSE(exists(final_path)) << "nothing visible before commit";
    d.commit();
  }
  EXPECT_EQ(slurp(final_path + "/a.txt"), "first");
  {
    AtomicDir d(final_path);
    std::ofstream(d.path() + "/a.txt") << "abandoned";
    // no commit: as if the save failed half-way
  }
  EXPECT_EQ(slurp(final_path + "/a.txt"), "first") << "the previous checkpoint is untouched";
  {
    AtomicDir d(final_path + "/");
    std::ofstream(d.path() + "/a.txt") << "second";
    d.commit();
    EXPECT_FALSE(exists(d.path()));
  }
  EXPECT_EQ(slurp(final_path + "/a.txt"), "second") << "replaced whole";
  EXPECT_THROW(AtomicDir("/nonexistent-parent/ckpt"), accel::Error);
}

// Owner-only while written, whatever the umask; the umask's permissions once in place.
TEST(AtomicDir, PartialIsOwnerOnlyAndTheCommittedOneFollowsTheUmask) {
  const std::string final_path = ::testing::TempDir() + "atomic_ckpt_mode";
  accel::checkpoint::remove_tree(final_path);
  const mode_t old = umask(027);
  {
    AtomicDir d(final_path);
    struct stat st;
    ASSERT_EQ(stat(d.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    d.commit();
    ASSERT_EQ(stat(final_path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0750u);
  }
  umask(old);
  accel::checkpoint::remove_tree(final_path);
}
