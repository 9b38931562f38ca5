/* tpurt demo's checkpoints and progress lines (demo_checkpoint.h). */
#include "demo_checkpoint.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tpurt/checkpoint.h>

/* Complete checkpoints kept: the newest and the one before it, so that a save killed
 * half-way always leaves one to restore. */
#define KEEP 2

void demo_checkpoint_setup(demo_checkpoint *c, tpu_system *system, const char *dir, int every) {
  c->dir = dir;
  c->every = every;
  c->launched = getenv("TPURT_LAUNCH_TASKS") != NULL;
  CHECK(tpu_system_task_id(system, &c->task));
}

int64_t demo_restore(tpu_system *system, const demo_checkpoint *c, const char *name,
                     float *values, int64_t count) {
  if (!c->dir) return 0;
  int64_t step = 0;
  tpu_status status = tpu_checkpoint_latest(c->dir, &step);
  if (status == TPU_NOT_FOUND) {
    printf("demo: no complete checkpoint in %s; starting at step 0\n", c->dir);
    return 0;
  }
  CHECK_DOING(status, "looking for a checkpoint");
  double t0 = now_seconds();
  tpu_tensor *tensor = NULL;
  const void *data;
  size_t bytes;
  CHECK_DOING(tpu_checkpoint_restore(system, c->dir, step, &name, &tensor, 1, &step, NULL),
              "restoring a checkpoint");
  CHECK(tpu_tensor_data(tensor, &data));
  CHECK(tpu_tensor_byte_size(tensor, &bytes));
  if (bytes != (size_t)count * sizeof *values) {
    fprintf(stderr, "tpurt demo: the checkpoint's '%s' has %zu bytes, not %zu\n", name, bytes,
            (size_t)count * sizeof *values);
    exit(1);
  }
  memcpy(values, data, bytes);
  CHECK(tpu_tensor_release(tensor));
  printf("demo: restored the checkpoint of step %lld from %s in %.1f ms\n", (long long)step,
         c->dir, (now_seconds() - t0) * 1e3);
  if (c->launched) printf("tpurt-progress: restored %lld\n", (long long)step);
  fflush(stdout);
  return step;
}

/* A test's hook: TPURT_DEMO_STOP_BEFORE_SAVE=TASK:STEP stops that task (SIGSTOP) just
 * before its save of STEP, so that the others wait inside theirs, where the test kills
 * one (tests/check_elastic.sh). */
static void stop_if_asked(const demo_checkpoint *c, int64_t step) {
  const char *hook = getenv("TPURT_DEMO_STOP_BEFORE_SAVE");
  int task;
  long long at;
  if (hook && sscanf(hook, "%d:%lld", &task, &at) == 2 && task == c->task && at == step)
    raise(SIGSTOP);
}

void demo_maybe_save(tpu_system *system, const demo_checkpoint *c, int64_t done, int64_t total,
                     const char *name, float *values, int64_t count) {
  if (!c->dir || (done % c->every && done != total)) return;
  tpu_tensor *tensor;
  CHECK(tpu_tensor_wrap(TPU_FLOAT, &count, 1, values, (size_t)count * sizeof *values, NULL, NULL,
                        &tensor));
  printf("demo: saving the checkpoint of step %lld\n", (long long)done);
  fflush(stdout);
  stop_if_asked(c, done);
  tpu_checkpoint_options options = TPU_CHECKPOINT_OPTIONS_INIT;
  options.keep = KEEP;
  double t0 = now_seconds();
  tpu_status status = tpu_checkpoint_save(system, c->dir, done, &name, &tensor, 1, &options);
  CHECK(tpu_tensor_release(tensor));
  /* A restarted run that resumed from an older checkpoint saves the same steps again. */
  if (status == TPU_ALREADY_EXISTS) status = TPU_OK;
  CHECK_DOING(status, "saving a checkpoint");
  if (c->task == 0) {
    printf("demo: checkpoint of step %lld saved in %s in %.1f ms\n", (long long)done, c->dir,
           (now_seconds() - t0) * 1e3);
    if (c->launched) printf("tpurt-progress: checkpoint %lld\n", (long long)done);
  }
  fflush(stdout);
}

void demo_step_done(const demo_checkpoint *c, int64_t step) {
  if (!c->launched) return;
  printf("tpurt-progress: step %lld\n", (long long)step);
  fflush(stdout);
}
