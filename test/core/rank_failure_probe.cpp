// Exercised by the mpi.rank_failure test: rank 2 fails while the others wait
// in a collective. The job must end promptly with rank 2's message, not hang.
#include <stdexcept>

#include "gang.h"

int main(int argc, char** argv) {
  pb::Gang gang(&argc, &argv);
  try {
    gang.barrier();
    if (gang.rank() == 2) throw std::runtime_error("planted failure on purpose");
    gang.broadcast("the others wait here");  // rank 0 sends, 1 and 3 wait
    gang.barrier();                          // never completes without rank 2
  } catch (const std::exception& e) {
    gang.fail(e.what());
  }
  return 0;
}
