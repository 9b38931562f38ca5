/* tpurt demo: the options of its variants, --mesh (demo_mesh.c) and --embedding
 * (demo_embedding.c), which demo.c parses beside its own. */
#ifndef TPURT_TOOL_DEMO_H
#define TPURT_TOOL_DEMO_H

#include "common.h"

typedef struct demo_mesh_options {
  int replicas, cores_per_replica; /* --mesh R,K */
  int steps, batch, hidden;
  double tolerance;                /* relative, against the same training on one core */
} demo_mesh_options;

/* --embedding (demo_embedding.c): a click-through-rate model over the embedding engine. */
typedef struct demo_embedding_options {
  int replicas, steps, batch; /* batch: the global batch of a step, a multiple of replicas */
  double tolerance;           /* relative, against the same training on one core */
  int replicas_given;         /* -r: else under tpurt launch, one per core of every task */
  const char *checkpoint_dir; /* --checkpoint; NULL: none */
  int checkpoint_every;
} demo_embedding_options;

/* A fixed-seed LCG (Knuth's MMIX constants): uniform in [-1, 1). */
double demo_uniform(uint64_t *state);

/* Trains the MLP over the mesh and checks it; returns the exit status. */
int demo_mesh(const demo_mesh_options *options);

/* Trains the model, checks it against a single-threaded reference; the exit status. */
int demo_embedding(const demo_embedding_options *options);

#endif /* TPURT_TOOL_DEMO_H */
