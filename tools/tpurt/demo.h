/* tpurt demo: the options of its model-parallel variant, --mesh (demo_mesh.c), which
 * demo.c parses beside its own. */
#ifndef TPURT_TOOL_DEMO_H
#define TPURT_TOOL_DEMO_H

#include "common.h"

typedef struct demo_mesh_options {
  int replicas, cores_per_replica; /* --mesh R,K */
  int steps, batch, hidden;
  double tolerance;                /* relative, against the same training on one core */
} demo_mesh_options;

/* A fixed-seed LCG (Knuth's MMIX constants): uniform in [-1, 1). */
double demo_uniform(uint64_t *state);

/* Trains the MLP over the mesh and checks it; returns the exit status. */
int demo_mesh(const demo_mesh_options *options);

#endif /* TPURT_TOOL_DEMO_H */
