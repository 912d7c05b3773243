#include "launch/supervisor.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/error.hpp"
#include "runtime/parent_watch.hpp"

namespace accel::launch {

namespace {

using Clock = std::chrono::steady_clock;

struct Child {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int out_fd = -1, err_fd = -1;  // read ends of the rank's stdout/stderr pipes (prefix mode)
  int log_fd = -1;               // the rank's log file, when it has one
  std::string out_partial, err_partial;
};

void say(const std::string& text) {
  const std::string line = "accel launch: " + text + "\n";
  ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

void write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// Moves whole lines from `partial` + `chunk` to `fd`, each prefixed; keeps the unfinished tail.
void emit_lines(std::string& partial, const char* chunk, size_t n, int fd,
                const std::string& prefix, bool flush_tail) {
  partial.append(chunk, n);
  std::string out;
  size_t start = 0;
  for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1)
    out += prefix + partial.substr(start, nl + 1 - start);
  partial.erase(0, start);
  if (flush_tail && !partial.empty()) {
    out += prefix + partial + "\n";
    partial.clear();
  }
  if (!out.empty()) write_all(fd, out);
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = strsignal(sig);
    return "was killed by signal " + std::to_string(sig) + " (" + (name ? name : "?") + ")";
  }
  return "stopped with status " + std::to_string(status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

void signal_all(std::vector<Child>& children, int sig) {
  for (auto& c : children) {
    if (!c.running) continue;
    kill(-c.pid, sig);  // the rank's whole process group
    // A stopped rank (SIGSTOP, a debugger detached badly) would hold SIGTERM until the grace ran
    // out: let it run to receive the signal.
    if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP) kill(-c.pid, SIGCONT);
  }
}

// SIGKILL to the process group of every running child, then reaps each; closes their pipes.
// Returns how many were running.
int stop_started(std::vector<Child>& children) {
  int stopped = 0;
  for (auto& c : children)
    if (c.running && kill(-c.pid, SIGKILL) != 0) kill(c.pid, SIGKILL);
  for (auto& c : children) {
    if (c.running) {
      while (waitpid(c.pid, nullptr, 0) < 0 && errno == EINTR) {
      }
      c.running = false;
      ++stopped;
    }
    for (int* fd : {&c.out_fd, &c.err_fd, &c.log_fd})
      if (*fd >= 0) {
        close(*fd);
        *fd = -1;
      }
  }
  return stopped;
}

std::vector<char*> c_strings(std::vector<std::string>& items) {
  std::vector<char*> out;
  for (auto& s : items) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// A rank log that an earlier attempt's killed rank left mid-line (--max_restarts appends to it)
// gets its newline first, so that the next attempt's first line starts a line of its own; the
// cut line stays where it was: it is that rank's last output.
void end_partial_line(int fd) {
  struct stat st {};
  char last = '\n';
  if (fstat(fd, &st) == 0 && st.st_size > 0 && pread(fd, &last, 1, st.st_size - 1) == 1 &&
      last != '\n')
    (void)!write(fd, "\n", 1);
}

}  // namespace

sigset_t block_supervised_signals() {
  sigset_t handled;
  sigemptyset(&handled);
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&handled, s);
  if (pthread_sigmask(SIG_BLOCK, &handled, nullptr) != 0)
    fail(Errc::internal, std::string("pthread_sigmask: ") + std::strerror(errno));
  return handled;
}

std::string resolve_program(const std::string& name) {
  auto executable = [](const std::string& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    if (!executable(name))
      fail(Errc::invalid_argument, "program '" + name + "' does not exist or is not executable");
    return name;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t colon = dirs.find(':', start);
    if (colon == std::string::npos) colon = dirs.size();
    std::string dir = dirs.substr(start, colon - start);
    if (dir.empty()) dir = ".";
    if (executable(dir + "/" + name)) return dir + "/" + name;
    start = colon + 1;
  }
  fail(Errc::invalid_argument, "program '" + name + "' was not found in PATH");
}

namespace {

// One supervise() call: the ranks' processes, the signalfd, and what the watch loop has decided so
// far. Its steps run in the order supervise() calls them; it is neither copied nor moved.
struct Supervision {
  const std::vector<RankProcess>& ranks;
  const SupervisorOptions& options;
  std::string program;
  sigset_t handled{};
  int sfd = -1;
  std::vector<Child> children;
  pid_t launcher = -1;
  // The pipes and log file of the rank being started, until its Child owns them.
  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  int log_fd = -1;
  // The watch loop's state.
  int result = 0;
  bool stopping = false;
  std::string
      exited_early;  // ranks that exited 0 while others ran: the usual cause of a peer error
  int interrupted_by = 0;
  Clock::time_point kill_at = Clock::time_point::max();
  Clock::time_point drain_until = Clock::time_point::max();

