// Spelling rules of the Prometheus text exposition format 0.0.4: how numbers, HELP text and
// label values are written, and which metric and label names are legal. Used by metrics.cpp.
#pragma once

#include <string>
#include <string_view>

namespace vlmd::serve::obs {

// Appends `v` as a sample value: integral values below 2^63 in magnitude without exponent or
// fraction ("3", "-2", "1000000000000000000"), other finite values as the shortest text that
// parses back to the same double ("0.1", "1e+300"), and +Inf, -Inf, NaN as Prometheus spells
// them. Thread-safe (pure).
void AppendValue(double v, std::string* out);
std::string FormatValue(double v);

// Appends HELP text with backslash and line feed escaped as \\ and \n. Bytes that are not valid
// UTF-8 become U+FFFD, because one bad byte makes Prometheus reject the whole scrape. Pure.
void AppendEscapedHelp(std::string_view help, std::string* out);

// Appends a label value with backslash, double quote and line feed escaped as \\, \" and \n;
// invalid UTF-8 becomes U+FFFD as for HELP. Label values may come from requests, so this never
// fails. Pure.
void AppendEscapedLabelValue(std::string_view value, std::string* out);

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool IsValidMetricName(std::string_view name);

// [a-zA-Z_][a-zA-Z0-9_]* without the "__" prefix that Prometheus reserves for itself. Colons are
// legal in metric names only.
bool IsValidLabelName(std::string_view name);

}  // namespace vlmd::serve::obs
