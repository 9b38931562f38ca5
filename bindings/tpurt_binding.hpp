// The binding-support layer: C++ classes over the C ABI that SWIG wraps for every
// language (bindings/tpurt.i). Header-only, calls nothing but include/tpurt.h.
//
// Rules the language layers rely on:
//  - Every failing C call throws tpurt::Error{code, message}, with the message read on
//    the failing thread inside the same wrapper call (the last error is thread-local).
//  - No overloads and no default arguments: each language writes its own overloads
//    (SWIG turns C++ overloads into runtime dispatchers in Go).
//  - Optional arguments are objects whose empty state means "none" (an empty
//    GroupAssignment is "all replicas in one group"), so no language passes null.
//  - Callbacks are directors returning a tpu_status: a language layer catches its own
//    exception or panic and reports it through ReplicaContext::fail or
//    Computation::failHost; nothing managed unwinds through C frames.
//
// The classes live in support/, one header per concern; each includes what it needs.
// SWIG does not follow #include: tpurt.i %includes the same headers in this order.
#ifndef TPURT_BINDING_HPP
#define TPURT_BINDING_HPP

#include "support/common.hpp"     // Status and the other enums, Error, free functions
#include "support/tensor.hpp"     // Tensor, Shape, GroupAssignment
#include "support/topology.hpp"   // Topology, DeviceAssignment
#include "support/mesh.hpp"       // Mesh
#include "support/options.hpp"    // SystemOptions, StepOptions, CollectiveOptions
#include "support/cluster.hpp"    // ClusterResolverOptions, ClusterOptions, ClusterResolver
#include "support/feed.hpp"       // InfeedQueue, OutfeedQueue
#include "support/embedding.hpp"  // EmbeddingFeatureBatch, embeddingConfigFromJson
#include "support/context.hpp"    // ReplicaContext (collectives), HostComputation, HostTensorComputation
#include "support/step.hpp"       // Computation, JoinedStep
#include "support/system.hpp"     // TpuSystem
#include "support/checkpoint.hpp" // CheckpointOptions, checkpointSave, checkpointLatest, checkpointRestore

#endif  // TPURT_BINDING_HPP
