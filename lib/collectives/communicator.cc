// The collective algorithms for replicas in one process. Small inputs travel inline
// in the rendezvous records and each replica computes its own result (one meeting
// per collective). Large inputs are read in place. When every member of a group gets
// the same result (all-reduce, all-gather, broadcast), the group's first member
// allocates one buffer, the others share it (copy-on-write, core/tensor.h), and the
// members split the writing of it by claiming chunks: each byte is read once and
// written once. With private results (SystemConfig), every member has its own output
// and an all-reduce writes each reduced slice into all of them. A second meeting
// keeps buffers alive until every peer is done with them.
#include "collectives/communicator.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives/reduce.h"
#include "collectives/rendezvous.h"
#include "collectives/shapes.h"
#include "core/box_copy.h"
#include "core/checked.h"
#include "core/dtype.h"
#include "core/float16.h"
#include "core/stream_copy.h"
#include "core/tensor_ops.h"
#include "core/tensor_ref.h"
#include "topology/group_assignment.h"
#include "topology/group_modes.h"
#include "trace/trace.h"

namespace tpurt {
namespace {

// Elements reduced per piece: small enough that the piece stays in L1/L2 while it is
// copied out to the other members.
// (64 KiB measured best against 16 and 256 KiB at 16 MiB with 2 and 8 replicas.)
constexpr int64_t kPieceBytes = 64 * 1024;
// Pieces per claimed chunk: big enough that claiming costs nothing, small enough to
// balance the work among the members that are running.
constexpr int64_t kPiecesPerChunk = 4;
// Total output bytes of one all-reduce above which its writes bypass the cache.
constexpr size_t kStreamBytes = 16u << 20;


// Bytes a member claims at a time when the members split the work of one result.
constexpr int64_t kChunkBytes = kPieceBytes * kPiecesPerChunk;

// An output published for peers to write into (or to share): if the collective
// throws, a peer may still be writing, so the rendezvous keeps it until the step's
// reset instead of freeing it now.
struct PublishedTensor {
  Rendezvous* rv;
  int rank;
  Tensor* t = nullptr;
  ~PublishedTensor() {
    if (t) rv->park(rank, t);
  }
  Tensor* take() { Tensor* r = t; t = nullptr; return r; }
};

}  // namespace

uint64_t hash_ids(const int32_t* ids, int64_t n) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t i = 0; i < n; ++i) {
    h ^= static_cast<uint32_t>(ids[i]);
    h *= 1099511628211ull;
  }
  return h;
}

Communicator::Communicator(int size, int64_t timeout_ms, int num_cpus, bool private_results,
                           int cores_per_replica)
    : rv_(new Rendezvous(size, timeout_ms, num_cpus, cores_per_replica)),
      identity_(size),
      private_results_(private_results) {
  for (int i = 0; i < size; ++i) identity_[i] = i;
  identity_hash_ = hash_ids(identity_.data(), size);
}

Communicator::~Communicator() = default;

int Communicator::size() const { return rv_->size(); }
int Communicator::cores_per_replica() const { return rv_->cores_per_replica(); }
void Communicator::reset(const int* cpu_of_rank) { rv_->reset(cpu_of_rank); }
void Communicator::set_step_timeout(int64_t timeout_ms) { rv_->set_step_timeout(timeout_ms); }
int64_t Communicator::step_timeout_ms() const { return rv_->step_timeout(); }
void Communicator::set_call_timeout(int rank, int64_t timeout_ms) {
  rv_->set_call_timeout(rank, timeout_ms);
}
void Communicator::abort(int replica, tpu_status code, const std::string& message) {
  rv_->abort(replica, code, message);
}
void Communicator::reject(int participant, const Error& error) {
  rv_->poison(error.code(), error.message(), participant);
}
bool Communicator::aborted() const { return rv_->aborted(); }
bool Communicator::failure(int* origin, tpu_status* code, std::string* message) const {
  return rv_->failure(origin, code, message);
}
void Communicator::depart(int rank) { rv_->depart(rank); }

