#include "checkpoint/state.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <zlib.h>
#include <nlohmann/json.hpp>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>

#include "checkpoint/atomic_dir.hpp"
#include "checkpoint/manifest.hpp"
#include "checkpoint/model_io.hpp"
#include "common/error.hpp"
#include "common/files.hpp"
#include "common/parse.hpp"
#include "ops/collectives.hpp"
#include "ops/main_process.hpp"
#include "runtime/seed.hpp"

namespace accel::checkpoint {

namespace {

void write_text(const std::string& path, const std::string& text) {
  errno = 0;
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out)
    fail(Errc::io,
         "cannot write '" + path + "': " + (errno ? std::strerror(errno) : "the stream failed"));
}

nlohmann::json read_json(const std::string& path) {
  try {
    return nlohmann::json::parse(read_file(path));
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

// Under ZeRO stage 1, rank r's part of optimizer i's state (Accelerate's SHARDED_STATE_DICT).
std::string optimizer_shard_file(size_t optimizer, int rank) {
  return "optimizer_" + std::to_string(optimizer) + ".rank_" + std::to_string(rank) +
         ".safetensors";
}

// The parts of one sharded optimizer state, as one: each parameter's state in exactly one part.
NamedTensors merge_shards(std::vector<NamedTensors> parts, const std::vector<std::string>& names) {
  NamedTensors all;
  std::map<std::string, size_t> part_of;
  for (size_t r = 0; r < parts.size(); ++r)
    for (auto& [name, t] : parts[r]) {
      if (auto [it, fresh] = part_of.emplace(name, r); !fresh)
        fail(Errc::io, "optimizer state '" + name + "' is in both '" + names[it->second] +
                           "' and '" + names[r] + "': the shards are of different saves");
      all.emplace_back(name, std::move(t));
    }
  return all;
}

// Folds `tensors` (names and bytes) into a running CRC-32.
uLong crc_of(uLong crc, const NamedTensors& tensors) {
  for (const auto& [name, t] : tensors) {
    crc = crc32(crc, reinterpret_cast<const Bytef*>(name.data()), static_cast<uInt>(name.size()));
    const at::Tensor c = t.to(at::kCPU).contiguous();  // a ZeRO shard on a GPU: its bytes here
    const auto* p = static_cast<const Bytef*>(c.data_ptr());
    for (size_t done = 0, n = c.nbytes(); done < n;) {
      const size_t chunk = std::min<size_t>(n - done, size_t{1} << 30);
      crc = crc32(crc, p + done, static_cast<uInt>(chunk));
      done += chunk;
    }
  }
  return crc;
}

// This rank's part of the save's id: the CRC-32 of its per-rank files' contents ("<hex>;").
std::string part_crc(const NamedTensors& rng, const std::vector<NamedTensors>& shards) {
  uLong crc = crc_of(crc32(0L, Z_NULL, 0), rng);
  for (const auto& s : shards) crc = crc_of(crc, s);
  char text[32];
  std::snprintf(text, sizeof text, "%08lx;", static_cast<unsigned long>(crc));
  return text;
}

// A save's id, the same on every rank: a fingerprint of every rank's part (gathered) and the step.
// Saving the same state again gives the same id, so a re-save is byte for byte the same; a part of
// any other state carries another id.
std::string save_id_of(int64_t step, const std::vector<std::string>& parts) {
  std::string all = std::to_string(step) + ";";
  for (const auto& part : parts) all += part;
  const auto* bytes = reinterpret_cast<const Bytef*>(all.data());
  const auto size = static_cast<uInt>(all.size());
  char id[17];
  std::snprintf(id, sizeof id, "%08lx%08lx",
                static_cast<unsigned long>(crc32(crc32(0L, Z_NULL, 0), bytes, size)),
                static_cast<unsigned long>(adler32(adler32(0L, Z_NULL, 0), bytes, size)));
  return id;
}

// What ties a per-rank file (random states, an optimizer's part) to its save.
std::map<std::string, std::string> part_metadata(const std::string& save_id, int rank,
                                                 int num_processes) {
  return {{"libaccel_save_id", save_id},
          {"libaccel_rank", std::to_string(rank)},
          {"libaccel_num_processes", std::to_string(num_processes)}};
}

// Refuses a per-rank file that is not rank `rank`'s part of the save `m` describes: one copied in
// from another save (even with the manifest rewritten to match), or a manifest whose
// num_processes was changed. Checkpoints without a save id (0.2.4 and before) are taken as they
// are.
void check_part(const std::string& path, const Manifest& m, int rank) {
  if (m.save_id.empty()) return;
  const auto meta = read_safetensors_metadata(path);
  auto get = [&](const char* key) {
    const auto it = meta.find(key);
    return it == meta.end() ? std::string("(none)") : it->second;
  };
  if (get("libaccel_save_id") != m.save_id || get("libaccel_rank") != std::to_string(rank) ||
      get("libaccel_num_processes") != std::to_string(m.num_processes))
    fail(Errc::state, "checkpoint file '" + path + "' is not part of this checkpoint's save: it " +
                          "says save " + get("libaccel_save_id") + ", rank " +
                          get("libaccel_rank") + " of " + get("libaccel_num_processes") +
                          "; manifest.json says save " + m.save_id + ", rank " +
                          std::to_string(rank) + " of " + std::to_string(m.num_processes) +
                          " (a file copied in from another save, or an edited manifest)");
}

}  // namespace

namespace {

// This rank's own files of a save: its random states and its part of each sharded optimizer.
struct RankFiles {
  NamedTensors rng;
  std::vector<NamedTensors> shards;
};

// Reads this rank's states into `out`; returns its part of the save id, or "!" and the error:
// every rank reaches the gather, a failing one too, so that all agree on the id or on the failure
// and none is left waiting.
std::string read_rank_files(prepare::Session& session, RankFiles& out) {
  const auto& optimizers = session.optimizers();
  out.shards.resize(optimizers.size());
  try {
    out.rng = {{"cpu", state_of(at::detail::getDefaultCPUGenerator())},
               {"library", state_of(runtime::library_generator())}};
    for (size_t i = 0; i < optimizers.size(); ++i)
      if (optimizers[i]->sharded()) out.shards[i] = optimizers[i]->state_tensors();
    return part_crc(out.rng, out.shards);
  } catch (const std::exception& e) {
    return std::string("!") + e.what();
  }
}

std::string agree_on_save_id(prepare::Session& session, const std::string& mine) {
  auto* comm = session.accelerator().communicator();
  const auto parts = comm ? ops::gather_object(comm, mine) : std::vector<std::string>{mine};
  for (const auto& p : parts)
    if (!p.empty() && p[0] == '!')
      fail(Errc::io,
           "save_state: reading the random and sharded optimizer states failed: " + p.substr(1));
  return save_id_of(session.total_steps(), parts);
}

// Every rank writes its own files in parallel; all fail together when any of them failed.
void write_rank_files(prepare::Session& session, const std::string& work,
                      const std::string& save_id, const RankFiles& own) {
  auto& acc = session.accelerator();
  auto* comm = acc.communicator();
  const auto& optimizers = session.optimizers();
  const int rank = acc.place().rank;
  const auto part = part_metadata(save_id, rank, acc.place().world_size);
  std::string error;
  try {
    struct stat st;
    if (stat(work.c_str(), &st) != 0)
      fail(Errc::io, "'" + work + "', where the main process gathers this save, is not visible " +
                         "to rank " + std::to_string(rank) +
                         ": save_state needs a directory every machine shares, or " +
                         "save_on_each_node (a copy on each machine)");
    write_safetensors(work + "/" + rng_file(rank), own.rng, part);
    for (size_t i = 0; i < optimizers.size(); ++i)
      if (optimizers[i]->sharded())
        write_safetensors(work + "/" + optimizer_shard_file(i, rank), own.shards[i], part);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (comm) {
    for (const auto& e : ops::gather_object(comm, error))
      if (!e.empty() && error.empty()) error = e;
  }
  if (!error.empty())
    fail(Errc::io, "save_state: writing the random and sharded optimizer states failed: " + error);
}

// Each function below writes one kind of object into `work` and appends the names to `files`.
void write_models(prepare::Session& session, const std::string& work,
                  std::vector<std::string>& files) {
  const auto& models = session.models();
  for (size_t i = 0; i < models.size(); ++i) {
    NamedTensors state = models[i]->named_parameters();
    for (auto& b : models[i]->named_buffers()) state.push_back(std::move(b));
    files.push_back("model_" + std::to_string(i) + ".safetensors");
    write_safetensors(work + "/" + files.back(), state, {{"format", "pt"}});
  }
}

// FULL_STATE_DICT of a sharded optimizer: the ranks' parts become the one file stage 0 writes.
void merge_optimizer_parts(size_t i, int world_size, const std::string& work,
                           std::vector<std::string>& files) {
  std::vector<NamedTensors> parts;
  std::vector<std::string> names;
  for (int r = 0; r < world_size; ++r) {
    names.push_back(work + "/" + optimizer_shard_file(i, r));
    parts.push_back(read_safetensors(names.back()));
  }
  files.push_back("optimizer_" + std::to_string(i) + ".safetensors");
  write_safetensors(work + "/" + files.back(), merge_shards(std::move(parts), names), {});
  for (const auto& n : names) std::remove(n.c_str());
}

void write_optimizers(prepare::Session& session, const std::string& work,
                      std::vector<std::string>& files) {
  auto& acc = session.accelerator();
  const auto& optimizers = session.optimizers();
  for (size_t i = 0; i < optimizers.size(); ++i) {
    if (!optimizers[i]->sharded()) {
      files.push_back("optimizer_" + std::to_string(i) + ".safetensors");
      write_safetensors(work + "/" + files.back(), optimizers[i]->state_tensors(), {});
    } else if (acc.sharding().state_dict == config::StateDictType::kSharded) {
      // Each rank wrote its part above (SHARDED_STATE_DICT; DeepSpeed writes one file per rank).
      for (int r = 0; r < acc.place().world_size; ++r) files.push_back(optimizer_shard_file(i, r));
    } else {
      merge_optimizer_parts(i, acc.place().world_size, work, files);
    }
    nlohmann::ordered_json j = {{"kind", optimizers[i]->kind()},
                                {"options", optimizers[i]->options()}};
    files.push_back("optimizer_" + std::to_string(i) + ".json");
    write_text(work + "/" + files.back(), j.dump(2));
  }
}

void write_schedulers(prepare::Session& session, const std::string& work,
                      std::vector<std::string>& files) {
  const auto& schedulers = session.schedulers();
  for (size_t i = 0; i < schedulers.size(); ++i) {
    nlohmann::ordered_json j = {{"kind", schedulers[i]->schedule().kind()},
                                {"steps", schedulers[i]->steps()},
                                {"base_lr", schedulers[i]->base_lr()}};
    files.push_back("scheduler_" + std::to_string(i) + ".json");
    write_text(work + "/" + files.back(), j.dump(2));
  }
}

void write_training_state(prepare::Session& session, const std::string& work,
                          std::vector<std::string>& files) {
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
}

void write_custom_objects(prepare::Session& session, const std::string& work,
                          std::vector<std::string>& files) {
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
  for (const auto& [name, object] : session.named_objects()) {
    files.push_back(name);
    write_text(work + "/" + name, object.save());
  }
}

// The main process's part (or a machine-local copy's owner's): the shared files, then
// manifest.json listing every file of the save; `machine_ranks` as Manifest's (empty: all ranks).
void write_main_files(prepare::Session& session, const std::string& work,
                      const std::string& save_id, const std::vector<int>& machine_ranks) {
  auto& acc = session.accelerator();
  Manifest m;
  m.library_version = ACCEL_LIBRARY_VERSION;
  m.num_processes = acc.place().world_size;
  m.step = session.total_steps();
  m.save_id = save_id;
  m.machine_ranks = machine_ranks;
  std::vector<std::string> files;
  for (int r : ranks_held(m)) files.push_back(rng_file(r));
  write_models(session, work, files);
  write_optimizers(session, work, files);
  write_schedulers(session, work, files);
  write_training_state(session, work, files);
  write_custom_objects(session, work, files);
  files.push_back("config.yaml");
  write_text(work + "/" + files.back(), acc.settings().dump_yaml());
  for (const auto& f : files) m.files.push_back(describe_file(work, f));
  write_text(work + "/manifest.json", to_json(m));
}

// Where a save is written. One copy, the main process's, normally; with save_on_each_node on
// several machines one per filesystem that the machines do not share: every machine's local main
// process makes a partial directory of its own, dir.partial-r<rank>, holding a probe with a fresh
// nonce, and every rank takes the lowest such directory it sees as its copy. Machines that do share
// a directory so write one copy together, and no two processes ever make the same directory.
struct Copies {
  std::unique_ptr<AtomicDir> atomic;  // set on the owner of this rank's copy, which commits it
  std::string work;                   // where this rank writes its per-rank files
  std::vector<int> copy_of;           // save_on_each_node: every rank's copy, by its owner's rank
};

const char kProbe[] = ".libaccel-copy-probe";

std::string copy_partial(const std::string& dir, size_t owner) {
  return dir + ".partial-r" + std::to_string(owner);
}

// Never throws: every rank must reach the gather that follows.
std::string fresh_nonce() {
  unsigned a = 0, b = 0;
  try {
    std::random_device device;
    a = device();
    b = device();
  } catch (const std::exception&) {
    b = static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  char text[48];
  std::snprintf(text, sizeof text, "%08x%08x-%ld", a, b, static_cast<long>(getpid()));
  return text;
}

Copies main_copy(runtime::Accelerator& acc, const std::string& dir) {
  Copies c;
  const std::string partial_suffix = ".partial";
  ops::run_on_main(acc, [&] { c.atomic = std::make_unique<AtomicDir>(dir, partial_suffix); });
  c.work = dir + partial_suffix;
  return c;
}

// The lowest local main process whose partial directory (and nonce) this rank sees, or -1.
int visible_copy(const std::string& dir, const std::vector<std::string>& nonces) {
  for (size_t r = 0; r < nonces.size(); ++r) {
    if (nonces[r].empty()) continue;
    std::ifstream in(copy_partial(dir, r) + "/" + kProbe, std::ios::binary);
    const std::string got{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (in && got == nonces[r]) return static_cast<int>(r);
  }
  return -1;
}

Copies machine_copies(runtime::Accelerator& acc, const std::string& dir) {
  Copies c;
  const int rank = acc.place().rank;
  const std::string nonce = acc.is_local_main_process() ? fresh_nonce() : "";
  const auto nonces = ops::gather_object(acc.communicator(), nonce);
  ops::run_on_local_main(acc, [&] {
    c.atomic = std::make_unique<AtomicDir>(dir, copy_partial("", rank));
    write_text(c.atomic->path() + "/" + kProbe, nonce);
  });
  const auto seen =
      ops::gather_object(acc.communicator(), std::to_string(visible_copy(dir, nonces)));
  for (size_t r = 0; r < seen.size(); ++r) {
    long long owner = -1;
    if (!parse_int(seen[r], &owner) || owner < 0)
      fail(Errc::io, "save_state (save_on_each_node): rank " + std::to_string(r) +
                         " sees none of the partial directories that the machines' local main " +
                         "processes made beside '" + dir + "'");
    c.copy_of.push_back(static_cast<int>(owner));
  }
  // Every rank has looked: the probe goes, and so does the directory of a local main process
  // whose machine shares a lower one's.
  c.work = copy_partial(dir, c.copy_of[rank]);
  if (c.copy_of[rank] != rank)
    c.atomic.reset();
  else
    std::remove((c.work + "/" + kProbe).c_str());
  return c;
}

// The ranks whose per-rank files copy `owner` holds; empty when that is every rank.
std::vector<int> ranks_of_copy(const Copies& c, int owner) {
  std::vector<int> ranks;
  for (size_t r = 0; r < c.copy_of.size(); ++r)
    if (c.copy_of[r] == owner) ranks.push_back(static_cast<int>(r));
  if (ranks.size() == c.copy_of.size()) ranks.clear();
  return ranks;
}

// Bytes of a file as a uint8 tensor; empty, with `error` set, when it cannot be read.
at::Tensor file_bytes(const std::string& path, std::string& error) {
  try {
    const std::string bytes = read_file(path);
    at::Tensor t = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
    std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
    return t;
  } catch (const std::exception& e) {
    error = e.what();
    return at::empty({0}, at::kByte);
  }
}

// With several copies, every copy needs every rank's part of a ZeRO-sharded optimizer state (a
// load merges them all): each part travels from its rank, one at a time, to the owners of the
// other copies, who write the bytes as they came. All ranks then agree on the outcome.
void share_optimizer_parts(prepare::Session& session, const Copies& c) {
  auto& acc = session.accelerator();
  const int rank = acc.place().rank;
  const auto& optimizers = session.optimizers();
  std::string error;
  for (size_t i = 0; i < optimizers.size(); ++i) {
    if (!optimizers[i]->sharded()) continue;
    for (int r = 0; r < acc.place().world_size; ++r) {
      const std::string path = c.work + "/" + optimizer_shard_file(i, r);
      at::Tensor bytes = at::empty({0}, at::kByte);
      if (r == rank) bytes = file_bytes(path, error);
      bytes = ops::broadcast(acc.communicator(), bytes, r);
      if (!c.atomic || c.copy_of[r] == rank || !error.empty()) continue;
      try {
        write_text(path, std::string(static_cast<const char*>(bytes.data_ptr()),
                                     static_cast<size_t>(bytes.numel())));
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
  }
  ops::run_on_all(acc, [&] {
    if (!error.empty())
      fail(Errc::io, "save_state: copying the sharded optimizer states to every machine: " + error);
  });
}

void save_state_unguarded(prepare::Session& session, const std::string& dir, bool each_node) {
  const prepare::Session::WholeParameters whole(session);  // stage 3 gathers them
  auto& acc = session.accelerator();
  Copies c = each_node ? machine_copies(acc, dir) : main_copy(acc, dir);
  // Every rank's own random state, and its part of each sharded optimizer's state, into the
  // directory its copy's owner made, in parallel.
  RankFiles own;
  const std::string mine = read_rank_files(session, own);
  const std::string save_id = agree_on_save_id(session, mine);
  write_rank_files(session, c.work, save_id, own);
  if (!each_node) {
    ops::run_on_main(acc, [&] {
      write_main_files(session, c.work, save_id, {});
      c.atomic->commit();
    });
    return;
  }
  if (std::set<int>(c.copy_of.begin(), c.copy_of.end()).size() > 1)
    share_optimizer_parts(session, c);
  ops::run_on_all(acc, [&] {
    if (!c.atomic) return;
    write_main_files(session, c.work, save_id, ranks_of_copy(c, acc.place().rank));
    c.atomic->commit();
  });
}

// Everything a load will apply, read and checked against the live objects first.
struct StagedLoad {
  std::vector<StagedWeights> models;
  std::vector<std::shared_ptr<optim::Optimizer::StagedState>> optimizers;
  std::vector<std::pair<int64_t, double>> schedulers;
  int64_t micro_step = 0;
  bool sync_gradients = true;
  std::optional<std::pair<double, int>> scaler;
  std::vector<std::pair<int64_t, int64_t>> cursors;
  std::vector<std::string> custom;
  std::map<std::string, std::string> named;
  std::vector<std::pair<at::Generator, at::Tensor>> rng_states;  // this rank's own
  std::vector<std::pair<at::Generator, uint64_t>> rng_seeds;     // derived for a new rank
};

std::string base_name(const std::string& path) {
  return path.substr(path.rfind('/') + 1);
}

// Runs one file's part of the staging so that every failure names the file.
template <class F>
auto in_file(const std::string& path, F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const accel::Error& e) {
    const std::string what = e.what();
    if (what.find(base_name(path)) != std::string::npos) throw;
    fail(e.code(), "checkpoint file '" + path + "': " + what);
  } catch (const std::exception& e) {
    fail(Errc::io, "checkpoint file '" + path + "' is malformed: " + e.what());
  }
}

template <class T>
T field(const nlohmann::json& j, const std::string& key) {
  if (!j.is_object() || !j.contains(key)) fail(Errc::io, "the key '" + key + "' is missing");
  try {
    return j.at(key).get<T>();
  } catch (const std::exception&) {
    fail(Errc::io, "the key '" + key + "' has the wrong type (" + j.at(key).type_name() + ")");
  }
}

// The files a checkpoint's manifest lists, and the checks a load makes against that list.
struct Listing {
  const std::string& dir;
  std::set<std::string> listed;

  Listing(const std::string& d, const Manifest& m) : dir(d) {
    for (const auto& f : m.files) listed.insert(f.path);
  }

  // Each kind of object must appear in the checkpoint as often as this run prepared it.
  void expect_count(const char* what, const std::string& prefix, const std::string& suffix,
                    size_t live) const {
    size_t saved = 0;
    while (listed.count(prefix + std::to_string(saved) + suffix)) ++saved;
    if (saved != live)
      fail(Errc::state, "the checkpoint '" + dir + "/manifest.json' lists " +
                            std::to_string(saved) + " " + what + " (" + prefix + "<n>" + suffix +
                            "); this run prepared " + std::to_string(live));
  }

  std::string path_of(const std::string& name) const {
    if (!listed.count(name))
      fail(Errc::io, "the checkpoint '" + dir + "' does not list '" + name + "' in manifest.json");
    return dir + "/" + name;
  }
};

// Optimizer i's state: one file, or (a SHARDED_STATE_DICT save) one part per saving rank; either
// loads on any number of processes, sharded or not.
std::shared_ptr<optim::Optimizer::StagedState> stage_optimizer(prepare::Session& session,
                                                               const Listing& files,
                                                               const Manifest& m, size_t i) {
  const auto& optimizer = session.optimizers()[i];
  const std::string json = files.path_of("optimizer_" + std::to_string(i) + ".json");
  const std::string full = "optimizer_" + std::to_string(i) + ".safetensors";
  std::vector<std::string> parts;
  if (files.listed.count(full) || m.num_processes < 1) {
    parts.push_back(files.path_of(full));
  } else {
    for (int r = 0; r < m.num_processes; ++r) {
      parts.push_back(files.path_of(optimizer_shard_file(i, r)));
      check_part(parts.back(), m, r);
    }
  }
  const std::string& tensors = parts.front();
  const auto options = in_file(json, [&] {
    const auto j = read_json(json);
    const auto kind = field<std::string>(j, "kind");
    if (kind != optimizer->kind())
      fail(Errc::state, "checkpoint file '" + json + "' holds a " + kind +
                            " optimizer; this run prepared " + optimizer->kind());
    auto saved = field<std::map<std::string, double>>(j, "options");
    optimizer->check_saved_options(saved);  // here, so that its errors name this file
    return saved;
  });
  std::vector<NamedTensors> read;
  for (const auto& part : parts)
    read.push_back(in_file(part, [&] { return read_safetensors(part); }));
  const auto state = merge_shards(std::move(read), parts);
  return in_file(tensors, [&] { return optimizer->stage_state(options, state); });
}

void stage_schedulers(prepare::Session& session, const Listing& files, StagedLoad& st) {
  const auto& schedulers = session.schedulers();
  for (size_t i = 0; i < schedulers.size(); ++i) {
    const std::string path = files.path_of("scheduler_" + std::to_string(i) + ".json");
    st.schedulers.push_back(in_file(path, [&] {
      const auto j = read_json(path);
      const auto kind = field<std::string>(j, "kind");
      if (kind != schedulers[i]->schedule().kind())
        fail(Errc::state, "checkpoint file '" + path + "' holds a " + kind +
                              " schedule; this run prepared " + schedulers[i]->schedule().kind());
      const auto steps = field<int64_t>(j, "steps");
      const auto base_lr = field<double>(j, "base_lr");
      schedulers[i]->check_restore(steps, base_lr);
      return std::make_pair(steps, base_lr);
    }));
  }
}

// training_state.json: the micro-step, the scaler and every dataloader's cursor.
void stage_training_state(prepare::Session& session, const Listing& files, StagedLoad& st) {
  const auto& loaders = session.dataloaders();
  const std::string training_path = files.path_of("training_state.json");
  in_file(training_path, [&] {
    const auto training = read_json(training_path);
    st.micro_step = field<int64_t>(training, "micro_step");
    if (st.micro_step < 0) fail(Errc::io, "the key 'micro_step' is negative");
    st.sync_gradients = field<bool>(training, "sync_gradients");
    if (session.mutable_scaler() && training.contains("scaler")) {
      const auto& s = training["scaler"];
      const auto scale = field<double>(s, "scale");
      if (!std::isfinite(scale) || scale <= 0)
        fail(Errc::io, "the key 'scaler.scale' is not a finite positive number");
      st.scaler = std::make_pair(scale, field<int>(s, "growth_tracker"));
    }
    const auto saved = field<nlohmann::json>(training, "dataloaders");
    if (!saved.is_array()) fail(Errc::io, "the key 'dataloaders' is not an array");
    if (saved.size() != loaders.size())
      fail(Errc::state, "the checkpoint has " + std::to_string(saved.size()) +
                            " dataloaders; this run prepared " + std::to_string(loaders.size()));
    for (size_t i = 0; i < loaders.size(); ++i) {
      const auto epoch = field<int64_t>(saved[i], "epoch");
      const auto samples = field<int64_t>(saved[i], "samples");
      loaders[i]->check_cursor(epoch, samples);
      st.cursors.emplace_back(epoch, samples);
    }
  });
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

// Every rank the checkpoint holds must have its random states listed (a machine-local copy of
// save_on_each_node holds its machine's ranks' only).
void expect_rank_files(const Listing& files, const Manifest& m) {
  for (int r : ranks_held(m)) files.path_of(rng_file(r));
}

// Random states: this rank's own, or, for a rank the saving run did not have, the lowest held
// rank's (rank 0's but in a machine-local copy) mixed with the rank so that every new rank draws
// its own reproducible stream.
void stage_random_states(prepare::Session& session, const Listing& files, const Manifest& m,
                         StagedLoad& st) {
  const int rank = session.accelerator().place().rank;
  const bool own = rank < m.num_processes;
  const auto held = ranks_held(m);
  if (own && !std::binary_search(held.begin(), held.end(), rank))
    fail(Errc::state, "the checkpoint '" + files.dir + "' is a machine-local copy " +
                          "(save_on_each_node) with the random states of rank(s) " +
                          rank_list(held) + " only, and this process is rank " +
                          std::to_string(rank) + ": load it with each rank on the machine " +
                          "that saved it");
  const int from = own ? rank : held.front();
  const std::string rng_path = files.path_of(rng_file(from));
  check_part(rng_path, m, from);
  in_file(rng_path, [&] {
    const auto states = read_safetensors(rng_path);
    std::set<std::string> names;
    for (const auto& entry : states) names.insert(entry.first);
    if (names != std::set<std::string>{"cpu", "library"})
      fail(Errc::io, "a random-state file holds the generators 'cpu' and 'library', no others");
    for (const auto& [name, state] : states) {
      at::Generator gen =
          name == "library" ? runtime::library_generator() : at::detail::getDefaultCPUGenerator();
      const at::Tensor current = state_of(gen);
      if (state.scalar_type() != at::kByte || state.numel() != current.numel())
        fail(Errc::io, "the generator state '" + name + "' is not " +
                           std::to_string(current.numel()) + " bytes");
      if (own) {
        st.rng_states.emplace_back(gen, state);
      } else {
        const uLong crc = crc32(crc32(0L, Z_NULL, 0), state.data_ptr<uint8_t>(),
                                static_cast<uInt>(state.numel()));
        st.rng_seeds.emplace_back(gen,
                                  (static_cast<uint64_t>(crc) << 20) ^ static_cast<uint64_t>(rank));
      }
    }
  });
}

StagedLoad stage_load(prepare::Session& session, const std::string& dir, const Manifest& m) {
  const Listing files(dir, m);
  StagedLoad st;
  const auto& models = session.models();
  const auto& custom = session.custom_objects();
  files.expect_count("models", "model_", ".safetensors", models.size());
  files.expect_count("optimizers", "optimizer_", ".json", session.optimizers().size());
  files.expect_count("schedulers", "scheduler_", ".json", session.schedulers().size());
  files.expect_count("registered objects", "custom_", ".bin", custom.size());
  expect_rank_files(files, m);

  for (size_t i = 0; i < models.size(); ++i) {
    const std::string path = files.path_of("model_" + std::to_string(i) + ".safetensors");
    st.models.push_back(
        in_file(path, [&] { return stage_checkpoint_for_model(*models[i], path); }));
  }
  for (size_t i = 0; i < session.optimizers().size(); ++i)
    st.optimizers.push_back(stage_optimizer(session, files, m, i));
  stage_schedulers(session, files, st);
  stage_training_state(session, files, st);
  for (size_t i = 0; i < custom.size(); ++i) {
    const std::string path = files.path_of("custom_" + std::to_string(i) + ".bin");
    st.custom.push_back(in_file(path, [&] { return read_file(path); }));
  }
  for (const auto& [name, object] : session.named_objects()) {
    const std::string path = files.path_of(name);
    st.named[name] = in_file(path, [&] { return read_file(path); });
  }
  stage_random_states(session, files, m, st);
  return st;
}

// Cannot fail: every value was checked by stage_load.
void apply_load(prepare::Session& session, StagedLoad& st, const Manifest& m) {
  const auto& models = session.models();
  for (size_t i = 0; i < models.size(); ++i) apply_weights(st.models[i]);
  const auto& optimizers = session.optimizers();
  for (size_t i = 0; i < optimizers.size(); ++i) optimizers[i]->apply_state(*st.optimizers[i]);
  const auto& schedulers = session.schedulers();
  for (size_t i = 0; i < schedulers.size(); ++i)
    schedulers[i]->restore(st.schedulers[i].first, st.schedulers[i].second);
  session.restore_micro_step(st.micro_step, st.sync_gradients, m.step);
  if (st.scaler) session.mutable_scaler()->restore(st.scaler->first, st.scaler->second);
  const auto& loaders = session.dataloaders();
  for (size_t i = 0; i < loaders.size(); ++i)
    loaders[i]->restore_cursor(st.cursors[i].first, st.cursors[i].second);
  for (auto& [gen, state] : st.rng_states) set_state(gen, state);
  for (auto& [gen, seed] : st.rng_seeds) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_current_seed(seed);
  }
}

// Every rank read the same save: with save_on_each_node each machine reads its own copy, and a
// copy of another save (a save that failed on some machine only) must not be mixed in.
void agree_on_save(runtime::Accelerator& acc, const Manifest& m, const std::string& dir) {
  auto* comm = acc.communicator();
  if (!comm) return;
  const auto all = ops::gather_object(
      comm, (m.save_id.empty() ? "(no id)" : m.save_id) + " of step " + std::to_string(m.step));
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0])
      fail(Errc::state, "the checkpoint '" + dir + "' is not the same save on every rank: rank 0 " +
                            "read save " + all[0] + ", rank " + std::to_string(r) + " save " +
                            all[r] + " (machine-local copies of save_on_each_node from different " +
                            "saves)");
}

// All or nothing: every file is read and checked against the live objects on every rank, and the
// ranks agree, before anything is applied. Only the program's registered objects load earlier
// than the rest is applied (their callbacks may fail; the header says so).
void load_state_unguarded(prepare::Session& session, const std::string& dir) {
  auto& acc = session.accelerator();
  Manifest m;
  StagedLoad staged;
  ops::run_on_all(acc, [&] {
    const std::string manifest_path = dir + "/manifest.json";
    m = in_file(manifest_path,
                [&] { return parse_manifest(read_file(manifest_path), manifest_path); });
    verify(dir, m);
    staged = stage_load(session, dir, m);
  });
  agree_on_save(acc, m, dir);
  const auto& custom = session.custom_objects();
  ops::run_on_all(acc, [&] {
    for (size_t i = 0; i < custom.size(); ++i) {
      try {
        custom[i].load(staged.custom[i]);
      } catch (const accel::Error& e) {
        fail(e.code(), "registered object " + std::to_string(i) + " (checkpoint file '" + dir +
                           "/custom_" + std::to_string(i) + ".bin'): " + e.what());
      }
    }
    for (const auto& [name, object] : session.named_objects())
      in_file(dir + "/" + name, [&] { object.load(staged.named[name]); });
  });
  {
    const prepare::Session::WholeParameters whole(session);  // stage 3: loaded, then released
    apply_load(session, staged, m);
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

// Work on the checkpoint directory's parent: the main process's, or with save_on_each_node every
// machine's local main process's.
template <class F>
void on_writers(runtime::Accelerator& acc, bool each_node, F&& body) {
  if (each_node)
    ops::run_on_local_main(acc, body);
  else
    ops::run_on_main(acc, body);
}

// The checkpoint numbers present on every machine (each lists its own copies), ascending.
std::vector<int64_t> present_everywhere(runtime::Accelerator& acc, const std::string& dir) {
  std::string mine;
  for (int64_t n : existing(dir)) mine += std::to_string(n) + ",";
  std::vector<int64_t> common;
  bool first = true;
  for (const auto& theirs : ops::gather_object(acc.communicator(), mine)) {
    std::vector<int64_t> listed;
    for (size_t at = 0, comma; (comma = theirs.find(',', at)) != std::string::npos; at = comma + 1)
      listed.push_back(std::stoll(theirs.substr(at, comma - at)));
    if (!first) {
      std::vector<int64_t> both;
      std::set_intersection(common.begin(), common.end(), listed.begin(), listed.end(),
                            std::back_inserter(both));
      listed = std::move(both);
    }
    common = std::move(listed);
    first = false;
  }
  return common;
}

// The number of the next automatic checkpoint: one past the newest present (on any machine).
int64_t next_iteration(runtime::Accelerator& acc, const std::string& dir, bool each_node) {
  const auto present = existing(dir);
  int64_t next = present.empty() ? 0 : present.back() + 1;
  if (each_node)
    for (const auto& theirs : ops::gather_object(acc.communicator(), std::to_string(next)))
      next = std::max<int64_t>(next, std::stoll(theirs));
  return next;
}

}  // namespace

void save_state(prepare::Session& session, const std::string& dir) {
  prepare::Session::CheckpointScope scope(session);
  save_state_unguarded(session, dir, ops::save_on_each_node(session.accelerator()));
}

void load_state(prepare::Session& session, const std::string& dir) {
  prepare::Session::CheckpointScope scope(session);
  load_state_unguarded(session, dir);
}

void save_state_automatic(prepare::Session& session) {
  prepare::Session::CheckpointScope scope(session);
  const std::string dir = checkpoints_dir(session);
  auto& acc = session.accelerator();
  const bool each_node = ops::save_on_each_node(acc);
  // project_dir and its missing parents too, as Accelerate's os.makedirs; a failure says why.
  on_writers(acc, each_node, [&] { make_directories(dir, 0755); });
  if (session.iteration < 0) session.iteration = next_iteration(acc, dir, each_node);
  save_state_unguarded(session, dir + "/checkpoint_" + std::to_string(session.iteration),
                       each_node);
  ++session.iteration;
  const int64_t limit = acc.settings().integer("total_limit");
  on_writers(acc, each_node, [&] {
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
  auto& acc = session.accelerator();
  const bool each_node = ops::save_on_each_node(acc);
  const auto present = each_node ? present_everywhere(acc, dir) : existing(dir);
  if (present.empty())
    fail(Errc::io, "there is no checkpoint in '" + dir + "'" +
                       (each_node ? " that every machine holds (save_on_each_node)" : ""));
  load_state_unguarded(session, dir + "/checkpoint_" + std::to_string(present.back()));
  // Accelerate forgets this (its issue #3306): the next save must not overwrite the loaded one.
  session.iteration = present.back() + 1;
}

}  // namespace accel::checkpoint
