#include "cluster/hostlist.h"

#include <algorithm>
#include <cstdint>

#include "core/status.h"

namespace tpurt {
namespace {

// Range bounds have at most 9 digits: 999999999 fits an int32 and no sum of two
// overflows an int64, and a longer number names no real host.
constexpr size_t kMaxDigits = 9;

[[noreturn]] void bad_hostlist(const char* variable, const std::string& text,
                               const std::string& why) {
  invalid_argument("Invalid hostlist format in ", variable, "='", text, "': ", why);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Characters of a host name outside the brackets.
bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '-' ||
         c == '.' || c == '_';
}

// A decimal number of 1 to kMaxDigits digits, all of `s`.
bool parse_number(const std::string& s, int64_t* out) {
  if (s.empty() || s.size() > kMaxDigits) return false;
  int64_t v = 0;
  for (char c : s) {
    if (!is_digit(c)) return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

// One part of an item: literal text, or the expansion of a bracket group.
struct Part {
  std::vector<std::string> choices;
};

std::string padded(int64_t v, size_t width) {
  std::string s = std::to_string(v);
  if (s.size() < width) s.insert(0, width - s.size(), '0');
  return s;
}

// "01-04,7" -> {"01", "02", "03", "04", "7"}; `budget` is how many hosts may still
// come, checked before anything is allocated.
std::vector<std::string> expand_ranges(const std::string& ranges, size_t budget,
                                       const char* variable, const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t comma = ranges.find(',', start);
    std::string range = ranges.substr(start, comma == std::string::npos ? comma : comma - start);
    size_t dash = range.find('-');
    std::string lo_text = range.substr(0, dash);
    std::string hi_text = dash == std::string::npos ? lo_text : range.substr(dash + 1);
    int64_t lo, hi;
    if (!parse_number(lo_text, &lo) || !parse_number(hi_text, &hi))
      bad_hostlist(variable, text,
                   str_cat("range '", range, "' is not N or N-M with N and M of 1 to ",
                           kMaxDigits, " digits"));
    if (lo > hi) bad_hostlist(variable, text, str_cat("range '", range, "' runs backwards"));
    if (static_cast<uint64_t>(hi - lo + 1) > budget - out.size())
      bad_hostlist(variable, text, str_cat("it names more than ", kMaxHosts, " hosts"));
    // Slurm pads every number to the width of the range's first bound.
    for (int64_t v = lo; v <= hi; ++v) out.push_back(padded(v, lo_text.size()));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& text, const char* variable) {
  if (text.empty()) bad_hostlist(variable, text, "it is empty");
  std::vector<std::string> hosts;
  size_t pos = 0;
  while (true) {
    // One item: up to the next comma outside brackets.
    std::vector<Part> parts;
    std::string literal;
    size_t product = 1;
    for (; pos < text.size() && text[pos] != ','; ++pos) {
      char c = text[pos];
      if (c == '[') {
        size_t close = text.find(']', pos);
        if (close == std::string::npos)
          bad_hostlist(variable, text, str_cat("'[' at offset ", pos, " is not closed"));
        std::string ranges = text.substr(pos + 1, close - pos - 1);
        if (ranges.find('[') != std::string::npos)
          bad_hostlist(variable, text, str_cat("brackets nest at offset ", pos));
        if (!literal.empty()) parts.push_back(Part{{literal}});
        literal.clear();
        // The product of every group's size bounds this item; each group is expanded
        // only within what is left of the budget.
        size_t budget = (kMaxHosts - hosts.size()) / product;
        Part group{expand_ranges(ranges, budget, variable, text)};
        product *= group.choices.size();
        parts.push_back(std::move(group));
        pos = close;
      } else if (is_name_char(c)) {
        literal.push_back(c);
      } else {
        bad_hostlist(variable, text,
                     c == ']' ? str_cat("']' at offset ", pos, " closes no '['")
                              : str_cat("character code ", int(static_cast<unsigned char>(c)),
                                        " at offset ", pos, " is not allowed in a host name"));
      }
    }
    if (!literal.empty()) parts.push_back(Part{{literal}});
    if (parts.empty()) bad_hostlist(variable, text, str_cat("empty item at offset ", pos));
    if (product > kMaxHosts - hosts.size())
      bad_hostlist(variable, text, str_cat("it names more than ", kMaxHosts, " hosts"));
    size_t longest = 0;  // the item's longest host name
    for (const Part& part : parts) {
      size_t widest = 0;
      for (const std::string& choice : part.choices) widest = std::max(widest, choice.size());
      longest += widest;
    }
    if (longest > kMaxHostNameBytes)
      bad_hostlist(variable, text, str_cat("a host name of ", longest, " characters (at most ",
                                           kMaxHostNameBytes, ")"));
    // The cartesian product, last part fastest: an odometer over the parts.
    std::vector<size_t> digit(parts.size(), 0);
    for (size_t n = 0; n < product; ++n) {
      std::string host;
      for (size_t i = 0; i < parts.size(); ++i) host += parts[i].choices[digit[i]];
      hosts.push_back(std::move(host));
      for (size_t i = parts.size(); i-- > 0;) {
        if (++digit[i] < parts[i].choices.size()) break;
        digit[i] = 0;
      }
    }
    if (pos == text.size()) break;
    ++pos;  // the comma
    if (pos == text.size()) bad_hostlist(variable, text, "it ends with ','");
  }
  return hosts;
}

std::vector<int> expand_tasks_per_node(const std::string& text, const char* variable) {
  auto bad = [&](const std::string& why) {
    invalid_argument("Invalid tasks-per-node list format in ", variable, "='", text, "': ", why);
  };
  if (text.empty()) bad("it is empty");
  std::vector<int> counts;
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? comma : comma - start);
    // N or N(xM)
    size_t paren = item.find('(');
    int64_t n = 0, repeat = 1;
    bool ok = parse_number(item.substr(0, paren), &n);
    if (ok && paren != std::string::npos) {
      ok = item.size() > paren + 3 && item.compare(paren, 2, "(x") == 0 && item.back() == ')' &&
           parse_number(item.substr(paren + 2, item.size() - paren - 3), &repeat) && repeat > 0;
    }
    if (!ok) bad(str_cat("item '", item, "' is not N or N(xM)"));
    if (static_cast<uint64_t>(repeat) > kMaxHosts - counts.size())
      bad(str_cat("it has more than ", kMaxHosts, " entries"));
    if (n > static_cast<int64_t>(kMaxHosts))
      bad(str_cat("item '", item, "' has more than ", kMaxHosts, " tasks on one node"));
    counts.insert(counts.end(), static_cast<size_t>(repeat), static_cast<int>(n));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return counts;
}

}  // namespace tpurt