// Validates the call's arguments on this replica. An invalid call fails the whole
// step, so that peers blocked in the same collective learn of it at once.
template <typename Fn>
void Communicator::check_local(int rank, Fn&& checks) {
  if (rv_->aborted()) {
    uint64_t seq;
    rv_->begin(rank, &seq);
    rv_->arrive_and_check(rank, seq);  // throws the step's failure
  }
  try {
    checks();
  } catch (const Error& e) {
    rv_->poison(e.code(), e.message(), rank);
    throw;
  }
}

void Communicator::setup(int rank, CollectiveKind kind, const Tensor* x,
                         const tpu_group_assignment* groups, Descriptor* desc, GroupInfo* group) {
  *desc = Descriptor{};
  desc->kind = kind;
  if (x != nullptr) {
    desc->dtype = x->dtype;
    desc->rank = x->rank;
    for (int i = 0; i < x->rank; ++i) desc->dims[i] = x->dims[i];
  }
  int n = size();
  if (groups == nullptr) {
    group->members = identity_.data();
    group->size = n;
    group->pos = rank;
    desc->num_groups = 1;
    desc->group_size = n;
    desc->groups_hash = identity_hash_;
    return;
  }
  // A thread's collectives usually repeat their groups: the last uniform ones it
  // checked, compared by content, skip the validation, the hash and the search.
  struct Checked {
    bool valid = false;
    int n = 0, rank = 0, num_groups = 0, group_size = 0, row = 0, pos = 0;
    uint64_t hash = 0;
    std::vector<int32_t> ids;
  };
  static thread_local Checked last;
  const bool uniform = !is_ragged(groups) && groups->replica_ids != nullptr;
  if (uniform && last.valid && last.n == n && last.rank == rank && last.num_groups == groups->num_groups &&
      last.group_size == groups->group_size && std::equal(last.ids.begin(), last.ids.end(), groups->replica_ids)) {
    desc->num_groups = last.num_groups;
    desc->group_size = last.group_size;
    desc->groups_hash = last.hash;
    group->members = groups->replica_ids + int64_t(last.row) * last.group_size;
    group->size = last.group_size;
    group->pos = last.pos;
    return;
  }
  last.valid = false;
  validate_group_assignment(groups, n);
  desc->num_groups = groups->num_groups;
  desc->group_size = groups->group_size;
  if (is_ragged(groups)) {  // rows of different sizes, each after its length
    desc->groups_hash = hash_ids(groups->replica_ids, ragged_length(*groups));
    bool found = false;
    for_each_row(*groups, [&](int, const int32_t* row, int size) {
      for (int k = 0; k < size && !found; ++k)
        if (row[k] == rank) {
          *group = GroupInfo{};
          group->members = row;
          group->size = size;
          group->pos = k;
          found = true;
        }
    });
    if (found) return;
  }
  desc->groups_hash = hash_ids(groups->replica_ids, int64_t(groups->num_groups) * groups->group_size);
  for (int g = 0; g < groups->num_groups && !is_ragged(groups); ++g) {
    const int32_t* row = groups->replica_ids + int64_t(g) * groups->group_size;
    for (int k = 0; k < groups->group_size; ++k) {
      if (row[k] == rank) {
        group->members = row;
        group->size = groups->group_size;
        group->pos = k;
        last.ids.assign(groups->replica_ids, groups->replica_ids + int64_t(groups->num_groups) * groups->group_size);
        last.n = n, last.rank = rank, last.num_groups = groups->num_groups, last.group_size = groups->group_size;
        last.row = g, last.pos = k, last.hash = desc->groups_hash;
        last.valid = true;
        return;
      }
    }
  }
  invalid_argument(participant_name(rank, cores_per_replica()), " is in no group");  // unreachable after validation
}

