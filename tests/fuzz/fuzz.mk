# The wire fuzzer (libFuzzer with ASan): `make fuzz`, then e.g.
#   build/fuzz/fuzz_wire -max_total_time=60 build/fuzz/corpus tests/fuzz/corpus/wire
# (the first directory collects new inputs; the seed corpus stays as it is).
# tests/test_wire_corpus.cc replays the seeds and mutations of them without libFuzzer.
# Included by the Makefile; compiles the few sources it needs with clang directly.
FUZZ_CC ?= clang
FUZZ_CXX ?= clang++
FUZZ_DIR := $(BUILD)/fuzz
FUZZ_FLAGS := -g -O1 -fsanitize=fuzzer,address -fno-omit-frame-pointer
FUZZ_WIRE_SRCS := lib/net/frame.cc lib/net/handshake.cc lib/net/control_wire.cc \
  lib/core/status.cc

.PHONY: fuzz
fuzz: $(FUZZ_DIR)/fuzz_wire

$(FUZZ_DIR)/wire.pb-c.o: $(BUILD)/gen/wire.pb-c.c $(BUILD)/gen/wire.pb-c.h
	@mkdir -p $(@D)
	$(FUZZ_CC) $(CPPFLAGS_COMMON) -g -O1 -fsanitize=fuzzer-no-link,address -c $< -o $@

$(FUZZ_DIR)/fuzz_wire: tests/fuzz/fuzz_wire.cc $(FUZZ_WIRE_SRCS) $(FUZZ_DIR)/wire.pb-c.o
	@mkdir -p $(@D) $(FUZZ_DIR)/corpus
	$(FUZZ_CXX) -std=c++17 $(CPPFLAGS_COMMON) $(FUZZ_FLAGS) -o $@ tests/fuzz/fuzz_wire.cc \
	  $(FUZZ_WIRE_SRCS) $(FUZZ_DIR)/wire.pb-c.o -lprotobuf-c -lcrypto -pthread
