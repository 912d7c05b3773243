// SLURM's host list and task count notations.
#include <gtest/gtest.h>

#include "cluster/hostlist.hpp"
#include "common/error.hpp"

using accel::cluster::expand_hostlist;
using accel::cluster::expand_task_counts;
using Hosts = std::vector<std::string>;

TEST(Hostlist, Expands) {
  EXPECT_EQ(expand_hostlist("vm"), Hosts{"vm"});
  EXPECT_EQ(expand_hostlist("node[001-003,7]"), (Hosts{"node001", "node002", "node003", "node7"}));
  EXPECT_EQ(expand_hostlist("gnode[10,20],login-1"), (Hosts{"gnode10", "gnode20", "login-1"}));
  EXPECT_EQ(expand_hostlist("r[1-2]n[08-09]"), (Hosts{"r1n08", "r1n09", "r2n08", "r2n09"}));
  EXPECT_EQ(expand_hostlist("a[9-11].ib"), (Hosts{"a9.ib", "a10.ib", "a11.ib"}));
  EXPECT_EQ(expand_hostlist("n[98-100]"), (Hosts{"n98", "n99", "n100"}));
}

TEST(Hostlist, BadListsSayWhere) {
  for (const char* bad : {"", "node[1-2", "node]1", "n[3-1]", "n[a-b]", "n[1,,2]", "a,,b", "a,",
                          "n[1-2[3]]", "n[]", "two words", "n[99999999999999999999]"}) {
    try {
      expand_hostlist(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const accel::Error& e) {
      EXPECT_EQ(e.code(), accel::Errc::config);
      EXPECT_NE(std::string(e.what()).find("host list"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(expand_hostlist("n[0-99999999]"), accel::Error) << "bounded";
  EXPECT_THROW(expand_hostlist("a[0-9999]b[0-9999]"), accel::Error) << "bounded product";
}

TEST(Hostlist, TaskCounts) {
  EXPECT_EQ(expand_task_counts("2"), std::vector<int>{2});
  EXPECT_EQ(expand_task_counts("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(expand_task_counts("1,4(x2)"), (std::vector<int>{1, 4, 4}));
  for (const char* bad : {"", "0", "2(x0)", "2(x3", "x", "2,,1", "-1", "2(x99999999999)"})
    EXPECT_THROW(expand_task_counts(bad), accel::Error) << bad;
}
