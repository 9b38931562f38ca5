#include "collectives/rendezvous.h"

#include <cstring>
#include <sstream>

#include "core/dtype.h"
#include "core/tensor.h"
#include "trace/trace.h"

namespace tpurt {

const char* kind_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllToAll: return "all_to_all";
    case CollectiveKind::kCollectivePermute: return "collective_permute";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kBarrier: return "barrier";
  }
  return "unknown";
}

bool Descriptor::operator==(const Descriptor& o) const {
  if (kind != o.kind || op != o.op || dtype != o.dtype || rank != o.rank ||
      bf16_wire != o.bf16_wire || num_groups != o.num_groups || group_size != o.group_size ||
      groups_hash != o.groups_hash)
    return false;
  for (int i = 0; i < 3; ++i)
    if (params[i] != o.params[i]) return false;
  for (int i = 0; i < rank; ++i)
    if (dims[i] != o.dims[i]) return false;
  return true;
}

std::string Descriptor::describe() const {
  std::ostringstream os;
  os << kind_name(kind);
  if (kind == CollectiveKind::kBarrier) return os.str();
  os << ' ' << dtype_name(static_cast<tpu_dtype>(dtype)) << shape_string(dims, rank);
  switch (kind) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kReduceScatter: {
      static const char* ops[] = {"sum", "prod", "min", "max", "mean"};
      os << " op=" << (op >= 0 && op < 5 ? ops[op] : "?");
      if (kind == CollectiveKind::kReduceScatter) os << " axis=" << params[0];
      if (bf16_wire) os << " bfloat16_scope";
      break;
    }
    case CollectiveKind::kAllGather: os << " axis=" << params[0]; break;
    case CollectiveKind::kAllToAll:
      os << " split_dimension=" << params[0] << " concat_dimension=" << params[1]
         << " split_count=" << params[2];
      break;
    case CollectiveKind::kBroadcast: os << " root=" << params[0]; break;
    default: break;
  }
  if (kind == CollectiveKind::kCollectivePermute)
    os << " pairs=" << num_groups << " (hash " << std::hex << groups_hash << std::dec << ')';
  else if (group_size == TPU_GROUP_SIZE_RAGGED)
    os << " groups=" << num_groups << "xragged (hash " << std::hex << groups_hash << std::dec << ')';
  else
    os << " groups=" << num_groups << 'x' << group_size << " (hash " << std::hex << groups_hash
       << std::dec << ')';
  return os.str();
}

