#include "embedding/config_json.h"

#include <jansson.h>
#include <openssl/evp.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cluster/resolver_parse.h"
#include "core/status.h"
#include "optimization_parameters.pb-c.h"
#include "tpu_embedding_configuration.pb-c.h"

namespace tpurt {
namespace embedding {

namespace {

// Every allocation of the message being built, freed together: the message never goes
// through protobuf-c's free (its rules for default strings are not ours).
class Arena {
 public:
  ~Arena() {
    for (void* p : blocks_) std::free(p);
  }
  void* alloc(size_t n) {
    void* p = std::calloc(n ? n : 1, 1);
    if (p == nullptr) throw std::bad_alloc();
    blocks_.push_back(p);
    return p;
  }

 private:
  std::vector<void*> blocks_;
};

// "vocabulary_size" -> "vocabularySize": proto3 JSON's names.
std::string camel(const char* name) {
  std::string out;
  bool up = false;
  for (const char* c = name; *c; ++c) {
    if (*c == '_') {
      up = true;
      continue;
    }
    out += up ? static_cast<char>(std::toupper(static_cast<unsigned char>(*c))) : *c;
    up = false;
  }
  return out;
}

class Builder {
 public:
  ProtobufCMessage* message(const ProtobufCMessageDescriptor* d, const json_t* obj, const std::string& path, int depth) {
    if (depth > 32) invalid_argument(path, ": nested too deeply");
    if (!json_is_object(obj)) invalid_argument(path.empty() ? "the configuration" : path, ": expected an object, got ", resolver::json_type_name(obj));
    auto* m = static_cast<ProtobufCMessage*>(arena_.alloc(d->sizeof_message));
    d->message_init(m);
    const char* key;
    const json_t* value;
    json_object_foreach(const_cast<json_t*>(obj), key, value) {
      const ProtobufCFieldDescriptor* f = field(d, key);
      const std::string at = path.empty() ? key : path + "." + key;
      if (f == nullptr) invalid_argument(at, ": ", d->name, " has no such field");
      if (json_is_null(value)) continue;
      char* base = reinterpret_cast<char*>(m);
      if (f->label == PROTOBUF_C_LABEL_REPEATED) {
        if (!json_is_array(value)) invalid_argument(at, ": expected a list, got ", resolver::json_type_name(value));
        const size_t n = json_array_size(value), size = element_size(f);
        char* items = static_cast<char*>(arena_.alloc(n * size));
        for (size_t i = 0; i < n; ++i)
          scalar(f, json_array_get(value, i), items + i * size, str_cat(at, "[", i, "]"), depth);
        *reinterpret_cast<size_t*>(base + f->quantifier_offset) = n;
        *reinterpret_cast<char**>(base + f->offset) = items;
        continue;
      }
      uint32_t* oneof_case = reinterpret_cast<uint32_t*>(base + f->quantifier_offset);
      if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) && *oneof_case != 0)
        invalid_argument(at, ": ", protobuf_c_message_descriptor_get_field(d, *oneof_case)->name,
                         " is set already, and only one field of their oneof may be");
      scalar(f, value, base + f->offset, at, depth);
      if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
        *oneof_case = f->id;
      else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->type != PROTOBUF_C_TYPE_MESSAGE &&
               f->type != PROTOBUF_C_TYPE_STRING)
        *reinterpret_cast<protobuf_c_boolean*>(base + f->quantifier_offset) = 1;
    }
    return m;
  }

 private:
  static const ProtobufCFieldDescriptor* field(const ProtobufCMessageDescriptor* d, const char* key) {
    for (unsigned i = 0; i < d->n_fields; ++i)
      if (std::strcmp(d->fields[i].name, key) == 0 || camel(d->fields[i].name) == key) return &d->fields[i];
    return nullptr;
  }

  // The well-known wrapper types (google/protobuf/wrappers.proto): one field, `value` = 1.
  // tpurt's protos spell google.protobuf.FloatValue as tensorflow.tpu.FloatValue (the same
  // wire format), so that name counts too.
  static bool is_wrapper(const ProtobufCMessageDescriptor* d) {
    static const char* const kNames[] = {
        "google.protobuf.DoubleValue", "google.protobuf.FloatValue",  "google.protobuf.Int64Value",
        "google.protobuf.UInt64Value", "google.protobuf.Int32Value",  "google.protobuf.UInt32Value",
        "google.protobuf.BoolValue",   "google.protobuf.StringValue", "google.protobuf.BytesValue",
        "tensorflow.tpu.FloatValue",
    };
    if (d->n_fields != 1 || d->fields[0].id != 1 || std::strcmp(d->fields[0].name, "value") != 0 ||
        d->fields[0].label == PROTOBUF_C_LABEL_REPEATED)
      return false;
    for (const char* name : kNames)
      if (std::strcmp(d->name, name) == 0) return true;
    return false;
  }