  Supervision(const std::vector<RankProcess>& r, const SupervisorOptions& o);
  Supervision(const Supervision&) = delete;
  Supervision& operator=(const Supervision&) = delete;

  void close_pending();
  int abandon();
  void start_all();
  void start_rank(size_t i, std::vector<char*>& argv);
  void open_rank_log(const RankProcess& rank, const std::string& which);
  [[noreturn]] void exec_rank(const RankProcess& rank, std::vector<char*>& argv,
                              std::vector<char*>& envp);
  void adopt_rank(size_t i, pid_t pid);

  int running_count() const;
  int open_pipes() const;
  void watch();
  void collect_poll_fds(std::vector<pollfd>& fds, std::vector<std::pair<Child*, bool>>& owners);
  void kill_when_grace_is_over(Clock::time_point now);
  int poll_timeout_ms(Clock::time_point now) const;
  void copy_ready_output(const std::vector<pollfd>& fds,
                         const std::vector<std::pair<Child*, bool>>& owners);
  void forward_signal();
  void reap_exited();
  void record_exit(Child& c, pid_t pid, int status);
  SuperviseResult finish();
};

Supervision::Supervision(const std::vector<RankProcess>& r, const SupervisorOptions& o)
    : ranks(r), options(o) {
  program = resolve_program(options.command.at(0));
  // Signals arrive through a signalfd so that one poll() loop handles children, output and signals.
  handled = block_supervised_signals();
  sfd = signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) fail(Errc::internal, std::string("signalfd: ") + std::strerror(errno));
  children.resize(ranks.size());
  launcher = getpid();
}

void Supervision::close_pending() {
  for (int* fd : {&out_pipe[0], &out_pipe[1], &err_pipe[0], &err_pipe[1], &log_fd})
    if (*fd >= 0) {
      close(*fd);
      *fd = -1;
    }
}

int Supervision::abandon() {
  const int stopped = stop_started(children);
  close_pending();
  close(sfd);
  return stopped;
}

void Supervision::start_all() {
  std::vector<std::string> argv_store = options.command;
  argv_store[0] = program;
  std::vector<char*> argv = c_strings(argv_store);
  try {
    for (size_t i = 0; i < ranks.size(); ++i) start_rank(i, argv);
  } catch (const Error& e) {
    // Nothing may outlive a launcher that could not start every rank: kill and reap the ranks
    // started so far and close every descriptor opened for them before reporting the error.
    const int stopped = abandon();
    if (stopped == 0) throw;
    fail(e.code(), std::string(e.what()) + "; stopped the " + std::to_string(stopped) + " rank" +
                       (stopped > 1 ? "s" : "") + " already started");
  } catch (...) {
    abandon();
    throw;
  }
}

void Supervision::start_rank(size_t i, std::vector<char*>& argv) {
  const RankProcess& rank = ranks[i];
  std::vector<std::string> env_store = rank.env;
  std::vector<char*> envp = c_strings(env_store);  // built before fork: the child only execs
  const std::string which = "could not start rank " + std::to_string(rank.rank) + ": ";
  if (!rank.log_path.empty()) open_rank_log(rank, which);
  if (options.prefix_output && (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0))
    fail(Errc::internal, which + "pipe: " + std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) fail(Errc::internal, which + "fork: " + std::strerror(errno));
  if (pid == 0) exec_rank(rank, argv, envp);
  adopt_rank(i, pid);
  close_pending();  // the write ends and a log file only the child keeps
}

void Supervision::open_rank_log(const RankProcess& rank, const std::string& which) {
  log_fd = open(rank.log_path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0 && errno == EACCES)  // writable, not readable: appended as it is
    log_fd = open(rank.log_path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (log_fd < 0)
    fail(Errc::io,
         which + "cannot open its log file '" + rank.log_path + "': " + std::strerror(errno));
  end_partial_line(log_fd);
}

// The forked child: async-signal-safe calls only, then exec.
void Supervision::exec_rank(const RankProcess& rank, std::vector<char*>& argv,
                            std::vector<char*>& envp) {
  setpgid(0, 0);
  // A rank dies with its launcher, even one killed by SIGKILL, which it cannot forward.
  runtime::die_with_parent_after_fork(launcher);
  sigprocmask(SIG_UNBLOCK, &handled, nullptr);
  if (rank.inherit_fd >= 0) fcntl(rank.inherit_fd, F_SETFD, 0);  // off: FD_CLOEXEC
  if (options.prefix_output) {
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
  } else if (log_fd >= 0) {
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
  }
  execve(program.c_str(), argv.data(), envp.data());
  const char msg[] = "accel launch: exec failed for the rank's program\n";
  ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)ignored;
  _exit(127);
}

void Supervision::adopt_rank(size_t i, pid_t pid) {
  Child& c = children[i];
  c.rank = ranks[i].rank;
  c.pid = pid;
  c.running = true;
  setpgid(pid, pid);  // also from the parent, so signals never race the child's own call
  if (options.prefix_output) {
    c.log_fd = log_fd;  // the launcher copies the output into it
    log_fd = -1;
    c.out_fd = out_pipe[0];
    c.err_fd = err_pipe[0];
    out_pipe[0] = err_pipe[0] = -1;
  }
}

int Supervision::running_count() const {
  int n = 0;
  for (auto& c : children) n += c.running ? 1 : 0;
  return n;
}

int Supervision::open_pipes() const {
  int n = 0;
  for (auto& c : children) n += (c.out_fd >= 0) + (c.err_fd >= 0);
  return n;
}

void Supervision::watch() {
  while (running_count() > 0 || open_pipes() > 0) {
    if (running_count() == 0) {
      // Every rank has exited; a grandchild may still hold a pipe. Drain briefly, then stop.
      if (drain_until == Clock::time_point::max())
        drain_until = Clock::now() + std::chrono::seconds(2);
      if (Clock::now() >= drain_until) break;
    }
    std::vector<pollfd> fds;
    std::vector<std::pair<Child*, bool>> owners;
    collect_poll_fds(fds, owners);
    const auto now = Clock::now();
    kill_when_grace_is_over(now);
    const int ready = poll(fds.data(), fds.size(), poll_timeout_ms(now));
    if (ready < 0 && errno != EINTR) {
      say(std::string("poll failed: ") + std::strerror(errno));
      signal_all(children, SIGKILL);
      stopping = true;
    }
    if (ready <= 0) continue;
    copy_ready_output(fds, owners);
    if (!(fds[0].revents & POLLIN)) continue;
    forward_signal();
    reap_exited();
  }
}

// The signalfd first, then each open output pipe with its rank and whether it is stderr.
void Supervision::collect_poll_fds(std::vector<pollfd>& fds,
                                   std::vector<std::pair<Child*, bool>>& owners) {
  fds = {{sfd, POLLIN, 0}};
  owners = {{nullptr, false}};
  for (auto& c : children) {
    if (c.out_fd >= 0) {
      fds.push_back({c.out_fd, POLLIN, 0});
      owners.push_back({&c, false});
    }
    if (c.err_fd >= 0) {
      fds.push_back({c.err_fd, POLLIN, 0});
      owners.push_back({&c, true});
    }
  }
}

void Supervision::kill_when_grace_is_over(Clock::time_point now) {
  if (kill_at != Clock::time_point::max() && now >= kill_at) {
    signal_all(children, SIGKILL);
    kill_at = Clock::time_point::max();
  }
}

// The monitor interval, shortened to reach the kill deadline on time and to drain promptly.
int Supervision::poll_timeout_ms(Clock::time_point now) const {
  int timeout_ms = static_cast<int>(std::max<long long>(1, options.monitor_interval.count()));
  if (kill_at != Clock::time_point::max())
    timeout_ms = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(kill_at - now).count() + 1);
  if (drain_until != Clock::time_point::max()) timeout_ms = std::min(timeout_ms, 100);
  return timeout_ms;
}

