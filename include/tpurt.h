/* tpurt: TPU-style SPMD programs on CPUs. The one header users include. */
#ifndef TPURT_H
#define TPURT_H

#include "tpurt/common.h"
#include "tpurt/tensor.h"
#include "tpurt/topology.h"
#include "tpurt/system.h"
#include "tpurt/replicate.h"
#include "tpurt/collectives.h"
#include "tpurt/feed.h"
#include "tpurt/cluster.h"
#include "tpurt/mesh.h"
#include "tpurt/embedding.h"
#include "tpurt/checkpoint.h"

#endif /* TPURT_H */