  // proto3 JSON writes a wrapper as its bare value ("lower": -1.5): read it as the
  // wrapper's `value` field, with that field's type and the wrapper's path in errors.
  ProtobufCMessage* wrapper(const ProtobufCMessageDescriptor* d, const json_t* v, const std::string& at, int depth) {
    auto* m = static_cast<ProtobufCMessage*>(arena_.alloc(d->sizeof_message));
    d->message_init(m);
    const ProtobufCFieldDescriptor* f = &d->fields[0];
    char* base = reinterpret_cast<char*>(m);
    scalar(f, v, base + f->offset, at, depth);
    if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->type != PROTOBUF_C_TYPE_MESSAGE &&
        f->type != PROTOBUF_C_TYPE_STRING)
      *reinterpret_cast<protobuf_c_boolean*>(base + f->quantifier_offset) = 1;
    return m;
  }

  static size_t element_size(const ProtobufCFieldDescriptor* f) {
    switch (f->type) {
      case PROTOBUF_C_TYPE_INT64:
      case PROTOBUF_C_TYPE_SINT64:
      case PROTOBUF_C_TYPE_SFIXED64:
      case PROTOBUF_C_TYPE_UINT64:
      case PROTOBUF_C_TYPE_FIXED64: return 8;
      case PROTOBUF_C_TYPE_DOUBLE: return sizeof(double);
      case PROTOBUF_C_TYPE_BOOL: return sizeof(protobuf_c_boolean);
      case PROTOBUF_C_TYPE_STRING: return sizeof(char*);
      case PROTOBUF_C_TYPE_BYTES: return sizeof(ProtobufCBinaryData);
      case PROTOBUF_C_TYPE_MESSAGE: return sizeof(ProtobufCMessage*);
      default: return 4;
    }
  }

  // An integer as a JSON number or a decimal string (proto3 JSON writes 64-bit ones so).
  static long double integer(const json_t* v, const std::string& at) {
    if (json_is_integer(v)) return static_cast<long double>(json_integer_value(v));
    if (json_is_real(v)) {
      const double d = json_real_value(v);
      if (std::floor(d) == d && std::isfinite(d)) return d;
      invalid_argument(at, ": expected an integer, got ", d);
    }
    if (json_is_string(v)) {
      const char* s = json_string_value(v);
      char* end = nullptr;
      errno = 0;
      const long long x = std::strtoll(s, &end, 10);
      if (end != s && *end == '\0' && errno == 0) return x;
      invalid_argument(at, ": expected an integer, got \"", s, "\"");
    }
    invalid_argument(at, ": expected an integer, got ", resolver::json_type_name(v));
  }

  static void check_range(long double x, long double lo, long double hi, const std::string& at) {
    if (x < lo || x > hi) invalid_argument(at, ": ", static_cast<double>(x), " is outside [", static_cast<double>(lo), ", ", static_cast<double>(hi), "]");
  }

  static double real(const json_t* v, const std::string& at) {
    if (json_is_number(v)) return json_number_value(v);
    if (json_is_string(v)) {
      const std::string s = json_string_value(v);
      if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
      if (s == "Infinity") return std::numeric_limits<double>::infinity();
      if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
    }
    invalid_argument(at, ": expected a number, got ", resolver::json_type_name(v));
  }

  void scalar(const ProtobufCFieldDescriptor* f, const json_t* v, char* out, const std::string& at, int depth) {
    switch (f->type) {
      case PROTOBUF_C_TYPE_INT32:
      case PROTOBUF_C_TYPE_SINT32:
      case PROTOBUF_C_TYPE_SFIXED32: {
        const long double x = integer(v, at);
        check_range(x, INT32_MIN, INT32_MAX, at);
        *reinterpret_cast<int32_t*>(out) = static_cast<int32_t>(x);
        return;
      }
      case PROTOBUF_C_TYPE_UINT32:
      case PROTOBUF_C_TYPE_FIXED32: {
        const long double x = integer(v, at);
        check_range(x, 0, UINT32_MAX, at);
        *reinterpret_cast<uint32_t*>(out) = static_cast<uint32_t>(x);
        return;
      }
      case PROTOBUF_C_TYPE_INT64:
      case PROTOBUF_C_TYPE_SINT64:
      case PROTOBUF_C_TYPE_SFIXED64: {
        const long double x = integer(v, at);
        check_range(x, INT64_MIN, INT64_MAX, at);
        *reinterpret_cast<int64_t*>(out) = static_cast<int64_t>(x);
        return;
      }
      case PROTOBUF_C_TYPE_UINT64:
      case PROTOBUF_C_TYPE_FIXED64: {
        const long double x = integer(v, at);
        check_range(x, 0, INT64_MAX, at);
        *reinterpret_cast<uint64_t*>(out) = static_cast<uint64_t>(x);
        return;
      }
      case PROTOBUF_C_TYPE_FLOAT: {
        const double x = real(v, at);
        if (std::isfinite(x) && std::fabs(x) > std::numeric_limits<float>::max())
          invalid_argument(at, ": ", x, " is outside float's range");
        *reinterpret_cast<float*>(out) = static_cast<float>(x);
        return;
      }
      case PROTOBUF_C_TYPE_DOUBLE:
        *reinterpret_cast<double*>(out) = real(v, at);
        return;
      case PROTOBUF_C_TYPE_BOOL:
        if (!json_is_boolean(v)) invalid_argument(at, ": expected true or false, got ", resolver::json_type_name(v));
        *reinterpret_cast<protobuf_c_boolean*>(out) = json_is_true(v) ? 1 : 0;
        return;
      case PROTOBUF_C_TYPE_ENUM: {
        const auto* e = static_cast<const ProtobufCEnumDescriptor*>(f->descriptor);
        if (json_is_string(v)) {
          const char* name = json_string_value(v);
          for (unsigned i = 0; i < e->n_values; ++i)
            if (std::strcmp(e->values[i].name, name) == 0) {
              *reinterpret_cast<int32_t*>(out) = e->values[i].value;
              return;
            }
          std::string names;
          for (unsigned i = 0; i < e->n_values; ++i) names += str_cat(i ? ", " : "", e->values[i].name);
          invalid_argument(at, ": \"", name, "\" is not a ", e->name, " (", names, ")");
        }
        const long double x = integer(v, at);
        check_range(x, INT32_MIN, INT32_MAX, at);
        *reinterpret_cast<int32_t*>(out) = static_cast<int32_t>(x);
        return;
      }
      case PROTOBUF_C_TYPE_STRING: {
        if (!json_is_string(v)) invalid_argument(at, ": expected a string, got ", resolver::json_type_name(v));
        const size_t n = json_string_length(v);
        char* s = static_cast<char*>(arena_.alloc(n + 1));
        std::memcpy(s, json_string_value(v), n);
        if (std::strlen(s) != n) invalid_argument(at, ": the string holds a NUL character");
        *reinterpret_cast<char**>(out) = s;
        return;
      }
      case PROTOBUF_C_TYPE_BYTES: {
        auto* b = reinterpret_cast<ProtobufCBinaryData*>(out);
        if (json_is_object(v) && std::strcmp(f->name, "optimization_parameters") == 0) {
          // The table's optimizer, written as an OptimizationParameters object.
          ProtobufCMessage* p =
              message(&tensorflow__tpu__optimization_parameters__descriptor, v, at, depth + 1);
          b->len = protobuf_c_message_get_packed_size(p);
          b->data = static_cast<uint8_t*>(arena_.alloc(b->len));
          protobuf_c_message_pack(p, b->data);
          return;
        }
        if (!json_is_string(v)) invalid_argument(at, ": expected base64 bytes, got ", resolver::json_type_name(v));
        const std::string s = json_string_value(v);
        b->data = static_cast<uint8_t*>(arena_.alloc(s.size()));
        const int n = EVP_DecodeBlock(b->data, reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()));
        if (n < 0 || s.size() % 4 != 0) invalid_argument(at, ": not base64");
        size_t pad = 0;
        while (pad < 2 && pad < s.size() && s[s.size() - 1 - pad] == '=') ++pad;
        b->len = static_cast<size_t>(n) - pad;
        return;
      }
      case PROTOBUF_C_TYPE_MESSAGE: {
        const auto* d = static_cast<const ProtobufCMessageDescriptor*>(f->descriptor);
        *reinterpret_cast<ProtobufCMessage**>(out) =
            is_wrapper(d) && !json_is_object(v) ? wrapper(d, v, at, depth + 1) : message(d, v, at, depth + 1);
        return;
      }
    }
    invalid_argument(at, ": a field type tpurt does not read");
  }

  Arena arena_;
};

}  // namespace

std::string config_from_json(const char* text) {
  json_error_t error;
  json_t* root = json_loads(text, JSON_REJECT_DUPLICATES, &error);
  if (root == nullptr)
    invalid_argument("the embedding configuration is not JSON: ", error.text, " (line ", error.line, ", column ",
                     error.column, ")");
  std::string bytes;
  try {
    Builder b;
    ProtobufCMessage* m = b.message(&tensorflow__tpu__tpuembedding_configuration__descriptor, root, "", 0);
    bytes.resize(protobuf_c_message_get_packed_size(m));
    protobuf_c_message_pack(m, reinterpret_cast<uint8_t*>(&bytes[0]));
  } catch (...) {
    json_decref(root);
    throw;
  }
  json_decref(root);
  return bytes;
}

}  // namespace embedding
}  // namespace tpurt
