// Slurm's compressed lists: host lists ("n[1-3,5],m7") and tasks-per-node lists
// ("3(x2),2,1"), as SLURM_STEP_NODELIST and SLURM_STEP_TASKS_PER_NODE hold them.
// Both are expanded with a bound, so that a hostile or mistyped range is an error and
// not an allocation of gigabytes.
#pragma once

#include <string>
#include <vector>

namespace tpurt {

// The most hosts (and tasks-per-node entries) one list may expand to.
constexpr size_t kMaxHosts = 65536;
// The longest host name (DNS's 253): with kMaxHosts, this bounds a list's expansion
// in bytes too (a 4 KB name times 65536 hosts would be gigabytes).
constexpr size_t kMaxHostNameBytes = 253;

// Expands a host list: comma-separated items, each a name with zero or more bracket
// groups of ranges ("rack[1-2]-n[01-04,7]"); the last group varies fastest, as Slurm
// prints them. Zero padding is kept: n[01-04] is n01..n04 (TensorFlow's resolver
// drops it, which names hosts that do not exist). Throws TPU_INVALID_ARGUMENT
// "Invalid hostlist format" naming `variable` and the text.
std::vector<std::string> expand_hostlist(const std::string& text, const char* variable);

// Expands a tasks-per-node list: "3(x2),2,1" is {3, 3, 2, 1}. Throws
// TPU_INVALID_ARGUMENT "Invalid tasks-per-node list format" naming `variable`.
std::vector<int> expand_tasks_per_node(const std::string& text, const char* variable);

}  // namespace tpurt
