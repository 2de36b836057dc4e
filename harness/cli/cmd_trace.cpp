// `prefill-bench trace`: one rep of a results file as Chrome trace-event JSON
// (harness/analysis/trace.h), for Perfetto or chrome://tracing. Rank 0 only.
#include <cstdio>

#include "check.h"
#include "commands.h"
#include "links.h"

namespace pb {

int cmd_trace(const Gang& gang, const TraceArgs& args) {
  if (!gang.is_root()) return 0;
  const std::string output = args.output.empty() ? beside_results(args.input, ".trace.json.gz") : args.output;
  const RunResult result = read_with_link_bytes(args.input);  // a projection over a link re-times them
  std::string json;
  try {
    json = trace_json(result, args.options);
  } catch (const Error& error) {  // the file's variants or reps: name it
    throw Error("'" + args.input + "': " + error.what());
  }
  write_trace(output, json, args.overwrite);
  std::printf("wrote %s\n", output.c_str());
  return 0;
}

}  // namespace pb
