# tpurt build. Everything is written under $(BUILD); nothing in the source tree.
#   make                     library, tool and tests
#   make test                every test (unit, ABI, header, pkg-config)
#   make demo                the main job: `tpurt demo`
#   make bench               `tpurt bench` sweep
#   make install PREFIX=/usr/local DESTDIR=
#   make SANITIZE=address|undefined|thread test   (builds into build/<sanitizer>)

SHELL := /bin/bash
PREFIX ?= /usr/local
DESTDIR ?=
SANITIZE ?=

ifeq ($(SANITIZE),)
BUILD ?= build
else
BUILD ?= build/$(SANITIZE)
endif

VERSION_MAJOR := $(shell sed -n 's/^\#define TPU_VERSION_MAJOR \([0-9]*\)/\1/p' include/tpurt/common.h)
VERSION_MINOR := $(shell sed -n 's/^\#define TPU_VERSION_MINOR \([0-9]*\)/\1/p' include/tpurt/common.h)
VERSION_PATCH := $(shell sed -n 's/^\#define TPU_VERSION_PATCH \([0-9]*\)/\1/p' include/tpurt/common.h)
VERSION := $(VERSION_MAJOR).$(VERSION_MINOR).$(VERSION_PATCH)

CC := gcc
CXX := g++
OPT ?= -O2
# No recovery: a UBSan report must fail the test that triggered it.
SAN_FLAGS := $(if $(SANITIZE),-fsanitize=$(SANITIZE) -fno-sanitize-recover=all -fno-omit-frame-pointer,)
WARN := -Wall -Wextra -Wno-unused-parameter
CPPFLAGS_COMMON := -Iinclude -Ilib -I$(BUILD)/gen -DTPURT_BUILDING
CXXFLAGS := -std=c++17 $(OPT) -g $(WARN) -fPIC -fvisibility=hidden -fvisibility-inlines-hidden \
            -pthread $(SAN_FLAGS)
CFLAGS := -std=c11 $(OPT) -g $(WARN) -fPIC -pthread $(SAN_FLAGS)
LDFLAGS_SAN := $(SAN_FLAGS)

