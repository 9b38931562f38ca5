/* tpurt launch: starts N local tasks of one cluster with the environment DTensor's
 * multi-client resolver reads, prefixes every line they print with the task's index,
 * and takes them all down when one fails; with --max-restarts it then starts them
 * again on the tasks left (the restart's rules here, its log in launch_elastic.c; the command
 * line in launch_options.c).
 *
 * The tasks share one new process group (led by task 0) so that a kill(-pgid) also
 * reaches whatever they started. Task 0 is observed with WNOWAIT and reaped only once
 * every task has ended: until then its zombie keeps the group's id from being reused,
 * so kill(-pgid) never reaches a stranger. On Linux the launcher is also a child subreaper: what a task
 * leaves behind is reparented to the launcher, which reaps it before exiting. */
#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <netinet/in.h>

#include "common.h"
#include "launch_elastic.h"
#include "launch_options.h"
#include "launch_output.h"

/* Between SIGTERM and SIGKILL. */
#define GRACE_SECONDS 5.0
/* After SIGKILL: how long the pipes may stay open, and how long a task may take to die
 * before the launcher gives up on it (only a task stuck in the kernel takes that long). */
#define DRAIN_SECONDS 1.0
#define GIVE_UP_SECONDS 10.0


typedef struct task {
  pid_t pid;
  int running;
  siginfo_t end;  /* how it ended, once !running */
  out_stream out, err;
} task;

/* ---- Signals: the handlers only record and wake poll() through a pipe ---------- */

static volatile sig_atomic_t pending_signal;  /* the last SIGINT/SIGTERM/SIGHUP */
static volatile sig_atomic_t signal_count;
static int wake_pipe[2] = {-1, -1};

static void wake(void) {
  int saved = errno;
  ssize_t ignored = write(wake_pipe[1], "x", 1);  /* full pipe: already awake */
  (void)ignored;
  errno = saved;
}

static void on_stop_signal(int sig) {
  pending_signal = sig;
  signal_count++;
  wake();
}

static void on_child(int sig) { wake(); }

static const int forwarded_signals[] = {SIGINT, SIGTERM, SIGHUP};
#define NUM_FORWARDED (sizeof forwarded_signals / sizeof forwarded_signals[0])

static void install_handlers(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sa.sa_handler = on_stop_signal;
  for (size_t i = 0; i < NUM_FORWARDED; i++) sigaction(forwarded_signals[i], &sa, NULL);
  sa.sa_handler = on_child;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, NULL);
  /* A closed stdout must not kill the launcher while its tasks run. */
  sa.sa_handler = SIG_IGN;
  sa.sa_flags = 0;
  sigaction(SIGPIPE, &sa, NULL);
}

/* ---- Ports and the environment ----------------------------------------------------- */

/* N distinct free ports on `host` (bind_free_ports). The sockets stay open in `sockets`
 * until just before the tasks start; between that close and a task's own bind another
 * process could take the port, a small race --port-base avoids. */
static void pick_ports(const char *host, int n, int *ports, int *sockets) {
  struct addrinfo hints, *ai = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host, "0", &hints, &ai);
  if (rc) {
    fprintf(stderr, "tpurt launch: --host '%s': %s\n", host, gai_strerror(rc));
    exit(EXIT_USAGE);
  }
  int bound = bind_free_ports(ai->ai_addr, ai->ai_addrlen, n, ports, sockets);
  if (bound < n) {
    int e = errno;
    fprintf(stderr, "tpurt launch: cannot pick a free port on '%s' (%d of %d): %s%s\n", host,
            bound + 1, n, strerror(e), e == EADDRNOTAVAIL ? "; use --port-base" : "");
    exit(1);
  }
  freeaddrinfo(ai);
}

static char *jobs_list(const char *host, int n, const int *ports) {
  /* An IPv6 literal is bracketed so that its colons do not read as the port's. */
  int bracket = strchr(host, ':') != NULL;
  size_t cap = (size_t)n * (strlen(host) + 10) + 1;
  char *jobs = xcalloc(cap, 1), *p = jobs;
  for (int i = 0; i < n; i++)
    p += snprintf(p, cap - (size_t)(p - jobs), "%s%s%s%s:%d", i ? "," : "", bracket ? "[" : "",
                  host, bracket ? "]" : "", ports[i]);
  return jobs;
}

