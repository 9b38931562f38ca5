#include "checkpoint/checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>

#include "checkpoint/files.h"
#include "checkpoint/manifest.h"
#include "core/deadline.h"
#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "embedding/engine.h"
#include "runtime/system.h"

namespace tpurt {
namespace checkpoint {

namespace {

using embedding::Engine;
using embedding::ShardMap;
using embedding::TableSpec;

constexpr size_t kMaxManifestBytes = size_t{64} << 20;
constexpr int64_t kChunkRows = 65536;  // rows read from the engine at a time when saving

std::string shard_name(int table, int task) { return str_cat("table-", table, "-task-", task, ".bin"); }

// The global row of a shard's row sr (ShardMap's inverse).
int64_t first_row_of(const ShardMap& map, int64_t shard) {
  if (map.mod()) return shard;
  int64_t r = 0;
  for (int64_t s = 0; s < shard; ++s) r += map.rows_in(s);
  return r;
}
int64_t row_of(const ShardMap& map, int64_t shard, int64_t first, int64_t sr) {
  return map.mod() ? sr * map.shards() + shard : first + sr;
}

// ---- The tasks' votes through the coordination store ------------------------------
// A value is "<status>\n<text>": TPU_OK and a payload, or a failure and its message.

std::string vote(tpu_status code, const std::string& text) { return str_cat(static_cast<int>(code), "\n", text); }

struct Vote {
  tpu_status code;
  std::string text;
};

Vote parse_vote(const std::string& v) {
  const size_t nl = v.find('\n');
  if (nl == std::string::npos) return {TPU_INTERNAL, "a malformed checkpoint vote: '" + v + "'"};
  return {static_cast<tpu_status>(std::atoi(v.substr(0, nl).c_str())), v.substr(nl + 1)};
}

class Votes {
 public:
  Votes(System& sys, const char* op, int64_t timeout_ms)
      : sys_(sys),
        prefix_(str_cat("checkpoint/", sys.next_checkpoint_call(), "/", op, "/")),
        deadline_(deadline_ms_after(now_ms(), timeout_ms)),
        timeout_ms_(timeout_ms) {}

  void post(const std::string& name, const std::string& value) { sys_.internal_kv_set(prefix_ + name, value); }
  // Waits for the value, up to the call's deadline plus grace_ms; TPU_DEADLINE_EXCEEDED
  // names `who`.
  Vote wait(const std::string& name, const std::string& who, const std::string& doing, int64_t grace_ms = 0) {
    const int64_t left = std::max<int64_t>(1, deadline_ - now_ms()) + grace_ms;
    try {
      return parse_vote(sys_.internal_kv_get(prefix_ + name, left));
    } catch (const Error& e) {
      if (e.code() != TPU_DEADLINE_EXCEEDED) throw;
      fail(TPU_DEADLINE_EXCEEDED, who, " did not ", doing, " within ", timeout_ms_, " ms");
    }
  }

