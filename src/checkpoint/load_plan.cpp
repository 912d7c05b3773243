#include "checkpoint/load_plan.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "common/error.hpp"

namespace accel::checkpoint {
namespace {

bool floating(const std::string& dtype) {
  return dtype == "F32" || dtype == "F16" || dtype == "BF16" || dtype == "F64";
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// transformers 4.4x: the direction is decided once for the whole load, by a plain startswith.
std::map<std::string, std::string> expected_keys(const std::vector<TensorSpec>& model,
                                                 const std::vector<TensorSpec>& checkpoint,
                                                 const std::string& prefix) {
  auto any_starts = [&](const std::vector<TensorSpec>& specs) {
    return !prefix.empty() && std::any_of(specs.begin(), specs.end(), [&](const TensorSpec& t) {
      return starts_with(t.name, prefix);
    });
  };
  const bool has = any_starts(checkpoint), expects = any_starts(model);
  std::map<std::string, std::string> key_to_model;
  for (const TensorSpec& t : model) {
    std::string key = t.name;
    if (!has && expects && starts_with(key, prefix + "."))
      key = key.substr(prefix.size() + 1);  // a base checkpoint into a model holding the base
    else if (has && !expects)
      key = prefix + "." + key;  // a task checkpoint into the base model
    key_to_model[key] = t.name;
  }
  return key_to_model;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "torch.Size([";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "])";
}

// A Python list's repr, as transformers prints its key lists.
std::string list_text(const std::vector<std::string>& keys) {
  std::string s = "[";
  for (size_t i = 0; i < keys.size(); ++i) s += (i ? ", '" : "'") + keys[i] + "'";
  return s + "]";
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// A tied group with one member loaded is not missing at all (transformers' rule).
void forgive_tied(std::vector<std::string>& missing,
                  const std::vector<std::vector<std::string>>& tied,
                  const std::map<std::string, std::string>& key_of_model) {
  for (const auto& group : tied) {
    std::vector<std::string> keys;
    for (const auto& n : group)
      if (auto it = key_of_model.find(n); it != key_of_model.end()) keys.push_back(it->second);
    const auto in_missing = [&](const std::string& k) {
      return std::find(missing.begin(), missing.end(), k) != missing.end();
    };
    const size_t gone = static_cast<size_t>(std::count_if(keys.begin(), keys.end(), in_missing));
    if (gone > 0 && gone < keys.size())
      missing.erase(std::remove_if(missing.begin(), missing.end(),
                                   [&](const std::string& k) {
                                     return std::find(keys.begin(), keys.end(), k) != keys.end();
                                   }),
                    missing.end());
  }
}

}  // namespace

MappedNames map_checkpoint_names(const std::vector<TensorSpec>& checkpoint, const NameMap& map) {
  MappedNames out;
  for (const TensorSpec& t : checkpoint) {
    std::optional<std::string> name = map(t.name);
    if (!name) {
      out.unused.push_back(t.name);
      continue;
    }
    const auto [it, fresh] = out.original.emplace(*name, t.name);
    if (!fresh)
      fail(Errc::invalid_argument, "the name map gives checkpoint tensors '" + it->second +
                                       "' and '" + t.name + "' one name, '" + *name + "'");
    out.checkpoint.push_back({*name, t.shape, t.dtype});
  }
  return out;
}

LoadPlan plan_load(const std::vector<TensorSpec>& model, const std::vector<TensorSpec>& checkpoint,
                   const LoadOptions& options) {
  const auto key_to_model = expected_keys(model, checkpoint, options.base_model_prefix);
  std::map<std::string, std::string> key_of_model;
  for (const auto& [key, name] : key_to_model) key_of_model[name] = key;
  std::map<std::string, const TensorSpec*> by_name;
  for (const TensorSpec& t : model) by_name[t.name] = &t;
  LoadPlan plan;
  std::set<std::string> loaded;
  std::vector<std::string> wrong_kind;
  for (const TensorSpec& c : checkpoint) {
    loaded.insert(c.name);
    const auto it = key_to_model.find(c.name);
    if (it == key_to_model.end()) {
      plan.unexpected.push_back(c.name);
      continue;
    }
    const TensorSpec& m = *by_name.at(it->second);
    if (m.shape != c.shape) {
      plan.mismatched.push_back({c.name, c.shape, m.shape});
      continue;
    }
    if (floating(m.dtype) != floating(c.dtype)) {
      wrong_kind.push_back(c.name + " (" + c.dtype + " in the checkpoint, " + m.dtype +
                           " in the model)");
      continue;
    }
    plan.copies.emplace_back(m.name, c.name);
  }
  plan.unexpected.insert(plan.unexpected.end(), options.unused.begin(), options.unused.end());
  for (const auto& [key, name] : key_to_model)
    if (!loaded.count(key)) plan.missing.push_back(key);
  forgive_tied(plan.missing, options.tied, key_of_model);
  std::sort(plan.unexpected.begin(), plan.unexpected.end());
  if (!wrong_kind.empty())
    fail(Errc::dtype,
         "checkpoint tensors of another kind than the model's (a floating tensor "
         "loads only into a floating one): " +
             joined(wrong_kind));
  std::vector<std::string> mismatches;
  for (const Mismatch& m : plan.mismatched)
    mismatches.push_back(m.key + ": found shape " + shape_text(m.checkpoint_shape) +
                         " in the checkpoint and " + shape_text(m.model_shape) + " in the model");
  if (!mismatches.empty() && (options.strict || !options.ignore_mismatched_sizes))
    fail(Errc::shape, "size mismatch for " + joined(mismatches) +
                          (options.strict ? "" : " (ignore_mismatched_sizes keeps the model's)"));
  if (options.strict && (!plan.missing.empty() || !plan.unexpected.empty()))
    fail(Errc::invalid_argument,
         "strict load: " +
             (plan.missing.empty() ? "" : "missing from the checkpoint: " + joined(plan.missing)) +
             (plan.missing.empty() || plan.unexpected.empty() ? "" : "; ") +
             (plan.unexpected.empty() ? "" : "not in the model: " + joined(plan.unexpected)));
  return plan;
}

std::vector<ReportLine> load_report(const LoadPlan& plan, const std::string& model_name,
                                    const std::string& path, bool architecture_matches) {
  std::vector<ReportLine> lines;
  const std::string& m = model_name;
  if (!plan.unexpected.empty())
    lines.push_back(
        {architecture_matches,
         "Some weights of the model checkpoint at " + path + " were not used when initializing " +
             m + ": " + list_text(plan.unexpected) +
             "\n- This IS expected if you are initializing " + m +
             " from the checkpoint of a model trained on another task or with another "
             "architecture (e.g. initializing a BertForSequenceClassification model from a "
             "BertForPreTraining model).\n- This IS NOT expected if you are initializing " +
             m +
             " from the checkpoint of a model that you expect to be exactly identical "
             "(initializing a BertForSequenceClassification model from a "
             "BertForSequenceClassification model)."});
  else
    lines.push_back(
        {false, "All model checkpoint weights were used when initializing " + m + ".\n"});
  if (!plan.missing.empty())
    lines.push_back({true, "Some weights of " + m +
                               " were not initialized from the model checkpoint at " + path +
                               " and are newly initialized: " + list_text(plan.missing) +
                               "\nYou should probably TRAIN this model on a down-stream task to "
                               "be able to use it for predictions and inference."});
  else if (plan.mismatched.empty())
    lines.push_back({false, "All the weights of " + m +
                                " were initialized from the model checkpoint at " + path +
                                ".\nIf your task is similar to the task the model of the "
                                "checkpoint was trained on, you can already use " +
                                m + " for predictions without further training."});
  if (!plan.mismatched.empty()) {
    std::string list;
    for (const Mismatch& x : plan.mismatched)
      list +=
          (list.empty() ? "" : "\n") +
          ("- " + x.key + ": found shape " + shape_text(x.checkpoint_shape) +
           " in the checkpoint and " + shape_text(x.model_shape) + " in the model instantiated");
    lines.push_back(
        {true, "Some weights of " + m + " were not initialized from the model checkpoint at " +
                   path + " and are newly initialized because the shapes did not match:\n" + list +
                   "\nYou should probably TRAIN this model on a down-stream task to "
                   "be able to use it for predictions and inference."});
  }
  return lines;
}

}  // namespace accel::checkpoint
