// Exercised by the mpi.rank_failure test: rank 2 fails while the others wait
// in a collective. The job must end promptly with rank 2's message, not hang.
// The message is a PB_CHECK's: one "[rank 2 on host] error: " prefix, and the
// source location only under PB_DEBUG (the mpi.rank_failure tests check both).
#include <stdexcept>

#include "check.h"
#include "gang.h"

int main(int argc, char** argv) {
  pb::Gang gang(&argc, &argv);
  try {
    gang.barrier();
    PB_CHECK(gang.rank() != 2, "planted failure on purpose");
    gang.broadcast("the others wait here");  // rank 0 sends, 1 and 3 wait
    gang.barrier();                          // never completes without rank 2
  } catch (const std::exception& e) {
    gang.fail(e.what());
  }
  return 0;
}
