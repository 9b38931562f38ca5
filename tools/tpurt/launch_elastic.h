/* tpurt launch's elastic restarts: the progress lines a program prints for the launcher
 * and the messages a restart logs (launch_elastic.c). */
#ifndef TPURT_TOOL_LAUNCH_ELASTIC_H
#define TPURT_TOOL_LAUNCH_ELASTIC_H

#include <stddef.h>
#include <signal.h>

/* A line on a task's stdout that starts with this is read by the launcher, not relayed:
 *   tpurt-progress: step N        step N (from 0) is done
 *   tpurt-progress: checkpoint N  the newest complete checkpoint holds steps 0..N-1
 *   tpurt-progress: restored N    this run resumed from the checkpoint of step N */
#define PROGRESS_PREFIX "tpurt-progress: "

/* "SIGKILL" for SIGKILL; "signal" for one it does not know. */
const char *signal_name(int sig);

/* The line hook (launch_output.h) that reads progress lines. */
int progress_line(int index, const char *text, size_t len);

/* A new run starts: `death_at` is when the task whose death caused it died. */
void progress_new_run(double death_at);

/* Writes "task 2 died (SIGKILL) at step 41" for the task whose end (`how`) stopped the
 * run, the step being the one after the last any task reported. */
void describe_death(int index, const siginfo_t *how, char *buf, size_t cap);

/* " from the checkpoint of step 40": the newest complete one in dir (tpu_checkpoint_latest)
 * when dir is given, else the newest a task reported; or " from the start (...)". */
void describe_resume(const char *dir, char *buf, size_t cap);

#endif