static void set_env(const char *name, const char *value) {
  if (setenv(name, value, 1)) {
    fprintf(stderr, "tpurt launch: cannot set %s: %s\n", name, strerror(errno));
    exit(1);
  }
}

/* The launcher's own environment becomes the tasks' (the launcher itself reads none of
 * it), so a child only execs; DTENSOR_CLIENT_ID is set before each fork. */
static void prepare_environment(const launch_options *o, int count, const char *jobs) {
  char number[32];
  set_env("DTENSOR_JOBS", jobs);
  set_env("DTENSOR_JOB_NAME", "worker");
  snprintf(number, sizeof number, "%d", count);
  set_env("TPURT_LAUNCH_TASKS", number);
  if (o->cores_per_task) {
    snprintf(number, sizeof number, "%d", o->cores_per_task);
    set_env("TPURT_NUM_CORES", number);
  }
  /* AUTO resolution takes DTENSOR_JOBS before these anyway; they are removed so that a
   * program asking for a source by name, or a tool that looks at them (a Slurm or MPI
   * launch inside this one), does not see another cluster. */
  unsetenv("TF_CONFIG");
  unsetenv("SLURM_JOB_ID");
  unsetenv("OMPI_COMM_WORLD_SIZE");
}

/* ---- Starting the tasks -------------------------------------------------------------- */

typedef struct launcher {
  const launch_options *options;
  task *tasks;
  int count;              /* this run's tasks: -n, fewer after an elastic restart */
  int started;
  double deadline;        /* --timeout over every run; 0: none */
  int cause;              /* the first task to fail on its own, -1: none */
  double cause_at;        /* when the launcher saw it end */
  int lost;               /* tasks killed by a signal the launcher did not send */
  int first_lost;         /* the first of them, -1: none */
  int start_failed;       /* a task could not start: no restart helps */
  int timed_out;
  pid_t pgid;             /* task 0's pid once started */
  int failures;
  char first_failure[256]; /* "" until a task fails */
  struct rlimit nofile;   /* the limit the launcher was started with, for the tasks */
  int cpus[CPU_SETSIZE];  /* the launcher's CPUs, in order, that --bind spreads over */
  int num_cpus;
  int devnull;
} launcher;

static void record_failure(launcher *l, const char *message) {
  if (l->failures++ == 0) snprintf(l->first_failure, sizeof l->first_failure, "%s", message);
  if (l->failures == 1 || l->options->keep_going) fprintf(stderr, "tpurt launch: %s\n", message);
}

/* In the child, between fork and exec: only async-signal-safe calls. */
static void exec_task(const launcher *l, int out_w, int err_w, int exec_w,
                      const sigset_t *mask, const cpu_set_t *cpus) {
  setpgid(0, l->pgid);  /* 0 for task 0: a new group with its own pid */
  if (cpus && sched_setaffinity(0, sizeof *cpus, cpus) != 0) {
    int e = errno;
    ssize_t ignored = write(exec_w, &e, sizeof e);
    (void)ignored;
    _exit(127);
  }
  if (dup2(l->devnull, STDIN_FILENO) < 0 || dup2(out_w, STDOUT_FILENO) < 0 ||
      dup2(err_w, STDERR_FILENO) < 0) {
    int e = errno;
    ssize_t ignored = write(exec_w, &e, sizeof e);
    (void)ignored;
    _exit(127);
  }
  /* Caught signals revert to the default at exec, ignored ones do not. */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_DFL;
  for (size_t i = 0; i < NUM_FORWARDED; i++) sigaction(forwarded_signals[i], &sa, NULL);
  sigaction(SIGCHLD, &sa, NULL);
  sigaction(SIGPIPE, &sa, NULL);
  sigprocmask(SIG_SETMASK, mask, NULL);
  setrlimit(RLIMIT_NOFILE, &l->nofile);
  execvp(l->options->program[0], l->options->program);
  int e = errno;
  ssize_t ignored = write(exec_w, &e, sizeof e);
  (void)ignored;
  _exit(127);
}

static int make_pipe(int fds[2]) { return pipe2(fds, O_CLOEXEC); }