uint64_t Descriptor::digest() const {
  // Every field in a lane of its own, multiplied by its own odd constant (the products
  // are independent, so they overlap: this runs on every collective), then one mix.
  auto word = [](int32_t hi, int32_t lo) { return (uint64_t(uint32_t(hi)) << 32) | uint32_t(lo); };
  uint64_t h = word(static_cast<int32_t>(kind), op) * 0x9e3779b97f4a7c15ull ^
               word(dtype, rank) * 0xc2b2ae3d27d4eb4full ^
               word(params[0], params[1]) * 0x165667b19e3779f9ull ^
               word(params[2], bf16_wire) * 0xd6e8feb86659fd93ull ^
               word(num_groups, group_size) * 0xff51afd7ed558ccdull ^
               groups_hash * 0xc4ceb9fe1a85ec53ull;
  for (int i = 0; i < rank; ++i)
    h ^= static_cast<uint64_t>(dims[i]) * (0x9fb21c651e98df25ull + 2 * static_cast<uint64_t>(i));
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

Rendezvous::Rendezvous(int size, int64_t timeout_ms, int num_cpus, int cores_per_replica)
    : size_(size),
      cores_per_replica_(cores_per_replica),
      timeout_ms_(timeout_ms),
      policy_(SpinPolicy::for_threads(size, num_cpus)),
      slots_(new Slot[size]),
      next_cpu_mate_(size, -1),
      first_on_cpu_(kMaxCpuIds, -1),
      last_on_cpu_(kMaxCpuIds, -1) {
  for (int r = 0; r < size; ++r) slots_[r].parked.reserve(1);
  claims_[0].reset(new ClaimCounter[size]);
  claims_[1].reset(new ClaimCounter[size]);
}

Rendezvous::~Rendezvous() { release_parked(); }

void Rendezvous::park(int rank, tpu_tensor* output) noexcept {
  try {
    slots_[rank].parked.push_back(output);  // capacity reserved: one failure per step
  } catch (...) {
    // Leaking the output beats freeing it under a writer.
  }
}

void Rendezvous::release_parked() {
  for (int r = 0; r < size_; ++r) {
    for (tpu_tensor* t : slots_[r].parked) release(t);
    slots_[r].parked.clear();
  }
}

void Rendezvous::reset(const int* cpu_of_rank) {
  release_parked();
  auto cpu = [&](int r) {
    int c = cpu_of_rank ? cpu_of_rank[r] : -1;
    return c >= 0 && c < kMaxCpuIds ? c : -1;
  };
  for (int r = 0; r < size_; ++r) {
    next_cpu_mate_[r] = -1;
    int c = cpu(r);
    if (c < 0) continue;
    if (last_on_cpu_[c] >= 0) next_cpu_mate_[last_on_cpu_[c]] = r;
    else first_on_cpu_[c] = r;
    last_on_cpu_[c] = r;
  }
  for (int r = 0; r < size_; ++r) {
    int c = cpu(r);
    if (c < 0 || last_on_cpu_[c] != r) continue;
    next_cpu_mate_[r] = first_on_cpu_[c];  // close the cycle
    first_on_cpu_[c] = last_on_cpu_[c] = -1;
  }
  for (int r = 0; r < size_; ++r) {
    slots_[r].call_timeout_ms = 0;
    slots_[r].line[0].seq.store(0, std::memory_order_relaxed);
    slots_[r].line[1].seq.store(0, std::memory_order_relaxed);
    slots_[r].finished.store(0, std::memory_order_relaxed);
    slots_[r].departed.store(false, std::memory_order_relaxed);
    slots_[r].next_seq = 0;
    claims_[0][r].next.store(0, std::memory_order_relaxed);
    claims_[1][r].next.store(0, std::memory_order_relaxed);
  }
  std::lock_guard<std::mutex> lock(failure_mu_);
  failure_code_ = TPU_OK;
  failure_origin_ = -1;
  failure_message_.clear();
  failure_to_others_.clear();
  origin_code_ = TPU_OK;
  origin_message_.clear();
  mismatch_seq_.store(0, std::memory_order_relaxed);
  failed_.store(false, std::memory_order_seq_cst);
}

void Rendezvous::abort(int replica, tpu_status code, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(failure_mu_);
    if (failed_.load(std::memory_order_relaxed)) return;
    failure_code_ = TPU_ABORTED;
    failure_origin_ = replica;
    failure_message_ = replica >= 0
                           ? str_cat(participant_name(replica, cores_per_replica_), " failed (",
                                     status_name(code), "): ", message)
                           : str_cat("step aborted (", status_name(code), "): ", message);
    // Everyone, the replica too (it has returned: its own error is the step's).
    failure_to_others_ = failure_message_;
    origin_code_ = failure_code_;
    origin_message_ = failure_message_;
    failed_.store(true, std::memory_order_seq_cst);
  }
  wake_.wake();
}

// Under failure_mu_: the step's failure ("replica R: raw"), what R's own collectives
// give it (raw), and what the others' give them ("replica R failed (CODE): raw").
void Rendezvous::set_failure_locked(tpu_status code, int origin, const std::string& raw) {
  const std::string who = origin >= 0 ? participant_name(origin, cores_per_replica_) : std::string();
  failure_code_ = code;
  failure_origin_ = origin;
  failure_message_ = origin >= 0 ? str_cat(who, ": ", raw) : raw;
  failure_to_others_ = origin >= 0 ? str_cat(who, " failed (", status_name(code), "): ", raw) : raw;
  origin_code_ = code;
  origin_message_ = raw;
  failed_.store(true, std::memory_order_seq_cst);
}

void Rendezvous::poison(tpu_status code, const std::string& message, int origin) {
  {
    std::lock_guard<std::mutex> lock(failure_mu_);
    if (failed_.load(std::memory_order_relaxed)) return;
    set_failure_locked(code, origin, message);
  }
  wake_.wake();
}

