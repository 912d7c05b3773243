#include "checkpoint/state.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <zlib.h>
#include <nlohmann/json.hpp>

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <mutex>
#include <sstream>

#include "checkpoint/atomic_dir.hpp"
#include "checkpoint/manifest.hpp"
#include "checkpoint/model_io.hpp"
#include "common/error.hpp"
#include "common/parse.hpp"
#include "ops/collectives.hpp"
#include "ops/main_process.hpp"
#include "runtime/seed.hpp"

namespace accel::checkpoint {

namespace {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) fail(Errc::io, "cannot write '" + path + "'");
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(Errc::io, "cannot read '" + path + "'");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

nlohmann::json read_json(const std::string& path) {
  try {
    return nlohmann::json::parse(read_text(path));
  } catch (const accel::Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(Errc::io, "'" + path + "' is not valid JSON: " + e.what());
  }
}

// at::Generator is a handle: copies share the generator.
at::Tensor state_of(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_state(at::Generator gen, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

std::string rng_file(int rank) {
  return "random_states_" + std::to_string(rank) + ".safetensors";
}

}  // namespace

namespace {

void save_state_unguarded(prepare::Session& session, const std::string& dir) {
  auto& acc = session.accelerator();
  auto* comm = acc.communicator();
  const std::string partial_suffix = ".partial";
  std::unique_ptr<AtomicDir> atomic;
  ops::run_on_main(acc, [&] { atomic = std::make_unique<AtomicDir>(dir, partial_suffix); });
  const std::string work = dir + partial_suffix;
  // Every rank's own random state, into the directory the main process made.
  std::string error;
  try {
    NamedTensors rng = {{"cpu", state_of(at::detail::getDefaultCPUGenerator())},
                        {"library", state_of(runtime::library_generator())}};
    write_safetensors(work + "/" + rng_file(acc.place().rank), rng, {});
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (comm) {
    for (const auto& e : ops::gather_object(comm, error))
      if (!e.empty() && error.empty()) error = e;
  }
  if (!error.empty()) fail(Errc::io, "save_state: writing the random states failed: " + error);

  ops::run_on_main(acc, [&] {
    Manifest m;
    m.library_version = ACCEL_LIBRARY_VERSION;
    m.num_processes = acc.place().world_size;
    m.step = session.total_steps();
    std::vector<std::string> files;
    for (int r = 0; r < acc.place().world_size; ++r) files.push_back(rng_file(r));
    const auto& models = session.models();
    for (size_t i = 0; i < models.size(); ++i) {
      NamedTensors state = models[i]->named_parameters();
      for (auto& b : models[i]->named_buffers()) state.push_back(std::move(b));
      files.push_back("model_" + std::to_string(i) + ".safetensors");
      write_safetensors(work + "/" + files.back(), state, {{"format", "pt"}});
    }
    const auto& optimizers = session.optimizers();
    for (size_t i = 0; i < optimizers.size(); ++i) {
      files.push_back("optimizer_" + std::to_string(i) + ".safetensors");
      write_safetensors(work + "/" + files.back(), optimizers[i]->state_tensors(), {});
      nlohmann::ordered_json j = {{"kind", optimizers[i]->kind()},
                                  {"options", optimizers[i]->options()}};
      files.push_back("optimizer_" + std::to_string(i) + ".json");
      write_text(work + "/" + files.back(), j.dump(2));
    }
    const auto& schedulers = session.schedulers();
    for (size_t i = 0; i < schedulers.size(); ++i) {
      nlohmann::ordered_json j = {{"kind", schedulers[i]->schedule().kind()},
                                  {"steps", schedulers[i]->steps()},
                                  {"base_lr", schedulers[i]->base_lr()}};
      files.push_back("scheduler_" + std::to_string(i) + ".json");
      write_text(work + "/" + files.back(), j.dump(2));
    }
    const auto& loaders = session.dataloaders();
    nlohmann::ordered_json training = {{"micro_step", session.micro_step()},
                                       {"sync_gradients", session.sync_gradients()}};
    if (auto* s = session.mutable_scaler())
      training["scaler"] = {{"scale", s->scale()}, {"growth_tracker", s->growth_tracker()}};
    training["dataloaders"] = nlohmann::ordered_json::array();
    for (const auto& l : loaders) {
      const auto [epoch, samples] = l->checkpoint_cursor();
      training["dataloaders"].push_back({{"epoch", epoch}, {"samples", samples}});
    }
    files.push_back("training_state.json");
    write_text(work + "/" + files.back(), training.dump(2));
    const auto& custom = session.custom_objects();
    for (size_t i = 0; i < custom.size(); ++i) {
      std::string bytes;
      try {
        bytes = custom[i].save();
      } catch (const accel::Error& e) {
        fail(e.code(), "registered object " + std::to_string(i) + ": " + e.what());
      }
      files.push_back("custom_" + std::to_string(i) + ".bin");
      write_text(work + "/" + files.back(), bytes);
    }
    files.push_back("config.yaml");
    write_text(work + "/" + files.back(), acc.settings().dump_yaml());
    for (const auto& f : files) m.files.push_back(describe_file(work, f));
    write_text(work + "/manifest.json", to_json(m));
    atomic->commit();
  });
}

void load_state_unguarded(prepare::Session& session, const std::string& dir) {
  auto& acc = session.accelerator();
  const Manifest m = parse_manifest(read_text(dir + "/manifest.json"), dir + "/manifest.json");
  verify(dir, m);
  const auto& models = session.models();
  const auto& optimizers = session.optimizers();
  const auto& schedulers = session.schedulers();
  for (size_t i = 0; i < models.size(); ++i)
    load_checkpoint_in_model(*models[i], dir + "/model_" + std::to_string(i) + ".safetensors");
  for (size_t i = 0; i < optimizers.size(); ++i) {
    const std::string base = dir + "/optimizer_" + std::to_string(i);
    const auto j = read_json(base + ".json");
    if (!j.contains("kind") || j["kind"] != optimizers[i]->kind())
      fail(Errc::state, "checkpoint optimizer " + std::to_string(i) + " is not a " +
                            optimizers[i]->kind() + " optimizer");
    optimizers[i]->set_options(j.at("options").get<std::map<std::string, double>>());
    optimizers[i]->load_state_tensors(read_safetensors(base + ".safetensors"));
  }
  for (size_t i = 0; i < schedulers.size(); ++i) {
    const auto j = read_json(dir + "/scheduler_" + std::to_string(i) + ".json");
    if (!j.contains("kind") || j["kind"] != schedulers[i]->schedule().kind())
      fail(Errc::state, "checkpoint scheduler " + std::to_string(i) + " is not a " +
                            schedulers[i]->schedule().kind() + " schedule");
    schedulers[i]->restore(j.at("steps").get<int64_t>(), j.at("base_lr").get<double>());
  }
  const auto training = read_json(dir + "/training_state.json");
  session.restore_micro_step(training.at("micro_step").get<int64_t>(),
                             training.at("sync_gradients").get<bool>(), m.step);
  if (auto* s = session.mutable_scaler(); s && training.contains("scaler"))
    s->restore(training["scaler"].at("scale").get<double>(),
               training["scaler"].at("growth_tracker").get<int>());
  const auto& loaders = session.dataloaders();
  const auto& saved = training.at("dataloaders");
  if (saved.size() != loaders.size())
    fail(Errc::state, "the checkpoint has " + std::to_string(saved.size()) +
                          " dataloaders; this run prepared " + std::to_string(loaders.size()));
  for (size_t i = 0; i < loaders.size(); ++i)
    loaders[i]->restore_cursor(saved[i].at("epoch").get<int64_t>(),
                               saved[i].at("samples").get<int64_t>());
  const auto& custom = session.custom_objects();
  for (size_t i = 0; i < custom.size(); ++i) {
    const std::string bytes = read_text(dir + "/custom_" + std::to_string(i) + ".bin");
    try {
      custom[i].load(bytes);
    } catch (const accel::Error& e) {
      fail(e.code(), "registered object " + std::to_string(i) + ": " + e.what());
    }
  }
  // Random states: this rank's own, or, for a rank the saving run did not have, rank 0's mixed with
  // the rank so that every new rank draws its own reproducible stream.
  const int rank = acc.place().rank;
  const bool own = rank < m.num_processes;
  const auto rng = read_safetensors(dir + "/" + rng_file(own ? rank : 0));
  for (const auto& [name, state] : rng) {
    at::Generator gen =
        name == "library" ? runtime::library_generator() : at::detail::getDefaultCPUGenerator();
    if (name != "library" && name != "cpu") continue;
    if (own) {
      set_state(gen, state);
    } else {
      const uLong crc =
          crc32(crc32(0L, Z_NULL, 0), state.data_ptr<uint8_t>(), static_cast<uInt>(state.numel()));
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_current_seed((static_cast<uint64_t>(crc) << 20) ^ static_cast<uint64_t>(rank));
    }
  }
  if (auto* comm = acc.communicator()) comm->barrier();
}

std::string checkpoints_dir(prepare::Session& session) {
  const auto& settings = session.accelerator().settings();
  const std::string project = settings.text("project_dir");
  if (!settings.flag("automatic_checkpoint_naming") || project.empty())
    fail(Errc::invalid_argument,
         "no checkpoint directory given and automatic naming is off: set "
         "automatic_checkpoint_naming true and project_dir, or pass a directory");
  return project + "/checkpoints";
}

// The checkpoint numbers present, ascending.
std::vector<int64_t> existing(const std::string& dir) {
  std::vector<int64_t> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      long long n = -1;
      if (name.rfind("checkpoint_", 0) == 0 && parse_int(name.substr(11), &n) && n >= 0)
        out.push_back(n);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

void save_state(prepare::Session& session, const std::string& dir) {
  prepare::Session::CheckpointScope scope(session);
  save_state_unguarded(session, dir);
}

void load_state(prepare::Session& session, const std::string& dir) {
  prepare::Session::CheckpointScope scope(session);
  load_state_unguarded(session, dir);
}

void save_state_automatic(prepare::Session& session) {
  prepare::Session::CheckpointScope scope(session);
  const std::string dir = checkpoints_dir(session);
  auto& acc = session.accelerator();
  ops::run_on_main(acc, [&] {
    const std::string project = dir.substr(0, dir.rfind('/'));
    mkdir(project.c_str(), 0755);
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
      fail(Errc::io, "cannot create '" + dir + "'");
  });
  if (session.iteration < 0) {
    const auto present = existing(dir);
    session.iteration = present.empty() ? 0 : present.back() + 1;
  }
  save_state_unguarded(session, dir + "/checkpoint_" + std::to_string(session.iteration));
  ++session.iteration;
  const int64_t limit = acc.settings().integer("total_limit");
  ops::run_on_main(acc, [&] {
    if (limit <= 0) return;
    auto present = existing(dir);
    while (static_cast<int64_t>(present.size()) > limit) {
      remove_tree(dir + "/checkpoint_" + std::to_string(present.front()));
      present.erase(present.begin());
    }
  });
}

void load_state_automatic(prepare::Session& session) {
  prepare::Session::CheckpointScope scope(session);
  const std::string dir = checkpoints_dir(session);
  const auto present = existing(dir);
  if (present.empty()) fail(Errc::io, "there is no checkpoint in '" + dir + "'");
  load_state_unguarded(session, dir + "/checkpoint_" + std::to_string(present.back()));
  // Accelerate forgets this (its issue #3306): the next save must not overwrite the loaded one.
  session.iteration = present.back() + 1;
}

}  // namespace accel::checkpoint
