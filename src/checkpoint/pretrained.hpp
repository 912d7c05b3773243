// A pretrained checkpoint loaded into a model as Hugging Face transformers' from_pretrained loads
// it (checkpoint/load_plan.hpp decides what goes where): non-strict loads, base_model_prefix,
// floating tensors cast to the model's dtype, tied weights, transformers' report.
#pragma once

#include <string>
#include <vector>

#include "checkpoint/load_plan.hpp"

namespace accel::model {
class Model;
}

namespace accel::checkpoint {

struct PretrainedOptions {
  LoadOptions load{"", false};           // not strict, as from_pretrained; tied groups: the model's
  std::string model_name = "the model";  // the name the report gives the model
  bool architecture_matches = false;     // unexpected tensors a warning (else info)
};

struct PretrainedLoad {
  LoadPlan plan;
  std::vector<ReportLine> report;
};

// Parses "key=value" options (accel_model_add_layer's spec form): strict, base_model_prefix,
// ignore_mismatched_sizes, model_name, architecture_matches. Throws invalid_argument.
PretrainedOptions parse_pretrained_options(const std::string& spec);

// All or nothing: every file is read and every tensor checked and converted before the model
// changes. Throws accel::Error (io: files; shape, dtype, invalid_argument: see plan_load).
PretrainedLoad load_pretrained(model::Model& m, const std::string& path,
                               const PretrainedOptions& options);

}  // namespace accel::checkpoint
