# Go binding: SWIG runs here (not through a .swigcxx, whose %includes go build does
# not track); $(GO_MOD) is the complete module: hand-written sources + generated code.
GO ?= go
GO_MODULE := tpurt.dev/go/tpurt
GO_OUT := $(BUILD)/bindings/go
GO_MOD := $(GO_OUT)/tpurt
GO_SRC := $(filter-out %_test.go,$(wildcard bindings/go/*.go)) bindings/go/go.mod bindings/go/pool.cxx bindings/go/pool.h
GO_TESTS := $(wildcard bindings/go/*_test.go)
GO_ENV := GOPROXY=off GOFLAGS=-mod=mod GO111MODULE=on GOTOOLCHAIN=local \
  GOCACHE=$(abspath $(GO_OUT))/cache GOPATH=$(abspath $(GO_OUT))/gopath
GO_LIBDIR := $(abspath $(BUILD)/lib)

# go build's cache hashes the headers in the package directory, not those in support/:
# their checksum in cgo_flags.go makes an edit to one of them rebuild the package.
GO_SUPPORT_SUM = $(firstword $(shell cat bindings/support/*.hpp bindings/replica_pool.hpp | sha256sum))

# One stamp: swig output, copies and the cgo flags file appear together.
$(GO_MOD)/.stamp: bindings/go/tpurt_go.i $(BINDING_SUPPORT) $(GO_SRC) $(GO_TESTS) bindings/go/go.mk
	@rm -rf $(GO_MOD) && mkdir -p $(GO_MOD)
	$(SWIG) -go -cgo -intgosize 64 -c++ -module tpurt -Ibindings -Iinclude \
	  -outdir $(GO_MOD) -o $(GO_MOD)/tpurt_wrap.cxx bindings/go/tpurt_go.i
	cp $(GO_SRC) $(GO_TESTS) bindings/tpurt_binding.hpp bindings/replica_pool.hpp $(GO_MOD)/
	mkdir -p $(GO_MOD)/support && cp bindings/support/*.hpp $(GO_MOD)/support/
	printf '%s\n' 'package tpurt' '' \
	  '// support headers: sha256 $(GO_SUPPORT_SUM)' '' \
	  '// #cgo CXXFLAGS: -std=c++17 -w -I$${SRCDIR} -I$(abspath include)' \
	  '// #cgo LDFLAGS: -L$(GO_LIBDIR) -ltpurt -Wl,-rpath,$(GO_LIBDIR)' \
	  'import "C"' > $(GO_MOD)/cgo_flags.go
	touch $@

.PHONY: bindings-go test-go install-go example-go bench-go
bindings-go: $(GO_MOD)/.stamp $(BUILD)/lib/libtpurt.so
	cd $(GO_MOD) && $(GO_ENV) $(GO) build ./... && $(GO_ENV) $(GO) vet -unsafeptr=false .

test-go: bindings-go
	cd $(GO_MOD) && GODEBUG=cgocheck=2 $(GO_ENV) timeout 170 $(GO) test -count=1 -v . > ../test.log 2>&1; \
	  status=$$?; cat ../test.log; \
	  passed=$$(grep -c '^\s*--- PASS' ../test.log); failed=$$(grep -c '^\s*--- FAIL' ../test.log); \
	  if [ $$status -ne 0 ] && [ $$failed -eq 0 ]; then failed=1; fi; \
	  echo "go: $$passed passed, $$failed failed"; exit $$status

# A program outside the module: its go.mod points at the assembled module.
define GO_PROGRAM
	@rm -rf $(GO_OUT)/$(1) && mkdir -p $(GO_OUT)/$(1)
	cp $(2)/*.go $(GO_OUT)/$(1)/
	printf '%s\n' 'module tpurt.dev/go/$(1)' '' 'go 1.19' '' 'require $(GO_MODULE) v0.0.0' \
	  'replace $(GO_MODULE) => ../tpurt' > $(GO_OUT)/$(1)/go.mod
	cd $(GO_OUT)/$(1) && $(GO_ENV) $(GO) build -o $(1) . && ./$(1)
endef

# Both examples: the data-parallel regression, then a step over a 2 x 2 mesh.
example-go: bindings-go
	$(call GO_PROGRAM,example,examples/go)
	$(call GO_PROGRAM,mesh,examples/go/mesh)

bench-go: bindings-go
	$(call GO_PROGRAM,bench,bench/go)

# Debian's layout for Go sources; the installed flags point at the installed library.
GO_INSTALL_DIR := $(DESTDIR)$(PREFIX)/share/gocode/src/$(GO_MODULE)
# The module's top-level files as installed and as packaged (make go-proxy), without
# the build tree's cgo flags; support/*.hpp goes with them.
GO_MODULE_FILES = $(filter-out %_test.go $(GO_MOD)/cgo_flags.go,$(wildcard $(GO_MOD)/*.go)) \
  $(GO_MOD)/go.mod $(GO_MOD)/tpurt_wrap.cxx $(GO_MOD)/tpurt_wrap.h $(GO_MOD)/tpurt_binding.hpp \
  $(GO_MOD)/replica_pool.hpp $(GO_MOD)/pool.cxx $(GO_MOD)/pool.h
install-go: bindings-go
	install -d $(GO_INSTALL_DIR)
	install -m 644 $(GO_MODULE_FILES) $(GO_INSTALL_DIR)/
	install -d $(GO_INSTALL_DIR)/support
	install -m 644 $(GO_MOD)/support/*.hpp $(GO_INSTALL_DIR)/support/
	printf '%s\n' 'package tpurt' '' \
	  '// #cgo CXXFLAGS: -std=c++17 -w -I$${SRCDIR} -I$(INCLUDEDIR)' \
	  '// #cgo LDFLAGS: -L$(LIBDIR) -ltpurt -Wl,-rpath,$(LIBDIR)' \
	  'import "C"' > $(GO_INSTALL_DIR)/cgo_flags.go
