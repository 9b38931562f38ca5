#include "cluster/resolver_parse.h"

#include <cstdlib>
#include <cstring>
#include <set>

#include "core/status.h"

namespace tpurt {
namespace resolver {

// The variable's value; nullptr when unset. `empty_is_unset`: set but empty counts as
// unset (the library's convention for its own variables and the launchers').
const char* env(const char* name, bool empty_is_unset) {
  const char* v = std::getenv(name);
  if (v != nullptr && empty_is_unset && *v == '\0') return nullptr;
  return v;
}

bool starts_with(const std::string& s, const char* prefix) {
  return s.compare(0, std::strlen(prefix), prefix) == 0;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string::npos ? at : at - start));
    if (at == std::string::npos) return out;
    start = at + 1;
  }
}

// Python's int() on a decimal: optional sign and digits, no spaces. Returns false for
// anything else and for values outside int64.
bool parse_int(const char* text, int64_t* out) {
  const char* p = text;
  bool negative = *p == '-';
  if (*p == '-' || *p == '+') ++p;
  if (*p == '\0') return false;
  uint64_t v = 0;
  for (; *p; ++p) {
    if (*p < '0' || *p > '9') return false;
    v = v * 10 + static_cast<uint64_t>(*p - '0');
    if (v > static_cast<uint64_t>(INT64_MAX)) return false;
  }
  *out = negative ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
  return true;
}

// A required non-negative integer variable of a launcher, below `limit`.
int64_t launcher_int(const char* name, const char* text, int64_t limit) {
  int64_t v;
  if (!parse_int(text, &v) || v < 0 || v >= limit)
    invalid_argument("environment variable ", name, "='", text,
                     "' is not a decimal integer in [0, ", limit, ")");
  return v;
}

bool is_host_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '-' || c == '.' || c == '_';
}

// Splits "host:port" or "[v6]:port" into host and port text; false when it is
// neither. `port` is "" when the address has no port.
bool split_address(const std::string& a, std::string* host, std::string* port) {
  size_t colon;
  if (!a.empty() && a[0] == '[') {
    size_t close = a.find(']');
    if (close == std::string::npos || close == 1) return false;
    bool zone = false;  // after '%': an interface name ("fe80::1%eth0")
    for (size_t i = 1; i < close; ++i) {
      char c = a[i];
      bool ok = zone ? is_host_char(c)
                     : (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
                           (c >= 'A' && c <= 'F') || c == ':' || c == '.' || c == '%';
      if (!ok) return false;
      zone = zone || c == '%';
    }
    *host = a.substr(0, close + 1);
    if (close + 1 == a.size()) {
      port->clear();
      return true;
    }
    if (a[close + 1] != ':') return false;
    colon = close + 1;
  } else {
    colon = a.find(':');
    *host = a.substr(0, colon);
    if (host->empty()) return false;
    for (char c : *host)
      if (!is_host_char(c)) return false;
    if (colon == std::string::npos) {
      port->clear();
      return true;
    }
  }
  *port = a.substr(colon + 1);
  if (port->empty()) return false;  // "host:" names no port
  return true;
}

bool valid_port(const std::string& p) {
  if (p.empty() || p.size() > 5) return false;
  for (char c : p)
    if (c < '0' || c > '9') return false;
  int v = std::atoi(p.c_str());
  return v >= 1 && v <= 65535;
}

namespace {

[[noreturn]] void bad_address(const std::string& a, const std::string& where) {
  invalid_argument("invalid address '", a, "' in ", where,
                   ": expected host:port with a port in [1, 65535] (IPv6 as [addr]:port)");
}

}  // namespace

// Checks host:port; `where` names the entry's source for the message.
void check_address(const std::string& a, const std::string& where) {
  std::string host, port;
  if (!split_address(a, &host, &port) || !valid_port(port)) bad_address(a, where);
}

// host[:port] with the port defaulting to `port`.
std::string with_default_port(const std::string& a, int port, const std::string& where) {
  std::string host, port_text;
  if (!split_address(a, &host, &port_text)) bad_address(a, where);
  if (port_text.empty()) return str_cat(host, ":", port);
  if (!valid_port(port_text)) bad_address(a, where);
  return a;
}

void check_no_duplicates(const std::vector<std::string>& addresses, const std::string& where) {
  std::set<std::string> seen;
  for (const std::string& a : addresses)
    if (!a.empty() && !seen.insert(a).second)
      invalid_argument("duplicate address '", a, "' in ", where,
                       ": every task needs its own host:port");
}

std::string format_master_url(const std::string& address, const std::string& rpc_layer) {
  return rpc_layer.empty() ? address : str_cat(rpc_layer, "://", address);
}

std::string port_base_address(const std::string& host, int port_base, int64_t offset,
                              const char* what) {
  if (port_base + offset > 65535)
    invalid_argument("port ", port_base, " + ", offset, " for ", what,
                     " is above 65535: lower port_base");
  return str_cat(host, ":", port_base + offset);
}

const char* json_type_name(const json_t* j) {
  switch (json_typeof(j)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "a list";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
  }
  return "a value";
}

std::string json_string_of(const json_t* j) {
  return std::string(json_string_value(j), json_string_length(j));
}

}  // namespace resolver
}  // namespace tpurt
