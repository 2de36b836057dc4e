// doctest main for the MPI suites: every rank runs every test case; a failure
// on any rank makes mpirun exit non-zero.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "mpi_test.h"

namespace pb::test {
Gang* g_gang = nullptr;
}

int main(int argc, char** argv) {
  pb::Gang gang(&argc, &argv);
  pb::test::g_gang = &gang;
  doctest::Context context(argc, argv);
  if (gang.rank() != 0) context.setOption("out", "/dev/null");  // one report, from rank 0
  int failed = context.run();
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any_failed ? 1 : 0;
}
