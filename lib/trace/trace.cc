#include "trace/trace.h"

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <utility>

#include "core/deadline.h"
#include "core/status.h"
#include "core/tensor.h"  // tpu_tensor::byte_size
#include "topology/group_assignment.h"

namespace tpurt {
namespace trace {

std::atomic<bool> g_on{false};

namespace {

std::atomic<Recorder*> g_recorder{nullptr};

// The participant this thread runs, and the collective it is inside.
struct ThreadState {
  std::shared_ptr<Buffer> buffer;  // NULL: not a participant's thread
  int tid = 0;
  int64_t step = 0;
  int64_t seq = 0;            // collectives so far in this step
  bool in_collective = false;
  int64_t wait_ns = 0;        // of the current collective
  const char* algorithm = nullptr;
  int64_t computation_begin = 0;  // 0: none open
};
thread_local ThreadState t_state;

void append_escaped(std::string* out, const std::string& s) {
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c < 0x20) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\u%04x", c);
      out->append(hex);
    } else {
      out->push_back(static_cast<char>(c));
    }
  }
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  append_escaped(&out, s);
  out.push_back('"');
  return out;
}

void push(Event e) {
  Buffer& b = *t_state.buffer;
  std::lock_guard<std::mutex> lock(b.mu);
  b.events.push_back(std::move(e));
}

}  // namespace

void install(Recorder* recorder) {
  g_recorder.store(recorder, std::memory_order_release);
  g_on.store(recorder != nullptr, std::memory_order_relaxed);
}

std::string Recorder::path_for_task(const std::string& path, int task, int num_tasks) {
  const size_t at = path.find("%t");
  if (at != std::string::npos) return path.substr(0, at) + std::to_string(task) + path.substr(at + 2);
  if (num_tasks <= 1) return path;
  const size_t slash = path.rfind('/');
  size_t dot = path.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) dot = path.size();
  return path.substr(0, dot) + ".task" + std::to_string(task) + path.substr(dot);
}

Recorder::Recorder(const std::string& path, int task, int num_tasks, int64_t offset_ns,
                   std::string transport, int num_cores)
    : task_(task), offset_ns_(offset_ns), transport_(std::move(transport)) {
  const std::string file = path_for_task(path, task, num_tasks);
  file_ = std::fopen(file.c_str(), "w");
  if (file_ == nullptr)
    invalid_argument("the trace path '", file, "' cannot be written: ", std::strerror(errno));
  buffers_.resize(static_cast<size_t>(num_cores));
  for (auto& b : buffers_) {
    b = std::make_shared<Buffer>();
    b->transport = transport_;
  }
  std::fprintf(file_,
               "[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"task %d\"}},\n"
               "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}},\n"
               "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"steps\"}},\n"
               "{\"name\":\"tpurt_trace\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"task\":%d,"
               "\"num_tasks\":%d,\"clock_offset_ns\":%" PRId64 ",\"transport\":%s}}",
               task, task, task, task, task, task, task, num_tasks, offset_ns, quoted(transport_).c_str());
  first_ = false;
}

Recorder::~Recorder() {
  std::lock_guard<std::mutex> lock(mu_);
  flush_locked();
  std::fputs("\n]\n", file_);
  std::fclose(file_);
}

void Recorder::write(const Event& e) {
  const double ts = static_cast<double>(e.ts_ns + offset_ns_) / 1000.0;
  std::fprintf(file_, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f",
               e.name, e.cat, e.dur_ns < 0 ? "i" : "X", task_, e.tid, ts);
  if (e.dur_ns >= 0) std::fprintf(file_, ",\"dur\":%.3f", static_cast<double>(e.dur_ns) / 1000.0);
  else std::fputs(",\"s\":\"t\"", file_);
  std::fprintf(file_, ",\"args\":{%s}}", e.args.c_str());
}

void Recorder::flush_locked() {
  std::vector<Event> events;
  for (auto& b : buffers_) {
    {
      std::lock_guard<std::mutex> lock(b->mu);
      events.swap(b->events);
    }
    for (const Event& e : events) write(e);
    events.clear();
  }
  std::fflush(file_);
}

void Recorder::begin_step() {
  std::lock_guard<std::mutex> lock(mu_);
  ++step_;
  step_begin_ns_ = now_ns();
}