// Publishes x (inline when small) and the output buffer, then meets the others.
// Returns true when inputs travelled inline (no second meeting needed).
bool Communicator::meet(int rank, uint64_t seq, Record& rec, const Descriptor& desc,
                        const Tensor* x, Tensor* out) {
  rec.desc = desc;
  size_t bytes = x ? x->byte_size : 0;
  bool small = bytes <= kInlineBytes;
  if (bytes <= kLineBytes) {
    if (bytes) rv_->set_line_data(rank, seq, x->data, bytes);
    rec.input = rv_->line_data(rank, seq);
  } else if (small) {
    std::memcpy(rec.data, x->data, bytes);
    rec.input = rec.data;
  } else {
    rec.input = x->data;
  }
  rec.output = out ? out->data : nullptr;
  rec.result = out;
  rv_->arrive_and_check(rank, seq);
  return small;
}

const void* Communicator::input_of(int replica, uint64_t seq, size_t bytes) const {
  return bytes <= kLineBytes ? rv_->line_data(replica, seq) : rv_->record(replica, seq).input;
}

void* Communicator::output_of(int replica, uint64_t seq) const {
  return rv_->record(replica, seq).output;
}

bool Communicator::shares_result(const GroupInfo& g, size_t input_bytes) const {
  return !private_results_ && g.size > 1 && input_bytes > kInlineBytes;
}

Tensor* Communicator::new_result(const GroupInfo& g, bool shared, const Tensor* x,
                                 const int64_t* dims) {
  return shared && g.pos != 0 ? nullptr : new_tensor_uninitialized(x->dtype, dims, x->rank);
}

// Every member gets a handle of its own: one handle retained by all could not give
// one member a private copy, since mutable_data changes what every holder sees.
void Communicator::join_result(const GroupInfo& g, bool shared, uint64_t seq, Tensor** out) {
  if (!shared || g.pos == 0) return;
  const Tensor* first = rv_->record(g.members[0], seq).result;
  *out = share(first, first->dims, first->rank, 0);
}

Tensor* Communicator::all_reduce(int rank, const Tensor* x, tpu_reduce_op op,
                                 const tpu_group_assignment* groups, bool bf16_wire) {
  trace::CollectiveSpan span("all_reduce", x, groups);
  if (bf16_wire && x != nullptr && x->dtype == TPU_FLOAT)
    return through_bfloat16(x, [&](const Tensor* wire) { return reduce_impl(rank, wire, op, groups, true); });
  return reduce_impl(rank, x, op, groups, false);
}

