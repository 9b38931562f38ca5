// The text a resolver reads: addresses (host:port, [v6]:port), launcher integers,
// environment variables and TF_CONFIG's JSON, each checked with a message naming
// where the value came from. Shared by the resolvers of lib/cluster/resolver_*.cc.
#pragma once

#include <jansson.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tpurt {
namespace resolver {

constexpr int kDefaultTpuPort = 8470;    // TPUClusterResolver's port for grpc:// names
constexpr int kDefaultPortBase = 8888;   // SlurmClusterResolver's port_base
constexpr int kMaxSparseIndex = 65535;   // bounds a sparse TF_CONFIG job's vector
// Bounds the vectors of all TF_CONFIG's jobs together (each sparse job is as long as its
// largest index): many jobs of one large index each would be gigabytes.
constexpr size_t kMaxTaskSlots = size_t{1} << 20;
constexpr char kGrpcPrefix[] = "grpc://";

// The variable's value; nullptr when unset. `empty_is_unset`: set but empty counts as
// unset (the library's convention for its own variables and the launchers').
const char* env(const char* name, bool empty_is_unset = true);
bool starts_with(const std::string& s, const char* prefix);
std::vector<std::string> split(const std::string& s, char sep);
// Python's int() on a decimal: optional sign and digits, no spaces. Returns false for
// anything else and for values outside int64.
bool parse_int(const char* text, int64_t* out);
// A required non-negative integer variable of a launcher, below `limit`.
int64_t launcher_int(const char* name, const char* text, int64_t limit);
// Splits "host:port" or "[v6]:port" into host and port text; false when it is
// neither. `port` is "" when the address has no port.
bool split_address(const std::string& a, std::string* host, std::string* port);
bool valid_port(const std::string& p);
// Checks host:port; `where` names the entry's source for the message.
void check_address(const std::string& a, const std::string& where);
// host[:port] with the port defaulting to `port`.
std::string with_default_port(const std::string& a, int port, const std::string& where);
void check_no_duplicates(const std::vector<std::string>& addresses, const std::string& where);
std::string format_master_url(const std::string& address, const std::string& rpc_layer);
std::string port_base_address(const std::string& host, int port_base, int64_t offset,
                              const char* what);

// Owns a jansson reference.
struct JsonRef {
  json_t* p;
  explicit JsonRef(json_t* j) : p(j) {}
  ~JsonRef() { json_decref(p); }
  JsonRef(const JsonRef&) = delete;
  JsonRef& operator=(const JsonRef&) = delete;
};
const char* json_type_name(const json_t* j);
std::string json_string_of(const json_t* j);

}  // namespace resolver
}  // namespace tpurt