void Recorder::end_step(int code, const std::string& message) {
  const int64_t end = now_ns();
  std::lock_guard<std::mutex> lock(mu_);
  std::string args = "\"step\":" + std::to_string(step_) + ",\"verdict\":" +
                     quoted(status_name(static_cast<tpu_status>(code)));
  if (code != TPU_OK) args += ",\"message\":" + quoted(message);
  write(Event{"step", "step", 0, step_begin_ns_, end - step_begin_ns_, args});
  write(Event{"verdict", "step", 0, end, -1, args});
  flush_locked();
}

void Recorder::enter(int core, int participant, int replica, int logical_core, int cores_per_replica) {
  const int tid = participant + 1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<size_t>(tid) >= named_.size()) named_.resize(tid + 1);
    if (!named_[tid]) {
      named_[tid] = true;
      std::string name = "replica " + std::to_string(replica);
      if (cores_per_replica > 1) name += " core " + std::to_string(logical_core);
      std::fprintf(file_,
                   ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}"
                   ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"sort_index\":%d}}",
                   task_, tid, name.c_str(), task_, tid, tid);
    }
  }
  t_state.buffer = buffers_[static_cast<size_t>(core) % buffers_.size()];
  t_state.tid = tid;
  t_state.step = step_;
  t_state.seq = 0;
  t_state.in_collective = false;
  t_state.computation_begin = now_ns();
}

void enter_slow(int core, int participant, int replica, int logical_core, int cores_per_replica) {
  if (Recorder* r = g_recorder.load(std::memory_order_acquire))
    r->enter(core, participant, replica, logical_core, cores_per_replica);
}

void leave_slow() { t_state.buffer.reset(); }

void computation_begins_slow() {
  if (t_state.buffer) t_state.computation_begin = now_ns();
}

void computation_ends_slow(int status) {
  if (!t_state.buffer || t_state.computation_begin == 0) return;
  span_end("computation", "compute", std::exchange(t_state.computation_begin, 0),
           "\"status\":" + quoted(status_name(static_cast<tpu_status>(status))));
}

int64_t span_begin() { return t_state.buffer ? now_ns() : 0; }

void span_end(const char* name, const char* cat, int64_t begin_ns, std::string args) {
  if (!t_state.buffer) return;
  const int64_t end = now_ns();
  std::string a = "\"step\":" + std::to_string(t_state.step);
  if (!args.empty()) a += "," + args;
  push(Event{name, cat, t_state.tid, begin_ns, end - begin_ns, std::move(a)});
}

int64_t collective_begin() {
  if (!t_state.buffer || t_state.in_collective) return 0;
  t_state.in_collective = true;
  t_state.wait_ns = 0;
  t_state.algorithm = nullptr;
  return now_ns();
}

void collective_end(const char* kind, int64_t begin_ns, const tpu_tensor* x,
                    const tpu_group_assignment* groups) {
  t_state.in_collective = false;
  if (!t_state.buffer) return;
  const int64_t end = now_ns();
  const int64_t dur = end - begin_ns;
  const int64_t wait = std::min(t_state.wait_ns, dur);
  std::string a = "\"step\":" + std::to_string(t_state.step) + ",\"seq\":" + std::to_string(++t_state.seq) +
                  ",\"bytes\":" + std::to_string(x ? x->byte_size : 0) +
                  ",\"group\":" + quoted(groups ? groups_text(*groups) : std::string("all")) +
                  ",\"algorithm\":" + quoted(t_state.algorithm ? t_state.algorithm : "in-process") +
                  ",\"transport\":" + quoted(t_state.buffer->transport);
  char times[96];
  std::snprintf(times, sizeof times, ",\"wait_us\":%.3f,\"move_us\":%.3f", wait / 1000.0, (dur - wait) / 1000.0);
  a += times;
  push(Event{kind, "collective", t_state.tid, begin_ns, dur, std::move(a)});
}

int64_t wait_begin() { return t_state.in_collective ? now_ns() : 0; }

void wait_end(int64_t begin_ns) { t_state.wait_ns += now_ns() - begin_ns; }

void note_algorithm_slow(const char* algorithm) {
  if (t_state.in_collective) t_state.algorithm = algorithm;
}

}  // namespace trace
}  // namespace tpurt
