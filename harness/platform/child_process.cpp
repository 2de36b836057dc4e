#include "child_process.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "check.h"

extern char** environ;

namespace pb {

namespace {

std::vector<std::string>& remembered() {
  static std::vector<std::string> environment;
  return environment;
}

std::string key_of(const std::string& entry) { return entry.substr(0, entry.find('=')); }

}  // namespace

void remember_environment() {
  std::vector<std::string>& environment = remembered();
  environment.clear();
  for (char** entry = environ; entry && *entry; ++entry) environment.emplace_back(*entry);
}

int run_child(const std::vector<std::string>& argv, const std::string& log_path,
              const std::vector<std::string>& extra_env) {
  PB_CHECK(!argv.empty(), "run_child: no command");
  if (remembered().empty()) remember_environment();  // never remembered: this process's own
  std::vector<std::string> environment;
  for (const std::string& entry : remembered()) {
    bool replaced = false;
    for (const std::string& extra : extra_env) replaced = replaced || key_of(extra) == key_of(entry);
    if (!replaced) environment.push_back(entry);
  }
  environment.insert(environment.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> args, envp;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  for (const std::string& entry : environment) envp.push_back(const_cast<char*>(entry.c_str()));
  envp.push_back(nullptr);

  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  PB_CHECK(log >= 0, "cannot open the log '" + log_path + "': " + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, log, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, log, STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  pid_t pid = 0;
  const int started = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(log);
  PB_CHECK(started == 0, "cannot start '" + argv[0] + "': " + std::strerror(started));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    PB_CHECK(errno == EINTR, "waiting for '" + argv[0] + "': " + std::strerror(errno));
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
}

std::string last_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  return last;
}

}  // namespace pb