 private:
  static int64_t now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  System& sys_;
  std::string prefix_;
  int64_t deadline_, timeout_ms_;
};

// "task T: message" in a multi-task system, the message alone in one task.
Error from_task(const System& sys, int task, const Vote& v) {
  if (sys.num_tasks() == 1) return Error(v.code, v.text);
  return Error(v.code, str_cat("task ", task, ": ", v.text));
}

// ---- Saving -------------------------------------------------------------------------

FileEntry write_shards(const Engine& e, int table, const std::string& sdir, int task, int cores) {
  const TableSpec& spec = e.table(table);
  const ShardMap& map = spec.shards;
  const int nv = 1 + static_cast<int>(spec.optimizer->slot_names().size());
  const int64_t dim = spec.dimension;
  DurableFile f(sdir, shard_name(table, task), std::to_string(task));
  std::vector<float> buf;
  for (int64_t s = int64_t{task} * cores; s < int64_t{task + 1} * cores; ++s) {
    const int64_t rows = map.rows_in(s), first = first_row_of(map, s);
    for (int v = 0; v < nv; ++v) {
      for (int64_t sr0 = 0; sr0 < rows; sr0 += kChunkRows) {
        const int64_t n = std::min(kChunkRows, rows - sr0);
        buf.resize(static_cast<size_t>(n * dim));
        if (!map.mod()) {
          e.retrieve(table, v, first + sr0, n, buf.data());
        } else {
          for (int64_t i = 0; i < n; ++i) e.retrieve(table, v, row_of(map, s, first, sr0 + i), 1, &buf[i * dim]);
        }
        f.write(buf.data(), buf.size() * sizeof(float));
      }
    }
  }
  return f.finish();
}

// "table path bytes sha256" lines: a task's shard files, as task 0 collects them.
std::string files_text(const std::vector<FileEntry>& files) {
  std::string out;
  for (size_t t = 0; t < files.size(); ++t)
    out += str_cat(t, " ", files[t].path, " ", files[t].bytes, " ", files[t].sha256, "\n");
  return out;
}

std::vector<FileEntry> parse_files_text(const std::string& text, size_t tables, int task) {
  std::vector<FileEntry> files(tables);
  std::istringstream in(text);
  size_t t;
  FileEntry f;
  size_t seen = 0;
  while (in >> t >> f.path >> f.bytes >> f.sha256) {
    if (t >= tables) break;
    files[t] = f;
    ++seen;
  }
  if (seen != tables) fail(TPU_INTERNAL, "task ", task, " reported ", seen, " shard files for ", tables, " tables");
  return files;
}

FileEntry write_tensors(const std::string& sdir, const std::vector<NamedTensor>& tensors,
                        std::vector<TensorEntry>* entries) {
  DurableFile f(sdir, "tensors.bin", "0");
  uint64_t offset = 0;
  for (const NamedTensor& nt : tensors) {
    const tpu_tensor* t = nt.tensor;
    TensorEntry te;
    te.name = nt.name;
    te.dtype = t->dtype;
    te.shape.assign(t->dims, t->dims + t->rank);
    te.offset = offset;
    te.bytes = t->byte_size;
    f.write(t->data, t->byte_size);
    offset += t->byte_size;
    entries->push_back(std::move(te));
  }
  return f.finish();
}

Manifest build_manifest(const System& sys, int64_t step, const std::vector<std::vector<FileEntry>>& by_task) {
  Manifest m;
  m.step = step;
  m.num_tasks = sys.num_tasks();
  m.cores_per_task = sys.num_cores();
  if (const Engine* e = sys.embedding()) {
    m.mod = e->config().mod_sharding;
    for (size_t t = 0; t < e->config().tables.size(); ++t) {
      const TableSpec& spec = e->config().tables[t];
      TableEntry te;
      te.name = spec.name;
      te.vocabulary_size = spec.vocabulary_size;
      te.dimension = spec.dimension;
      te.optimizer = spec.optimizer->kind_name();
      te.variables.push_back("parameters");
      for (const std::string& s : spec.optimizer->slot_names()) te.variables.push_back(s);
      for (int task = 0; task < m.num_tasks; ++task)
        te.shards.push_back({task, int64_t{task} * m.cores_per_task, m.cores_per_task, by_task[task][t]});
      m.tables.push_back(std::move(te));
    }
  }
  return m;
}

bool has_manifest(const std::string& sdir) {
  struct stat st;
  return stat((sdir + "/" + kManifestName).c_str(), &st) == 0;
}

Manifest read_manifest(const std::string& sdir) {
  const std::string path = sdir + "/" + kManifestName;
  return parse_manifest(read_small_file(path, kMaxManifestBytes), path);
}

// keep > 0: the complete checkpoints past the newest `keep`, and incomplete ones older
// than `step`, go (best effort: a failure here does not fail the save).
void remove_old(const std::string& dir, int64_t step, int keep) {
  int complete = 0;
  for (int64_t s : list_steps(dir)) {
    const std::string sdir = step_dir(dir, s);
    bool valid = true;
    try {
      read_manifest(sdir);
    } catch (const Error&) {
      valid = false;
    }
    if (valid) {
      if (complete >= keep) remove_step_dir(sdir);
      ++complete;
    } else if (s < step) {
      remove_step_dir(sdir);
    }
  }
}

// ---- Restoring ----------------------------------------------------------------------

// Rows of new shard `s` whose old home is contiguous: fn(first_row, count, old_shard,
// old_shard_row) for each run, in shard-row order.
template <typename Fn>
void for_each_run(const ShardMap& now, int64_t s, const ShardMap& old, Fn&& fn) {
  const int64_t rows = now.rows_in(s), first = first_row_of(now, s);
  int64_t r0 = -1, count = 0, os = -1, osr = -1;
  for (int64_t sr = 0; sr < rows; ++sr) {
    const int64_t r = row_of(now, s, first, sr);
    const int64_t o = old.shard_of(r), orow = old.shard_row(r);
    if (count > 0 && r == r0 + count && o == os && orow == osr + count) {
      ++count;
      continue;
    }
    if (count > 0) fn(r0, count, os, osr);
    r0 = r, count = 1, os = o, osr = orow;
  }
  if (count > 0) fn(r0, count, os, osr);
}

// One table's old layout: the shard files and where each old shard begins in its file.
struct OldTable {
  const TableEntry* entry;
  std::unique_ptr<ShardMap> map;
  std::vector<uint64_t> base;  // by old shard: its byte offset in its task's file
  std::vector<std::unique_ptr<MappedFile>> files;  // by old task; NULL: not needed here
};

void check_config(const Manifest& m, const Engine* e, const std::string& where) {
  const size_t n = e ? e->config().tables.size() : 0;
  for (const TableEntry& te : m.tables)
    if (!e || e->config().table_index(te.name) < 0)
      fail(TPU_FAILED_PRECONDITION, where, " holds table '", te.name, "', which the system does not have");
  for (size_t t = 0; t < n; ++t) {
    const TableSpec& spec = e->config().tables[t];
    auto it = std::find_if(m.tables.begin(), m.tables.end(), [&](const TableEntry& te) { return te.name == spec.name; });
    if (it == m.tables.end())
      fail(TPU_FAILED_PRECONDITION, where, " has no table '", spec.name, "', which the system has");
    const std::string what = str_cat(where, ": table '", spec.name, "'");
    if (it->vocabulary_size != spec.vocabulary_size)
      fail(TPU_FAILED_PRECONDITION, what, " has vocabulary_size ", it->vocabulary_size, ", the system's ",
           spec.vocabulary_size);
    if (it->dimension != spec.dimension)
      fail(TPU_FAILED_PRECONDITION, what, " has dimension ", it->dimension, ", the system's ", spec.dimension);
    if (it->optimizer != spec.optimizer->kind_name())
      fail(TPU_FAILED_PRECONDITION, what, " has optimizer ", it->optimizer, ", the system's ",
           spec.optimizer->kind_name());
    std::vector<std::string> vars{"parameters"};
    for (const std::string& s : spec.optimizer->slot_names()) vars.push_back(s);
    for (size_t v = 0; v < std::max(vars.size(), it->variables.size()); ++v) {
      const std::string a = v < it->variables.size() ? it->variables[v] : "(none)";
      const std::string b = v < vars.size() ? vars[v] : "(none)";
      if (a != b) fail(TPU_FAILED_PRECONDITION, what, " has variable ", v, " '", a, "', the system's '", b, "'");
    }
    if (it->dtype != "float32")
      fail(TPU_FAILED_PRECONDITION, what, " has dtype ", it->dtype, ", the system's float32");
  }
}

// Maps and checks the files that hold this task's rows of table t.
OldTable open_old_table(const Manifest& m, const TableEntry& te, const TableSpec& spec, const std::string& sdir,
                        int task, int cores) {
  OldTable o;
  o.entry = &te;
  const int64_t old_shards = int64_t{m.num_tasks} * m.cores_per_task;
  o.map = std::make_unique<ShardMap>(te.vocabulary_size, old_shards, m.mod);
  const uint64_t row_bytes = static_cast<uint64_t>(te.dimension) * sizeof(float) * te.variables.size();
  o.base.resize(static_cast<size_t>(old_shards));
  for (int64_t s = 0; s < old_shards; ++s)
    o.base[s] = s % m.cores_per_task == 0 ? 0 : o.base[s - 1] + o.map->rows_in(s - 1) * row_bytes;
  std::vector<bool> needed(static_cast<size_t>(m.num_tasks), false);
  for (int64_t s = int64_t{task} * cores; s < int64_t{task + 1} * cores; ++s)
    for_each_run(spec.shards, s, *o.map,
                 [&](int64_t, int64_t, int64_t os, int64_t) { needed[os / m.cores_per_task] = true; });
  o.files.resize(needed.size());
  for (size_t t = 0; t < needed.size(); ++t)
    if (needed[t]) o.files[t] = std::make_unique<MappedFile>(sdir, te.shards[t].file);
  return o;
}

void load_table(Engine& e, int table, const OldTable& o, int old_cores, int task, int cores) {
  const TableSpec& spec = e.table(table);
  const uint64_t dim = static_cast<uint64_t>(spec.dimension);
  const int nv = static_cast<int>(o.entry->variables.size());
  for (int64_t s = int64_t{task} * cores; s < int64_t{task + 1} * cores; ++s)
    for_each_run(spec.shards, s, *o.map, [&](int64_t r0, int64_t count, int64_t os, int64_t osr) {
      const MappedFile& f = *o.files[os / old_cores];
      for (int v = 0; v < nv; ++v) {
        const uint64_t off = o.base[os] + (static_cast<uint64_t>(v) * o.map->rows_in(os) + osr) * dim * sizeof(float);
        e.load(table, v, r0, count, reinterpret_cast<const float*>(f.data() + off), count * dim);
      }
    });
}

}  // namespace

void save(System& sys, const std::string& dir, int64_t step, const std::vector<NamedTensor>& tensors,
          int64_t timeout_ms, int keep) {
  const int me = sys.task_id(), n = sys.num_tasks();
  Votes votes(sys, "save", timeout_ms);
  const std::string sdir = step_dir(dir, step);
  const size_t num_tables = sys.embedding() ? sys.embedding()->config().tables.size() : 0;
  std::vector<FileEntry> mine;
  std::vector<TensorEntry> tensor_entries;
  FileEntry tensor_file;
  try {
    sys.between_steps([] {});  // refused inside a computation before anything is written
    if (has_manifest(sdir)) fail(TPU_ALREADY_EXISTS, "checkpoint ", sdir, " exists and is complete");
    make_dir(dir);
    make_dir(sdir);
    sys.between_steps([&] {
      for (size_t t = 0; t < num_tables; ++t)
        mine.push_back(write_shards(*sys.embedding(), static_cast<int>(t), sdir, me, sys.num_cores()));
    });
    if (me == 0) tensor_file = write_tensors(sdir, tensors, &tensor_entries);
    sync_dir(dir);
  } catch (const Error& e) {
    votes.post(str_cat("written/", me), vote(e.code(), e.message()));
    if (me == 0) votes.post("done", vote(e.code(), from_task(sys, 0, {e.code(), e.message()}).message()));
    throw;
  }
  votes.post(str_cat("written/", me), vote(TPU_OK, files_text(mine)));

  if (me != 0) {
    // Task 0's verdict names the task that failed or stayed away: wait past its deadline.
    const Vote done = votes.wait("done", "task 0", str_cat("complete checkpoint ", sdir),
                                 std::min<int64_t>(timeout_ms, 10000));
    if (done.code != TPU_OK) throw Error(done.code, done.text);
    return;
  }
  bool named = false;  // the error already names its task
  try {
    std::vector<std::vector<FileEntry>> by_task(n);
    for (int t = 1; t < n; ++t) {
      named = true;
      const Vote v = votes.wait(str_cat("written/", t), str_cat("task ", t), str_cat("write its shards of ", sdir));
      if (v.code != TPU_OK) throw from_task(sys, t, v);
      by_task[t] = parse_files_text(v.text, num_tables, t);
      named = false;
    }
    by_task[0] = mine;
    Manifest m = build_manifest(sys, step, by_task);
    m.tensors = std::move(tensor_entries);
    m.tensor_file = tensor_file;
    DurableFile f(sdir, kManifestName, "0");
    const std::string text = manifest_to_json(m);
    f.write(text.data(), text.size());
    f.finish();
  } catch (const Error& e) {
    votes.post("done", vote(e.code(), named ? e.message() : from_task(sys, 0, {e.code(), e.message()}).message()));
    throw;
  }
  votes.post("done", vote(TPU_OK, ""));
  if (keep > 0) remove_old(dir, step, keep);
}

int64_t latest(const std::string& dir) {
  for (int64_t s : list_steps(dir)) {
    try {
      if (read_manifest(step_dir(dir, s)).step == s) return s;
    } catch (const Error&) {
      // not complete: the previous one is the newest
    }
  }
  fail(TPU_NOT_FOUND, "no complete checkpoint in ", dir);
}

int64_t restore(System& sys, const std::string& dir, int64_t step, const std::vector<std::string>& names,
                int64_t timeout_ms, std::vector<tpu_tensor*>* out) {
  const int me = sys.task_id(), n = sys.num_tasks(), cores = sys.num_cores();
  Votes votes(sys, "restore", timeout_ms);
  Engine* e = sys.embedding();
  Manifest m;
  std::vector<OldTable> old;  // by system table
  std::unique_ptr<MappedFile> tensor_file;
  std::vector<const TensorEntry*> wanted;
  std::string sdir;
  try {
    sys.between_steps([] {});  // refused inside a computation
    const int64_t s = step >= 0 ? step : latest(dir);
    sdir = step_dir(dir, s);
    if (!has_manifest(sdir)) fail(TPU_NOT_FOUND, "no complete checkpoint of step ", s, " in ", dir, " (", sdir, "/",
                                  kManifestName, " is missing)");
    m = read_manifest(sdir);
    const std::string where = sdir + "/" + kManifestName;
    if (m.step != s) fail(TPU_DATA_LOSS, where, " names step ", m.step, ", its directory step ", s);
    check_config(m, e, where);
    for (const std::string& name : names) {
      auto it = std::find_if(m.tensors.begin(), m.tensors.end(), [&](const TensorEntry& t) { return t.name == name; });
      if (it == m.tensors.end()) fail(TPU_NOT_FOUND, where, " holds no tensor named '", name, "'");
      wanted.push_back(&*it);
    }
    if (!names.empty()) tensor_file = std::make_unique<MappedFile>(sdir, m.tensor_file);
    if (e != nullptr)
      for (size_t t = 0; t < e->config().tables.size(); ++t) {
        const TableSpec& spec = e->config().tables[t];
        const TableEntry& te = *std::find_if(m.tables.begin(), m.tables.end(),
                                             [&](const TableEntry& x) { return x.name == spec.name; });
        old.push_back(open_old_table(m, te, spec, sdir, me, cores));
      }
  } catch (const Error& err) {
    votes.post(str_cat("ready/", me), vote(err.code(), err.message()));
    throw;
  }
  votes.post(str_cat("ready/", me), vote(TPU_OK, std::to_string(m.step)));
  for (int t = 0; t < n; ++t) {
    if (t == me) continue;
    const Vote v = votes.wait(str_cat("ready/", t), str_cat("task ", t), str_cat("check checkpoint ", sdir));
    if (v.code != TPU_OK) throw from_task(sys, t, Vote{v.code, "refused the restore: " + v.text});
    if (v.text != std::to_string(m.step))
      fail(TPU_FAILED_PRECONDITION, "task ", t, " restores step ", v.text, ", this task step ", m.step,
           " (their newest complete checkpoints differ)");
  }

  std::vector<tpu_tensor*> made;
  try {
    for (const TensorEntry* te : wanted) {
      tpu_tensor* t = new_tensor_uninitialized(te->dtype, te->shape.data(), static_cast<int>(te->shape.size()));
      made.push_back(t);
      if (te->bytes) std::memcpy(t->data, tensor_file->data() + te->offset, te->bytes);
    }
    if (e != nullptr)
      sys.between_steps([&] {
        for (size_t t = 0; t < old.size(); ++t)
          load_table(*e, static_cast<int>(t), old[t], m.cores_per_task, me, cores);
      });
  } catch (...) {
    for (tpu_tensor* t : made) tpu_tensor_release(t);
    throw;
  }
  *out = std::move(made);
  return m.step;
}

}  // namespace checkpoint
}  // namespace tpurt
