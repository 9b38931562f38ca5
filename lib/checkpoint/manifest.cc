#include "checkpoint/manifest.h"

#include <jansson.h>

#include "cluster/resolver_parse.h"
#include "core/dtype.h"
#include "core/status.h"
#include "embedding/config.h"

namespace tpurt {
namespace checkpoint {

using resolver::JsonRef;

namespace {

constexpr const char* kFormat = "tpurt-checkpoint";
constexpr int kVersion = 1;
// Bounds that keep every size below 2^62 bytes: no product overflows.
constexpr int64_t kMaxRows = int64_t{1} << 40;
constexpr int64_t kMaxDimension = int64_t{1} << 16;
constexpr int64_t kMaxCount = 1 << 20;  // tasks, cores, tables, tensors, variables

json_t* file_json(const FileEntry& f) {
  return json_pack("{s:s, s:I, s:s}", "path", f.path.c_str(), "bytes", static_cast<json_int_t>(f.bytes),
                   "sha256", f.sha256.c_str());
}

// The reader: every lookup names its path in the manifest.
struct Reader {
  const std::string& where;

  [[noreturn]] void bad(const std::string& path, const std::string& what) const {
    fail(TPU_DATA_LOSS, where, ": ", path, ": ", what);
  }
  json_t* get(json_t* obj, const std::string& path, const char* key, json_type type) const {
    json_t* v = json_object_get(obj, key);
    const std::string p = path.empty() ? key : path + "." + key;
    if (v == nullptr) bad(p, "missing");
    if (json_typeof(v) != type) bad(p, std::string("expected ") + json_type_name_of(type) + ", got " +
                                           resolver::json_type_name(v));
    return v;
  }
  static const char* json_type_name_of(json_type t) {
    switch (t) {
      case JSON_OBJECT: return "an object";
      case JSON_ARRAY: return "an array";
      case JSON_STRING: return "a string";
      case JSON_INTEGER: return "an integer";
      default: return "a boolean";
    }
  }
  std::string str(json_t* obj, const std::string& path, const char* key) const {
    json_t* v = get(obj, path, key, JSON_STRING);
    return std::string(json_string_value(v), json_string_length(v));
  }
  int64_t integer(json_t* obj, const std::string& path, const char* key, int64_t lo, int64_t hi) const {
    const int64_t v = json_integer_value(get(obj, path, key, JSON_INTEGER));
    if (v < lo || v > hi)
      bad(path.empty() ? key : path + "." + key, str_cat(v, " is outside [", lo, ", ", hi, "]"));
    return v;
  }
  FileEntry file(json_t* obj, const std::string& path) const {
    FileEntry f;
    f.path = str(obj, path, "path");
    if (f.path.empty() || f.path.find('/') != std::string::npos || f.path[0] == '.' ||
        f.path.find('\0') != std::string::npos)
      bad(path + ".path", "'" + f.path + "' is not a plain file name");
    f.bytes = static_cast<uint64_t>(integer(obj, path, "bytes", 0, int64_t{1} << 62));
    f.sha256 = str(obj, path, "sha256");
    if (f.sha256.size() != 64 || f.sha256.find_first_not_of("0123456789abcdef") != std::string::npos)
      bad(path + ".sha256", "'" + f.sha256 + "' is not 64 lowercase hex digits");
    return f;
  }
};

bool dtype_from_name(const std::string& name, tpu_dtype* out) {
#define TPURT_CKPT_DTYPE_(n, value, str, size) \
  if (name == str) {                           \
    *out = TPU_##n;                            \
    return true;                               \
  }
  TPU_DTYPE_MAP(TPURT_CKPT_DTYPE_)
#undef TPURT_CKPT_DTYPE_
  return false;
}

}  // namespace

uint64_t shard_file_bytes(const TableEntry& t, int64_t shards, bool mod, int64_t first_shard,
                          int64_t num_shards) {
  const embedding::ShardMap map(t.vocabulary_size, shards, mod);
  uint64_t rows = 0;
  for (int64_t s = first_shard; s < first_shard + num_shards; ++s) rows += map.rows_in(s);
  return rows * t.variables.size() * static_cast<uint64_t>(t.dimension) * sizeof(float);
}

std::string manifest_to_json(const Manifest& m) {
  JsonRef root(json_pack("{s:s, s:i, s:I, s:i, s:i, s:s}", "format", kFormat, "version", kVersion, "step",
                         static_cast<json_int_t>(m.step), "num_tasks", m.num_tasks, "cores_per_task",
                         m.cores_per_task, "sharding", m.mod ? "MOD" : "DIV"));
  json_t* tables = json_array();
  for (const TableEntry& t : m.tables) {
    json_t* vars = json_array();
    for (const std::string& v : t.variables) json_array_append_new(vars, json_string(v.c_str()));
    json_t* shards = json_array();
    for (const ShardFile& s : t.shards) {
      json_t* f = file_json(s.file);
      json_object_set_new(f, "task", json_integer(s.task));
      json_object_set_new(f, "first_shard", json_integer(s.first_shard));
      json_object_set_new(f, "num_shards", json_integer(s.num_shards));
      json_array_append_new(shards, f);
    }
    json_array_append_new(
        tables, json_pack("{s:s, s:I, s:i, s:s, s:o, s:s, s:o}", "name", t.name.c_str(), "vocabulary_size",
                          static_cast<json_int_t>(t.vocabulary_size), "dimension", t.dimension, "optimizer",
                          t.optimizer.c_str(), "variables", vars, "dtype", t.dtype.c_str(), "shards", shards));
  }
  json_object_set_new(root.p, "tables", tables);
  json_t* tensors = json_array();
  for (const TensorEntry& t : m.tensors) {
    json_t* shape = json_array();
    for (int64_t d : t.shape) json_array_append_new(shape, json_integer(d));
    json_array_append_new(tensors, json_pack("{s:s, s:s, s:o, s:I, s:I}", "name", t.name.c_str(), "dtype",
                                             dtype_name(t.dtype), "shape", shape, "offset",
                                             static_cast<json_int_t>(t.offset), "bytes",
                                             static_cast<json_int_t>(t.bytes)));
  }
  json_object_set_new(root.p, "tensors", tensors);
  json_object_set_new(root.p, "tensor_file", file_json(m.tensor_file));
  char* text = json_dumps(root.p, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
  if (text == nullptr) fail(TPU_RESOURCE_EXHAUSTED, "out of memory writing a checkpoint manifest");
  std::string out(text);
  free(text);
  return out + "\n";
}

Manifest parse_manifest(const std::string& text, const std::string& where) {
  const Reader r{where};
  json_error_t err;
  JsonRef root(json_loadb(text.data(), text.size(), JSON_REJECT_DUPLICATES, &err));
  if (root.p == nullptr) fail(TPU_DATA_LOSS, where, ": not JSON: ", err.text, " (line ", err.line, ")");
  if (!json_is_object(root.p)) r.bad("(top)", "expected an object");
  if (r.str(root.p, "", "format") != kFormat) r.bad("format", str_cat("expected '", kFormat, "'"));
  r.integer(root.p, "", "version", kVersion, kVersion);
  Manifest m;
  m.step = r.integer(root.p, "", "step", 0, INT64_MAX);
  m.num_tasks = static_cast<int>(r.integer(root.p, "", "num_tasks", 1, kMaxCount));
  m.cores_per_task = static_cast<int>(r.integer(root.p, "", "cores_per_task", 1, kMaxCount));
  const int64_t shards = int64_t{m.num_tasks} * m.cores_per_task;
  if (shards > kMaxCount) r.bad("num_tasks", str_cat(shards, " cores in all is too many"));
  const std::string sharding = r.str(root.p, "", "sharding");
  if (sharding != "DIV" && sharding != "MOD") r.bad("sharding", "'" + sharding + "' is neither DIV nor MOD");
  m.mod = sharding == "MOD";

  json_t* tables = r.get(root.p, "", "tables", JSON_ARRAY);
  if (json_array_size(tables) > static_cast<size_t>(kMaxCount)) r.bad("tables", "too many");
  for (size_t i = 0; i < json_array_size(tables); ++i) {
    const std::string p = str_cat("tables[", i, "]");
    json_t* jt = json_array_get(tables, i);
    if (!json_is_object(jt)) r.bad(p, "expected an object");
    TableEntry t;
    t.name = r.str(jt, p, "name");
    for (const TableEntry& o : m.tables)
      if (o.name == t.name) r.bad(p + ".name", "table '" + t.name + "' is listed twice");
    t.vocabulary_size = r.integer(jt, p, "vocabulary_size", 1, kMaxRows);
    t.dimension = static_cast<int32_t>(r.integer(jt, p, "dimension", 1, kMaxDimension));
    t.optimizer = r.str(jt, p, "optimizer");
    t.dtype = r.str(jt, p, "dtype");
    if (t.dtype != "float32") r.bad(p + ".dtype", "'" + t.dtype + "' is not float32");
    json_t* vars = r.get(jt, p, "variables", JSON_ARRAY);
    if (json_array_size(vars) < 1 || json_array_size(vars) > 16) r.bad(p + ".variables", "expected 1 to 16");
    for (size_t v = 0; v < json_array_size(vars); ++v) {
      json_t* jv = json_array_get(vars, v);
      if (!json_is_string(jv)) r.bad(str_cat(p, ".variables[", v, "]"), "expected a string");
      t.variables.emplace_back(json_string_value(jv));
    }
    json_t* files = r.get(jt, p, "shards", JSON_ARRAY);
    if (json_array_size(files) != static_cast<size_t>(m.num_tasks))
      r.bad(p + ".shards", str_cat(json_array_size(files), " files for ", m.num_tasks, " tasks"));
    for (int task = 0; task < m.num_tasks; ++task) {
      const std::string fp = str_cat(p, ".shards[", task, "]");
      json_t* jf = json_array_get(files, task);
      if (!json_is_object(jf)) r.bad(fp, "expected an object");
      ShardFile s;
      s.task = static_cast<int>(r.integer(jf, fp, "task", task, task));
      s.first_shard = r.integer(jf, fp, "first_shard", int64_t{task} * m.cores_per_task,
                                int64_t{task} * m.cores_per_task);
      s.num_shards = r.integer(jf, fp, "num_shards", m.cores_per_task, m.cores_per_task);
      s.file = r.file(jf, fp);
      const uint64_t want = shard_file_bytes(t, shards, m.mod, s.first_shard, s.num_shards);
      if (s.file.bytes != want)
        r.bad(fp + ".bytes", str_cat(s.file.bytes, " bytes, but the table's rows there take ", want));
      t.shards.push_back(std::move(s));
    }
    m.tables.push_back(std::move(t));
  }

  json_t* tensors = r.get(root.p, "", "tensors", JSON_ARRAY);
  if (json_array_size(tensors) > static_cast<size_t>(kMaxCount)) r.bad("tensors", "too many");
  m.tensor_file = r.file(r.get(root.p, "", "tensor_file", JSON_OBJECT), "tensor_file");
  uint64_t end = 0;
  for (size_t i = 0; i < json_array_size(tensors); ++i) {
    const std::string p = str_cat("tensors[", i, "]");
    json_t* jt = json_array_get(tensors, i);
    if (!json_is_object(jt)) r.bad(p, "expected an object");
    TensorEntry t;
    t.name = r.str(jt, p, "name");
    if (t.name.empty()) r.bad(p + ".name", "empty");
    for (const TensorEntry& o : m.tensors)
      if (o.name == t.name) r.bad(p + ".name", "tensor '" + t.name + "' is listed twice");
    const std::string dt = r.str(jt, p, "dtype");
    if (!dtype_from_name(dt, &t.dtype)) r.bad(p + ".dtype", "'" + dt + "' is not a dtype");
    json_t* shape = r.get(jt, p, "shape", JSON_ARRAY);
    if (json_array_size(shape) > TPU_MAX_RANK) r.bad(p + ".shape", str_cat("rank above ", TPU_MAX_RANK));
    uint64_t elements = 1;
    for (size_t d = 0; d < json_array_size(shape); ++d) {
      json_t* jd = json_array_get(shape, d);
      const int64_t v = json_is_integer(jd) ? json_integer_value(jd) : -1;
      if (v < 0 || v > kMaxRows) r.bad(str_cat(p, ".shape[", d, "]"), "expected an integer in [0, 2^40]");
      if (__builtin_mul_overflow(elements, static_cast<uint64_t>(v), &elements) || elements > kMaxRows)
        r.bad(p + ".shape", "too many elements");
      t.shape.push_back(v);
    }
    t.offset = static_cast<uint64_t>(r.integer(jt, p, "offset", 0, int64_t{1} << 62));
    t.bytes = static_cast<uint64_t>(r.integer(jt, p, "bytes", 0, int64_t{1} << 62));
    if (t.bytes != elements * dtype_size(t.dtype))
      r.bad(p + ".bytes", str_cat(t.bytes, " bytes for ", elements, " elements of ", dt));
    if (t.offset != end) r.bad(p + ".offset", str_cat(t.offset, ", expected ", end));
    end += t.bytes;
    m.tensors.push_back(std::move(t));
  }
  if (m.tensor_file.bytes != end)
    r.bad("tensor_file.bytes", str_cat(m.tensor_file.bytes, ", but the tensors take ", end));
  return m;
}

}  // namespace checkpoint
}  // namespace tpurt
