/* tpurt demo's checkpoints (--checkpoint DIR --checkpoint-every S) and the progress
 * lines tpurt launch reads (launch_elastic.h), shared by the linear and CTR demos. */
#ifndef TPURT_TOOL_DEMO_CHECKPOINT_H
#define TPURT_TOOL_DEMO_CHECKPOINT_H

#include "common.h"

typedef struct demo_checkpoint {
  const char *dir; /* NULL: no checkpoints */
  int every;       /* save after every `every` steps (and after the last) */
  int launched;    /* under tpurt launch: print its progress lines */
  int task;        /* this task's index (task 0 reports the saves) */
} demo_checkpoint;

/* Fills c for this process (after the system started); dir may be NULL. */
void demo_checkpoint_setup(demo_checkpoint *c, tpu_system *system, const char *dir, int every);

/* The steps done by the newest complete checkpoint in c->dir, restored into the system's
 * tables and into values[count] (the float vector saved as `name`); 0 with values
 * untouched when there is none (or no --checkpoint). Exits 1 on a refusal. */
int64_t demo_restore(tpu_system *system, const demo_checkpoint *c, const char *name,
                     float *values, int64_t count);

/* After `done` steps of `total`: saves the tables and values[count] as `name` when a
 * checkpoint is due. Collective. */
void demo_maybe_save(tpu_system *system, const demo_checkpoint *c, int64_t done, int64_t total,
                     const char *name, float *values, int64_t count);

/* Step `step` (from 0) is done: the progress line under tpurt launch. */
void demo_step_done(const demo_checkpoint *c, int64_t step);

#endif
