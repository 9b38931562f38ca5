/* tpurt launch's command line: the usage text and the options, parsed and checked. */
#define _GNU_SOURCE

#include "launch_options.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

const char launch_usage[] =
    "usage: tpurt launch -n N [options] -- program [args...]\n"
    "Starts N local tasks of one cluster, each running `program args...`, and supervises\n"
    "them. Task i gets the environment DTensor's multi-client resolver reads:\n"
    "  DTENSOR_JOBS=H:p0,...,H:p(N-1)  DTENSOR_CLIENT_ID=i  DTENSOR_JOB_NAME=worker\n"
    "  TPURT_LAUNCH_TASKS=N  (and TPURT_NUM_CORES=C with --cores-per-task)\n"
    "TF_CONFIG, SLURM_JOB_ID and OMPI_COMM_WORLD_SIZE are removed from it. Every line a\n"
    "task prints is printed with the prefix \"[i] \", stdout to stdout, stderr to stderr;\n"
    "the tasks' stdin is /dev/null.\n"
    "\n"
    "  -n, --tasks N          number of tasks, 1 to 1024 (required)\n"
    "  --cores-per-task C     logical cores of each task (sets TPURT_NUM_CORES)\n"
    "  --bind MODE            with --cores-per-task C, where the tasks run: spread\n"
    "                         (default) binds task i to C of the launcher's CPUs, taken\n"
    "                         in turn (i*C to i*C+C-1, wrapping around), so tasks share\n"
    "                         CPUs evenly when they need more than there are; none leaves\n"
    "                         placement to the OS\n"
    "  --port-base P          task i listens on P+i (default: N free ports picked by\n"
    "                         binding to port 0)\n"
    "  --host H               the tasks' host in DTENSOR_JOBS (default 127.0.0.1)\n"
    "  --timeout SECONDS      kill every task and fail when they run longer\n"
    "  --keep-going           a failing task does not stop the others\n"
    "  --max-restarts K       elastic: when a task fails, stop the others and start the\n"
    "                         program again, at most K times (default 0)\n"
    "  --min-tasks M          elastic: a restart runs on the tasks left (a task killed\n"
    "                         by a signal is one fewer; one that exited, with its\n"
    "                         step's named error or any other, is not), and never on\n"
    "                         fewer than M (default: N, no fewer)\n"
    "  --checkpoint-dir DIR   elastic: the program's checkpoint directory; a restart's log\n"
    "                         names its newest complete checkpoint (tpu_checkpoint_latest)\n"
    "  -h, --help             this text\n"
    "As soon as a task exits non-zero or is killed by a signal, the others get SIGTERM,\n"
    "then SIGKILL 5 s later, and the launcher exits 1 naming that task. SIGINT, SIGTERM\n"
    "and SIGHUP are forwarded to the tasks; the launcher then exits 128 + the signal.\n"
    "With --max-restarts, each restart is logged with its cause (\"task 2 died (SIGKILL)\n"
    "at step 41; restarting on 3 tasks from the checkpoint of step 40\"): the steps come\n"
    "from lines the program prints, \"tpurt-progress: step N\" (step N is done),\n"
    "\"tpurt-progress: checkpoint N\" (a complete checkpoint of N steps) and\n"
    "\"tpurt-progress: restored N\", which the launcher reads and does not relay (with\n"
    "--checkpoint-dir the checkpoint's step is read from DIR instead); the\n"
    "program learns the new count from TPURT_LAUNCH_TASKS and DTENSOR_JOBS.\n"
    "Exit status: 0 every task exited 0, 1 a task failed (with no restart left, or\n"
    "fewer than --min-tasks left) or the timeout passed, 2 bad usage.\n";

enum { OPT_CORES_PER_TASK = 256, OPT_BIND, OPT_PORT_BASE, OPT_HOST, OPT_TIMEOUT, OPT_KEEP_GOING,
       OPT_MIN_TASKS, OPT_MAX_RESTARTS, OPT_CHECKPOINT_DIR };

/* Returns 1 after printing the help. Everything after the first "--" is the program;
 * getopt sees only what comes before it, so the program's own options stay its own. */