/* Starts task i; 0 on success. A failure to start is recorded (the caller stops). */
static int start_task(launcher *l, int i) {
  task *t = &l->tasks[i];
  int out[2] = {-1, -1}, err[2] = {-1, -1}, exec_pipe[2] = {-1, -1};
  char id[16], message[256];
  snprintf(id, sizeof id, "%d", i);
  set_env("DTENSOR_CLIENT_ID", id);
  cpu_set_t share;
  const cpu_set_t *cpus = NULL;
  if (l->options->bind && l->options->cores_per_task && l->num_cpus > 0) {
    CPU_ZERO(&share);
    for (int j = 0; j < l->options->cores_per_task; j++)
      CPU_SET(l->cpus[((long)i * l->options->cores_per_task + j) % l->num_cpus], &share);
    cpus = &share;
  }
  if (make_pipe(out) || make_pipe(err) || make_pipe(exec_pipe)) {
    snprintf(message, sizeof message, "task %d: cannot make its pipes: %s", i, strerror(errno));
    goto fail;
  }
  /* Blocked across fork so that a child never runs the launcher's handlers. */
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, &old);
  pid_t pid = fork();
  if (pid == 0) exec_task(l, out[1], err[1], exec_pipe[1], &old, cpus);
  int fork_errno = errno;
  if (pid > 0) {
    /* Also from here: whichever of the two setpgid calls comes first makes it so. */
    if (i == 0) l->pgid = pid;
    setpgid(pid, l->pgid);
  }
  sigprocmask(SIG_SETMASK, &old, NULL);
  if (pid < 0) {
    snprintf(message, sizeof message, "task %d: cannot fork: %s", i, strerror(fork_errno));
    goto fail;
  }
  t->pid = pid;
  t->running = 1;
  l->started++;
  close(out[1]);
  close(err[1]);
  close(exec_pipe[1]);
  t->out = (out_stream){out[0], STDOUT_FILENO, NULL, 0};
  t->err = (out_stream){err[0], STDERR_FILENO, NULL, 0};
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  fcntl(err[0], F_SETFL, O_NONBLOCK);
  /* The exec pipe closes at a successful exec, or carries execvp's errno. */
  int exec_errno = 0;
  ssize_t n;
  do n = read(exec_pipe[0], &exec_errno, sizeof exec_errno);
  while (n < 0 && errno == EINTR);
  close(exec_pipe[0]);
  if (n == (ssize_t)sizeof exec_errno) {
    /* Said here, on the launcher's stderr; its exit 127 is then the failure. */
    fprintf(stderr, "tpurt launch: task %d: cannot run '%s': %s\n", i, l->options->program[0],
            strerror(exec_errno));
    l->start_failed = 1;
    return -1;
  }
  return 0;

fail:
  for (int k = 0; k < 2; k++) {
    if (out[k] >= 0) close(out[k]);
    if (err[k] >= 0) close(err[k]);
    if (exec_pipe[k] >= 0) close(exec_pipe[k]);
  }
  l->start_failed = 1;
  record_failure(l, message);
  return -1;
}

/* ---- Supervision ----------------------------------------------------------------- */

static void describe_end(const task *t, int index, char *buf, size_t cap) {
  if (t->end.si_code == CLD_EXITED)
    snprintf(buf, cap, "task %d (pid %d) exited with status %d", index, (int)t->pid,
             t->end.si_status);
  else
    snprintf(buf, cap, "task %d (pid %d) was killed by signal %s (%d)%s", index, (int)t->pid,
             signal_name(t->end.si_status), t->end.si_status,
             t->end.si_code == CLD_DUMPED ? " (core dumped)" : "");
}

/* Notes the tasks that ended; returns how many are still running. Task 0 stays a zombie
 * (WNOWAIT) until the end: see the top of the file. `killed`: the launcher sent SIGKILL. */
