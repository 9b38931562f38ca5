// The C handles that only the shim defines. A handle is the C name of a runtime
// object: the shim converts between them, the layers below see the C++ type.
#pragma once

#include "runtime/feed.h"

struct tpu_infeed_queue : tpurt::FeedQueue {
  using FeedQueue::FeedQueue;
};
struct tpu_outfeed_queue : tpurt::FeedQueue {
  using FeedQueue::FeedQueue;
};