void Supervision::copy_ready_output(const std::vector<pollfd>& fds,
                                    const std::vector<std::pair<Child*, bool>>& owners) {
  for (size_t i = 1; i < fds.size(); ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    Child& c = *owners[i].first;
    const bool is_err = owners[i].second;
    int& fd = is_err ? c.err_fd : c.out_fd;
    char buf[65536];
    const ssize_t n = read(fd, buf, sizeof buf);
    const std::string prefix = "[rank " + std::to_string(c.rank) + "] ";
    std::string& partial = is_err ? c.err_partial : c.out_partial;
    const int target = is_err ? STDERR_FILENO : STDOUT_FILENO;
    if (n > 0) {
      emit_lines(partial, buf, static_cast<size_t>(n), target, prefix, false);
      if (c.log_fd >= 0) write_all(c.log_fd, std::string(buf, static_cast<size_t>(n)));
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      emit_lines(partial, "", 0, target, prefix, true);
      close(fd);
      fd = -1;
    }
  }
}

// The first signal other than SIGCHLD read from the signalfd goes to every rank; the grace starts.
void Supervision::forward_signal() {
  signalfd_siginfo info;
  while (read(sfd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
    const int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) continue;  // reaped below
    if (!interrupted_by) interrupted_by = sig;
    if (!options.quiet)
      say(std::string("received ") + strsignal(sig) + "; forwarding it to the ranks");
    signal_all(children, sig);
    if (!stopping) {
      stopping = true;
      kill_at = Clock::now() + options.grace;
    }
    break;
  }
}

