// The trackers that write files under a run's directory (logging_dir/project_name), each made by
// its own function (one signature: the directory, where warnings go); make_file_trackers
// (tracker.hpp) picks them by name from the table in trackers.cpp (a new one: its file, its
// function here, its row there).
//   tensorboard  events.out.tfevents.* (numbers as scalars, texts as PyTorch's add_text writes
//                them), the configuration as a text summary "hparams" (a Markdown table) and as
//                hparams.yml, as Accelerate's TensorBoardTracker keeps it beside its events
//   jsonl        metrics.jsonl, one JSON object a log call: {"step": 5, "wall_time": ...,
//                "values": {"loss": 0.31, ...}} (step null without one); hparams.json
//   csv          metrics.csv, one row a value: wall_time,step,tag,value; hparams.csv (key,value)
// jsonl and csv append to the files of an earlier run in the same directory (a resumed run goes
// on in the same file), after moving aside a last record a killed run left without its newline
// (OutputFile::Mode::kAppend), said through `warn`; TensorBoard starts a new event file, as it
// always does (its readers skip a torn record at a file's end).
#pragma once

#include <memory>
#include <string>

#include "tracking/tracker.hpp"

namespace accel::tracking {

std::unique_ptr<Tracker> make_tensorboard_tracker(const std::string& dir, Warn warn);
std::unique_ptr<Tracker> make_jsonl_tracker(const std::string& dir, Warn warn);
std::unique_ptr<Tracker> make_csv_tracker(const std::string& dir, Warn warn);

}  // namespace accel::tracking