Tensor* Communicator::reduce_impl(int rank, const Tensor* x, tpu_reduce_op op,
                                  const tpu_group_assignment* groups, bool bf16_wire) {
  Descriptor desc;
  GroupInfo g;
  PublishedTensor out{rv_.get(), rank};
  bool shared = false;
  check_local(rank, [&] {
    require_not_null(x, "x");
    check_reduction(x->dtype, op);
    setup(rank, CollectiveKind::kAllReduce, x, groups, &desc, &g);
    shared = shares_result(g, x->byte_size);
    out.t = new_result(g, shared, x, x->dims);
  });
  desc.op = op;
  desc.bf16_wire = bf16_wire;
  uint64_t seq;
  Record& rec = rv_->begin(rank, &seq);
  bool small = meet(rank, seq, rec, desc, x, out.t);
  SourceList sources(g.size);
  const void** srcs = sources.data();
  for (int j = 0; j < g.size; ++j) srcs[j] = input_of(g.members[j], seq, x->byte_size);
  const int64_t n = x->num_elements;
  if (small) {
    reduce(x->dtype, op, srcs, g.size, 0, n, out.t->data);
    return out.take();
  }
  join_result(g, shared, seq, &out.t);
  // Chunks are claimed by whichever members are running, so progress never waits for
  // a particular thread to be scheduled (replicas may outnumber CPUs). Chunk bounds are
  // cache-line aligned so members never write the same line.
  const size_t esize = dtype_size(x->dtype);
  const int64_t align = std::max<int64_t>(1, 64 / static_cast<int64_t>(esize));
  const int64_t piece = std::max<int64_t>(align, kPieceBytes / static_cast<int64_t>(esize));
  const int64_t chunk = piece * kPiecesPerChunk;
  const int64_t num_chunks = (n + chunk - 1) / chunk;
  // Outputs larger than the caches are written with streaming stores from a piece
  // reduced in L1; smaller ones stay cached for the computation that reads them next.
  const int outputs = shared ? 1 : g.size;
  const bool stream = x->byte_size * outputs >= kStreamBytes;
  alignas(64) static thread_local unsigned char scratch[kPieceBytes];
  for (int64_t c; (c = rv_->claim_chunk(g.members[0], seq)) < num_chunks;) {
    const int64_t chunk_end = std::min(n, (c + 1) * chunk);
    for (int64_t p = c * chunk; p < chunk_end; p += piece) {
      int64_t m = std::min(piece, chunk_end - p);
      size_t off = p * esize, len = m * esize;
      if (stream) {
        reduce(x->dtype, op, srcs, g.size, p, m, scratch);
        if (shared) stream_copy(static_cast<char*>(out.t->data) + off, scratch, len);
        else
          for (int j = 0; j < g.size; ++j)
            stream_copy(static_cast<char*>(output_of(g.members[j], seq)) + off, scratch, len);
      } else {
        char* mine = static_cast<char*>(out.t->data) + off;
        reduce(x->dtype, op, srcs, g.size, p, m, mine);
        if (!shared)
          for (int j = 0; j < g.size; ++j)
            if (j != g.pos) std::memcpy(static_cast<char*>(output_of(g.members[j], seq)) + off, mine, len);
      }
    }
  }
  if (stream) stream_fence();
  rv_->finish(rank, seq);
  return out.take();
}

Tensor* Communicator::all_gather(int rank, const Tensor* x, int axis,
                                 const tpu_group_assignment* groups) {
  trace::CollectiveSpan span("all_gather", x, groups);
  Descriptor desc;
  GroupInfo g;
  int a = 0;
  int64_t dims[TPU_MAX_RANK];
  PublishedTensor out{rv_.get(), rank};
  bool shared = false;
  check_local(rank, [&] {
    require_not_null(x, "x");
    setup(rank, CollectiveKind::kAllGather, x, groups, &desc, &g);
    a = all_gather_shape(x, axis, g.size, dims);
    shared = shares_result(g, x->byte_size);
    out.t = new_result(g, shared, x, dims);
  });
  desc.params[0] = a;
  uint64_t seq;
  Record& rec = rv_->begin(rank, &seq);
  bool small = meet(rank, seq, rec, desc, x, out.t);
  join_result(g, shared, seq, &out.t);
  // Units of work: runs of rows (dimension 0) of one member's input; a private result
  // takes them all, a shared one is split among the members that claim them.
  const int64_t rows = x->dims[0];
  const size_t row_bytes = rows ? x->byte_size / rows : 0;
  const int64_t rows_per_unit = shared ? std::max<int64_t>(1, kChunkBytes / std::max<size_t>(row_bytes, 1)) : rows;
  const int64_t units_per_input = rows ? (rows + rows_per_unit - 1) / rows_per_unit : 0;
  const int64_t num_units = units_per_input * g.size;
  const size_t esize = dtype_size(x->dtype);
  int64_t extent[TPU_MAX_RANK], from[TPU_MAX_RANK] = {0}, to[TPU_MAX_RANK] = {0};
  std::copy(x->dims, x->dims + x->rank, extent);
  auto copy_unit = [&](int64_t u) {
    const int j = static_cast<int>(u / units_per_input);
    const int64_t r0 = u % units_per_input * rows_per_unit;
    extent[0] = std::min(rows_per_unit, rows - r0);
    from[0] = r0;
    to[0] = r0;
    to[a] += j * x->dims[a];
    copy_box(esize, x->rank, extent, input_of(g.members[j], seq, x->byte_size), x->dims, from, out.t->data, dims, to);
    to[a] = to[0] = 0;
  };
  if (shared)
    for (int64_t u; (u = rv_->claim_chunk(g.members[0], seq)) < num_units;) copy_unit(u);
  else
    for (int64_t u = 0; u < num_units; ++u) copy_unit(u);
  if (!small) rv_->finish(rank, seq);
  return out.take();
}

