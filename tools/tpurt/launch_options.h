/* tpurt launch's command line: its usage text and its options, parsed and checked
 * (launch_options.c). */
#ifndef TPURT_TOOL_LAUNCH_OPTIONS_H
#define TPURT_TOOL_LAUNCH_OPTIONS_H

#define MAX_TASKS 1024

typedef struct launch_options {
  int tasks;
  int cores_per_task;  /* 0: TPURT_NUM_CORES is left alone */
  int bind;            /* with cores_per_task: bind each task to its share of the CPUs */
  int port_base;       /* 0: free ports are picked */
  const char *host;
  double timeout;      /* seconds; 0: none */
  int keep_going;
  int min_tasks;       /* elastic: the fewest tasks a restart may run on */
  int max_restarts;
  const char *checkpoint_dir; /* elastic: where the restart's step is read; NULL: none */
  char **program;      /* NULL-terminated argv */
} launch_options;

extern const char launch_usage[];

/* Parses `tpurt launch [options] -- program [args...]` into *o; a usage error exits 2
 * naming the option. Returns 1 when --help was asked (nothing else is set). */
int launch_parse_options(int argc, char **argv, launch_options *o);

#endif
