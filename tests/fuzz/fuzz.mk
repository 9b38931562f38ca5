# libFuzzer targets, one per parser of outside bytes (tests/fuzz/fuzz_<target>.cc):
#   wire              frames, every control message, both sides of the handshake
#   topology          TopologyProto bytes
#   device_assignment the arrays and counts a caller builds a topology and a device
#                     assignment from (and group assignments)
#   embedding_config  TPUEmbeddingConfiguration bytes (with OptimizationParameters)
#   embedding_json    tpu_embedding_config_from_json's JSON
#   tf_config         TF_CONFIG
#   hostlist          Slurm's host and tasks-per-node lists, and the Slurm resolver
#   dtensor_jobs      DTENSOR_JOBS and DTENSOR_CLIENT_ID
#   grpc_name         grpc:// names (options->tpu, TPU_NAME)
#   checkpoint_manifest a checkpoint's manifest.json (lib/checkpoint/manifest.cc)
# Each is built with clang, -fsanitize=fuzzer,address,undefined and no recovery
# (clang's UBSan also checks enum and bool loads, which gcc's does not), from the
# few lib/ sources it needs.
#   make fuzz-build                   builds every target into build/fuzz/
#   make fuzz [FUZZ_TIME=300]         builds them and runs each for FUZZ_TIME seconds
#                                     (make -j2 fuzz: two at a time) on its seed corpus,
#                                     tests/fuzz/corpus/<target>/; new inputs go to
#                                     build/fuzz/corpus/<target>/, the log (with the
#                                     run count) to build/fuzz/logs/<target>.log, a
#                                     crash to build/fuzz/crashes/<target>/
#   make fuzz-run-topology            one target
#   build/fuzz/fuzz_wire -runs=0 tests/fuzz/corpus/wire   replays a corpus
# tests/check_fuzz.sh (make test) runs each for a few seconds. A crash found becomes
# tests/fuzz/corpus/<target>/crash-<what> once fixed. tests/test_wire_corpus.cc also
# replays the wire corpus without libFuzzer.
FUZZ_CC ?= clang
FUZZ_CXX ?= clang++
FUZZ_TIME ?= 300
FUZZ_DIR := $(BUILD)/fuzz
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_COMPILE := -g -O1 $(FUZZ_SAN) -fsanitize=fuzzer-no-link $(CPPFLAGS_COMMON)
FUZZ_TARGETS := wire topology device_assignment embedding_config embedding_json tf_config \
  hostlist dtensor_jobs grpc_name checkpoint_manifest

# The decoded protobufs' enum checks (where the tree has them).
FUZZ_PROTO_SRCS := $(wildcard lib/core/proto_enums.cc)
FUZZ_RESOLVER_SRCS := $(wildcard lib/cluster/resolver*.cc) lib/cluster/hostlist.cc lib/core/env.cc \
  lib/core/cpus.cc lib/core/status.cc
FUZZ_SRCS_wire := lib/net/frame.cc lib/net/handshake.cc lib/net/control_wire.cc \
  lib/core/status.cc $(FUZZ_PROTO_SRCS) gen/wire.pb-c.c
FUZZ_SRCS_topology := lib/topology/topology.cc lib/topology/device_assignment.cc \
  lib/core/status.cc $(FUZZ_PROTO_SRCS) gen/topology.pb-c.c
FUZZ_SRCS_device_assignment := $(FUZZ_SRCS_topology) lib/topology/group_assignment.cc
FUZZ_SRCS_embedding_config := lib/topology/embedding_config.cc lib/core/status.cc \
  lib/embedding/config.cc lib/embedding/optimizer.cc $(wildcard lib/embedding/optimizers/*.cc) \
  $(FUZZ_PROTO_SRCS) gen/tpu_embedding_configuration.pb-c.c gen/optimization_parameters.pb-c.c
FUZZ_SRCS_embedding_json := $(FUZZ_SRCS_embedding_config) lib/embedding/config_json.cc \
  $(filter-out lib/core/status.cc,$(FUZZ_RESOLVER_SRCS))
FUZZ_SRCS_checkpoint_manifest := lib/checkpoint/manifest.cc lib/core/dtype.cc $(FUZZ_RESOLVER_SRCS)
FUZZ_SRCS_tf_config := $(FUZZ_RESOLVER_SRCS)
FUZZ_SRCS_hostlist := $(FUZZ_RESOLVER_SRCS)
FUZZ_SRCS_dtensor_jobs := $(FUZZ_RESOLVER_SRCS)
FUZZ_SRCS_grpc_name := $(FUZZ_RESOLVER_SRCS)
FUZZ_LIBS := -lprotobuf-c -lcrypto -ljansson -pthread

# A source's object: lib/x.cc -> build/fuzz/obj/lib/x.o, gen/x.c (generated) ->
# build/fuzz/obj/gen/x.o.
fuzz_objs = $(patsubst %.cc,$(FUZZ_DIR)/obj/%.o,$(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(1)))

$(FUZZ_DIR)/obj/gen/%.o: $(BUILD)/gen/%.c $(PROTO_H)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_COMPILE) -MMD -MP -c $< -o $@

$(FUZZ_DIR)/obj/lib/%.o: lib/%.cc $(PROTO_H) | deps
	@mkdir -p $(@D)
	$(FUZZ_CXX) -std=c++17 $(FUZZ_COMPILE) -MMD -MP -c $< -o $@

define fuzz_target
$(FUZZ_DIR)/fuzz_$(1): tests/fuzz/fuzz_$(1).cc $(call fuzz_objs,$(FUZZ_SRCS_$(1))) $(PROTO_H)
	@mkdir -p $$(@D)
	$(FUZZ_CXX) -std=c++17 $(FUZZ_COMPILE) -fsanitize=fuzzer -MMD -MP -o $$@ $$< \
	  $(call fuzz_objs,$(FUZZ_SRCS_$(1))) $(FUZZ_LIBS)

.PHONY: fuzz-run-$(1)
fuzz-run-$(1): $(FUZZ_DIR)/fuzz_$(1)
	@mkdir -p $(FUZZ_DIR)/corpus/$(1) $(FUZZ_DIR)/crashes/$(1) $(FUZZ_DIR)/logs
	@echo "fuzz_$(1): $(FUZZ_TIME) s (log: $(FUZZ_DIR)/logs/$(1).log)"
	@UBSAN_OPTIONS=print_stacktrace=1 $$< -max_total_time=$(FUZZ_TIME) -timeout=10 \
	  -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=$(FUZZ_DIR)/crashes/$(1)/ \
	  $(FUZZ_DIR)/corpus/$(1) tests/fuzz/corpus/$(1) >$(FUZZ_DIR)/logs/$(1).log 2>&1 || \
	  { tail -n 60 $(FUZZ_DIR)/logs/$(1).log >&2; echo "fuzz_$(1): FAILED" >&2; exit 1; }
	@echo "fuzz_$(1): $$$$(sed -n 's/^stat::number_of_executed_units: *//p' \
	  $(FUZZ_DIR)/logs/$(1).log) runs in $(FUZZ_TIME) s, no crash, leak or hang"
endef
$(foreach t,$(FUZZ_TARGETS),$(eval $(call fuzz_target,$(t))))

.PHONY: fuzz fuzz-build
fuzz-build: $(addprefix $(FUZZ_DIR)/fuzz_,$(FUZZ_TARGETS))
fuzz: $(addprefix fuzz-run-,$(FUZZ_TARGETS))

-include $(shell find $(FUZZ_DIR) -name '*.d' 2>/dev/null)