Tensor* Communicator::reduce_scatter(int rank, const Tensor* x, tpu_reduce_op op, int axis,
                                     const tpu_group_assignment* groups, bool bf16_wire) {
  trace::CollectiveSpan span("reduce_scatter", x, groups);
  if (bf16_wire && x != nullptr && x->dtype == TPU_FLOAT)
    return through_bfloat16(x, [&](const Tensor* wire) { return scatter_impl(rank, wire, op, axis, groups, true); });
  return scatter_impl(rank, x, op, axis, groups, false);
}

Tensor* Communicator::scatter_impl(int rank, const Tensor* x, tpu_reduce_op op, int axis,
                                   const tpu_group_assignment* groups, bool bf16_wire) {
  Descriptor desc;
  GroupInfo g;
  int a = 0;
  int64_t dims[TPU_MAX_RANK];
  TensorRef out;
  check_local(rank, [&] {
    require_not_null(x, "x");
    check_reduction(x->dtype, op);
    setup(rank, CollectiveKind::kReduceScatter, x, groups, &desc, &g);
    a = reduce_scatter_shape(x, axis, g.size, dims);
    out.reset(new_tensor_uninitialized(x->dtype, dims, x->rank));
  });
  desc.op = op;
  desc.params[0] = a;
  desc.bf16_wire = bf16_wire;
  uint64_t seq;
  Record& rec = rv_->begin(rank, &seq);
  bool small = meet(rank, seq, rec, desc, x, out.get());
  // Skipped when empty: then only prefix products of the shape are sure to fit in
  // int64 ([0, 2^62, 2^62] is a shape), and inner would not.
  if (x->num_elements > 0) {
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < a; ++i) outer *= x->dims[i];
    for (int i = a + 1; i < x->rank; ++i) inner *= x->dims[i];
    const int64_t block = dims[a] * inner;  // elements this member keeps per outer row
    const int64_t row = x->dims[a] * inner;  // elements of an input row
    const size_t esize = dtype_size(x->dtype);
    SourceList sources(g.size);
    const void** srcs = sources.data();
    for (int64_t o = 0; o < outer; ++o) {
      for (int j = 0; j < g.size; ++j)
        srcs[j] = static_cast<const char*>(input_of(g.members[j], seq, x->byte_size)) + (o * row + g.pos * block) * esize;
      reduce(x->dtype, op, srcs, g.size, 0, block, static_cast<char*>(out->data) + o * block * esize);
    }
  }
  if (!small) rv_->finish(rank, seq);
  return out.take();
}

Tensor* Communicator::all_to_all(int rank, const Tensor* x, int concat_dim, int split_dim,
                                 int split_count, const tpu_group_assignment* groups) {
  trace::CollectiveSpan span("all_to_all", x, groups);
  Descriptor desc;
  GroupInfo g;
  int c = 0, s = 0;
  int64_t box[TPU_MAX_RANK], dims[TPU_MAX_RANK];
  TensorRef out;
  check_local(rank, [&] {
    require_not_null(x, "x");
    setup(rank, CollectiveKind::kAllToAll, x, groups, &desc, &g);
    all_to_all_shape(x, concat_dim, split_dim, split_count, g.size, &c, &s, box, dims);
    out.reset(new_tensor_uninitialized(x->dtype, dims, x->rank));
  });
  desc.params[0] = s;
  desc.params[1] = c;
  desc.params[2] = split_count;
  uint64_t seq;
  Record& rec = rv_->begin(rank, &seq);
  bool small = meet(rank, seq, rec, desc, x, out.get());
  int64_t src_start[TPU_MAX_RANK] = {0}, dst_start[TPU_MAX_RANK] = {0};
  src_start[s] = g.pos * box[s];
  size_t esize = dtype_size(x->dtype);
  for (int j = 0; j < g.size; ++j) {
    dst_start[c] = j * box[c];
    copy_box(esize, x->rank, box, input_of(g.members[j], seq, x->byte_size), x->dims, src_start, out->data, dims, dst_start);
  }
  if (!small) rv_->finish(rank, seq);
  return out.take();
}