PROTOS := $(wildcard proto/*.proto)
PROTO_C := $(patsubst proto/%.proto,$(BUILD)/gen/%.pb-c.c,$(PROTOS))
PROTO_H := $(PROTO_C:.c=.h)
LIB_CXX := $(shell find lib -name '*.cc' | sort)
LIB_OBJS := $(patsubst %.cc,$(BUILD)/obj/%.o,$(LIB_CXX)) $(patsubst $(BUILD)/gen/%.c,$(BUILD)/obj/gen/%.o,$(PROTO_C))
LIB_DEPS_LIBS := $(shell pkg-config --libs libprotobuf-c 2>/dev/null || echo -lprotobuf-c) -pthread

SONAME := libtpurt.so.$(VERSION_MAJOR)
SHLIB := $(BUILD)/lib/libtpurt.so.$(VERSION)
STLIB := $(BUILD)/lib/libtpurt.a

TOOL_SRCS := $(wildcard tools/tpurt/*.c)
TOOL := $(BUILD)/bin/tpurt
TEST_SRCS := $(wildcard tests/test_*.c)
TEST_BINS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRCS))
TEST_LIBS := -lcmocka $(shell pkg-config --libs jansson 2>/dev/null || echo -ljansson) -lm -pthread
EXAMPLE_SRCS := $(wildcard examples/*.c)
EXAMPLE_BINS := $(patsubst examples/%.c,$(BUILD)/examples/%,$(EXAMPLE_SRCS))
RPATH := -Wl,-rpath,'$$ORIGIN/../lib'

DEPS_STAMP := build/.deps-ok

.PHONY: all lib tool tests examples test demo bench deps install uninstall clean headertest
.DELETE_ON_ERROR:

all: lib tool tests examples

deps: $(DEPS_STAMP)
$(DEPS_STAMP): tools/install-deps.sh
	@bash tools/install-deps.sh
	@mkdir -p $(@D) && touch $@

lib: $(DEPS_STAMP) $(SHLIB) $(STLIB) $(BUILD)/lib/libtpurt.so $(BUILD)/lib/$(SONAME) $(BUILD)/pkgconfig/tpurt.pc

$(BUILD)/gen/%.pb-c.c $(BUILD)/gen/%.pb-c.h: proto/%.proto | $(DEPS_STAMP)
	@mkdir -p $(@D)
	protoc-c --proto_path=proto --c_out=$(BUILD)/gen $<

# Keep the generated sources: as intermediates make would delete them after every
# build, and regenerating them rebuilds every object.
.SECONDARY: $(PROTO_C) $(PROTO_H)

$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c $(PROTO_H)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fvisibility=hidden $(CPPFLAGS_COMMON) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.o: %.cc $(PROTO_H) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) $(CPPFLAGS_COMMON) -MMD -MP -c $< -o $@

$(SHLIB): $(LIB_OBJS) lib/tpurt.map
	@mkdir -p $(@D)
	$(CXX) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=lib/tpurt.map -Wl,--no-undefined \
	  $(LDFLAGS_SAN) -o $@ $(LIB_OBJS) $(LIB_DEPS_LIBS)

$(BUILD)/lib/$(SONAME): $(SHLIB)
	ln -sf $(notdir $<) $@
$(BUILD)/lib/libtpurt.so: $(BUILD)/lib/$(SONAME)
	ln -sf $(notdir $<) $@

$(STLIB): $(LIB_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

PC_GEN = sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' pkgconfig/tpurt.pc.in
$(BUILD)/pkgconfig/tpurt.pc: pkgconfig/tpurt.pc.in include/tpurt/common.h
	@mkdir -p $(@D)
	$(PC_GEN) > $@

# Nothing to build until tools/tpurt has sources.
tool: $(if $(TOOL_SRCS),$(TOOL))
$(TOOL): $(TOOL_SRCS) $(wildcard tools/tpurt/*.h) $(BUILD)/lib/libtpurt.so
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Iinclude -o $@ $(TOOL_SRCS) -L$(BUILD)/lib -ltpurt -lm $(RPATH) $(LDFLAGS_SAN)

tests: $(TEST_BINS)
$(BUILD)/tests/%: tests/%.c $(wildcard tests/*.h) $(BUILD)/lib/libtpurt.so
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Iinclude -o $@ $< -L$(BUILD)/lib -ltpurt $(TEST_LIBS) $(RPATH) $(LDFLAGS_SAN)

# TEMPORARY (branch h-tests; the lead replaces it with the real rule): C++ unit tests
# of internal classes, linked against the static library.
TEST_CC_BINS := $(patsubst tests/%.cc,$(BUILD)/tests/%,$(wildcard tests/test_*.cc))
tests: $(TEST_CC_BINS)
$(BUILD)/tests/%: tests/%.cc $(wildcard tests/*.h) $(STLIB)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) -Ilib -Iinclude -I$(BUILD)/gen -o $@ $< $(STLIB) $(LIB_DEPS_LIBS) -lcmocka $(LDFLAGS_SAN)

examples: $(EXAMPLE_BINS)
$(BUILD)/examples/%: examples/%.c $(BUILD)/lib/libtpurt.so
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Iinclude -o $@ $< -L$(BUILD)/lib -ltpurt -lm $(RPATH) $(LDFLAGS_SAN)

test: all
	@BUILD=$(BUILD) SANITIZE=$(SANITIZE) ASAN_OPTIONS=$${ASAN_OPTIONS:-detect_leaks=1} \
	  UBSAN_OPTIONS=$${UBSAN_OPTIONS:-print_stacktrace=1} bash tests/run_tests.sh

demo: lib tool
	$(TOOL) demo --check

bench: lib tool
	$(TOOL) bench

headertest:
	@bash tests/check_header.sh

# tpurt.pc is generated for this PREFIX: the build tree's copy has the PREFIX of the build.
install: lib
	install -d $(DESTDIR)$(PREFIX)/include/tpurt $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/tpurt.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 include/tpurt/*.h $(DESTDIR)$(PREFIX)/include/tpurt/
	install -m 755 $(SHLIB) $(DESTDIR)$(PREFIX)/lib/
	ln -sf $(notdir $(SHLIB)) $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/libtpurt.so
	install -m 644 $(STLIB) $(DESTDIR)$(PREFIX)/lib/
	$(PC_GEN) > $(DESTDIR)$(PREFIX)/lib/pkgconfig/tpurt.pc
	chmod 644 $(DESTDIR)$(PREFIX)/lib/pkgconfig/tpurt.pc
	if [ -f $(TOOL) ]; then install -m 755 $(TOOL) $(DESTDIR)$(PREFIX)/bin/; fi

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/include/tpurt.h $(DESTDIR)$(PREFIX)/lib/libtpurt.* \
	  $(DESTDIR)$(PREFIX)/lib/pkgconfig/tpurt.pc $(DESTDIR)$(PREFIX)/bin/tpurt
	rm -rf $(DESTDIR)$(PREFIX)/include/tpurt

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
