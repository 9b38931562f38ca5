/* tpurt launch's elastic restarts (launch_elastic.h): what the tasks report of their
 * progress, and the time from a death to the first step after the restart. */
#define _GNU_SOURCE

#include "launch_elastic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "common.h"

#include <tpurt/checkpoint.h>

static long last_step = -1;   /* the last step any task reported done, over every run */
static long checkpoint = -1;  /* steps in the newest complete checkpoint */
static long restored = -1;    /* this run's checkpoint, once a task said so */
static double death_at;       /* 0: this run is the first, or its time was printed */

/* "KEY N" at text: N, or -1 when the line is not that. */
static long value_of(const char *text, size_t len, const char *key) {
  size_t k = strlen(key);
  if (len <= k + 1 || memcmp(text, key, k) || text[k] != ' ') return -1;
  char number[24];
  size_t n = len - k - 1;
  if (n >= sizeof number) return -1;
  memcpy(number, text + k + 1, n);
  number[n] = '\0';
  char *end;
  long v = strtol(number, &end, 10);
  return *end || v < 0 ? -1 : v;
}

const char *signal_name(int sig) {
  static const struct { int sig; const char *name; } names[] = {
      {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
      {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
      {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGCHLD, "SIGCHLD"},
      {SIGCONT, "SIGCONT"}, {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"}, {SIGTTIN, "SIGTTIN"},
      {SIGTTOU, "SIGTTOU"}, {SIGURG, "SIGURG"},   {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"},
      {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGWINCH, "SIGWINCH"}, {SIGSYS, "SIGSYS"}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (names[i].sig == sig) return names[i].name;
  return "signal";
}

int progress_line(int index, const char *text, size_t len) {
  (void)index;
  size_t p = strlen(PROGRESS_PREFIX);
  if (len < p || memcmp(text, PROGRESS_PREFIX, p)) return 0;
  text += p;
  len -= p;
  long v;
  if ((v = value_of(text, len, "step")) >= 0) {
    if (v > last_step || death_at) last_step = v;
    if (death_at) {
      /* Said once per restart, by the first task to finish a step after it. */
      fprintf(stderr, "tpurt launch: %.2f s from the death to the first step after the restore "
             "(step %ld%s)\n", now_seconds() - death_at, v,
             restored >= 0 ? "" : "; no restore was reported");
      death_at = 0;
    }
  } else if ((v = value_of(text, len, "checkpoint")) >= 0) {
    if (v > checkpoint) checkpoint = v;
  } else if ((v = value_of(text, len, "restored")) >= 0) {
    restored = v;
  } else {
    return 0;  /* not one of ours: relayed as it is */
  }
  return 1;
}

void progress_new_run(double when) {
  death_at = when;
  restored = -1;
}

void describe_death(int index, const siginfo_t *how, char *buf, size_t cap) {
  char what[64], when[48];
  if (how->si_code == CLD_EXITED)
    snprintf(what, sizeof what, "exited with status %d", how->si_status);
  else
    snprintf(what, sizeof what, "died (%s)", signal_name(how->si_status));
  if (last_step >= 0) snprintf(when, sizeof when, " at step %ld", last_step + 1);
  else snprintf(when, sizeof when, " before any step was reported");
  snprintf(buf, cap, "task %d %s%s", index, what, when);
}

void describe_resume(const char *dir, char *buf, size_t cap) {
  if (dir) {
    /* The tasks have all ended: what is on disk now is what the restart restores, even
     * a save that completed after its last progress line. */
    int64_t step;
    tpu_status status = tpu_checkpoint_latest(dir, &step);
    if (status == TPU_OK)
      snprintf(buf, cap, " from the checkpoint of step %lld", (long long)step);
    else if (status == TPU_NOT_FOUND)
      snprintf(buf, cap, " from the start (no complete checkpoint in %s)", dir);
    else
      snprintf(buf, cap, " (its checkpoint: %s)", tpu_last_error());
  } else if (checkpoint >= 0) {
    snprintf(buf, cap, " from the checkpoint of step %ld (the newest reported)", checkpoint);
  } else {
    snprintf(buf, cap, " from the start (no checkpoint reported)");
  }
}
