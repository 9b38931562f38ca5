// The wire fuzzer's entry point (tests/fuzz/fuzz_wire.cc) without libFuzzer: every
// seed in tests/fuzz/corpus/wire, then 5000 inputs made from them with a fixed seed
// (bit flips, truncations, insertions, splices, random bytes). Nothing may crash,
// hang or leak (run it under SANITIZE=address too).
//
// TPURT_WRITE_WIRE_CORPUS=DIR build/tests/test_wire_corpus writes the seed corpus
// (the valid frames of every message, and a few broken ones) to DIR and exits.
#include <dirent.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/proto_enums.h"
#include "core/status.h"
#include "net/control_wire.h"
#include "net/frame.h"

#include "fuzz/fuzz_wire.cc"

// After the C++ and library headers: cmocka defines a macro named fail().
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
extern "C" {
#include <cmocka.h>
}

#include "tpurt.h"
#include "test_util.h"

namespace {

namespace w = tpurt::wire;

const char* corpus_dir() { return TPURT_TEST_DATA_DIR "/../fuzz/corpus/wire"; }

std::string frame_of(w::Envelope& e, uint64_t seq = 1) { return w::pack_frame(seq, e); }

std::string header(uint16_t type, uint64_t length, uint32_t magic = tpurt::net::kFrameMagic) {
  tpurt::net::FrameHeader h;
  h.magic = magic;
  h.type = type;
  h.length = length;
  std::string s(tpurt::net::kFrameHeaderBytes, '\0');
  tpurt::net::encode_header(h, reinterpret_cast<unsigned char*>(&s[0]));
  return s;
}

// Every message once, as the service, agents and handshake send it.
std::vector<std::pair<std::string, std::string>> seeds() {
  std::vector<std::pair<std::string, std::string>> out;
  std::string nonce(32, 'n'), mac(32, 'm');
  w::Envelope e = TPURT__WIRE__ENVELOPE__INIT;

  Tpurt__Wire__Hello hello = TPURT__WIRE__HELLO__INIT;
  hello.version = 1;
  hello.cluster_id = const_cast<char*>("job,127.0.0.1:1");
  hello.task_id = 1;
  hello.incarnation = 99;
  hello.kind = 1;
  hello.client_nonce = w::binary(nonce);
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_HELLO;
  e.hello = &hello;
  std::string hello_frame = frame_of(e, 0);
  out.push_back({"hello", hello_frame});
  Tpurt__Wire__Proof proof = TPURT__WIRE__PROOF__INIT;
  proof.hmac = w::binary(mac);
  e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_PROOF;
  e.proof = &proof;
  out.push_back({"hello_proof", hello_frame + frame_of(e, 0)});
  Tpurt__Wire__Proof empty_proof = TPURT__WIRE__PROOF__INIT;
  e.proof = &empty_proof;
  out.push_back({"hello_empty_proof", hello_frame + frame_of(e, 0)});

  Tpurt__Wire__Challenge ch = TPURT__WIRE__CHALLENGE__INIT;
  ch.server_nonce = w::binary(nonce);
  ch.token_required = 1;
  e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_CHALLENGE;
  e.challenge = &ch;
  out.push_back({"challenge", frame_of(e, 0)});

  Tpurt__Wire__Welcome wel = TPURT__WIRE__WELCOME__INIT;
  wel.ok = 0;
  wel.code = 16;
  wel.message = const_cast<char*>("wrong token");
  e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_WELCOME;
  e.welcome = &wel;
  out.push_back({"welcome_error", frame_of(e, 0)});

  // What a listener without a token answers a dialling task: a challenge, then welcome.
  Tpurt__Wire__Challenge open_ch = TPURT__WIRE__CHALLENGE__INIT;
  open_ch.server_nonce = w::binary(nonce);
  Tpurt__Wire__Welcome ok = TPURT__WIRE__WELCOME__INIT;
  ok.ok = 1;
  e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_CHALLENGE;
  e.challenge = &open_ch;
  std::string open_challenge = frame_of(e, 0);
  e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_WELCOME;
  e.welcome = &ok;
  out.push_back({"challenge_welcome", open_challenge + frame_of(e, 0)});

  Tpurt__Wire__TaskInfo info = TPURT__WIRE__TASK_INFO__INIT;
  info.task_id = 1;
  info.hostname = const_cast<char*>("host");
  info.address = const_cast<char*>("127.0.0.1:2");
  info.num_cores = 8;
  info.incarnation = 99;
  Tpurt__Wire__Register reg = TPURT__WIRE__REGISTER__INIT;
  reg.task = &info;
  reg.timeout_ms = 1000;
  e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_REGISTER;
  e.register_ = &reg;
  std::string register_frame = frame_of(e, 1);
  out.push_back({"register", register_frame});

  Tpurt__Wire__Heartbeat hb = TPURT__WIRE__HEARTBEAT__INIT;
  hb.task_id = 1;
  hb.incarnation = 99;
  e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_HEARTBEAT;
  e.heartbeat = &hb;
  out.push_back({"register_heartbeat", register_frame + frame_of(e, 2)});

  Tpurt__Wire__TaskFailure tf = TPURT__WIRE__TASK_FAILURE__INIT;
  tf.task = 2;
  tf.code = 14;
  tf.message = const_cast<char*>("task 2 lost");
  e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_TASK_FAILURE;
  e.task_failure = &tf;
  out.push_back({"task_failure", frame_of(e, 0)});

  Tpurt__Wire__StepAbort sa = TPURT__WIRE__STEP_ABORT__INIT;
  sa.step = 7;
  sa.origin_task = 1;
  sa.origin_replica = 3;
  sa.code = 13;
  sa.message = const_cast<char*>("boom");
  e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_STEP_ABORT;
  e.step_abort = &sa;
  out.push_back({"step_abort", frame_of(e, 0)});

  Tpurt__Wire__ReportError re = TPURT__WIRE__REPORT_ERROR__INIT;
  re.code = 13;
  re.message = const_cast<char*>("failed");
  e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_REPORT_ERROR;
  e.report_error = &re;
  out.push_back({"report_error", frame_of(e, 3)});

  std::string value = "value";
  Tpurt__Wire__KvSet ks = TPURT__WIRE__KV_SET__INIT;
  ks.key = const_cast<char*>("a/b");
  ks.value = w::binary(value);
  e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_KV_SET;
  e.kv_set = &ks;
  out.push_back({"kv_set", frame_of(e, 4)});

  Tpurt__Wire__KvGet kg = TPURT__WIRE__KV_GET__INIT;
  kg.key = const_cast<char*>("//a//b/");
  kg.timeout_ms = 100;
  e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_KV_GET;
  e.kv_get = &kg;
  out.push_back({"kv_get", frame_of(e, 5)});

  Tpurt__Wire__KvDelete kd = TPURT__WIRE__KV_DELETE__INIT;
  kd.key = const_cast<char*>("a");
  e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_KV_DELETE;
  e.kv_delete = &kd;
  out.push_back({"kv_delete", frame_of(e, 6)});

  int32_t tasks[] = {0, 2, 1};
  Tpurt__Wire__Barrier b = TPURT__WIRE__BARRIER__INIT;
  b.id = const_cast<char*>("sync");
  b.timeout_ms = 500;
  b.n_tasks = 3;
  b.tasks = tasks;
  e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_BARRIER;
  e.barrier = &b;
  out.push_back({"barrier", frame_of(e, 7)});

  Tpurt__Wire__Disconnect d = TPURT__WIRE__DISCONNECT__INIT;
  d.graceful = 1;
  e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_DISCONNECT;
  e.disconnect = &d;
  out.push_back({"disconnect", frame_of(e, 8)});

  Tpurt__Wire__TaskInfo* infos[] = {&info, &info};
  Tpurt__Wire__Response r = TPURT__WIRE__RESPONSE__INIT;
  r.code = 0;
  r.value = w::binary(value);
  r.found = 1;
  r.n_tasks = 2;
  r.tasks = infos;
  e = TPURT__WIRE__ENVELOPE__INIT;
  e.msg_case = TPURT__WIRE__ENVELOPE__MSG_RESPONSE;
  e.response = &r;
  out.push_back({"response_tasks", frame_of(e, 1)});

  // Broken ones.
  e = TPURT__WIRE__ENVELOPE__INIT;
  out.push_back({"empty_envelope", frame_of(e, 1)});
  out.push_back({"truncated", register_frame.substr(0, register_frame.size() - 5)});
  out.push_back({"oversized_length", header(1, 1ull << 40)});
  out.push_back({"handshake_too_long", header(1, 5000) + std::string(100, 'x')});
  out.push_back({"bad_magic", header(1, 0, 0x12345678)});
  out.push_back({"data_frame", header(2, 4) + "abcd"});
  out.push_back({"garbage_protobuf", header(1, 8) + std::string(8, '\xff')});
  out.push_back({"short_nonce_hello", [&] {
                   std::string shorter(5, 'n');
                   hello.client_nonce = w::binary(shorter);
                   w::Envelope he = TPURT__WIRE__ENVELOPE__INIT;
                   he.msg_case = TPURT__WIRE__ENVELOPE__MSG_HELLO;
                   he.hello = &hello;
                   return frame_of(he, 0);
                 }()});
  out.push_back({"empty", ""});
  return out;
}

std::vector<std::string> read_corpus() {
  std::vector<std::string> files;
  DIR* d = opendir(corpus_dir());
  if (d == nullptr) return files;
  while (struct dirent* ent = readdir(d)) {
    if (ent->d_name[0] == '.') continue;
    std::ifstream in(std::string(corpus_dir()) + "/" + ent->d_name, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    files.push_back(ss.str());
  }
  closedir(d);
  return files;
}

void feed(const std::string& s) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

void test_wire_corpus__seeds(void** state) {
  (void)state;
  std::vector<std::string> files = read_corpus();
  CHECK(files.size() >= 10);
  for (const std::string& f : files) feed(f);
  // The valid seeds do parse: the corpus exercises the accepting paths too.
  int parsed = 0;
  for (const std::string& f : files) {
    w::FrameReader reader;
    reader.append(f.data(), f.size());
    tpurt::net::FrameHeader h;
    std::string payload, error;
    if (reader.next(&h, &payload, &error) == 1 &&
        w::parse_envelope(reinterpret_cast<const unsigned char*>(payload.data()), payload.size(), &error))
      ++parsed;
  }
  CHECK(parsed >= 10);
}

// The dialling side's seed: a listener's answer without a token completes the client
// handshake (so the fuzzer starts from the accepting path); with a token it is refused.
void test_wire_corpus__dialer_seed(void** state) {
  (void)state;
  std::ifstream in(std::string(corpus_dir()) + "/challenge_welcome", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  CHECK(!bytes.empty());
  tpurt::net::Hello me;
  me.cluster_id = "job,127.0.0.1:1";
  me.task_id = 1;
  for (const char* token : {"", "token"}) {
    int other;
    int fd = connection_from(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &other);
    CHECK(fd >= 0);
    tpu_status code = TPU_OK;
    try {
      tpurt::net::client_handshake(fd, "127.0.0.1:1", me, token, tpurt::net::now_ms() + 2000);
    } catch (const tpurt::Error& e) {
      code = e.code();
    }
    CHECK(code == (*token ? TPU_UNAUTHENTICATED : TPU_OK));
    close(fd);
    close(other);
  }
}

void test_wire_corpus__mutations(void** state) {
  (void)state;
  std::vector<std::string> files = read_corpus();
  if (files.empty()) {
    CHECK_FAIL("no corpus in %s", corpus_dir());
    return;
  }
  std::mt19937_64 rng(20261123);
  auto pick = [&](size_t n) { return n == 0 ? size_t(0) : static_cast<size_t>(rng() % n); };
  for (int i = 0; i < 5000; ++i) {
    std::string s = files[pick(files.size())];
    switch (rng() % 6) {
      case 0:  // bit flips
        for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n && !s.empty(); ++k)
          s[pick(s.size())] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:  // truncation
        s.resize(pick(s.size() + 1));
        break;
      case 2:  // random bytes inserted
        s.insert(pick(s.size() + 1), std::string(1 + rng() % 16, static_cast<char>(rng())));
        break;
      case 3:  // two seeds spliced
        s = s.substr(0, pick(s.size() + 1)) + files[pick(files.size())];
        break;
      case 4: {  // a random byte in the length field
        if (s.size() >= 56) s[48 + pick(8)] = static_cast<char>(rng());
        break;
      }
      default: {  // random bytes
        s.assign(pick(300), '\0');
        for (char& c : s) c = static_cast<char>(rng());
      }
    }
    feed(s);
  }
}

// The wire has no enum field, but each envelope's oneof case is one: protobuf-c
// writes only a member's id there, and the shared check (core/proto_enums.h, which
// parse_envelope runs) refuses anything else instead of switching on it.
void test_wire_corpus__oneof_case_is_checked(void** state) {
  (void)state;
  int checked = 0;
  for (auto& seed : seeds()) {
    w::FrameReader reader;
    reader.append(seed.second.data(), seed.second.size());
    tpurt::net::FrameHeader h;
    std::string payload, error;
    while (reader.next(&h, &payload, &error) == 1) {
      if (h.type != static_cast<uint16_t>(tpurt::net::FrameType::kControl)) continue;
      const auto* bytes = reinterpret_cast<const uint8_t*>(payload.data());
      w::EnvelopePtr e(tpurt__wire__envelope__unpack(nullptr, payload.size(), bytes));
      if (!e) continue;
      tpurt::check_proto_enums(&e->base);  // as decoded: fine
      const uint32_t bogus = 1000;
      uint32_t real;
      std::memcpy(&real, &e->msg_case, sizeof real);
      std::memcpy(&e->msg_case, &bogus, sizeof bogus);
      std::string message;
      try {
        tpurt::check_proto_enums(&e->base);
      } catch (const tpurt::Error& bad) {
        message = bad.message();
      }
      std::memcpy(&e->msg_case, &real, sizeof real);  // for free_unpacked
      CHECK(message.find("Envelope oneof case 1000 is not a field of it") != std::string::npos);
      ++checked;
    }
  }
  CHECK(checked >= 10);
}

int write_corpus(const char* dir) {
  for (auto& seed : seeds()) {
    std::ofstream out(std::string(dir) + "/" + seed.first, std::ios::binary);
    out << seed.second;
    if (!out) {
      std::fprintf(stderr, "cannot write %s/%s\n", dir, seed.first.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* dir = getenv("TPURT_WRITE_WIRE_CORPUS")) return write_corpus(dir);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_wire_corpus__seeds),
      cmocka_unit_test(test_wire_corpus__dialer_seed),
      cmocka_unit_test(test_wire_corpus__mutations),
      cmocka_unit_test(test_wire_corpus__oneof_case_is_checked),
  };
  return RUN_TESTS(argc, argv, tests, NULL, NULL);
}
