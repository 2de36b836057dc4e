// compare's reports that travel: `compare --format markdown|csv|json`.
//
// The rows are those of the text report's mode (compare.h):
//   - one file, no variant names: every variant, each against the reference
//     variant (`--reference`, default "baseline") of that file;
//   - one file, --variants A,B: A, then B against A;
//   - two files: each pair of variants compared (same names, else the
//     first of each, or the names given), B against A.
// Each row holds the headline TTFT (headline.h: its form, reps, median), the
// saving against its reference, the outputs verdict against it, and the time
// per superstep of each kernel family on each rank (family_times_us).
//   markdown  the table a pull request pastes: the files with their commit and
//             device, the TTFT table, then the deepest rank's families;
//   csv       one row per variant, rank and family (the TTFT in every row);
//   json      {"mode", "files": [{path, commit, device}], "variants": [...]}.
// The regression gate keeps its text form.
#pragma once

#include <ostream>
#include <string>

#include "compare.h"

namespace pb {

enum class ReportFormat { text, markdown, csv, json };

// "text" | "markdown" | "csv" | "json"; anything else throws pb::Error naming
// the allowed values.
ReportFormat parse_report_format(const std::string& text);

// Reads the files of `options` and writes the report in `format` (not text).
void write_report(const CompareOptions& options, ReportFormat format, std::ostream& out);

// The pieces every report shares: a CSV field (quoted when it holds a comma,
// quote or newline), a file's commit ("<sha>", " (dirty)" when it was) and
// its device (rank 0's GPU; a plan's profile), "unknown" when the file records neither.
std::string csv_field(const std::string& s);
std::string commit_of(const RunResult& run);
std::string device_of(const RunResult& run);

}  // namespace pb