Tensor* Communicator::collective_permute(int rank, const Tensor* x, const int32_t* pairs,
                                         int num_pairs) {
  trace::CollectiveSpan span("collective_permute", x, nullptr);
  Descriptor desc;
  GroupInfo g;
  int source = -1;
  TensorRef out;
  check_local(rank, [&] {
    require_not_null(x, "x");
    setup(rank, CollectiveKind::kCollectivePermute, x, nullptr, &desc, &g);
    source = permute_source(pairs, num_pairs, size(), rank);
    out.reset(new_tensor_like(x));
  });
  desc.num_groups = num_pairs;
  desc.group_size = 2;
  desc.groups_hash = hash_ids(pairs, int64_t(num_pairs) * 2);
  uint64_t seq;
  Record& rec = rv_->begin(rank, &seq);
  bool small = meet(rank, seq, rec, desc, x, out.get());
  if (source >= 0) std::memcpy(out->data, input_of(source, seq, x->byte_size), x->byte_size);
  else if (x->byte_size) std::memset(out->data, 0, x->byte_size);
  if (!small) rv_->finish(rank, seq);
  return out.take();
}

Tensor* Communicator::broadcast(int rank, const Tensor* x, int root,
                                const tpu_group_assignment* groups) {
  trace::CollectiveSpan span("broadcast", x, groups);
  Descriptor desc;
  GroupInfo g;
  PublishedTensor out{rv_.get(), rank};
  bool shared = false;
  check_local(rank, [&] {
    require_not_null(x, "x");
    setup(rank, CollectiveKind::kBroadcast, x, groups, &desc, &g);
    if (root < 0 || root >= g.size) invalid_argument("root ", root, " is outside the group of ", g.size);
    shared = shares_result(g, x->byte_size);
    out.t = new_result(g, shared, x, x->dims);
  });
  desc.params[0] = root;
  uint64_t seq;
  Record& rec = rv_->begin(rank, &seq);
  bool small = meet(rank, seq, rec, desc, x, out.t);
  join_result(g, shared, seq, &out.t);
  const char* src = static_cast<const char*>(input_of(g.members[root], seq, x->byte_size));
  char* dst = static_cast<char*>(out.t->data);
  const size_t bytes = x->byte_size;
  if (shared) {
    const int64_t num_chunks = static_cast<int64_t>((bytes + kChunkBytes - 1) / kChunkBytes);
    for (int64_t c; (c = rv_->claim_chunk(g.members[0], seq)) < num_chunks;) {
      size_t off = static_cast<size_t>(c) * kChunkBytes;
      std::memcpy(dst + off, src + off, std::min<size_t>(kChunkBytes, bytes - off));
    }
  } else if (bytes) {
    std::memcpy(dst, src, bytes);
  }
  if (!small) rv_->finish(rank, seq);
  return out.take();
}

void Communicator::barrier(int rank) {
  trace::CollectiveSpan span("barrier", nullptr, nullptr);
  Descriptor desc;
  GroupInfo g;
  check_local(rank, [&] { setup(rank, CollectiveKind::kBarrier, nullptr, nullptr, &desc, &g); });
  uint64_t seq;
  Record& rec = rv_->begin(rank, &seq);
  meet(rank, seq, rec, desc, nullptr, nullptr);
}

}  // namespace tpurt