int launch_parse_options(int argc, char **argv, launch_options *o) {
  static const struct option longopts[] = {
      {"tasks", required_argument, NULL, 'n'},
      {"cores-per-task", required_argument, NULL, OPT_CORES_PER_TASK},
      {"bind", required_argument, NULL, OPT_BIND},
      {"port-base", required_argument, NULL, OPT_PORT_BASE},
      {"host", required_argument, NULL, OPT_HOST},
      {"timeout", required_argument, NULL, OPT_TIMEOUT},
      {"keep-going", no_argument, NULL, OPT_KEEP_GOING},
      {"min-tasks", required_argument, NULL, OPT_MIN_TASKS},
      {"max-restarts", required_argument, NULL, OPT_MAX_RESTARTS},
      {"checkpoint-dir", required_argument, NULL, OPT_CHECKPOINT_DIR},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  int dashes = 1;
  while (dashes < argc && strcmp(argv[dashes], "--")) dashes++;
  memset(o, 0, sizeof *o);
  o->host = "127.0.0.1";
  o->bind = 1;
  opterr = 0;
  /* '+': stop at the first operand instead of permuting it behind the options; ':':
   * our messages for a missing value. */
  for (int c; (c = getopt_long(dashes, argv, "+:n:h", longopts, NULL)) != -1;) {
    switch (c) {
      case 'n': o->tasks = (int)parse_long("launch", "-n", optarg, 1, MAX_TASKS); break;
      case OPT_CORES_PER_TASK:
        o->cores_per_task = (int)parse_long("launch", "--cores-per-task", optarg, 1, 4096);
        break;
      case OPT_BIND:
        if (!strcmp(optarg, "spread")) o->bind = 1;
        else if (!strcmp(optarg, "none")) o->bind = 0;
        else usage_error("launch", "--bind: unknown mode '%s' (spread or none)", optarg);
        break;
      case OPT_PORT_BASE:
        o->port_base = (int)parse_long("launch", "--port-base", optarg, 1, 65535);
        break;
      case OPT_HOST: o->host = optarg; break;
      case OPT_TIMEOUT: o->timeout = parse_double("launch", "--timeout", optarg); break;
      case OPT_KEEP_GOING: o->keep_going = 1; break;
      case OPT_MIN_TASKS:
        o->min_tasks = (int)parse_long("launch", "--min-tasks", optarg, 1, MAX_TASKS);
        break;
      case OPT_CHECKPOINT_DIR:
        if (!optarg[0]) usage_error("launch", "--checkpoint-dir: an empty directory name");
        o->checkpoint_dir = optarg;
        break;
      case OPT_MAX_RESTARTS:
        o->max_restarts = (int)parse_long("launch", "--max-restarts", optarg, 0, 1000);
        break;
      case 'h': return 1;
      case ':': usage_error("launch", "option '%s' needs a value", argv[optind - 1]);
      default:
        if (optopt) usage_error("launch", "unknown option '-%c'", optopt);
        usage_error("launch", "unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind < dashes) {
    if (dashes == argc)
      usage_error("launch", "missing '--' before the program '%s'", argv[optind]);
    usage_error("launch", "unexpected argument '%s' before '--'", argv[optind]);
  }
  if (!o->tasks) usage_error("launch", "missing -n (the number of tasks)");
  if (dashes == argc) usage_error("launch", "missing '--' and the program to run");
  if (dashes + 1 == argc) usage_error("launch", "missing the program after '--'");
  if (!o->host[0] || strpbrk(o->host, ", \t\n"))
    usage_error("launch", "--host: '%s' is not a host name or address", o->host);
  if (o->port_base && o->port_base + o->tasks - 1 > 65535)
    usage_error("launch", "--port-base: %d + %d tasks passes port 65535", o->port_base,
                o->tasks);
  if (o->min_tasks > o->tasks)
    usage_error("launch", "--min-tasks: %d is more than the %d tasks of -n", o->min_tasks,
                o->tasks);
  if (!o->min_tasks) o->min_tasks = o->tasks;
  if (o->keep_going && o->max_restarts)
    usage_error("launch", "--keep-going and --max-restarts: a failure either stops the "
                          "others or restarts them, not both");
  if (o->timeout > 1e9) usage_error("launch", "--timeout: '%g' is too long", o->timeout);
  o->program = argv + dashes + 1;
  return 0;
}