void Rendezvous::overrule(tpu_status code, const std::string& message, int origin) {
  {
    std::lock_guard<std::mutex> lock(failure_mu_);
    // Worded as the step reports it ("replica R: ..."): worded again as poison does.
    const std::string prefix = origin >= 0 ? str_cat(participant_name(origin, cores_per_replica_), ": ") : "";
    if (!prefix.empty() && message.compare(0, prefix.size(), prefix) == 0) {
      set_failure_locked(code, origin, message.substr(prefix.size()));
    } else {
      set_failure_locked(code, -1, message);
      failure_origin_ = origin;
    }
  }
  wake_.wake();
}

void Rendezvous::poison_and_throw(tpu_status code, const std::string& message) {
  poison(code, message);
  throw Error(code, message);
}

bool Rendezvous::failure(int* origin, tpu_status* code, std::string* message) {
  std::lock_guard<std::mutex> lock(failure_mu_);
  if (!failed_.load(std::memory_order_relaxed)) return false;
  *origin = failure_origin_;
  *code = failure_code_;
  *message = failure_message_;
  return true;
}

bool Rendezvous::failure_for(int rank, tpu_status* code, std::string* message) {
  std::lock_guard<std::mutex> lock(failure_mu_);
  if (!failed_.load(std::memory_order_relaxed)) return false;
  if (rank >= 0 && failure_origin_ >= 0 && id(rank) == failure_origin_) {
    *code = origin_code_;
    *message = origin_message_;
  } else {
    *code = failure_code_;
    *message = failure_to_others_;
  }
  return true;
}

void Rendezvous::throw_failure(int rank) {
  tpu_status code;
  std::string message;
  if (!failure_for(rank, &code, &message)) fail(TPU_INTERNAL, "no failure to report");
  throw Error(code, message);
}

void Rendezvous::depart(int rank) {
  slots_[rank].departed.store(true, std::memory_order_seq_cst);
  wake_.wake();
}

Record& Rendezvous::begin(int rank, uint64_t* seq) {
  Slot& s = slots_[rank];
  *seq = ++s.next_seq;
  return s.rec[*seq & 1];
}

std::string Rendezvous::missing_list(uint64_t seq, Phase phase) const {
  std::ostringstream os;
  int n = 0;
  for (int r = 0; r < size_; ++r) {
    const Slot& s = slots_[r];
    uint64_t v = (phase == Phase::kArrive ? s.line[seq & 1].seq : s.finished).load(std::memory_order_seq_cst);
    if (v < seq) os << (n++ ? ", " : "") << (cores_per_replica_ > 1 ? name(r) : std::to_string(id(r)));
  }
  return os.str();
}

bool Rendezvous::cpu_mates_arrived(int rank, uint64_t seq, Phase phase) const {
  if (next_cpu_mate_[rank] < 0 || policy_.spin_ns > 0) return false;  // unknown; spinning already
  for (int q = next_cpu_mate_[rank]; q != rank; q = next_cpu_mate_[q]) {
    const Slot& s = slots_[q];
    const std::atomic<uint64_t>& field = phase == Phase::kArrive ? s.line[seq & 1].seq : s.finished;
    if (field.load(std::memory_order_relaxed) < seq) return false;
  }
  return true;
}

