#include "runtime/accelerator.hpp"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>

#include "common/error.hpp"
#include "common/interrupt.hpp"
#include "cuda/plugin.hpp"
#include "runtime/malloc_tuning.hpp"
#include "runtime/parent_watch.hpp"
#include "runtime/seed.hpp"
#include "runtime/tensor_allocator.hpp"

namespace accel::runtime {

namespace {

std::atomic<bool> g_live{false};

// at::set_num_threads sizes LibTorch's OpenMP pool but not OpenBLAS's own; OpenBLAS exports a
// setter, found at run time so that any BLAS (or none) may be the libblas.so.3 alternative.
void set_blas_threads(int n) {
  using Setter = void (*)(int);
  if (auto fn = reinterpret_cast<Setter>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) fn(n);
}

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<long long>(std::llround(seconds * 1000.0)));
}

// The program's configuration, plus the file `accel launch` names in ACCEL_CONFIG_FILE when the
// program loaded none itself.
config::Config with_launcher_file(const config::Config& cfg, const config::EnvMap& env) {
  config::Config out = cfg;
  if (out.file_path().empty())
    if (auto it = env.find("ACCEL_CONFIG_FILE"); it != env.end() && !it->second.empty())
      out.load_file(it->second);
  return out;
}

// How many CUDA devices this run may use. libaccel's CUDA part is loaded first: LibTorch decides
// once, at its first CUDA question, whether CUDA exists, and only libtorch_cuda.so (which the
// module loads) registers it. A machine with an NVIDIA driver whose libraries do not load is an
// error rather than a silent CPU run.
int usable_gpus(bool use_cpu, std::string* note) {
  if (use_cpu) return 0;
  std::string why;
  if (const cuda::Plugin* plugin = cuda::load_plugin(&why)) {
    const int n = plugin->device_count();
    if (n == 0) *note = "no CUDA device visible";
    return n;
  }
  *note = why;
#ifdef ACCEL_CUDA_PLUGIN
  if (access("/dev/nvidiactl", F_OK) == 0)
    fail(Errc::unsupported,
         "this machine has an NVIDIA driver (/dev/nvidiactl) but " + why +
             ". Install the CUDA libraries its LibTorch needs (pip installs them with torch), or "
             "train on the CPU: use_cpu: true (ACCELERATE_USE_CPU=1)");
  return 0;
#else
  // A LibTorch linked with CUDA directly registers its hooks itself.
  return at::detail::getCUDAHooks().getNumGPUs();
#endif
}

}  // namespace

// Gloo (collective_transport: gloo) and NCCL's bootstrap write to their peers' sockets with
// writev, which cannot ask for MSG_NOSIGNAL (libaccel's own sockets do): a write to a
// peer that just died raises SIGPIPE, whose default action kills this rank before the failed
// collective can say which peer died. A handler the program installed itself is left alone.
static void ignore_sigpipe_by_default() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL &&
      !(current.sa_flags & SA_SIGINFO))
    signal(SIGPIPE, SIG_IGN);
}

Accelerator::Accelerator(const config::Config& cfg, const config::EnvMap& env)
    : settings_(with_launcher_file(cfg, env).resolve(env)) {
  place_ = read_process_place(env);
  interrupt::set(false);  // an earlier accelerator's interruption is not this one's
  logger_.set_level(logging::level_from_name(settings_.text("log_level")));
  logger_.set_place(place_.rank, place_.world_size);
  const int gpus = usable_gpus(settings_.flag("use_cpu"), &cuda_note_);
  choose_device_and_types(gpus);
  // Sharding's keys are checked in every job, one process too, so that a file is refused or
  // taken the same way wherever it runs.
  sharding_ = config::resolve_sharding(settings_, env);
  config::check_sharding_supported(sharding_);

  bool expected = false;
  if (!g_live.compare_exchange_strong(expected, true))
    fail(Errc::state,
         "an accelerator already exists in this process; free it before creating "
         "another");
  std::string local_from;
  try {
    local_from = join_job(env, gpus);
  } catch (...) {
    g_live = false;
    throw;
  }
  if (settings_.flag("debug")) say_debug_line(local_from, gpus == 0);
}