static int reap(launcher *l, int stopping, int killed) {
  int running = 0;
  for (int i = 0; i < l->started; i++) {
    task *t = &l->tasks[i];
    if (!t->running) continue;
    siginfo_t info;
    memset(&info, 0, sizeof info);
    int flags = WEXITED | WNOHANG | (i == 0 ? WNOWAIT : 0);
    int rc = waitid(P_PID, (id_t)t->pid, &info, flags);
    if ((rc == 0 && info.si_pid == 0) || (rc < 0 && errno == EINTR)) {
      running++;
      continue;
    }
    t->running = 0;
    t->end = info;
    /* Lost even when the launcher was already stopping: a killed task's peers can see
     * its sockets close, and exit, before it is a zombie the launcher can see. */
    int sig = info.si_code == CLD_EXITED ? 0 : info.si_status;
    if (sig && !(stopping && sig == SIGTERM) && !(killed && sig == SIGKILL)) {
      if (l->first_lost < 0) l->first_lost = i;
      l->lost++;
    }
    /* Ends the launcher caused by stopping the tasks are not failures of their own. */
    if (!stopping && !(info.si_code == CLD_EXITED && info.si_status == 0)) {
      if (l->cause < 0) {
        l->cause = i;
        l->cause_at = now_seconds();
      }
      char message[256];
      describe_end(t, i, message, sizeof message);
      record_failure(l, message);
    }
  }
  return running;
}

static void signal_group(const launcher *l, int sig) {
  if (l->pgid <= 0) return;
  kill(-l->pgid, sig);
  /* A stopped task acts on SIGTERM only once continued (SIGKILL needs no help). */
  if (sig == SIGTERM) kill(-l->pgid, SIGCONT);
}

static int open_streams(const launcher *l) {
  int open = 0;
  for (int i = 0; i < l->started; i++)
    open += (l->tasks[i].out.fd >= 0) + (l->tasks[i].err.fd >= 0);
  return open;
}

static void print_still_running(const launcher *l) {
  char list[4096];
  size_t used = 0;
  int count = 0;
  list[0] = '\0';
  for (int i = 0; i < l->started; i++) {
    if (!l->tasks[i].running) continue;
    count++;
    if (used < sizeof list - 16)
      used += (size_t)snprintf(list + used, sizeof list - used, "%s%d", count > 1 ? ", " : "", i);
    else if (used < sizeof list - 1)
      used += (size_t)snprintf(list + used, sizeof list - used, ", ...");
  }
  fprintf(stderr, "tpurt launch: timeout after %g s; still running: task%s %s\n",
          l->options->timeout, count == 1 ? "" : "s", list);
}

/* Reaps every child left: task 0, and (as subreaper) what the tasks left behind, which
 * got SIGTERM with the group; the group gets SIGKILL once the grace is over. Bounded:
 * a leftover that left the group is given up after DRAIN_SECONDS past the SIGKILL (it
 * is then init's). */
static void reap_leftovers(const launcher *l, double term_at, double killed_at) {
  for (;;) {
    pid_t r = waitpid(-1, NULL, WNOHANG);
    if (r > 0 || (r < 0 && errno == EINTR)) continue;
    if (r < 0) return;  /* ECHILD: nothing left */
    double now = now_seconds();
    if (!killed_at && now >= term_at + GRACE_SECONDS) {
      signal_group(l, SIGKILL);
      killed_at = now;
    }
    if (killed_at && now >= killed_at + DRAIN_SECONDS) return;
    /* SIGCHLD wakes this; 50 ms bounds a missed one. */
    struct pollfd pfd = {wake_pipe[0], POLLIN, 0};
    if (poll(&pfd, 1, 50) > 0) {
      char drain[64];
      while (read(wake_pipe[0], drain, sizeof drain) > 0) {}
    }
  }
}

/* Runs until every task has ended and its pipes are closed (or the bounds below
 * pass); returns the launcher's exit status. */