void Rendezvous::wait_all(int rank, uint64_t seq, Phase phase, int64_t bound_ms) {
  const int64_t call_ms = slots_[rank].call_timeout_ms;
  const int64_t timeout_ms = bound_ms > 0 ? bound_ms : call_ms > 0 ? call_ms : timeout_ms_;
  Deadline deadline(timeout_ms);  // shared by the peers: the whole wait is bounded
  for (int r = 0; r < size_; ++r) {
    if (r == rank) continue;
    Slot& s = slots_[r];
    std::atomic<uint64_t>& field = phase == Phase::kArrive ? s.line[seq & 1].seq : s.finished;
    auto ready = [&] { return field.load(std::memory_order_seq_cst) >= seq; };
    auto stop = [&] {
      return failed_.load(std::memory_order_relaxed) || s.departed.load(std::memory_order_relaxed);
    };
    auto spin_instead = [&] { return cpu_mates_arrived(rank, seq, phase); };
    WaitResult res = wait_until(wake_, policy_, deadline, ready, stop, spin_instead);
    if (res == WaitResult::kReady) continue;
    if (failed_.load(std::memory_order_seq_cst)) throw_failure(rank);
    if (res == WaitResult::kStopped) {
      if (ready()) continue;  // arrived, then departed
      poison_and_throw(TPU_FAILED_PRECONDITION,
                       str_cat(name(r), " finished its computation without joining collective #",
                               seq, " (", record(rank, seq).desc.describe(), ") that ", name(rank),
                               " is in"));
    }
    poison_and_throw(TPU_DEADLINE_EXCEEDED,
                     str_cat("collective #", seq, " (", record(rank, seq).desc.describe(), ") timed out after ",
                             timeout_ms, " ms waiting for ", cores_per_replica_ > 1 ? "" : "replicas ", "[",
                             missing_list(seq, phase), "]"));
  }
}

void Rendezvous::arrive_and_check(int rank, uint64_t seq) {
  trace::WaitSpan waiting;  // for the others to arrive
  if (failed_.load(std::memory_order_acquire)) throw_failure(rank);
  if (size_ == 1) {  // nobody to meet or wake: a task with one replica of a cluster
    Line& line = slots_[rank].line[seq & 1];
    line.digest = record(rank, seq).desc.digest();
    line.seq.store(seq, std::memory_order_release);
    return;
  }
  if (rank == 0)
    for (int r = 0; r < size_; ++r) claims_[(seq + 1) & 1][r].next.store(0, std::memory_order_relaxed);
  Line& line = slots_[rank].line[seq & 1];
  const uint64_t digest = record(rank, seq).desc.digest();
  line.digest = digest;
  line.seq.store(seq, std::memory_order_seq_cst);
  wake_.wake();
  wait_all(rank, seq, Phase::kArrive);
  for (int r = 0; r < size_; ++r)
    if (slots_[r].line[seq & 1].digest != digest) report_mismatch(seq);
}

std::string mismatch_message(uint64_t seq, const std::vector<const Descriptor*>& descs,
                             const std::function<std::string(int)>& name_of, bool participants) {
  const int n = static_cast<int>(descs.size());
  int best = 0, best_count = 0;
  for (int r = 0; r < n; ++r) {
    int count = 0;
    for (int q = 0; q < n; ++q) count += *descs[q] == *descs[r];
    if (count > best_count) best = r, best_count = count;
  }
  const Descriptor& common = *descs[best];
  std::ostringstream os;
  os << "collective #" << seq << ": " << (participants ? "participants" : "replicas")
     << " disagree with the " << best_count << " that called " << common.describe() << ": ";
  int shown = 0;
  for (int r = 0; r < n; ++r) {
    const Descriptor& d = *descs[r];
    if (d == common) continue;
    os << (shown++ ? "; " : "") << name_of(r) << " called " << d.describe();
  }
  return os.str();
}

void Rendezvous::report_mismatch(uint64_t seq) {
  std::vector<const Descriptor*> descs(size_);
  for (int r = 0; r < size_; ++r) descs[r] = &record(r, seq).desc;
  mismatch_seq_.store(seq, std::memory_order_release);
  poison_and_throw(TPU_INVALID_ARGUMENT,
                   mismatch_message(seq, descs, [this](int r) { return name(r); }, cores_per_replica_ > 1));
}

void Rendezvous::set_line_data(int rank, uint64_t seq, const void* data, size_t bytes) {
  std::memcpy(slots_[rank].line[seq & 1].data, data, bytes);
}

void Rendezvous::finish(int rank, uint64_t seq, int64_t timeout_ms) {
  if (size_ == 1) {
    slots_[rank].finished.store(seq, std::memory_order_release);
    return;
  }
  slots_[rank].finished.store(seq, std::memory_order_seq_cst);
  wake_.wake();
  wait_all(rank, seq, Phase::kFinish, timeout_ms);
}

}  // namespace tpurt
