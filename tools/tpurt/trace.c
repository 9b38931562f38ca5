/* tpurt trace: joins the tasks' traces (TPURT_TRACE) into one timeline, and says where
 * a trace's time went. The files are Chrome trace-event JSON (docs/TRACING.md); each
 * is checked event by event, and one that is not a trace is refused by name. */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* A trace's size bound: larger files are refused before they are read. */
#define MAX_TRACE_BYTES ((size_t)1 << 30)

static const char trace_usage[] =
    "usage: tpurt trace merge FILE... -o OUT   join the tasks' traces into one timeline\n"
    "       tpurt trace summary FILE            where the time went: per collective kind the\n"
    "                                           time moving against the time waiting, and\n"
    "                                           the participants that kept the others waiting\n"
    "Traces come from TPURT_TRACE=path (or tpu_system_options.trace_path); docs/TRACING.md.\n";

static void refuse(const char *file, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void refuse(const char *file, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "tpurt trace: %s: ", file);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

/* The file's text. A trace whose process died before shutdown lacks the array's "]":
 * the caller retries with one added. */
static char *read_text(const char *file, size_t *len) {
  FILE *f = fopen(file, "rb");
  if (f == NULL) refuse(file, "cannot be read (%s)", strerror(errno));
  if (fseek(f, 0, SEEK_END) != 0) refuse(file, "cannot be read (not a regular file)");
  long size = ftell(f);
  if (size < 0 || (size_t)size > MAX_TRACE_BYTES)
    refuse(file, "is %ld bytes; a trace is at most %zu", size, MAX_TRACE_BYTES);
  rewind(f);
  char *text = malloc((size_t)size + 3);
  if (text == NULL) refuse(file, "out of memory for %ld bytes", size);
  *len = fread(text, 1, (size_t)size, f);
  fclose(f);
  return text;
}

/* Checks one event: an object with a string "ph", integer "pid" and "tid", and, for
 * spans (X) and instants (i), a string "name" and a number "ts" ("dur" >= 0 for X). */
static void check_event(const char *file, size_t i, json_t *e) {
  if (!json_is_object(e)) refuse(file, "event %zu is not a JSON object", i);
  const char *ph = json_string_value(json_object_get(e, "ph"));
  if (ph == NULL) refuse(file, "event %zu has no string \"ph\"", i);
  if (!json_is_integer(json_object_get(e, "pid")) || !json_is_integer(json_object_get(e, "tid")))
    refuse(file, "event %zu has no integer \"pid\" and \"tid\"", i);
  if (strcmp(ph, "X") != 0 && strcmp(ph, "i") != 0) return;
  if (!json_is_string(json_object_get(e, "name"))) refuse(file, "event %zu has no string \"name\"", i);
  if (!json_is_number(json_object_get(e, "ts"))) refuse(file, "event %zu has no number \"ts\"", i);
  if (ph[0] == 'X') {
    json_t *dur = json_object_get(e, "dur");
    if (!json_is_number(dur) || json_number_value(dur) < 0)
      refuse(file, "event %zu (a span) has no \"dur\" >= 0", i);
  }
}

/* The trace's events (a new reference): the JSON array, or the "traceEvents" of an
 * object, each event checked. */
static json_t *load_trace(const char *file) {
  size_t len;
  char *text = read_text(file, &len);
  json_error_t err;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
  if (root == NULL) {
    size_t n = len;
    while (n > 0 && strchr(" \t\r\n,", text[n - 1])) --n;  /* an unfinished array */
    memcpy(text + n, "\n]", 2);
    root = json_loadb(text, n + 2, JSON_REJECT_DUPLICATES, NULL);
  }
  free(text);
  if (root == NULL) refuse(file, "is not JSON (line %d, column %d: %s)", err.line, err.column, err.text);
  json_t *events = root;
  if (json_is_object(root)) events = json_object_get(root, "traceEvents");
  if (!json_is_array(events)) {
    json_decref(root);
    refuse(file, "is not a trace: neither an array of events nor an object with \"traceEvents\"");
  }
  json_incref(events);
  json_decref(root);
  for (size_t i = 0; i < json_array_size(events); ++i) check_event(file, i, json_array_get(events, i));
  return events;
}

/* The task (pid) a trace's events belong to, or -1 for none. */
static json_int_t task_of(const json_t *events) {
  for (size_t i = 0; i < json_array_size(events); ++i) {
    json_t *e = json_array_get(events, i);
    if (!strcmp(json_string_value(json_object_get(e, "ph")), "M"))
      return json_integer_value(json_object_get(e, "pid"));
  }
  return -1;
}

static int cmd_merge(int argc, char **argv) {
  const char *out = NULL;
  const char *files[argc];
  int n = 0;
  for (int i = 2; i < argc; ++i) {
    if (!strcmp(argv[i], "-o")) {
      if (i + 1 == argc) usage_error("trace", "-o needs the output file");
      out = argv[++i];
    } else {
      files[n++] = argv[i];
    }
  }
  if (n == 0 || out == NULL) usage_error("trace", "merge needs FILE... and -o OUT");
  json_t *all = json_array();
  json_int_t tasks[n];
  for (int f = 0; f < n; ++f) {
    json_t *events = load_trace(files[f]);
    tasks[f] = task_of(events);
    for (int g = 0; g < f; ++g)
      if (tasks[f] >= 0 && tasks[g] == tasks[f])
        refuse(files[f], "holds task %lld, as %s does: merge one trace per task", (long long)tasks[f],
               files[g]);
    json_array_extend(all, events);
    json_decref(events);
  }
  /* One event a line: readable, and diffable. */
  FILE *o = fopen(out, "w");
  if (o == NULL) refuse(out, "cannot be written (%s)", strerror(errno));
  fputs("[\n", o);
  for (size_t i = 0; i < json_array_size(all); ++i) {
    char *line = json_dumps(json_array_get(all, i), JSON_COMPACT);
    fprintf(o, "%s%s\n", line, i + 1 < json_array_size(all) ? "," : "");
    free(line);
  }
  fputs("]\n", o);
  if (fclose(o) != 0) refuse(out, "cannot be written (%s)", strerror(errno));
  printf("%zu events from %d trace%s in %s\n", json_array_size(all), n, n == 1 ? "" : "s", out);
  json_decref(all);
  return 0;
}

/* ---- summary ---------------------------------------------------------------------- */

typedef struct {
  const char *kind;
  long count;
  double bytes, total_us, wait_us, move_us;
} kind_stats;

typedef struct {
  json_int_t pid, tid;
  char name[96];
  double kept_waiting_us; /* summed over the collectives it came to last */
  long times;
  json_int_t steps[16]; /* the first steps where it kept the others waiting */
  int num_steps;
} participant_stats;

/* One collective as each participant met it: step and seq identify it across tasks. */
typedef struct {
  json_int_t step, seq;
  int participant; /* index into participants */
  double wait_us;
} meeting;

static int by_meeting(const void *a, const void *b) {
  const meeting *x = a, *y = b;
  if (x->step != y->step) return x->step < y->step ? -1 : 1;
  if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1;
  return 0;
}

static double arg_number(json_t *e, const char *key) {
  return json_number_value(json_object_get(json_object_get(e, "args"), key));
}

static int participant_index(participant_stats **ps, int *n, json_int_t pid, json_int_t tid) {
  for (int i = 0; i < *n; ++i)
    if ((*ps)[i].pid == pid && (*ps)[i].tid == tid) return i;
  *ps = realloc(*ps, sizeof **ps * (size_t)(*n + 1));
  if (*ps == NULL) refuse("summary", "out of memory");
  participant_stats *p = &(*ps)[*n];
  memset(p, 0, sizeof *p);
  p->pid = pid;
  p->tid = tid;
  snprintf(p->name, sizeof p->name, "task %lld participant %lld", (long long)pid, (long long)tid - 1);
  return (*n)++;
}

static int by_kept_waiting(const void *a, const void *b) {
  const participant_stats *x = a, *y = b;
  return (x->kept_waiting_us < y->kept_waiting_us) - (x->kept_waiting_us > y->kept_waiting_us);
}

static int cmd_summary(int argc, char **argv) {
  if (argc != 3) usage_error("trace", "summary needs exactly one FILE");
  const char *file = argv[2];
  json_t *events = load_trace(file);
  kind_stats kinds[16];
  int num_kinds = 0;
  participant_stats *ps = NULL;
  int num_ps = 0;
  size_t n = json_array_size(events);
  meeting *meetings = malloc(sizeof *meetings * (n ? n : 1));
  size_t num_meetings = 0;
  long steps = 0, failed_steps = 0;
  double step_us = 0;
  json_int_t step_pid = -1;  /* steps are counted on the first task's row */

  for (size_t i = 0; i < n; ++i) {
    json_t *e = json_array_get(events, i);
    const char *ph = json_string_value(json_object_get(e, "ph"));
    const char *name = json_string_value(json_object_get(e, "name"));
    const char *cat = json_string_value(json_object_get(e, "cat"));
    json_int_t pid = json_integer_value(json_object_get(e, "pid"));
    json_int_t tid = json_integer_value(json_object_get(e, "tid"));
    if (!strcmp(ph, "M") && name && !strcmp(name, "thread_name") && tid > 0) {
      const char *tn = json_string_value(json_object_get(json_object_get(e, "args"), "name"));
      const int p = participant_index(&ps, &num_ps, pid, tid);
      if (tn) snprintf(ps[p].name, sizeof ps[p].name, "task %lld %s", (long long)pid, tn);
      continue;
    }
    if (strcmp(ph, "X") != 0 || cat == NULL) continue;
    double dur = json_number_value(json_object_get(e, "dur"));
    if (!strcmp(cat, "step")) {
      if (step_pid < 0) step_pid = pid;
      if (pid != step_pid) continue;
      const char *verdict = json_string_value(json_object_get(json_object_get(e, "args"), "verdict"));
      ++steps;
      step_us += dur;
      if (verdict == NULL || strcmp(verdict, "OK") != 0) ++failed_steps;
      continue;
    }
    if (strcmp(cat, "collective") != 0) continue;
    json_t *args = json_object_get(e, "args");
    if (!json_is_object(args) || !json_is_number(json_object_get(args, "wait_us")) ||
        !json_is_number(json_object_get(args, "move_us")) || !json_is_integer(json_object_get(args, "step")) ||
        !json_is_integer(json_object_get(args, "seq")))
      refuse(file, "event %zu (collective '%s') lacks the numbers step, seq, wait_us and move_us", i, name);
    int k = 0;
    while (k < num_kinds && strcmp(kinds[k].kind, name) != 0) ++k;
    if (k == num_kinds) {
      if (num_kinds == 16) refuse(file, "has more than 16 kinds of collective ('%s')", name);
      kinds[num_kinds++] = (kind_stats){name, 0, 0, 0, 0, 0};
    }
    kinds[k].count++;
    kinds[k].bytes += arg_number(e, "bytes");
    kinds[k].total_us += dur;
    kinds[k].wait_us += arg_number(e, "wait_us");
    kinds[k].move_us += arg_number(e, "move_us");
    meetings[num_meetings++] = (meeting){json_integer_value(json_object_get(args, "step")),
                                         json_integer_value(json_object_get(args, "seq")),
                                         participant_index(&ps, &num_ps, pid, tid), arg_number(e, "wait_us")};
  }

  /* Stragglers: in each collective the participant that came last waited least; the
   * others waited for it, the longest of them as long as it kept them. */
  qsort(meetings, num_meetings, sizeof *meetings, by_meeting);
  for (size_t a = 0; a < num_meetings;) {
    size_t b = a;
    while (b < num_meetings && by_meeting(&meetings[a], &meetings[b]) == 0) ++b;
    if (b - a > 1) {
      size_t last = a;
      double longest = 0;
      for (size_t m = a; m < b; ++m)
        if (meetings[m].wait_us < meetings[last].wait_us) last = m;
      for (size_t m = a; m < b; ++m)
        if (m != last && meetings[m].wait_us > longest) longest = meetings[m].wait_us;
      participant_stats *p = &ps[meetings[last].participant];
      p->kept_waiting_us += longest;
      p->times++;
      if (p->num_steps < 16 && (p->num_steps == 0 || p->steps[p->num_steps - 1] != meetings[a].step))
        p->steps[p->num_steps++] = meetings[a].step;
    }
    a = b;
  }

  printf("%s: %ld step%s (%ld failed), %.3f ms in steps (task %lld)\n\n", file, steps, steps == 1 ? "" : "s",
         failed_steps, step_us / 1000, (long long)(step_pid < 0 ? 0 : step_pid));
  printf("%-20s %7s %12s %12s %12s %8s\n", "collective", "calls", "bytes", "moving ms", "waiting ms", "waiting");
  for (int k = 0; k < num_kinds; ++k) {
    const kind_stats *s = &kinds[k];
    const double sum = s->wait_us + s->move_us;
    printf("%-20s %7ld %12.0f %12.3f %12.3f %7.1f%%\n", s->kind, s->count, s->bytes, s->move_us / 1000,
           s->wait_us / 1000, sum > 0 ? 100 * s->wait_us / sum : 0);
  }
  qsort(ps, (size_t)num_ps, sizeof *ps, by_kept_waiting);
  printf("\nstragglers (who came last to collectives, and how long the others waited for them):\n");
  int shown = 0;
  for (int i = 0; i < num_ps && shown < 5; ++i) {
    if (ps[i].times == 0) continue;
    printf("  %-32s kept the others waiting %.3f ms in %ld collective%s; steps", ps[i].name,
           ps[i].kept_waiting_us / 1000, ps[i].times, ps[i].times == 1 ? "" : "s");
    for (int s = 0; s < ps[i].num_steps; ++s) printf("%s %lld", s ? "," : "", (long long)ps[i].steps[s]);
    printf("%s\n", ps[i].num_steps == 16 ? ", ..." : "");
    ++shown;
  }
  if (shown == 0) printf("  none: no collective had two participants\n");
  free(meetings);
  free(ps);
  json_decref(events);
  return 0;
}

static int cmd_trace(int argc, char **argv) {
  if (argc < 2) usage_error("trace", "needs merge or summary");
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    fputs(trace_usage, stdout);
    return 0;
  }
  if (!strcmp(argv[1], "merge")) return cmd_merge(argc, argv);
  if (!strcmp(argv[1], "summary")) return cmd_summary(argc, argv);
  usage_error("trace", "'%s' is not merge or summary", argv[1]);
}

const tool_command trace_command = {"trace", "join the tasks' traces; say where a step's time went",
                                    trace_usage, cmd_trace};
