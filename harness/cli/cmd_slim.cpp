// `prefill-bench slim`: a results file less its projections' per-span
// timelines (drop_projection_timelines), for committing full-size runs. Every
// measurement stays; `trace` replays a dropped timeline. An older run's fabric
// spans leave with the link's bytes (links.h restore_link_bytes). Rank 0 only.
#include <cstdio>
#include <filesystem>

#include "check.h"
#include "commands.h"
#include "links.h"

namespace pb {

namespace {

double megabytes(const std::string& path) { return double(std::filesystem::file_size(path)) / 1e6; }

}  // namespace

int cmd_slim(const Gang& gang, const SlimArgs& args) {
  if (!gang.is_root()) return 0;
  const std::string output = args.output.empty() ? beside_results(args.input, "-slim.h5") : args.output;
  PB_CHECK(std::filesystem::weakly_canonical(output) != std::filesystem::weakly_canonical(args.input),
           "slim: the output '" + output + "' is the input; name another");
  RunResult result = read_with_link_bytes(args.input);  // an older file leaves with the link's bytes
  drop_projection_timelines(result);
  write_results(output, result, args.overwrite);
  std::printf("wrote %s (%.1f MB; %s was %.1f MB)\n", output.c_str(), megabytes(output), args.input.c_str(),
              megabytes(args.input));
  return 0;
}

}  // namespace pb
