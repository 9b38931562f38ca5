// The wire's parsers under libFuzzer (make fuzz; tests/fuzz/fuzz.mk), and replayed
// without it by tests/test_wire_corpus.cc. The bytes go through the same code the
// listening ports run:
//   - as a stream on an established control connection: wire::FrameReader (header
//     bounds, reassembly across reads) and wire::parse_envelope (unpack + the
//     fields each message needs), exactly as wire::ControlConnection calls them;
//     every accepted envelope must survive a pack and re-parse;
//   - as what a connecting peer sends a listener: net::accept_handshake on one end
//     of a socketpair (with and without a token), which must end with an error or
//     a Hello, never a crash or a wait past its deadline;
//   - as what a listener answers a dialling task: net::client_handshake (dial's
//     side: Challenge, then Welcome), likewise.
// Data frames share the header (net::decode_header, which FrameReader calls with
// every type); their payload is raw bytes.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/status.h"
#include "net/control_wire.h"
#include "net/handshake.h"

namespace {

void drain(tpurt::wire::FrameReader* reader) {
  for (int frames = 0; frames < 10000; ++frames) {
    tpurt::net::FrameHeader h;
    std::string payload, error;
    int got = reader->next(&h, &payload, &error);
    if (got <= 0) return;
    tpurt::wire::EnvelopePtr e = tpurt::wire::parse_envelope(
        reinterpret_cast<const unsigned char*>(payload.data()), payload.size(), &error);
    if (!e) continue;  // the connection would close here
    // What was accepted packs into a valid frame header. (Re-parsing it may fail:
    // protobuf-c keeps unknown fields it cannot always read back once re-packed,
    // which is why the service rebuilds what it forwards instead of re-packing.)
    std::string frame = tpurt::wire::pack_frame(h.seq, *e);
    tpurt::net::FrameHeader h2;
    if (!tpurt::net::decode_header(reinterpret_cast<const unsigned char*>(frame.data()), &h2).empty())
      std::abort();
    tpurt::wire::EnvelopePtr again = tpurt::wire::parse_envelope(
        reinterpret_cast<const unsigned char*>(frame.data()) + tpurt::net::kFrameHeaderBytes,
        frame.size() - tpurt::net::kFrameHeaderBytes, &error);
    (void)again;
  }
}

// One end of a socketpair on which the other end has sent all of data, then its end
// of the stream: nothing can wait for more. *other is the other end.
int connection_from(const uint8_t* data, size_t size, int* other) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
  size_t done = 0;
  while (done < size) {
    ssize_t n = send(sv[1], data + done, size - done, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  shutdown(sv[1], SHUT_WR);
  *other = sv[1];
  return sv[0];
}

// The bytes as what a connecting peer sends a listener.
void as_handshake(const uint8_t* data, size_t size, const std::string& token) {
  int other;
  int fd = connection_from(data, size, &other);
  if (fd < 0) return;
  try {
    tpurt::net::accept_handshake(fd, "job,127.0.0.1:1", token, tpurt::net::now_ms() + 2000);
  } catch (const tpurt::Error&) {
    // Rejected: the listener closes this connection.
  }
  close(fd);
  close(other);
}

// The bytes as what a listener answers a dialling task (its Challenge, then its
// Welcome), on a non-blocking socket as dial's.
void as_dialer(const uint8_t* data, size_t size, const std::string& token) {
  int other;
  int fd = connection_from(data, size, &other);
  if (fd < 0) return;
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK);
  tpurt::net::Hello me;
  me.cluster_id = "job,127.0.0.1:1";
  me.task_id = 1;
  me.incarnation = 7;
  try {
    tpurt::net::client_handshake(fd, "127.0.0.1:1", me, token, tpurt::net::now_ms() + 2000);
  } catch (const tpurt::Error&) {
    // Rejected, or the server closed first: dial closes (or retries) the connection.
  }
  close(fd);
  close(other);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Split the stream where the first byte says, as two reads would.
  tpurt::wire::FrameReader reader;
  size_t split = size > 0 ? data[0] % (size + 1) : 0;
  reader.append(reinterpret_cast<const char*>(data), split);
  drain(&reader);
  reader.append(reinterpret_cast<const char*>(data) + split, size - split);
  drain(&reader);
  if (size <= 64 * 1024) {
    as_handshake(data, size, (size & 1) ? "token" : "");
    as_dialer(data, size, "");
    as_dialer(data, size, "token");
  }
  return 0;
}
