#include "net/handshake.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <thread>

#include "core/status.h"
#include "net/control_wire.h"

namespace tpurt {
namespace net {
namespace {

using wire::EnvelopePtr;

// The peer closed or reset the connection before the handshake finished: dial
// retries these (a listener at its handshake cap closes at once).
struct PeerClosed : Error {
  explicit PeerClosed(std::string m) : Error(TPU_UNAVAILABLE, std::move(m)) {}
};

std::string random_bytes(size_t n) {
  std::string s(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&s[0]), static_cast<int>(n)) != 1)
    fail(TPU_INTERNAL, "RAND_bytes failed: no randomness for the handshake's nonce");
  return s;
}

std::string hmac(const std::string& token, const std::string& message) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), out,
           &len) == nullptr)
    fail(TPU_INTERNAL, "HMAC-SHA256 failed");
  return std::string(reinterpret_cast<char*>(out), len);
}

std::string le32(int32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>(static_cast<uint32_t>(v) >> (8 * i));
  return s;
}

std::string client_proof(const std::string& token, const std::string& server_nonce,
                         const std::string& client_nonce, int32_t task) {
  return hmac(token, "tpurt-client" + server_nonce + client_nonce + le32(task));
}

std::string server_proof(const std::string& token, const std::string& client_nonce,
                         const std::string& server_nonce) {
  return hmac(token, "tpurt-server" + client_nonce + server_nonce);
}

