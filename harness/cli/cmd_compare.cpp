// `prefill-bench compare`: runs on rank 0 only.
#include <iostream>

#include "commands.h"

namespace pb {

int cmd_compare(const Gang& gang, const CompareOptions& options) {
  if (!gang.is_root()) return 0;
  return run_compare(options, std::cout);
}

}  // namespace pb
