# tpurt build. Everything is written under $(BUILD); nothing in the source tree.
#   make                     library, tool and tests
#   make test                every test (unit, ABI, header, pkg-config)
#   make test T=NAME         one case, binary or script (a glob or prefix too; tests/test-list)
#   make test-list           every case with its time limit
#   make demo                the main job: `tpurt demo`
#   make bench               `tpurt bench` sweep
#   make mpi                 the MPI plugin, libtpurt_mpi.so (needs mpicxx or mpicc)
#   make bindings            the C#, Java and Go bindings (bindings/<lang>/<lang>.mk)
#   make bench-bindings      one step from C, C#, Java and Go (bench/bindings.sh)
#   make deb | nupkg | jar-pom | go-proxy   packages at VERSION (packaging/packaging.mk)
#   make fuzz [FUZZ_TIME=300]   every libFuzzer target for FUZZ_TIME s (tests/fuzz/fuzz.mk)
#   make install PREFIX=/usr/local DESTDIR=   (also BINDIR, LIBDIR, INCLUDEDIR, MANDIR, DOCDIR)
#   make SANITIZE=address|undefined|thread test   (builds into build/<sanitizer>)
# CFLAGS, CXXFLAGS, CPPFLAGS and LDFLAGS given by the user come after the project's own.
# `make` never installs packages: it names the missing ones (tools/install-deps.sh).

SHELL := /bin/bash
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR ?= $(PREFIX)/share/man
DOCDIR ?= $(PREFIX)/share/doc/tpurt
PKGCONFIGDIR := $(LIBDIR)/pkgconfig
LDCONFIG ?= $(firstword $(wildcard /sbin/ldconfig /usr/sbin/ldconfig) ldconfig)
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

# make's built-in defaults (cc, g++) give way to gcc and g++; CC=clang etc. still win.
ifeq ($(origin CC),default)
CC := gcc
endif
ifeq ($(origin CXX),default)
CXX := g++
endif
OPT ?= -O2
# No recovery: a UBSan report must fail the test that triggered it.
SAN_FLAGS := $(if $(SANITIZE),-fsanitize=$(SANITIZE) -fno-sanitize-recover=all -fno-omit-frame-pointer,)
WARN := -Wall -Wextra -Wno-unused-parameter
CPPFLAGS_COMMON := -Iinclude -Ilib -I$(BUILD)/gen -DTPURT_BUILDING
# The project's flags; the user's CFLAGS/CXXFLAGS/CPPFLAGS/LDFLAGS follow, so they add
# to these (and a later -O wins) instead of dropping -std and the visibility. The
# project's -I come first of all: an installed tpurt.h must not shadow the tree's.
TPURT_CXXFLAGS := -std=c++17 $(OPT) -g $(WARN) -fPIC -fvisibility=hidden -fvisibility-inlines-hidden \
            -pthread $(SAN_FLAGS) $(CPPFLAGS) $(CXXFLAGS)
TPURT_CFLAGS := -std=c11 $(OPT) -g $(WARN) -fPIC -pthread $(SAN_FLAGS) $(CPPFLAGS) $(CFLAGS)
TPURT_LDFLAGS := $(SAN_FLAGS) $(LDFLAGS)

