/* Helpers shared by the tpurt subcommands: status checks, option parsing, clocks. */
#ifndef TPURT_TOOL_COMMON_H
#define TPURT_TOOL_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include <getopt.h>
#include <sys/socket.h>
#include <tpurt.h>

/* Exit codes: 1 for a failing library call or a failed check, 2 for bad usage. */
#define EXIT_USAGE 2

/* The running subcommand's name, for messages ("tpurt info: ..."); set by main. */
extern const char *tool_command_name;

/* Host side: a failing library call prints "tpurt CMD: [doing: ]message (STATUS)"
 * and exits 1. Never the C call itself: the library's message names what is wrong,
 * and `doing` (NULL for none) says in words what the command was doing. */
#define CHECK(call) check_status((call), NULL)
#define CHECK_DOING(call, doing) check_status((call), (doing))
void check_status(tpu_status status, const char *doing);

/* Inside a computation: hands a failing status back to tpu_replicate, which reports
 * it (with the replica) to the host. */
#define RETURN_IF_ERROR(call)              \
  do {                                     \
    tpu_status status_ = (call);           \
    if (status_ != TPU_OK) return status_; \
  } while (0)

/* The first non-OK of two statuses, for cleanup paths that must run regardless. */
static inline tpu_status first_error(tpu_status a, tpu_status b) { return a != TPU_OK ? a : b; }

/* A subcommand: its name, a line for `tpurt --help`, its own usage (`tpurt NAME
 * --help`) and its entry point, which sees argv from its own name on. */
typedef struct tool_command {
  const char *name;
  const char *summary;
  const char *usage;
  int (*run)(int argc, char **argv);
} tool_command;

extern const tool_command info_command, bench_command, demo_command, launch_command, trace_command;

/* Prints "tpurt <command>: <message> (see tpurt <command> --help)" to stderr and
 * exits EXIT_USAGE. */
void usage_error(const char *command, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));

/* getopt_long over a subcommand's argv: the next option's short name or long-only
 * value, or -1 when the options end (at the first operand or after "--"). An
 * unknown option, a missing value or an operand is a usage error; so each command
 * needs no operand. shortopts must not start with ':' (added here). */
int next_option(const char *command, int argc, char **argv, const char *shortopts,
                const struct option *longopts);

/* Prints `usage` to stdout and returns 0: what every command does with -h/--help. */
int print_usage(const char *usage);

/* Value parsers: anything malformed or out of range is a usage error naming `what`. */
long parse_long(const char *command, const char *what, const char *text, long min, long max);
/* A positive finite number, e.g. "1e-3". */
double parse_double(const char *command, const char *what, const char *text);
/* A byte count with an optional K, M or G suffix (powers of 1024). */
size_t parse_bytes(const char *command, const char *what, const char *text);
/* Exactly `n` comma-separated positive integers, e.g. "2,2,1,1". */
void parse_int_list(const char *command, const char *what, const char *text, int32_t *out,
                    int n);

/* Starts a system with `num_cores` cores (0: the library's default) and an optional
 * mesh shape (NULL: the default line of cores). */
/* pinning: a tpu_thread_pinning (TPU_PIN_AUTO is the library's default). */
tpu_system *start_system(int num_cores, const int32_t *mesh_shape, int pinning);
/* The same with an embedding configuration in its JSON form
 * (tpu_embedding_config_from_json); a configuration the library refuses exits 1. */
tpu_system *start_embedding_system(int num_cores, const char *json, int pinning);

/* The system's cores (every task's) as num_cores / k replicas of k cores: participant
 * (replica r, logical core c), flattened id r * k + c, on global core r * k + c (core d
 * of task t being global core t * cores_per_task + d), so a replica's cores are
 * neighbours, in one task where they fit. A k that does not divide the cores is a usage
 * error of `command` naming both. *num_cores receives the cores. The caller releases it. */
tpu_device_assignment *assign_replicas(tpu_system *system, int k, const char *command,
                                       int *num_cores);

/* A string the library returns through (out, capacity, count), such as
 * tpu_system_transport, of any length (size query first); exits 1 with `what` (in
 * words: "reading the transport") when the call fails. The caller frees it. */
char *system_string(tpu_status (*get)(const tpu_system *, char *, size_t, size_t *),
                    const tpu_system *system, const char *what);

/* calloc that exits 1 with a message when memory runs out. */
void *xcalloc(size_t count, size_t size);

int online_cpus(void);
/* qsort's comparison of doubles, ascending. */
int compare_doubles(const void *a, const void *b);
/* CLOCK_MONOTONIC in seconds. */
double now_seconds(void);
/* "64 MiB", "8 B", ... into buf. */
const char *format_bytes(double bytes, char *buf, size_t cap);

/* Binds n TCP sockets to `addr` with port 0, all open at once so that the kernel hands
 * out n distinct free ports, and reads the ports back (IPv4 or IPv6). The sockets
 * (close-on-exec) stay open in sockets[] until the caller closes them, just before the
 * ports' users bind them; another process may take a port in between. Returns how
 * many it bound: n, or fewer with errno saying why the next one failed. */
int bind_free_ports(const struct sockaddr *addr, socklen_t addr_len, int n, int *ports,
                    int *sockets);

/* Rejects a TPURT_* environment variable the library would reject (a usage error,
 * exit EXIT_USAGE, with the library's message). */
void check_environment(void);

#endif /* TPURT_TOOL_COMMON_H */
