// A pretrained checkpoint loaded into a model as Hugging Face transformers' from_pretrained loads
// it (checkpoint/load_plan.hpp decides what goes where): non-strict loads, base_model_prefix,
// floating tensors cast to the model's dtype, tied weights, transformers' report.
#pragma once

#include <string>
#include <vector>

#include "checkpoint/load_plan.hpp"
#include "checkpoint/model_io.hpp"

namespace accel::checkpoint {

struct PretrainedOptions {
  LoadOptions load{
      "", false, false, {}, {}};         // not strict, as from_pretrained; tied groups: the model's
  std::string model_name = "the model";  // the name the report gives the model
  bool architecture_matches = false;     // unexpected tensors a warning (else info)
  // The program's name map (accel_load_pretrained_mapped), or empty: the checkpoint's names. It
  // renames before the base_model_prefix rule; the report then uses the new names, and the
  // checkpoint's own names for the tensors it left unused.
  NameMap map;
};

struct PretrainedLoad {
  LoadPlan plan;
  std::vector<ReportLine> report;
};

// Parses "key=value" options (accel_model_add_layer's spec form): strict, base_model_prefix,
// ignore_mismatched_sizes, model_name, architecture_matches. Throws invalid_argument.
PretrainedOptions parse_pretrained_options(const std::string& spec);

// Every file opened and its header checked, the names mapped, and the plan made, before any
// tensor's bytes are read
// (model_io.hpp's write_planned then reads each into place, cast to the model's dtype). Fills
// `out` (plan and report). Throws accel::Error (io: files; shape, dtype, invalid_argument: see
// plan_load).
PlannedLoad plan_pretrained(const model::Model& m, const std::string& path,
                            const PretrainedOptions& options, PretrainedLoad* out);

// plan_pretrained then write_planned, into a model whole on this process. Any error found before
// the bytes (files, headers, dtypes, the plan's) leaves the model unchanged; a read failing midway
// leaves it partly loaded and says so (write_planned).
PretrainedLoad load_pretrained(model::Model& m, const std::string& path,
                               const PretrainedOptions& options);

}  // namespace accel::checkpoint
