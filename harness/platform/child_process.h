// Child processes of a command that itself runs as an MPI process (`sweep`
// starts an mpirun per point). MPI_Init of a singleton adds its own OMPI_* and
// PMIX_* variables to the environment; a child that inherited them would take
// itself for part of the parent's job. So children get the environment as the
// process started, remembered before MPI_Init.
#pragma once

#include <string>
#include <vector>

namespace pb {

// Call first in main, before MPI_Init. (Never called: run_child takes the
// environment as it is at its first call.)
void remember_environment();

// Runs argv (argv[0] looked up on PATH) with the remembered environment plus
// `extra_env` ("KEY=value", replacing the same key), stdout and stderr
// appended to log_path; waits. Returns its exit code, or 128 + the signal
// that ended it. Throws pb::Error when it cannot start (naming argv[0]) or the
// log cannot be opened.
int run_child(const std::vector<std::string>& argv, const std::string& log_path,
              const std::vector<std::string>& extra_env = {});

// The last line of a file that is not blank, "" when none (or no file).
std::string last_line(const std::string& path);

}  // namespace pb
