// The pure rules behind text data: padding a batch of ragged samples, Hugging Face's length
// grouping, and Accelerate's split_between_processes (the worked examples of its docstring and the
// rules of version 1.15; tests/unit/accelerate_data_diff.py compares the rest against Accelerate's
// own code).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "common/error.hpp"
#include "data/padding.hpp"
#include "data/shard.hpp"
#include "data/split.hpp"

using accel::data::FieldPadding;
using accel::data::kept_length;
using accel::data::padded_length;
using accel::data::set_padding_option;
using accel::data::split_list_indices;
using accel::data::split_padded_rows;
using accel::data::split_slice;
using accel::data::split_tensor_indices;
using Indices = std::vector<int64_t>;

TEST(Padding, LongestRoundedUpToTheMultipleAndTruncatedOrRefusedAboveTheMaximum) {
  FieldPadding p;
  EXPECT_EQ(padded_length(p, {3, 7, 5}), 7);
  EXPECT_EQ(padded_length(p, {}), 0);
  set_padding_option(p, "pad_to_multiple_of", "8");
  EXPECT_EQ(padded_length(p, {3, 7, 5}), 8);
  EXPECT_EQ(padded_length(p, {9}), 16);
  EXPECT_EQ(padded_length(p, {0, 0}), 0);

  set_padding_option(p, "max_length", "6");
  EXPECT_EQ(kept_length(p, 6, 0, 0), 6);
  try {
    kept_length(p, 7, 41, 2);
    FAIL() << "a sample above max_length without truncation was accepted";
  } catch (const accel::Error& e) {
    EXPECT_EQ(e.code(), accel::Errc::shape);
    EXPECT_NE(std::string(e.what()).find("sample 41, field 2 has length 7, above max_length 6"),
              std::string::npos)
        << e.what();
  }
  set_padding_option(p, "truncation", "true");
  EXPECT_EQ(kept_length(p, 7, 41, 2), 6);
  for (int64_t bad : {int64_t{-1}, accel::data::kMaxSampleLength + 1})
    EXPECT_THROW(kept_length(p, bad, 0, 0), accel::Error) << bad;
  set_padding_option(p, "max_length", "none");
  EXPECT_EQ(kept_length(p, 1000, 0, 0), 1000);

  EXPECT_EQ(accel::data::first_row(p, 3, 8), 0);
  set_padding_option(p, "padding_side", "left");
  EXPECT_EQ(accel::data::first_row(p, 3, 8), 5);
}

TEST(Padding, EveryBadOptionNamesTheKeyAndWhatIsAllowed) {
  FieldPadding p;
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"pad_value", "x"},          {"pad_value", "nan"}, {"padding_side", "middle"},
      {"pad_to_multiple_of", "0"}, {"max_length", "-3"}, {"truncation", "yes"},
      {"mask", "attention"},       {"pad_token", "0"}};
  for (const auto& [key, value] : bad) {
    try {
      set_padding_option(p, key, value);
      FAIL() << key << "=" << value << " was accepted";
    } catch (const accel::Error& e) {
      EXPECT_EQ(e.code(), accel::Errc::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("'" + key + "'"), std::string::npos) << e.what();
    }
  }
  set_padding_option(p, "pad_value", "-100");
  EXPECT_EQ(p.pad_value, -100);
}