bool equal_secret(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

// Waits for `events` on fd until deadline_ms; false on timeout.
bool wait_fd(int fd, short events, int64_t deadline_ms) {
  for (;;) {
    int64_t left = deadline_ms - now_ms();
    if (left <= 0) return false;
    struct pollfd p = {fd, events, 0};
    int r = poll(&p, 1, static_cast<int>(left > 1000 ? 1000 : left));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return true;  // the read or write names the error
  }
}

void write_all(int fd, const std::string& data, int64_t deadline_ms, const std::string& peer) {
  size_t done = 0;
  while (done < data.size()) {
    if (!wait_fd(fd, POLLOUT, deadline_ms))
      fail(TPU_DEADLINE_EXCEEDED, "handshake with ", peer, ": timed out writing");
    ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      throw PeerClosed(str_cat("handshake with ", peer, ": ", std::strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
}

void read_exact(int fd, unsigned char* out, size_t size, int64_t deadline_ms,
                const std::string& peer) {
  size_t done = 0;
  while (done < size) {
    if (!wait_fd(fd, POLLIN, deadline_ms))
      fail(TPU_DEADLINE_EXCEEDED, "handshake with ", peer, " did not complete in time");
    ssize_t n = recv(fd, out + done, size - done, MSG_DONTWAIT);
    if (n == 0) throw PeerClosed(str_cat("handshake with ", peer, ": connection closed"));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      throw PeerClosed(str_cat("handshake with ", peer, ": ", std::strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
}

void send_message(int fd, const wire::Envelope& e, int64_t deadline_ms, const std::string& peer) {
  write_all(fd, wire::pack_frame(0, e), deadline_ms, peer);
}

// One handshake frame: the header's bounds, at most kMaxHandshakeBytes, then the
// envelope and its fields (wire::parse_envelope).
EnvelopePtr read_message(int fd, int64_t deadline_ms, const std::string& peer) {
  unsigned char head[kFrameHeaderBytes];
  read_exact(fd, head, sizeof head, deadline_ms, peer);
  FrameHeader h;
  std::string why = decode_header(head, &h);
  if (why.empty() && h.type != static_cast<uint16_t>(FrameType::kControl))
    why = str_cat("frame type ", h.type, " during the handshake");
  if (why.empty() && h.length > wire::kMaxHandshakeBytes)
    why = str_cat("handshake frame of ", h.length, " bytes (at most ", wire::kMaxHandshakeBytes,
                  ")");
  if (!why.empty()) fail(TPU_INVALID_ARGUMENT, "handshake with ", peer, ": ", why);
  std::string payload(h.length, '\0');
  read_exact(fd, reinterpret_cast<unsigned char*>(&payload[0]), payload.size(), deadline_ms, peer);
  EnvelopePtr e = wire::parse_envelope(reinterpret_cast<const unsigned char*>(payload.data()),
                                       payload.size(), &why);
  if (!e) fail(TPU_INVALID_ARGUMENT, "handshake with ", peer, ": ", why);
  return e;
}

void send_welcome_error(int fd, tpu_status code, const std::string& message, int64_t deadline_ms,
                        const std::string& peer) {
  Tpurt__Wire__Welcome w = TPURT__WIRE__WELCOME__INIT;
  w.ok = 0;
  w.code = code;
  w.message = const_cast<char*>(message.c_str());
  wire::Envelope e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_WELCOME;
  e.welcome = &w;
  try {
    send_message(fd, e, deadline_ms, peer);
  } catch (const Error&) {
    // The peer is gone; the caller throws the reason all the same.
  }
}

[[noreturn]] void reject(int fd, tpu_status code, const std::string& message, int64_t deadline_ms,
                         const std::string& peer) {
  send_welcome_error(fd, code, message, deadline_ms, peer);
  fail(code, message);
}

tpu_status status_from_wire(int32_t code) {
  tpu_status s = static_cast<tpu_status>(code);
  return is_status(s) && s != TPU_OK ? s : TPU_UNAVAILABLE;
}

}  // namespace

void client_handshake(int fd, const std::string& address, const Hello& me,
                      const std::string& token, int64_t deadline_ms) {
  std::string client_nonce = random_bytes(wire::kNonceBytes);
  Tpurt__Wire__Hello hello = TPURT__WIRE__HELLO__INIT;
  hello.version = kWireVersion;
  hello.cluster_id = const_cast<char*>(me.cluster_id.c_str());
  hello.task_id = me.task_id;
  hello.incarnation = me.incarnation;
  hello.kind = static_cast<int32_t>(me.kind);
  hello.client_nonce = wire::binary(client_nonce);
  wire::Envelope e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_HELLO;
  e.hello = &hello;
  send_message(fd, e, deadline_ms, address);

  EnvelopePtr answer = read_message(fd, deadline_ms, address);
  if (answer->msg_case == TPURT__WIRE__ENVELOPE__MSG_WELCOME && !answer->welcome->ok) {
    // Not now (a service going away with its system): dial tries again.
    if (answer->welcome->code == TPU_UNAVAILABLE)
      throw PeerClosed(str_cat("handshake with ", address, ": ", answer->welcome->message));
    fail(status_from_wire(answer->welcome->code), answer->welcome->message);
  }
  if (answer->msg_case != TPURT__WIRE__ENVELOPE__MSG_CHALLENGE)
    fail(TPU_UNAVAILABLE, "handshake with ", address, ": expected a challenge, got ",
         wire::message_name(*answer));
  std::string server_nonce = wire::bytes(answer->challenge->server_nonce);
  bool required = answer->challenge->token_required;

  // Without a shared secret on both sides the proof is empty or unverifiable: the
  // server rejects it too, so that both sides report the mismatch.
  std::string proof = token.empty() ? std::string()
                                    : client_proof(token, server_nonce, client_nonce, me.task_id);
  Tpurt__Wire__Proof p = TPURT__WIRE__PROOF__INIT;
  p.hmac = wire::binary(proof);
  wire::Envelope pe = TPURT__WIRE__ENVELOPE__INIT;
  pe.msg_case = TPURT__WIRE__ENVELOPE__MSG_PROOF;
  pe.proof = &p;
  send_message(fd, pe, deadline_ms, address);
  if (required && token.empty())
    fail(TPU_UNAUTHENTICATED, "the cluster at ", address,
         " requires a token and task ", me.task_id, " has none");
  if (!required && !token.empty())
    fail(TPU_UNAUTHENTICATED, "task ", me.task_id, " has a cluster token but the task at ",
         address, " has none");

  EnvelopePtr welcome = read_message(fd, deadline_ms, address);
  if (welcome->msg_case != TPURT__WIRE__ENVELOPE__MSG_WELCOME)
    fail(TPU_UNAVAILABLE, "handshake with ", address, ": expected a welcome, got ",
         wire::message_name(*welcome));
  if (!welcome->welcome->ok) fail(status_from_wire(welcome->welcome->code), welcome->welcome->message);
  std::string expected = token.empty() ? std::string()
                                       : server_proof(token, client_nonce, server_nonce);
  if (!equal_secret(expected, wire::bytes(welcome->welcome->server_proof)))
    fail(TPU_UNAUTHENTICATED, "the task at ", address,
         " could not prove it holds the cluster token (wrong token)");
}

namespace {

int connect_once(const struct addrinfo* ai, int64_t deadline_ms, int* err) {
  int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
  if (fd < 0) {
    *err = errno;
    return -1;
  }
  int r = connect(fd, ai->ai_addr, ai->ai_addrlen);
  if (r < 0 && errno != EINPROGRESS) {
    *err = errno;
    close(fd);
    return -1;
  }
  if (r < 0) {
    if (!wait_fd(fd, POLLOUT, deadline_ms)) {
      *err = ETIMEDOUT;
      close(fd);
      return -1;
    }
    int so = 0;
    socklen_t len = sizeof so;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &len);
    if (so != 0) {
      *err = so;
      close(fd);
      return -1;
    }
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

bool retryable(int err) {
  return err == ECONNREFUSED || err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH ||
         err == ECONNRESET || err == EADDRNOTAVAIL || err == EAGAIN || err == EINTR;
}

}  // namespace

int64_t now_ms() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

void split_host_port(const std::string& address, std::string* host, std::string* port,
                     bool allow_zero_port) {
  size_t colon;
  if (!address.empty() && address[0] == '[') {
    size_t close_bracket = address.find(']');
    if (close_bracket == std::string::npos || close_bracket + 1 >= address.size() ||
        address[close_bracket + 1] != ':')
      invalid_argument("address '", address, "' is not [host]:port");
    *host = address.substr(1, close_bracket - 1);
    colon = close_bracket + 1;
  } else {
    colon = address.rfind(':');
    if (colon == std::string::npos) invalid_argument("address '", address, "' has no :port");
    *host = address.substr(0, colon);
    if (host->find(':') != std::string::npos)
      invalid_argument("address '", address, "': write an IPv6 host as [host]:port");
  }
  *port = address.substr(colon + 1);
  if (host->empty()) invalid_argument("address '", address, "' has no host");
  bool digits = !port->empty() && port->size() <= 5;
  for (char c : *port) digits = digits && c >= '0' && c <= '9';
  long n = digits ? std::strtol(port->c_str(), nullptr, 10) : -1;
  if (!digits || n > 65535 || (n == 0 && !allow_zero_port))
    invalid_argument("address '", address, "': port '", *port, "' is not in 1..65535");
}

int dial(const std::string& address, const Hello& me, const std::string& token,
         int64_t deadline_ms) {
  std::string host, port;
  split_host_port(address, &host, &port);
  std::mt19937_64 rng(std::random_device{}());
  int64_t backoff = 10;
  std::string last = "no attempt";
  for (;;) {
    struct addrinfo hints;
    std::memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    struct addrinfo* list = nullptr;
    int g = getaddrinfo(host.c_str(), port.c_str(), &hints, &list);
    if (g != 0) {
      last = str_cat("cannot resolve '", host, "': ", gai_strerror(g));
    } else {
      for (struct addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
        int err = 0;
        int fd = connect_once(ai, deadline_ms, &err);
        if (fd < 0) {
          last = std::strerror(err);
          if (!retryable(err)) {
            freeaddrinfo(list);
            fail(TPU_UNAVAILABLE, "cannot connect to ", address, ": ", last);
          }
          continue;
        }
        try {
          client_handshake(fd, address, me, token, deadline_ms);
        } catch (const PeerClosed& e) {
          last = e.message();
          close(fd);
          continue;
        } catch (...) {
          close(fd);
          freeaddrinfo(list);
          throw;
        }
        freeaddrinfo(list);
        int flags = fcntl(fd, F_GETFL, 0);
        fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
        return fd;
      }
      freeaddrinfo(list);
    }
    int64_t left = deadline_ms - now_ms();
    if (left <= 0)
      fail(TPU_DEADLINE_EXCEEDED, "could not connect to ", address, " in time: ", last);
    // Jittered exponential backoff: 10 ms doubling to 1 s, each +-50%.
    std::uniform_real_distribution<double> jitter(0.5, 1.5);
    int64_t sleep = static_cast<int64_t>(static_cast<double>(backoff) * jitter(rng));
    if (sleep > left) sleep = left;
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep));
    backoff = backoff * 2 > 1000 ? 1000 : backoff * 2;
  }
}

Hello accept_handshake(int fd, const std::string& cluster_id, const std::string& token,
                       int64_t deadline_ms, const RefuseFn& refuse) {
  const std::string peer = "a connecting task";
  EnvelopePtr first = read_message(fd, deadline_ms, peer);
  if (first->msg_case != TPURT__WIRE__ENVELOPE__MSG_HELLO)
    fail(TPU_INVALID_ARGUMENT, "handshake: expected a hello, got ", wire::message_name(*first));
  const Tpurt__Wire__Hello& h = *first->hello;
  Hello hello;
  hello.cluster_id = h.cluster_id;
  hello.task_id = h.task_id;
  hello.incarnation = h.incarnation;
  hello.kind = static_cast<ConnectionKind>(h.kind);
  std::string client_nonce = wire::bytes(h.client_nonce);
  if (h.version != kWireVersion)
    reject(fd, TPU_INVALID_ARGUMENT,
           str_cat("task ", h.task_id, " speaks wire version ", h.version, ", this one ",
                   kWireVersion),
           deadline_ms, peer);
  if (hello.cluster_id != cluster_id)
    reject(fd, TPU_INVALID_ARGUMENT,
           str_cat("task ", h.task_id, " belongs to cluster ", hello.cluster_id,
                   ", this one is ", cluster_id),
           deadline_ms, peer);
  if (hello.kind != ConnectionKind::kCoordination && hello.kind != ConnectionKind::kData)
    reject(fd, TPU_INVALID_ARGUMENT, str_cat("task ", h.task_id, ": unknown connection kind ", h.kind),
           deadline_ms, peer);
  if (refuse) {
    std::string why = refuse(hello);
    if (!why.empty()) reject(fd, TPU_UNAVAILABLE, why, deadline_ms, peer);
  }

  std::string server_nonce = random_bytes(wire::kNonceBytes);
  Tpurt__Wire__Challenge c = TPURT__WIRE__CHALLENGE__INIT;
  c.server_nonce = wire::binary(server_nonce);
  c.token_required = !token.empty();
  wire::Envelope ce = TPURT__WIRE__ENVELOPE__INIT;
  ce.msg_case = TPURT__WIRE__ENVELOPE__MSG_CHALLENGE;
  ce.challenge = &c;
  send_message(fd, ce, deadline_ms, peer);

  EnvelopePtr second = read_message(fd, deadline_ms, peer);
  if (second->msg_case != TPURT__WIRE__ENVELOPE__MSG_PROOF)
    fail(TPU_INVALID_ARGUMENT, "handshake: expected a proof, got ", wire::message_name(*second));
  std::string proof = wire::bytes(second->proof->hmac);
  if (token.empty() && !proof.empty())
    reject(fd, TPU_UNAUTHENTICATED,
           str_cat("task ", hello.task_id, " has a cluster token but this task has none"),
           deadline_ms, peer);
  if (!token.empty()) {
    std::string expected = client_proof(token, server_nonce, client_nonce, hello.task_id);
    if (proof.empty())
      reject(fd, TPU_UNAUTHENTICATED,
             str_cat("task ", hello.task_id, " has no cluster token; this cluster requires one"),
             deadline_ms, peer);
    if (!equal_secret(expected, proof))
      reject(fd, TPU_UNAUTHENTICATED,
             str_cat("task ", hello.task_id, " presented a wrong cluster token"), deadline_ms, peer);
  }

  std::string mine = token.empty() ? std::string() : server_proof(token, client_nonce, server_nonce);
  Tpurt__Wire__Welcome w = TPURT__WIRE__WELCOME__INIT;
  w.ok = 1;
  w.server_proof = wire::binary(mine);
  wire::Envelope we = TPURT__WIRE__ENVELOPE__INIT;
  we.msg_case = TPURT__WIRE__ENVELOPE__MSG_WELCOME;
  we.welcome = &w;
  send_message(fd, we, deadline_ms, peer);
  return hello;
}

}  // namespace net
}  // namespace tpurt
