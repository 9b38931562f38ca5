#!/usr/bin/env bash
# Writes the seed corpora of the targets other than wire (tests/test_wire_corpus.cc
# writes that one): valid examples of each format and edge cases, into
# tests/fuzz/corpus/<target>/. Fields of one input are NUL-separated (see each
# tests/fuzz/fuzz_<target>.cc). Run from the top of the tree; needs protoc-c.
# Files named crash-* are crashes the fuzzers found (fixed); this script keeps them.
set -euo pipefail
cd "$(dirname "$0")/../.."
C=tests/fuzz/corpus

seed() {  # target name field...: the fields joined by NUL
  local target=$1 name=$2
  shift 2
  mkdir -p "$C/$target"
  local first=1
  for f in "$@"; do
    [ $first -eq 1 ] || printf '\0'
    printf '%s' "$f"
    first=0
  done >"$C/$target/$name"
}

proto() {  # target name message text-format
  mkdir -p "$C/$1"
  printf '%s\n' "$4" | protoc-c --proto_path=proto --encode="$3" "$(basename "$(grep -l "message ${3##*.} " proto/*.proto)")" >"$C/$1/$2"
}

T=tensorflow.tpu.TopologyProto
proto topology empty "$T" ''
proto topology v2_8 "$T" 'mesh_shape: [2, 2, 1, 2] num_tasks: 1 num_tpu_devices_per_task: 8
device_coordinates: [0,0,0,0, 0,0,0,1, 1,0,0,0, 1,0,0,1, 0,1,0,0, 0,1,0,1, 1,1,0,0, 1,1,0,1]'
proto topology two_tasks "$T" 'mesh_shape: [2, 1, 1, 2] num_tasks: 2 num_tpu_devices_per_task: 2
device_coordinates: [0,0,0,0, 0,0,0,1, 1,0,0,0, 1,0,0,1]'
proto topology missing_devices "$T" 'mesh_shape: [2, 2, 1, 1] num_tasks: 1 num_tpu_devices_per_task: 3
device_coordinates: [0,0,0,0, 1,0,0,0, 1,1,0,0]'
proto topology hardware_feature "$T" 'mesh_shape: [1, 1, 1, 2] num_tasks: 1 num_tpu_devices_per_task: 2
device_coordinates: [0,0,0,0, 0,0,0,1] tpu_hardware_feature { embedding_feature: V2 num_embedding_devices_per_chip: 4 }'
proto topology duplicate_coordinate "$T" 'mesh_shape: [2, 1, 1, 1] num_tasks: 1 num_tpu_devices_per_task: 2
device_coordinates: [0,0,0,0, 0,0,0,0]'
proto topology huge_mesh "$T" 'mesh_shape: [65536, 65536, 1, 1] num_tasks: 1 num_tpu_devices_per_task: 1
device_coordinates: [0,0,0,0]'
proto topology negative_counts "$T" 'mesh_shape: [1, 1, 1, 1] num_tasks: -1 num_tpu_devices_per_task: -2147483648'
proto topology short_coordinates "$T" 'mesh_shape: [1, 1, 1, 2] num_tasks: 1 num_tpu_devices_per_task: 2
device_coordinates: [0,0,0]'
proto topology rank_3 "$T" 'mesh_shape: [2, 2, 1] num_tasks: 1 num_tpu_devices_per_task: 1 device_coordinates: [0,0,0]'

E=tensorflow.tpu.TPUEmbeddingConfiguration
proto embedding_config empty "$E" ''
proto embedding_config two_tables "$E" 'table_descriptor { name: "users" vocabulary_size: 1000 dimension: 16 num_features: 1 }
table_descriptor { name: "items" vocabulary_size: 50 dimension: 8 num_features: 2 }
mode: TRAINING batch_size_per_tensor_core: 32 num_hosts: 1 num_tensor_cores: 8 sharding_strategy: MOD
feature_descriptor { name: "u" table_id: 0 input_shape: [32] }
feature_descriptor { name: "i" table_id: 1 input_shape: [32, 4] }
spmd_sharding { enabled: true num_cores_per_replica: 2 }'
proto embedding_config bad_table_id "$E" 'table_descriptor { name: "t" vocabulary_size: 1 dimension: 1 }
feature_descriptor { name: "f" table_id: 7 }'
proto embedding_config duplicate_name "$E" 'table_descriptor { name: "t" vocabulary_size: 1 dimension: 1 }
table_descriptor { name: "t" vocabulary_size: 2 dimension: 2 }'
proto embedding_config unknown_mode "$E" 'table_descriptor { name: "t" vocabulary_size: 1 dimension: 1 } mode: 9'

seed tf_config chief_worker '{"cluster": {"chief": ["c:2222"], "worker": ["w0:2222", "w1:2222"], "ps": ["p:2222"]}, "task": {"type": "worker", "index": 1}, "rpc_layer": "grpc"}'
seed tf_config sparse '{"cluster": {"worker": {"1": "w1:2222", "3": "w3:2222"}}, "task": {"type": "worker", "index": 3}}'
seed tf_config ipv6 '{"cluster": {"worker": ["[::1]:2222", "[fe80::1%eth0]:2223"]}, "task": {"type": "worker", "index": 0}}'
seed tf_config session_master '{"session_master": "grpc://m:1", "task": {"type": "worker", "index": 0}}'
seed tf_config local '{"task": {"type": "worker", "index": 5}}'
seed tf_config options '{"cluster": {"ps": ["a:1"], "worker": ["b:1"]}}' ps grpc+verbs
seed tf_config bad_json '{"cluster": '
seed tf_config not_object '[1, "a", null]'
seed tf_config big_index '{"cluster": {"worker": {"999999": "a:1"}}, "task": {"type": "worker", "index": -9223372036854775808}}'
seed tf_config duplicate '{"cluster": {"worker": ["a:1", "a:1"]}, "task": {"type": "worker"}}'

seed hostlist simple 'n[1-3,5],m7' '3(x2),1,1' 5 4 42
seed hostlist padded 'rack[1-2]-n[01-04]' '1(x8)' 8 0 7 0
seed hostlist single 'localhost' '2' 2 1 1 1
seed hostlist bad_range 'n[3-1]' '1' 1 0 1
seed hostlist huge_range 'n[0-99999999]' '99999999(x99999999)' 1 0 1
seed hostlist unclosed 'n[1-2,' '1(x' 1 0 1
seed hostlist mismatch 'a,b,c' '1,1' 3 2 1 0

seed dtensor_jobs two 'h0:1234,h1:1234' 1 worker
seed dtensor_jobs one 'localhost:9000' 0
seed dtensor_jobs empty ''
seed dtensor_jobs bns '/bns/cell/job/0,h:1' 0
seed dtensor_jobs duplicate 'a:1,a:1' 0
seed dtensor_jobs bad_id 'a:1,b:1' '-0x1'
seed dtensor_jobs ipv6 '[::1]:1,[::1]:2' '1' ''

seed grpc_name local local
seed grpc_name two 'grpc://h0:8470,grpc://h1' worker
seed grpc_name coordinator 'grpc://10.0.0.1:8470' '' 'coord:2222'
seed grpc_name cloud_name my-tpu
seed grpc_name bad_port 'grpc://h:99999'
seed grpc_name ipv6 'grpc://[::1]:1,[::1]' tpu '[::1]:3'
seed grpc_name duplicate 'grpc://a:1,a:1'

# fuzz_device_assignment reads its input through FuzzedDataProvider: each value
# below is what one Consume* call returns, in the order the target calls them
# (see tests/fuzz/fuzz_device_assignment.cc); the encoder writes the bytes that make
# it so (taken from the end of the input, most significant first).
mkdir -p "$C/device_assignment"
python3 - "$C/device_assignment" <<'PY'
import sys
out = sys.argv[1]
I32 = (-2**31, 2**31 - 1)

class Input:
    def __init__(self):
        self.consumed = []
    def range(self, v, lo, hi):  # ConsumeIntegralInRange(lo, hi) == v
        r, x, off, nbytes = hi - lo, v - lo, 0, 0
        assert 0 <= x <= r
        while off < 64 and (r >> off) > 0:
            off += 8
            nbytes += 1
        self.consumed += list(x.to_bytes(nbytes, "big")) if nbytes else []
        return self
    def bool(self, b):
        return self.range(int(b), 0, 255)
    def count(self, v, small):  # the target's count()
        return self.bool(1).range(v, -1, small) if -1 <= v <= small else self.bool(0).range(v, *I32)
    def value(self, v):  # the target's value()
        return self.bool(1).range(v, -1, 8) if -1 <= v <= 8 else self.bool(0).range(v, *I32)
    def values(self, vs):
        self.range(len(vs), 0, 5)
        for v in vs: self.value(v)
        return self
    def write(self, name):
        with open(f"{out}/{name}", "wb") as f:
            f.write(bytes(reversed(self.consumed)))

def groups(i, num_groups, group_size, replicas, ids, null=False):
    i.count(num_groups, 8).count(group_size, 8)
    i.bool(1).count(replicas, 64) if -1 <= replicas <= 64 else i.bool(0).range(replicas, 0, 5000)
    for k, id in enumerate(ids): i.bool(1) if id == k else i.bool(0).range(id, -1, max(replicas, 0))
    return i.bool(null)

def dense(i, mesh, swaps, per_task, tasks):
    i.bool(0)
    for m in mesh: i.range(m, 1, 4)
    devices = mesh[0] * mesh[1] * mesh[2] * mesh[3]
    i.range(len(swaps), 0, 8)
    for a, b in swaps: i.range(a, 0, devices - 1).range(b, 0, devices - 1)
    return i.range(per_task, 1, devices).range(tasks, 1, devices // per_task)

def build(i, shape, stride, replicas, devices, mode):
    i.values(shape or []).values(stride or []).bool(shape is None).bool(stride is None)
    i.bool(1).range(replicas, -1, devices + 1) if -1 <= replicas <= devices + 1 else i.bool(0).range(replicas, *I32)
    return i.range(mode, -1, 3)

def create(i, replicas, cores, devices, c_form):  # exact: one device index per entry
    i.count(replicas, 8).count(cores, 8).bool(1)
    for d in devices: i.bool(1).range(d, 0, 7)
    return i.bool(c_form)

# 8 devices on one task, 2 groups of 2 out of 4 replicas; all replicas; an explicit one.
i = groups(Input(), 2, 2, 4, [0, 1, 2, 3])
dense(i, [2, 2, 1, 2], [], 8, 1)
build(i, None, None, 8, 8, 0)
create(i, 2, 2, [0, 1, 2, 3], True).write("v2_8")
# Three of four chips in three tasks (one missing), RING asked for; replicas in reverse.
i = groups(Input(), 1, 3, 3, [2, 1, 0])
dense(i, [2, 2, 1, 1], [(3, 0)], 1, 3)
build(i, [1, 1, 1, 1], None, 3, 3, 1)
create(i, 3, 1, [2, 1, 0], False).write("missing_device_ring")
# A raw two-device topology, MESH with shape [2,1,1,1]; a duplicate group id.
i = groups(Input(), 1, 2, 2, [0, 0])
i.bool(1).values([2, 1, 1, 1]).count(1, 4).count(2, 8).bool(1)
for v in [0, 0, 0, 0, 1, 0, 0, 0]: i.value(v)
build(i, [2, 1, 1, 1], None, 1, 2, 2)
create(i, 1, 2, [1, 0], True).write("raw_mesh")
# Counts at the ends of int: nothing may be sized from them.
i = groups(Input(), 2**31 - 1, 2**31 - 1, 5000, [])
i.bool(1).values([1, 1, 1, 1]).count(2**31 - 1, 4).count(2**31 - 1, 8).bool(0).range(3, 0, 64)
for v in [0, 0, 0]: i.value(v)
i.write("huge_counts")
PY