static int supervise(launcher *l) {
  const launch_options *o = l->options;
  int n = l->started;
  struct pollfd *fds = xcalloc((size_t)(2 * n + 1), sizeof *fds);
  out_stream **streams = xcalloc((size_t)(2 * n + 1), sizeof *streams);
  int *owner = xcalloc((size_t)(2 * n + 1), sizeof *owner);
  double deadline = l->deadline;
  double term_at = 0, kill_at = 0, killed_at = 0;
  int stopping = l->failures > 0 && !o->keep_going;  /* a task failed to start */
  int forwarded = 0, signals_seen = 0, cleanup = 0, status = 0;
  if (stopping) {
    signal_group(l, SIGTERM);
    term_at = now_seconds();
  }
  for (;;) {
    int failures_before = l->failures;
    int running = reap(l, stopping, killed_at != 0);
    double now = now_seconds();
    if (l->failures > failures_before && !o->keep_going && !stopping) {
      stopping = 1;
      signal_group(l, SIGTERM);
      term_at = now;
    }
    if (signal_count != signals_seen) {
      signals_seen = signal_count;
      if (!forwarded) {
        forwarded = pending_signal;
        signal_group(l, forwarded);
        if (!stopping) term_at = now;
        stopping = 1;
      } else if (!killed_at) {
        kill_at = now;  /* a second signal: no more grace */
      }
    }
    if (deadline && now >= deadline && running && !stopping) {
      print_still_running(l);
      l->timed_out = 1;
      stopping = 1;
      signal_group(l, SIGTERM);
      term_at = now;
    }
    if (!running && !cleanup) {
      /* Whatever the tasks left behind in their group (their pipes' other holders,
       * or background children) goes too: nothing outlives the launch. */
      cleanup = 1;
      signal_group(l, SIGTERM);
      if (!term_at) term_at = now;
    }
    if (term_at && !kill_at) kill_at = term_at + GRACE_SECONDS;
    if (kill_at && now >= kill_at && !killed_at) {
      signal_group(l, SIGKILL);
      killed_at = now;
    }
    int open = open_streams(l);
    if (!running && !open) break;
    if (killed_at && !running && now >= killed_at + DRAIN_SECONDS) break;
    if (killed_at && now >= killed_at + GIVE_UP_SECONDS) {
      for (int i = 0; i < n; i++)
        if (l->tasks[i].running)
          fprintf(stderr, "tpurt launch: task %d (pid %d) survived SIGKILL for %g s; leaving it\n",
                  i, (int)l->tasks[i].pid, GIVE_UP_SECONDS);
      status = 1;
      break;
    }

    /* Sleep until output, a signal, or the next deadline (at most 1 s). */
    double next = now + 1.0;
    if (deadline && !stopping && deadline < next) next = deadline;
    if (kill_at && !killed_at && kill_at < next) next = kill_at;
    int nfds = 0;
    fds[nfds++] = (struct pollfd){wake_pipe[0], POLLIN, 0};
    for (int i = 0; i < n; i++) {
      out_stream *pair[2] = {&l->tasks[i].out, &l->tasks[i].err};
      for (int k = 0; k < 2; k++) {
        if (pair[k]->fd < 0) continue;
        streams[nfds] = pair[k];
        owner[nfds] = i;
        fds[nfds++] = (struct pollfd){pair[k]->fd, POLLIN, 0};
      }
    }
    int ms = (int)ceil((next - now) * 1000);
    if (poll(fds, (nfds_t)nfds, ms < 0 ? 0 : ms) <= 0) continue;
    if (fds[0].revents) {
      char drain[64];
      while (read(wake_pipe[0], drain, sizeof drain) > 0) {}
    }
    for (int k = 1; k < nfds; k++)
      if (fds[k].revents) read_stream(owner[k], streams[k]);
  }
  for (int i = 0; i < n; i++) {
    close_stream(i, &l->tasks[i].out);
    close_stream(i, &l->tasks[i].err);
  }
  reap_leftovers(l, term_at ? term_at : now_seconds(), killed_at);
  free(fds);
  free(streams);
  free(owner);

  if (forwarded) return 128 + forwarded;
  if (l->failures) {
    if (o->keep_going && l->failures > 1)
      fprintf(stderr, "tpurt launch: %d of %d tasks failed; the first: %s\n", l->failures,
              l->count, l->first_failure);
    return 1;
  }
  if (l->timed_out) return 1;
  return status;
}

/* fds 0-2 open (so no pipe lands there), and room for 2 pipes per task. */
static void prepare_descriptors(launcher *l, int tasks) {
  for (int fd = 0; fd <= 2; fd++)
    if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) < 0) exit(1);
  getrlimit(RLIMIT_NOFILE, &l->nofile);
  struct rlimit raised = l->nofile;
  rlim_t need = (rlim_t)(2 * tasks + 64);
  if (raised.rlim_cur != RLIM_INFINITY && raised.rlim_cur < need) {
    raised.rlim_cur = raised.rlim_max == RLIM_INFINITY || raised.rlim_max > need ? need
                                                                                 : raised.rlim_max;
    setrlimit(RLIMIT_NOFILE, &raised);
  }
  l->devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (l->devnull < 0 || pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK)) {
    fprintf(stderr, "tpurt launch: %s\n", strerror(errno));
    exit(1);
  }
}