void Accelerator::choose_device_and_types(int gpus) {
  const bool use_cpu = gpus == 0;
  // torchrun may give each rank one device (CUDA_VISIBLE_DEVICES) and LOCAL_RANK 0..n-1: modulo.
  device_ = use_cpu ? "cpu" : "cuda:" + std::to_string(place_.local_rank % gpus);
  if (place_.world_size == 1)
    distributed_type_ = DistributedType::kNo;
  else
    distributed_type_ = use_cpu ? DistributedType::kMultiCpu : DistributedType::kMultiGpu;

  const std::string& mp = settings_.text("mixed_precision");
  mixed_precision_ = mp == "bf16"   ? MixedPrecision::kBf16
                     : mp == "fp16" ? MixedPrecision::kFp16
                                    : MixedPrecision::kNo;
  if (mixed_precision_ == MixedPrecision::kFp16 && use_cpu)
    fail(Errc::unsupported,
         "mixed_precision fp16 (" + settings_.at("mixed_precision").origin.describe() +
             ") needs a CUDA device: LibTorch's CPU autocast supports bf16 only; use bf16 on CPU" +
             (cuda_note_.empty() ? "" : " (CUDA: " + cuda_note_ + ")"));
}

std::string Accelerator::join_job(const config::EnvMap& env, int gpus) {
  const bool use_cpu = gpus == 0;
  std::string local_from = "a world of one";
  // Until the census says otherwise, a rank that does not know its machine's share assumes
  // every rank is on this machine, so that start-up does not oversubscribe it.
  set_threads(default_thread_count(
      static_cast<int>(settings_.integer("num_threads")), env, available_cpus(),
      place_.local_known ? place_.local_world_size : place_.world_size));
  if (settings_.flag("malloc_tuning")) {
    tune_malloc(env);
    install_tensor_allocator();
  }
  if (place_.distributed()) {
    die_with_launching_engine(env);
    ignore_sigpipe_by_default();
    CommOptions options;
    options.rendezvous = millis(settings_.seconds("rendezvous_timeout"));
    options.collective = millis(settings_.seconds("collective_timeout"));
    options.shared_memory = settings_.flag("shared_memory_allreduce");
    options.gloo = settings_.text("collective_transport") == "gloo";
    options.logger = &logger_;
    comm_ = std::make_unique<Communicator>(place_, options);
    local_from = place_.local_known ? "from " + place_.engine : "found by the census";
    if (!place_.local_known) {
      // The engine did not say which ranks share this machine; the census did.
      place_.local_rank = comm_->local_rank();
      place_.local_world_size = comm_->local_world_size();
      place_.local_known = true;
      set_threads(default_thread_count(static_cast<int>(settings_.integer("num_threads")), env,
                                       available_cpus(), place_.local_world_size));
      if (!use_cpu) device_ = "cuda:" + std::to_string(place_.local_rank % gpus);
    }
  }
  // Before any CUDA call of this rank, so that nothing lands on device 0 by default. (Without
  // libaccel's CUDA part, a LibTorch linked with CUDA directly, collectives go through the host.)
  if (const cuda::Plugin* plugin = use_cpu ? nullptr : cuda::load_plugin(nullptr)) {
    const int index = place_.local_rank % gpus;
    plugin->set_device(index);
    if (comm_) comm_->attach_device(index);
  }
  return local_from;
}

// Debug mode (`accel launch --debug`, ACCELERATE_DEBUG_MODE): where this rank stands and how it
// talks to the others, one line per rank.
void Accelerator::say_debug_line(const std::string& local_from, bool use_cpu) {
  std::string line = "rank " + std::to_string(place_.rank) + " of " +
                     std::to_string(place_.world_size) + " (" + place_.engine + "), local rank " +
                     std::to_string(place_.local_rank) + " of " +
                     std::to_string(place_.local_world_size) + " (" + local_from + "), " +
                     std::to_string(num_threads_) + " threads, device " + device_ +
                     (cuda_note_.empty() || !use_cpu ? "" : " (CUDA: " + cuda_note_ + ")");
  if (comm_)
    line += ", all-reduce over " + comm_->all_reduce_transport() + ", store " + place_.master_addr +
            ":" + std::to_string(place_.master_port) + " (" + place_.endpoint_source +
            (place_.store_hosted ? ", hosted by the launcher" : "") +
            (place_.store_fd >= 0 ? ", served on the socket accel launch bound" : "") + "; " +
            comm_->store_summary() + "), attempt " + std::to_string(place_.attempt);
  logger_.say(logging::kInfo, line, logging::kAllProcesses);
}

Accelerator::~Accelerator() {
  comm_.reset();
  interrupt::set(false);
  g_live = false;
}

void Accelerator::set_threads(int n) {
  num_threads_ = n;
  at::set_num_threads(n);
  set_blas_threads(n);
}

void Accelerator::wait_for_everyone() {
  if (comm_) comm_->barrier();
}

void Accelerator::set_seed(uint64_t seed, bool device_specific) {
  seed_everything(device_specific ? seed + static_cast<uint64_t>(place_.rank) : seed);
}

}  // namespace accel::runtime