// transformers' get_length_grouped_indices, written out for one case by hand: 16 samples, global
// batch 2, so megabatches of min(16 / 8, 50) = 2 batches (4 samples), sorted longest first; the
// longest sample's megabatch head goes to the front.
TEST(GroupByLength, MegabatchesSortedLongestFirstWithTheLongestBatchFirst) {
  const Indices lengths = {5, 1, 9, 3, 2, 8, 8, 4, 7, 6, 30, 0, 1, 2, 3, 4};
  Indices order(16);
  for (int64_t i = 0; i < 16; ++i) order[static_cast<size_t>(i)] = i;
  const Indices got = accel::data::group_by_length(order, lengths, 2);
  // Megabatches {0,1,2,3} {4,5,6,7} {8,9,10,11} {12,13,14,15} sorted by length (ties stable):
  // [2,0,3,1] [5,6,7,4] [10,8,9,11] [15,14,13,12]; the longest head (10, length 30) swaps with 2.
  EXPECT_EQ(got, (Indices{10, 0, 3, 1, 5, 6, 7, 4, 2, 8, 9, 11, 15, 14, 13, 12}));
  // A permutation of the input, whatever the order it is given.
  Indices shuffled = accel::data::epoch_order(16, true, 7, 3);
  Indices grouped = accel::data::group_by_length(shuffled, lengths, 4);
  std::sort(grouped.begin(), grouped.end());
  EXPECT_EQ(grouped, order);
}

TEST(SplitBetweenProcesses, AccelerateDocstringAndTodaysRules) {
  // ["A", "B", "C"] on two processes: [A, B] | [C]; padded: [A, B] | [C, C].
  EXPECT_EQ(split_list_indices(3, 2, 0, false), (Indices{0, 1}));
  EXPECT_EQ(split_list_indices(3, 2, 1, false), (Indices{2}));
  EXPECT_EQ(split_list_indices(3, 2, 1, true), (Indices{2, 2}));
  // Padding fills up to ceil(n / P) only: nothing when P divides n (1.2.1 padded to n / P + 1).
  EXPECT_EQ(split_list_indices(2, 2, 0, true), (Indices{0}));
  EXPECT_EQ(split_list_indices(4, 2, 0, true), (Indices{0, 1}));
  // It repeats the input's last item, not the slice's: n=4, P=3 is [0,1] | [2,3] | [3,3].
  EXPECT_EQ(split_list_indices(4, 3, 1, true), (Indices{2, 3}));
  EXPECT_EQ(split_list_indices(4, 3, 2, true), (Indices{3, 3}));
  // A process past the end takes nothing, or the last item when padded.
  EXPECT_EQ(split_list_indices(1, 2, 1, false), Indices{});
  EXPECT_EQ(split_list_indices(2, 4, 3, false), Indices{});
  EXPECT_EQ(split_list_indices(2, 4, 2, true), (Indices{1}));
  // One process: everything, never padded.
  EXPECT_EQ(split_list_indices(3, 1, 0, true), (Indices{0, 1, 2}));
  // An empty input is empty everywhere, padded too (Accelerate raises IndexError).
  EXPECT_EQ(split_list_indices(0, 2, 1, false), Indices{});
  EXPECT_EQ(split_list_indices(0, 2, 0, true), Indices{});
  EXPECT_EQ(split_tensor_indices(0, 3, 2, true), Indices{});
  EXPECT_THROW(split_list_indices(-1, 2, 0, false), accel::Error);
  EXPECT_THROW(split_list_indices(3, 2, 2, false), accel::Error);
  // Tensors split as lists do.
  EXPECT_EQ(split_tensor_indices(4, 3, 1, true), (Indices{2, 3}));
  EXPECT_EQ(split_padded_rows(4, 2), 2);
  EXPECT_EQ(split_padded_rows(5, 4), 2);
  EXPECT_EQ(split_padded_rows(2, 4), 1);
  // Every item is somebody's, in order, for any n and P.
  for (int64_t n = 0; n < 30; ++n)
    for (int P = 1; P < 7; ++P) {
      Indices all;
      for (int r = 0; r < P; ++r) {
        const auto s = split_slice(n, P, r);
        if (s.start + s.length <= n && (all.empty() || s.start > all.back()))
          for (int64_t i = 0; i < s.length; ++i) all.push_back(s.start + i);
      }
      EXPECT_EQ(static_cast<int64_t>(all.size()), n) << n << " on " << P;
    }
}