/* Starts `l->count` tasks on fresh ports and supervises them; the exit status. */
static int run_tasks(launcher *l) {
  const launch_options *o = l->options;
  int n = l->count;
  memset(l->tasks, 0, (size_t)n * sizeof *l->tasks);
  l->started = l->failures = l->lost = l->start_failed = 0;
  l->pgid = 0;
  l->cause = l->first_lost = -1;
  l->first_failure[0] = '\0';
  int *ports = xcalloc((size_t)n, sizeof *ports);
  int *sockets = xcalloc((size_t)n, sizeof *sockets);
  if (o->port_base)
    for (int i = 0; i < n; i++) ports[i] = o->port_base + i;
  else
    pick_ports(o->host, n, ports, sockets);
  char *jobs = jobs_list(o->host, n, ports);
  prepare_environment(o, n, jobs);
  if (!o->port_base)
    for (int i = 0; i < n; i++) close(sockets[i]);  /* just before the tasks start */
  for (int i = 0; i < n; i++) {
    if (start_task(l, i) && !o->keep_going) break;
    if (signal_count) break;  /* interrupted while starting: supervise takes them down */
  }
  int status = supervise(l);
  free(ports);
  free(sockets);
  free(jobs);
  return status;
}

/* After a run that failed: 1 when it is to run again on l->count tasks (logged with its
 * cause), 0 when the launch ends (said why when it is the elastic rules). */
static int plan_restart(launcher *l, int restarts) {
  const launch_options *o = l->options;
  if (!o->max_restarts || l->cause < 0 || l->start_failed || l->timed_out || signal_count)
    return 0;
  char death[160], from[512];
  /* The task that died names the restart, not a peer that exited first. */
  int who = l->first_lost >= 0 ? l->first_lost : l->cause;
  describe_death(who, &l->tasks[who].end, death, sizeof death);
  int left = l->count - l->lost;
  if (restarts >= o->max_restarts) {
    fprintf(stderr, "tpurt launch: %s; no restart left (--max-restarts %d: all used); giving up\n",
            death, o->max_restarts);
    return 0;
  }
  if (left < o->min_tasks) {
    fprintf(stderr, "tpurt launch: %s; %d task%s left, fewer than --min-tasks %d; giving up\n",
            death, left, left == 1 ? "" : "s", o->min_tasks);
    return 0;
  }
  describe_resume(o->checkpoint_dir, from, sizeof from);
  /* On stderr with the failures it follows; flushed, the relay writes with write(2). */
  fprintf(stderr, "tpurt launch: %s; restarting on %d task%s%s (restart %d of %d)\n", death,
          left, left == 1 ? "" : "s", from, restarts + 1, o->max_restarts);
  fflush(stderr);
  l->count = left;
  progress_new_run(l->cause_at);
  return 1;
}

static int cmd_launch(int argc, char **argv) {
  launch_options o;
  if (launch_parse_options(argc, argv, &o)) return print_usage(launch_usage);
  launcher l;
  memset(&l, 0, sizeof l);
  l.options = &o;
  l.count = o.tasks;
  l.deadline = o.timeout > 0 ? now_seconds() + o.timeout : 0;
  l.tasks = xcalloc((size_t)o.tasks, sizeof *l.tasks);
  prepare_descriptors(&l, o.tasks);
  cpu_set_t mine;
  if (sched_getaffinity(0, sizeof mine, &mine) == 0)
    for (int c = 0; c < CPU_SETSIZE; c++)
      if (CPU_ISSET(c, &mine)) l.cpus[l.num_cpus++] = c;
  install_handlers();
  set_line_hook(progress_line);
#ifdef PR_SET_CHILD_SUBREAPER
  prctl(PR_SET_CHILD_SUBREAPER, 1);
#endif
  int status = run_tasks(&l);
  for (int restarts = 0; status == 1 && plan_restart(&l, restarts); restarts++)
    status = run_tasks(&l);
  free(l.tasks);
  return status;
}

const tool_command launch_command = {
    "launch", "start N local tasks of one cluster (DTensor environment) and supervise them",
    launch_usage, cmd_launch};