void Supervision::reap_exited() {
  for (;;) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    for (auto& c : children) {
      if (c.pid != pid || !c.running) continue;
      record_exit(c, pid, status);
    }
  }
}

// The first rank to fail sets the result and stops the others (SIGTERM, SIGKILL after the grace).
void Supervision::record_exit(Child& c, pid_t pid, int status) {
  c.running = false;
  const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  if (!failed && !stopping && running_count() > 0)
    exited_early += (exited_early.empty() ? "" : ", ") + std::to_string(c.rank);
  if (!failed || stopping) return;
  result = exit_code_of(status);
  stopping = true;
  const int others = running_count();
  say("rank " + std::to_string(c.rank) + " (pid " + std::to_string(pid) + ") " +
      describe_exit(status) +
      (others ? "; stopping the other " + std::to_string(others) + " rank" + (others > 1 ? "s" : "")
              : "") +
      (exited_early.empty() ? ""
                            : " (before that, rank " + exited_early +
                                  " exited with code 0 while the others still ran)"));
  signal_all(children, SIGTERM);
  kill_at = Clock::now() + options.grace;
}

SuperviseResult Supervision::finish() {
  for (auto& c : children)
    for (int fd : {c.out_fd, c.err_fd, c.log_fd})
      if (fd >= 0) close(fd);
  close(sfd);
  SuperviseResult out;
  out.interrupted = interrupted_by != 0;
  out.code = interrupted_by && result == 0 ? 128 + interrupted_by : result;
  return out;
}

}  // namespace

SuperviseResult supervise(const std::vector<RankProcess>& ranks, const SupervisorOptions& options) {
  Supervision run(ranks, options);  // resolves the program, opens the signalfd
  run.start_all();
  run.watch();
  return run.finish();
}

}  // namespace accel::launch
