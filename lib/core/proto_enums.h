// Every enum of a message protobuf-c decoded, checked against its enumerators.
// protobuf-c stores whatever int32 the bytes hold in an enum field; loading a value
// that is not an enumerator through the C++ enum type is undefined behaviour. So
// every decoder calls this right after unpacking, and it reads each enum field (of
// nested and repeated messages too, and each oneof's case) as the int32 it is.
#pragma once

#include <protobuf-c/protobuf-c.h>

#include <cstdint>
#include <cstring>

namespace tpurt {

// An enum field of a decoded message as the int32 its bytes hold: the only way to
// read one (the C++ enum type may not hold the value).
template <typename E>
int32_t proto_enum_value(const E& field) {
  static_assert(sizeof(E) == sizeof(int32_t), "protobuf-c enums are int-sized");
  int32_t v;
  std::memcpy(&v, &field, sizeof v);
  return v;
}

// Throws Error(TPU_INVALID_ARGUMENT) for the first enum field whose value is not one
// of its enumerators: "<Message> <field path> <value> is not A (0), B (1) or C (2)".
void check_proto_enums(const ProtobufCMessage* message);

}  // namespace tpurt