PROTOS := $(wildcard proto/*.proto)
PROTO_C := $(patsubst proto/%.proto,$(BUILD)/gen/%.pb-c.c,$(PROTOS))
PROTO_H := $(PROTO_C:.c=.h)
# lib/mpi_plugin is the MPI plugin's (make mpi): libtpurt never links MPI.
LIB_CXX := $(shell find lib -name '*.cc' -not -path 'lib/mpi_plugin/*' | sort)
LIB_OBJS := $(patsubst %.cc,$(BUILD)/obj/%.o,$(LIB_CXX)) $(patsubst $(BUILD)/gen/%.c,$(BUILD)/obj/gen/%.o,$(PROTO_C))
# protobuf-c: TopologyProto and the wire; libuv: the transport's event loop;
# libcrypto: HMAC-SHA256 for cluster tokens; jansson: TF_CONFIG.
LIB_PKGS := libprotobuf-c libuv libcrypto jansson
LIB_DEPS_LIBS := $(shell pkg-config --libs $(LIB_PKGS) 2>/dev/null || echo -lprotobuf-c -luv -lcrypto -ljansson) -pthread

# What a static link of libtpurt.a needs (tpurt.pc's Libs.private): Debian ships
# libuv's archive as libuv_a (libuv-static.pc).
PC_LIBS_PRIVATE := $(shell pkg-config --static --libs libprotobuf-c libuv-static libcrypto jansson 2>/dev/null || echo -lprotobuf-c -luv_a -lcrypto -ljansson) -pthread

SONAME := libtpurt.so.$(VERSION_MAJOR)
SHLIB := $(BUILD)/lib/libtpurt.so.$(VERSION)
STLIB := $(BUILD)/lib/libtpurt.a

TOOL_SRCS := $(wildcard tools/tpurt/*.c)
TOOL := $(BUILD)/bin/tpurt
# jansson: `tpurt trace` reads traces.
JANSSON_LIBS := $(shell pkg-config --libs jansson 2>/dev/null || echo -ljansson)
TEST_SRCS := $(wildcard tests/test_*.c)
# C++ tests of internal modules, linked with the static library.
TEST_CXX_SRCS := $(wildcard tests/test_*.cc)
TEST_BINS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRCS)) \
             $(patsubst tests/%.cc,$(BUILD)/tests/%,$(TEST_CXX_SRCS))
TEST_SCRIPTS := $(wildcard tests/check_*.sh)
ifneq ($(words $(TEST_BINS)),$(words $(sort $(TEST_BINS))))
$(error tests/test_X.c and tests/test_X.cc would build the same binary: rename one)
endif
TEST_LIBS := -lcmocka $(shell pkg-config --libs jansson 2>/dev/null || echo -ljansson) -lm -pthread
EXAMPLE_SRCS := $(wildcard examples/*.c)
EXAMPLE_BINS := $(patsubst examples/%.c,$(BUILD)/examples/%,$(EXAMPLE_SRCS))
RPATH := -Wl,-rpath,'$$ORIGIN/../lib'

.PHONY: all lib tool tests examples test test-list demo bench deps install uninstall clean headertest bindings bench-bindings
.DELETE_ON_ERROR:

all: lib tool tests examples

# Stops the build with the missing packages and the command that installs them.
deps:
	@bash tools/install-deps.sh --check

lib: $(SHLIB) $(STLIB) $(BUILD)/lib/libtpurt.so $(BUILD)/lib/$(SONAME) $(BUILD)/pkgconfig/tpurt.pc \
     $(BUILD)/pkgconfig/tpurt-static.pc

$(BUILD)/gen/%.pb-c.c $(BUILD)/gen/%.pb-c.h: proto/%.proto | deps
	@mkdir -p $(@D)
	protoc-c --proto_path=proto --c_out=$(BUILD)/gen $<

# Keep the generated sources: as intermediates make would delete them after every
# build, and regenerating them rebuilds every object.
.SECONDARY: $(PROTO_C) $(PROTO_H)

$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c $(PROTO_H)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_COMMON) $(TPURT_CFLAGS) -fvisibility=hidden -MMD -MP -c $< -o $@

# The embedding engine's per-row loops (combining rows, summing gradients, the
# optimizers' square roots and divisions) run vectorized: IEEE results are the same lane
# by lane, and errno, which nothing reads, is not set.
$(BUILD)/obj/lib/embedding/%.o: TPURT_CXXFLAGS += -fno-math-errno -ftree-vectorize -fvect-cost-model=dynamic
# The collectives' reduction kernels likewise, lanes across elements: each element is
# still folded in source order, so the bits are the same (GCC 12's -O2 leaves them scalar).
$(BUILD)/obj/lib/collectives/reduce.o: TPURT_CXXFLAGS += -ftree-vectorize -fvect-cost-model=dynamic

$(BUILD)/obj/%.o: %.cc $(PROTO_H) | deps
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS_COMMON) $(TPURT_CXXFLAGS) -MMD -MP -c $< -o $@

$(SHLIB): $(LIB_OBJS) lib/tpurt.map
	@mkdir -p $(@D)
	$(CXX) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=lib/tpurt.map -Wl,--no-undefined \
	  $(TPURT_LDFLAGS) -o $@ $(LIB_OBJS) $(LIB_DEPS_LIBS)

$(BUILD)/lib/$(SONAME): $(SHLIB)
	ln -sf $(notdir $<) $@
$(BUILD)/lib/libtpurt.so: $(BUILD)/lib/$(SONAME)
	ln -sf $(notdir $<) $@

$(STLIB): $(LIB_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && $(AR) rcs $@ $^

# Directories under PREFIX are written relative to ${prefix}, as Debian's .pc files are.
pc_dir = $(patsubst $(PREFIX)/%,$${prefix}/%,$(1))
PC_GEN = sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(call pc_dir,$(LIBDIR))|g' \
  -e 's|@INCLUDEDIR@|$(call pc_dir,$(INCLUDEDIR))|g' -e 's|@VERSION@|$(VERSION)|g' \
  -e 's|@LIBS_PRIVATE@|$(PC_LIBS_PRIVATE) -lstdc++ -lm|g'
$(BUILD)/pkgconfig/%.pc: pkgconfig/%.pc.in include/tpurt/common.h
	@mkdir -p $(@D)
	$(PC_GEN) $< > $@

# Nothing to build until tools/tpurt has sources.
tool: $(if $(TOOL_SRCS),$(TOOL))
$(TOOL): $(TOOL_SRCS) $(wildcard tools/tpurt/*.h) $(BUILD)/lib/libtpurt.so
	@mkdir -p $(@D)
	$(CC) -Iinclude $(TPURT_CFLAGS) -L$(BUILD)/lib $(TPURT_LDFLAGS) -o $@ $(TOOL_SRCS) -ltpurt -lm $(JANSSON_LIBS) $(RPATH)

tests: $(TEST_BINS) $(BUILD)/tests/cluster_worker $(BUILD)/tests/lifetime_worker $(BUILD)/tests/verdict_worker \
  $(BUILD)/tests/checkpoint_worker
# The tests find their data (tests/data) from any working directory.
# One task of the multi-process tests (tests/check_cluster.sh).
$(BUILD)/tests/cluster_worker: tests/cluster/worker.c $(BUILD)/lib/libtpurt.so
	@mkdir -p $(@D)
	$(CC) -Iinclude $(TPURT_CFLAGS) -L$(BUILD)/lib $(TPURT_LDFLAGS) -o $@ $< -ltpurt -lm -pthread $(RPATH)
# One task of the cluster-lifetime tests (tests/check_cluster_lifetime.sh).
$(BUILD)/tests/lifetime_worker: tests/cluster/lifetime_worker.c $(BUILD)/lib/libtpurt.so
	@mkdir -p $(@D)
	$(CC) -Iinclude $(TPURT_CFLAGS) -L$(BUILD)/lib $(TPURT_LDFLAGS) -o $@ $< -ltpurt $(RPATH)
# One task of tests/check_checkpoint_cluster.sh (checkpoints across tasks).
$(BUILD)/tests/checkpoint_worker: tests/cluster/checkpoint_worker.c $(BUILD)/lib/libtpurt.so
	@mkdir -p $(@D)
	$(CC) -Iinclude $(TPURT_CFLAGS) -L$(BUILD)/lib $(TPURT_LDFLAGS) -o $@ $< -ltpurt $(RPATH)
# One task of tests/check_verdict.sh (one verdict on every task).
$(BUILD)/tests/verdict_worker: tests/cluster/verdict_worker.c $(BUILD)/lib/libtpurt.so
	@mkdir -p $(@D)
	$(CC) -Iinclude $(TPURT_CFLAGS) -L$(BUILD)/lib $(TPURT_LDFLAGS) -o $@ $< -ltpurt -lm -pthread $(RPATH)

$(BUILD)/tests/%: tests/%.c $(BUILD)/lib/libtpurt.so
	@mkdir -p $(@D)
	$(CC) -Iinclude $(TPURT_CFLAGS) -DTPURT_TEST_DATA_DIR='"$(CURDIR)/tests/data"' -MMD -MP -MF $@.d \
	  -L$(BUILD)/lib $(TPURT_LDFLAGS) -o $@ $< -ltpurt $(TEST_LIBS) $(RPATH)
# Internal unit tests see lib/ and are linked with libtpurt.a, hidden symbols included.
$(BUILD)/tests/%: tests/%.cc $(STLIB)
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS_COMMON) $(TPURT_CXXFLAGS) -DTPURT_TEST_DATA_DIR='"$(CURDIR)/tests/data"' \
	  -MMD -MP -MF $@.d $(TPURT_LDFLAGS) -o $@ $< $(STLIB) $(LIB_DEPS_LIBS) $(TEST_LIBS)

examples: $(EXAMPLE_BINS)
$(BUILD)/examples/%: examples/%.c $(BUILD)/lib/libtpurt.so
	@mkdir -p $(@D)
	$(CC) -Iinclude $(TPURT_CFLAGS) -L$(BUILD)/lib $(TPURT_LDFLAGS) -o $@ $< -ltpurt -lm -pthread $(RPATH)

# The MPI plugin, libtpurt_mpi.so beside libtpurt.so (loaded by TPURT_TRANSPORT=mpi):
# built with mpicxx, or with mpicc's flags (--showme, Open MPI) when only it is here.
MPICXX ?= $(shell command -v mpicxx || command -v mpic++ 2>/dev/null)
MPICC ?= $(shell command -v mpicc 2>/dev/null)
MPI_PLUGIN := $(BUILD)/lib/libtpurt_mpi.so
MPI_PLUGIN_SRCS := $(wildcard lib/mpi_plugin/*.cc)
MPI_BUILD_CXX := $(if $(MPICXX),$(MPICXX),$(if $(MPICC),$(CXX) $$($(MPICC) --showme:compile)))
MPI_BUILD_LIBS := $(if $(MPICXX),,$(if $(MPICC),$$($(MPICC) --showme:link)))
.PHONY: mpi
mpi: $(MPI_PLUGIN)
$(MPI_PLUGIN): $(MPI_PLUGIN_SRCS) $(wildcard lib/mpi_plugin/*.h) lib/mpi_plugin/plugin.map lib/net/mpi_plugin_api.h lib/core/float16.h lib/core/deadline.h
	@if [ -z "$(MPI_BUILD_CXX)" ]; then echo "make mpi: no MPI compiler (mpicxx or mpicc); install libopenmpi-dev (tools/install-deps.sh)" >&2; exit 1; fi
	@mkdir -p $(@D)
	$(MPI_BUILD_CXX) -std=c++17 $(OPT) -g $(WARN) -fPIC -fvisibility=hidden -fvisibility-inlines-hidden \
	  -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX -Iinclude -Ilib $(SAN_FLAGS) $(CPPFLAGS) $(CXXFLAGS) -shared -Wl,--no-undefined -Wl,--version-script=lib/mpi_plugin/plugin.map $(TPURT_LDFLAGS) \
	  -o $@ $(MPI_PLUGIN_SRCS) $(MPI_BUILD_LIBS)

# The runner runs exactly the tests listed here, each case in its own process with the
# time limit tests/test-list gives it. With an MPI compiler the plugin is
# built for tests/check_mpi.sh; without one (or under a sanitizer, whose reports on
# Open MPI itself would drown tpurt's) that script says the MPI tests were skipped.
# T is taken from the command line only (`make test T=test_tensor__cast`), never from
# the environment.
RUN_TESTS = BUILD=$(BUILD) SANITIZE=$(SANITIZE) T='$(if $(filter command line,$(origin T)),$(T))' \
  bash tests/run_tests.sh
test: all $(if $(and $(MPI_BUILD_CXX),$(if $(SANITIZE),,yes)),mpi)
	@ASAN_OPTIONS=$${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=$${UBSAN_OPTIONS:-print_stacktrace=1} \
	  $(RUN_TESTS) $(TEST_BINS) $(TEST_SCRIPTS)
test-list: tests
	@$(RUN_TESTS) --list $(TEST_BINS) $(TEST_SCRIPTS)

demo: lib tool
	$(TOOL) demo --check

bench: lib tool
	$(TOOL) bench

headertest:
	@bash tests/check_header.sh

# What install writes (without DESTDIR); uninstall removes exactly these.
INSTALL_FILES = $(INCLUDEDIR)/tpurt.h $(addprefix $(INCLUDEDIR)/,$(patsubst include/%,%,$(wildcard include/tpurt/*.h))) \
  $(LIBDIR)/$(notdir $(SHLIB)) $(LIBDIR)/$(SONAME) $(LIBDIR)/libtpurt.so $(LIBDIR)/libtpurt.a \
  $(LIBDIR)/libtpurt_mpi.so \
  $(PKGCONFIGDIR)/tpurt.pc $(PKGCONFIGDIR)/tpurt-static.pc $(BINDIR)/tpurt $(MANDIR)/man1/tpurt.1 \
  $(addprefix $(DOCDIR)/,$(notdir $(DOC_FILES)))
DOC_FILES := LICENSE $(wildcard CHANGELOG.md)
INSTALL_DIRS = $(BINDIR) $(INCLUDEDIR)/tpurt $(LIBDIR) $(PKGCONFIGDIR) $(MANDIR)/man1 $(DOCDIR)
# The directories install created, so that uninstall removes those and no others.
DIRS_MANIFEST = $(DOCDIR)/installed-dirs
# INSTALL_BINDINGS: auto (the default) installs each binding that was built (make
# bindings, bindings-<lang> or test-<lang>) and builds none; yes builds and installs all
# three; no installs none. Installing the C library installs the C library.
INSTALL_BINDINGS ?= $(if $(SANITIZE),no,auto)
ifeq ($(filter auto yes no,$(INSTALL_BINDINGS)),)
$(error INSTALL_BINDINGS=$(INSTALL_BINDINGS): use auto, yes or no)
endif
# A binding counts as built when its last build output exists.
BINDING_BUILT_csharp = $(CS_DLL)
BINDING_BUILT_java = $(JAVA_JAR)
BINDING_BUILT_go = $(GO_MOD)/.stamp
INSTALL_LANGS = $(if $(filter yes,$(INSTALL_BINDINGS)),$(BINDING_LANGS),$(if $(filter auto,$(INSTALL_BINDINGS)),$(foreach l,$(BINDING_LANGS),$(if $(wildcard $(BINDING_BUILT_$(l))),$(l)))))
# What each binding's install-<lang> writes (files, whole trees, directories it makes).
BINDING_FILES_csharp = $(CS_INSTALL_FILES)
BINDING_FILES_java = $(JAVA_INSTALL_FILES)
BINDING_DIRS_csharp = $(PREFIX)/lib/cli/tpurt
BINDING_DIRS_java = $(PREFIX)/share/java $(JAVA_JNIDIR)
BINDING_DIRS_go = $(BINDING_INSTALL_TREES)
INSTALL_DIRS += $(foreach l,$(INSTALL_LANGS),$(BINDING_DIRS_$(l)))
# uninstall removes every binding install may have put there, built now or not.
UNINSTALL_LANGS = $(if $(filter no,$(INSTALL_BINDINGS)),,$(BINDING_LANGS))

# ldconfig refreshes the loader's cache when LIBDIR is a directory it searches
# (/usr/local/lib, /usr/lib...): without it, programs fail to find libtpurt.so.1.
# Never for a DESTDIR stage or another prefix.
define run_ldconfig
if [ -z "$(DESTDIR)" ] && $(LDCONFIG) -vNX 2>/dev/null | sed -n 's|^\(/[^:]*\):.*|\1|p' | \
     { while read -r d; do [ "$$d" -ef "$(LIBDIR)" ] && exit 0; done; exit 1; }; then \
  echo "$(LDCONFIG)" && $(LDCONFIG); fi
endef
# After an install into a directory the loader does not search: the one line that
# builds a program that runs (the README's rpath recipe).
define loader_hint
if [ -z "$(DESTDIR)" ] && ! $(LDCONFIG) -vNX 2>/dev/null | sed -n 's|^\(/[^:]*\):.*|\1|p' | \
     { while read -r d; do [ "$$d" -ef "$(LIBDIR)" ] && exit 0; done; exit 1; }; then \
  echo "$(LIBDIR) is not searched by the loader; build programs with: cc prog.c \$$(PKG_CONFIG_PATH=$(PKGCONFIGDIR) pkg-config --cflags --libs tpurt) -Wl,-rpath,$(LIBDIR)"; fi
endef

# tpurt.pc is generated for this PREFIX: the build tree's copy has the PREFIX of the build.
# The bindings install as INSTALL_BINDINGS says (above; a sanitizer build has none).
install: lib tool $(if $(filter yes,$(INSTALL_BINDINGS)),bindings)
	@made=(); for d in $(INSTALL_DIRS); do \
	  new=(); while [ "$$d" != / ] && [ ! -d "$(DESTDIR)$$d" ]; do new=("$$d" "$${new[@]}"); d=$$(dirname "$$d"); done; \
	  made+=("$${new[@]}"); done; \
	install -d $(addprefix $(DESTDIR),$(INSTALL_DIRS)) && \
	{ cat "$(DESTDIR)$(DIRS_MANIFEST)" 2>/dev/null || true; printf '%s\n' "$${made[@]}"; } | \
	  awk 'NF && !seen[$$0]++' > "$(DESTDIR)$(DIRS_MANIFEST).new" && \
	mv "$(DESTDIR)$(DIRS_MANIFEST).new" "$(DESTDIR)$(DIRS_MANIFEST)"
	install -m 644 include/tpurt.h $(DESTDIR)$(INCLUDEDIR)/
	install -m 644 include/tpurt/*.h $(DESTDIR)$(INCLUDEDIR)/tpurt/
	install -m 755 $(SHLIB) $(DESTDIR)$(LIBDIR)/
	ln -sf $(notdir $(SHLIB)) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libtpurt.so
	install -m 644 $(STLIB) $(DESTDIR)$(LIBDIR)/
	@# The MPI plugin, when built (make mpi), goes beside libtpurt.so, where the loader looks.
	if [ -e $(MPI_PLUGIN) ]; then install -m 755 $(MPI_PLUGIN) $(DESTDIR)$(LIBDIR)/; fi
	$(PC_GEN) pkgconfig/tpurt.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/tpurt.pc
	$(PC_GEN) pkgconfig/tpurt-static.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/tpurt-static.pc
	chmod 644 $(DESTDIR)$(PKGCONFIGDIR)/tpurt.pc $(DESTDIR)$(PKGCONFIGDIR)/tpurt-static.pc
	install -m 755 $(TOOL) $(DESTDIR)$(BINDIR)/
	install -m 644 docs/tpurt.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 644 $(DOC_FILES) $(DESTDIR)$(DOCDIR)/
	$(if $(INSTALL_LANGS),@$(MAKE) --no-print-directory $(addprefix install-,$(INSTALL_LANGS)))
	@$(run_ldconfig)
	@$(loader_hint)

uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALL_FILES) $(foreach l,$(UNINSTALL_LANGS),$(BINDING_FILES_$(l))))
	rm -rf $(DESTDIR)$(INCLUDEDIR)/tpurt $(if $(UNINSTALL_LANGS),$(addprefix $(DESTDIR),$(BINDING_INSTALL_TREES)))
	@if [ -f "$(DESTDIR)$(DIRS_MANIFEST)" ]; then \
	  dirs=$$(tac "$(DESTDIR)$(DIRS_MANIFEST)"); rm -f "$(DESTDIR)$(DIRS_MANIFEST)"; \
	  for d in $$dirs; do rmdir "$(DESTDIR)$$d" 2>/dev/null || true; done; fi
	@$(run_ldconfig)

clean:
	rm -rf $(BUILD)

# ---- Bindings: one SWIG interface (bindings/tpurt.i) over the support layer
# (bindings/tpurt_binding.hpp, which includes bindings/support/*.hpp); each language's
# fragment defines bindings-<lang>, test-<lang> (prints "<lang>: N passed, N failed"),
# install-<lang>, bench-<lang> and example-<lang>, and writes only under
# $(BUILD)/bindings/<lang>.
BINDING_LANGS := csharp java go
SWIG ?= swig
BINDING_SUPPORT := bindings/tpurt.i bindings/tpurt_binding.hpp bindings/replica_pool.hpp $(wildcard bindings/support/*.hpp) \
  $(wildcard include/tpurt/*.h)
-include $(foreach l,$(BINDING_LANGS),bindings/$(l)/$(l).mk)
CS_INSTALL_FILES = $(PREFIX)/lib/cli/tpurt/Tpurt.dll $(PREFIX)/lib/cli/tpurt/Tpurt.dll.config \
  $(LIBDIR)/libtpurt_csharp.so
JAVA_INSTALL_FILES = $(PREFIX)/share/java/tpurt.jar $(JAVA_JNIDIR)/libtpurt_java.so
BINDING_INSTALL_TREES = $(GO_INSTALL_DIR:$(DESTDIR)%=%)
bindings: $(addprefix bindings-,$(BINDING_LANGS))
bench-bindings: lib $(addprefix bindings-,$(BINDING_LANGS))
	BUILD=$(BUILD) bash bench/bindings.sh

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null) $(wildcard $(BUILD)/tests/*.d)

# tpurt.i is language-neutral: a Python module generated from it, built and imported.
PY_DIR := $(BUILD)/bindings/python
PY_EXT := $(shell python3-config --extension-suffix 2>/dev/null)
$(PY_DIR)/tpurt_wrap.cxx: $(BINDING_SUPPORT)
	@mkdir -p $(@D)
	$(SWIG) -c++ -python -threads -Ibindings -outdir $(PY_DIR) -o $@ bindings/tpurt.i
$(PY_DIR)/_tpurt$(PY_EXT): $(PY_DIR)/tpurt_wrap.cxx $(BUILD)/lib/libtpurt.so
	$(CXX) -std=c++17 -O1 -shared -fPIC -w -Ibindings -Iinclude $$(python3-config --includes) $< -o $@ \
	  -L$(BUILD)/lib -ltpurt -Wl,-rpath,$(abspath $(BUILD)/lib)
.PHONY: test-python
test-python: $(PY_DIR)/_tpurt$(PY_EXT)
	PYTHONPATH=$(PY_DIR) python3 tests/python/test_generated_python.py

include packaging/packaging.mk
include tests/fuzz/fuzz.mk
