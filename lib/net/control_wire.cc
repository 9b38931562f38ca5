#include "net/control_wire.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/proto_enums.h"
#include "core/status.h"

namespace tpurt {
namespace wire {

void EnvelopeDeleter::operator()(Envelope* e) const {
  if (e != nullptr) tpurt__wire__envelope__free_unpacked(e, nullptr);
}

std::string pack_frame(uint64_t seq, const Envelope& envelope) {
  size_t size = tpurt__wire__envelope__get_packed_size(&envelope);
  std::string frame(net::kFrameHeaderBytes + size, '\0');
  net::FrameHeader h;
  h.type = static_cast<uint16_t>(net::FrameType::kControl);
  h.seq = seq;
  h.length = size;
  net::encode_header(h, reinterpret_cast<unsigned char*>(&frame[0]));
  tpurt__wire__envelope__pack(&envelope,
                              reinterpret_cast<uint8_t*>(&frame[net::kFrameHeaderBytes]));
  return frame;
}

EnvelopePtr parse_envelope(const unsigned char* data, size_t size, std::string* error) {
  EnvelopePtr e(tpurt__wire__envelope__unpack(nullptr, size, data));
  if (!e) {
    *error = str_cat("undecodable control message (", size, " bytes)");
    return nullptr;
  }
  try {
    check_proto_enums(&e->base);
  } catch (const Error& bad) {
    *error = bad.message();
    return nullptr;
  }
  std::string why = validate(*e);
  if (!why.empty()) {
    *error = why;
    return nullptr;
  }
  return e;
}

const char* message_name(const Envelope& e) {
  switch (e.msg_case) {
    case TPURT__WIRE__ENVELOPE__MSG_HELLO: return "hello";
    case TPURT__WIRE__ENVELOPE__MSG_CHALLENGE: return "challenge";
    case TPURT__WIRE__ENVELOPE__MSG_PROOF: return "proof";
    case TPURT__WIRE__ENVELOPE__MSG_WELCOME: return "welcome";
    case TPURT__WIRE__ENVELOPE__MSG_REGISTER: return "register";
    case TPURT__WIRE__ENVELOPE__MSG_HEARTBEAT: return "heartbeat";
    case TPURT__WIRE__ENVELOPE__MSG_TASK_FAILURE: return "task_failure";
    case TPURT__WIRE__ENVELOPE__MSG_STEP_ABORT: return "step_abort";
    case TPURT__WIRE__ENVELOPE__MSG_REPORT_ERROR: return "report_error";
    case TPURT__WIRE__ENVELOPE__MSG_KV_SET: return "kv_set";
    case TPURT__WIRE__ENVELOPE__MSG_KV_GET: return "kv_get";
    case TPURT__WIRE__ENVELOPE__MSG_KV_DELETE: return "kv_delete";
    case TPURT__WIRE__ENVELOPE__MSG_BARRIER: return "barrier";
    case TPURT__WIRE__ENVELOPE__MSG_DISCONNECT: return "disconnect";
    case TPURT__WIRE__ENVELOPE__MSG_RESPONSE: return "response";
    default: return "nothing";
  }
}

std::string validate(const Envelope& e) {
  // protobuf-c leaves a oneof member NULL only when its case is unset, but an
  // explicit check costs nothing and keeps every reader honest.
  const void* member = nullptr;
  switch (e.msg_case) {
    case TPURT__WIRE__ENVELOPE__MSG_HELLO: {
      member = e.hello;
      if (member && e.hello->client_nonce.len != kNonceBytes)
        return str_cat("hello with a ", e.hello->client_nonce.len, "-byte nonce (expected ",
                       kNonceBytes, ")");
      break;
    }
    case TPURT__WIRE__ENVELOPE__MSG_CHALLENGE:
      member = e.challenge;
      if (member && e.challenge->server_nonce.len != kNonceBytes)
        return str_cat("challenge with a ", e.challenge->server_nonce.len, "-byte nonce");
      break;
    case TPURT__WIRE__ENVELOPE__MSG_PROOF:
      member = e.proof;
      if (member && e.proof->hmac.len > 64) return "proof longer than 64 bytes";
      break;
    case TPURT__WIRE__ENVELOPE__MSG_WELCOME:
      member = e.welcome;
      if (member && e.welcome->server_proof.len > 64) return "server proof longer than 64 bytes";
      break;
    case TPURT__WIRE__ENVELOPE__MSG_REGISTER:
      member = e.register_;
      if (member && e.register_->task == nullptr) return "register without its task";
      break;
    case TPURT__WIRE__ENVELOPE__MSG_HEARTBEAT: member = e.heartbeat; break;
    case TPURT__WIRE__ENVELOPE__MSG_TASK_FAILURE: member = e.task_failure; break;
    case TPURT__WIRE__ENVELOPE__MSG_STEP_ABORT: member = e.step_abort; break;
    case TPURT__WIRE__ENVELOPE__MSG_REPORT_ERROR: member = e.report_error; break;
    case TPURT__WIRE__ENVELOPE__MSG_KV_SET: member = e.kv_set; break;
    case TPURT__WIRE__ENVELOPE__MSG_KV_GET: member = e.kv_get; break;
    case TPURT__WIRE__ENVELOPE__MSG_KV_DELETE: member = e.kv_delete; break;
    case TPURT__WIRE__ENVELOPE__MSG_BARRIER:
      member = e.barrier;
      if (member && e.barrier->n_tasks > 1024) return "barrier listing more than 1024 tasks";
      break;
    case TPURT__WIRE__ENVELOPE__MSG_DISCONNECT: member = e.disconnect; break;
    case TPURT__WIRE__ENVELOPE__MSG_RESPONSE: {
      member = e.response;
      if (!member) break;
      for (size_t i = 0; i < e.response->n_tasks; ++i)
        if (e.response->tasks[i] == nullptr) return "response with an empty task";
      break;
    }
    default:
      return "control message without a message";
  }
  if (member == nullptr) return str_cat(message_name(e), " message missing");
  return "";
}

void FrameReader::append(const char* data, size_t size) {
  if (start_ > 0 && start_ >= buffer_.size() / 2) {
    buffer_.erase(0, start_);
    start_ = 0;
  }
  buffer_.append(data, size);
}

int FrameReader::next(net::FrameHeader* header, std::string* payload, std::string* error) {
  size_t have = buffer_.size() - start_;
  if (have < net::kFrameHeaderBytes) return 0;
  const unsigned char* p = reinterpret_cast<const unsigned char*>(buffer_.data()) + start_;
  std::string why = net::decode_header(p, header);
  if (!why.empty()) {
    *error = why;
    return -1;
  }
  if (header->type != static_cast<uint16_t>(net::FrameType::kControl)) {
    *error = str_cat("frame type ", header->type, " on a control connection");
    return -1;
  }
  if (header->length > max_payload_) {
    *error = str_cat("control frame of ", header->length, " bytes (at most ", max_payload_,
                     " here)");
    return -1;
  }
  if (have - net::kFrameHeaderBytes < header->length) return 0;
  payload->assign(buffer_, start_ + net::kFrameHeaderBytes, header->length);
  start_ += net::kFrameHeaderBytes + header->length;
  if (start_ == buffer_.size()) {
    buffer_.clear();
    start_ = 0;
  }
  return 1;
}

std::string bytes(const ProtobufCBinaryData& data) {
  if (data.len == 0 || data.data == nullptr) return std::string();
  return std::string(reinterpret_cast<const char*>(data.data), data.len);
}

ProtobufCBinaryData binary(const std::string& s) {
  ProtobufCBinaryData b;
  b.len = s.size();
  b.data = reinterpret_cast<uint8_t*>(const_cast<char*>(s.data()));
  return b;
}

void log(const std::string& message) {
  static const bool enabled = std::getenv("TPURT_LOG") != nullptr;
  if (enabled) std::fprintf(stderr, "tpurt: %s\n", message.c_str());
}

}  // namespace wire
}  // namespace tpurt
