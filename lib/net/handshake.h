// Opening a connection between two tasks of a cluster: a HELLO (wire version,
// cluster id, task, incarnation, what the connection is for), then, when the
// cluster has a token, a challenge-response with HMAC-SHA256 (OpenSSL libcrypto)
// in both directions; the token itself never crosses the wire. Both sides of the
// handshake are bounded in time and in every length they read.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace tpurt {
namespace net {

enum class ConnectionKind : int32_t {
  kCoordination = 1,  // a task's agent to the coordination service in task 0
  kData = 2,          // the data plane between two tasks (collectives)
};

struct Hello {
  std::string cluster_id;   // the same on every task of one cluster (job and addresses)
  int32_t task_id = -1;     // the dialling task
  uint64_t incarnation = 0; // random per process start: a restarted task is recognised
  ConnectionKind kind = ConnectionKind::kData;
};

// Connects to host:port and completes the client side of the handshake. Retries a
// refused or unreachable address with jittered exponential backoff until
// deadline_ms (CLOCK_MONOTONIC, ms). Returns a connected blocking socket the caller
// owns (TCP_NODELAY set). Throws TPU_UNAUTHENTICATED (token mismatch, or the server
// wants one and we have none, or the reverse), TPU_INVALID_ARGUMENT (another
// cluster, a malformed address), TPU_DEADLINE_EXCEEDED naming the address.
int dial(const std::string& address, const Hello& me, const std::string& token,
         int64_t deadline_ms);

// dial's side of the handshake on a connected socket (tests/fuzz/fuzz_wire.cc calls
// it directly to give it the server's bytes). Throws as dial does, and PeerClosed
// (a tpurt::Error, which dial retries) when the socket ends before the server's
// answer or the server refuses with TPU_UNAVAILABLE (it cannot take the connection
// now: a coordination service going away with the system it served).
void client_handshake(int fd, const std::string& address, const Hello& me,
                      const std::string& token, int64_t deadline_ms);

// What a listener says of a peer's Hello before it takes the connection: "" takes it;
// anything else refuses it for now (TPU_UNAVAILABLE with that message), and the dialler
// retries until its deadline. Called on the handshake's thread.
using RefuseFn = std::function<std::string(const Hello&)>;

// The server side, on a freshly accepted socket (blocking or not): reads the HELLO,
// checks the cluster id (and asks refuse, if given), then the token's proof, answers.
// Returns the peer's Hello. Throws (the caller closes the socket) with the same codes
// as dial.
Hello accept_handshake(int fd, const std::string& cluster_id, const std::string& token,
                       int64_t deadline_ms, const RefuseFn& refuse = nullptr);

// Milliseconds on CLOCK_MONOTONIC.
int64_t now_ms();

// "host:port" or "[v6]:port" split in two; TPU_INVALID_ARGUMENT naming the address
// when either part is missing or the port is not a number in 1..65535 (0 is
// allowed when allow_zero_port, for a listener that takes any port).
void split_host_port(const std::string& address, std::string* host, std::string* port,
                     bool allow_zero_port = false);

}  // namespace net
}  // namespace tpurt
