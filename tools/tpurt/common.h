/* Helpers shared by the tpurt subcommands: status checks, option parsing, clocks. */
#ifndef TPURT_TOOL_COMMON_H
#define TPURT_TOOL_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include <tpurt.h>

/* Exit codes: 1 for a failing library call or a failed check, 2 for bad usage. */
#define EXIT_USAGE 2

/* Host side: a failing library call prints its status name and message, exits 1. */
#define CHECK(call) check_status((call), #call)
void check_status(tpu_status status, const char *what);

/* Inside a computation: hands a failing status back to tpu_replicate, which reports
 * it (with the replica) to the host. */
#define RETURN_IF_ERROR(call)              \
  do {                                     \
    tpu_status status_ = (call);           \
    if (status_ != TPU_OK) return status_; \
  } while (0)

/* The first non-OK of two statuses, for cleanup paths that must run regardless. */
static inline tpu_status first_error(tpu_status a, tpu_status b) { return a != TPU_OK ? a : b; }

/* Prints "tpurt <command>: <message>" to stderr and exits EXIT_USAGE. */
void usage_error(const char *command, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));

/* Matches argv[*i] against "-s VALUE", "--long VALUE" or "--long=VALUE" (short or
 * long may be NULL). On a match sets *value, advances *i past a separate value and
 * returns 1; a missing value is a usage error. */
int take_option(const char *command, int argc, char **argv, int *i, const char *short_name,
                const char *long_name, const char **value);

/* Value parsers: anything malformed or out of range is a usage error naming `what`. */
long parse_long(const char *command, const char *what, const char *text, long min, long max);
/* A byte count with an optional K, M or G suffix (powers of 1024). */
size_t parse_bytes(const char *command, const char *what, const char *text);
/* Exactly `n` comma-separated positive integers, e.g. "2,2,1,1". */
void parse_int_list(const char *command, const char *what, const char *text, int32_t *out,
                    int n);

/* Starts a system with `num_cores` cores (0: the library's default) and an optional
 * mesh shape (NULL: the default line of cores). */
/* pinning: a tpu_thread_pinning (TPU_PIN_AUTO is the library's default). */
tpu_system *start_system(int num_cores, const int32_t *mesh_shape, int pinning);

/* calloc that exits 1 with a message when memory runs out. */
void *xcalloc(size_t count, size_t size);

int online_cpus(void);
/* CLOCK_MONOTONIC in seconds. */
double now_seconds(void);
/* "64 MiB", "8 B", ... into buf. */
const char *format_bytes(double bytes, char *buf, size_t cap);

/* The --help text, and whether an argument asks for it. */
extern const char tpurt_usage[];
int is_help(const char *arg);

/* The subcommands; argv[0] is the subcommand's name. */
int cmd_info(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_demo(int argc, char **argv);

#endif /* TPURT_TOOL_COMMON_H */
