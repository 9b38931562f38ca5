#include "core/proto_enums.h"

#include <cstdint>
#include <cstring>
#include <string>

#include "core/status.h"

namespace tpurt {
namespace {

template <typename T>
T read_at(const void* base, size_t offset) {
  T v;
  std::memcpy(&v, static_cast<const char*>(base) + offset, sizeof v);
  return v;
}

[[noreturn]] void bad_enum(const char* top, const std::string& path, int32_t value,
                           const ProtobufCEnumDescriptor* e) {
  std::string names;
  for (unsigned i = 0; i < e->n_values; ++i)
    names += str_cat(i == 0 ? "" : i + 1 == e->n_values ? " or " : ", ", e->values[i].name, " (",
                     e->values[i].value, ")");
  invalid_argument(top, " ", path, " ", value, " is not ", names);
}

void check(const ProtobufCMessage* m, const char* top, const std::string& prefix) {
  const ProtobufCMessageDescriptor* d = m->descriptor;
  for (unsigned i = 0; i < d->n_fields; ++i) {
    const ProtobufCFieldDescriptor& f = d->fields[i];
    const bool oneof = (f.flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != 0;
    if (oneof) {
      // The case is an enum too: 0 or the id of one member of this oneof.
      const uint32_t which = read_at<uint32_t>(m, f.quantifier_offset);
      bool known = which == 0;
      for (unsigned k = 0; k < d->n_fields && !known; ++k)
        known = (d->fields[k].flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
                d->fields[k].quantifier_offset == f.quantifier_offset && d->fields[k].id == which;
      if (!known) invalid_argument(top, " ", prefix, "oneof case ", which, " is not a field of it");
      if (which != f.id) continue;
    }
    if (f.type != PROTOBUF_C_TYPE_ENUM && f.type != PROTOBUF_C_TYPE_MESSAGE) continue;
    if (!oneof && f.label == PROTOBUF_C_LABEL_OPTIONAL && f.type == PROTOBUF_C_TYPE_ENUM &&
        !read_at<protobuf_c_boolean>(m, f.quantifier_offset))
      continue;
    const bool repeated = f.label == PROTOBUF_C_LABEL_REPEATED;
    const size_t count = repeated ? read_at<size_t>(m, f.quantifier_offset) : 1;
    const void* elems = repeated ? read_at<const void*>(m, f.offset)
                                 : static_cast<const char*>(static_cast<const void*>(m)) + f.offset;
    for (size_t k = 0; k < count; ++k) {
      const std::string path =
          repeated ? str_cat(prefix, f.name, "[", k, "]") : str_cat(prefix, f.name);
      if (f.type == PROTOBUF_C_TYPE_ENUM) {
        const auto* e = static_cast<const ProtobufCEnumDescriptor*>(f.descriptor);
        const int32_t v = read_at<int32_t>(elems, k * sizeof(int32_t));
        if (protobuf_c_enum_descriptor_get_value(e, v) == nullptr) bad_enum(top, path, v, e);
      } else if (const auto* sub = read_at<const ProtobufCMessage*>(elems, k * sizeof(void*))) {
        check(sub, top, path + ".");
      }
    }
  }
}

}  // namespace

void check_proto_enums(const ProtobufCMessage* message) {
  check(message, message->descriptor->short_name, "");
}

}  // namespace tpurt
