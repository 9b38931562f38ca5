# C# binding: SWIG (-csharp) over bindings/tpurt.i plus the hand-written layer, built
# with Mono's mcs; tests run with NUnit 2.6 (nunit-console).
CS_DIR := $(BUILD)/bindings/csharp
CS_GEN := $(CS_DIR)/gen
CS_MCS ?= mcs
CS_NUNIT_DIR ?= /usr/lib/cli/nunit.framework-2.6.3
CS_NUNIT_CONSOLE ?= nunit-console
CS_HAND := $(wildcard bindings/csharp/*.cs)
CS_TESTS := $(wildcard bindings/csharp/tests/*.cs)
CS_GLUE := $(CS_DIR)/libtpurt_csharp.so
CS_DLL := $(CS_DIR)/Tpurt.dll
CS_RUN := LD_LIBRARY_PATH=$(abspath $(CS_DIR)):$(abspath $(BUILD)/lib) mono --debug

$(CS_DIR)/tpurt_wrap.cxx: bindings/csharp/tpurt_csharp.i $(BINDING_SUPPORT)
	@rm -rf $(CS_GEN) && mkdir -p $(CS_GEN)
	$(SWIG) -c++ -csharp -namespace Tpurt -dllimport tpurt_csharp -Ibindings -Iinclude \
	  -outdir $(CS_GEN) -o $@ bindings/csharp/tpurt_csharp.i
$(CS_GLUE): $(CS_DIR)/tpurt_wrap.cxx $(BUILD)/lib/libtpurt.so
	$(CXX) -std=c++17 -O2 -shared -fPIC -w -Ibindings -Iinclude $< -o $@ \
	  -L$(BUILD)/lib -ltpurt -Wl,-rpath,$(abspath $(BUILD)/lib)
$(CS_DLL): $(CS_DIR)/tpurt_wrap.cxx $(CS_HAND)
	$(CS_MCS) -nologo -target:library -unsafe -optimize+ -debug -nowarn:1591,414 -out:$@ $(CS_GEN)/*.cs $(CS_HAND)

# A dllmap beside the build tree's Tpurt.dll: a program run with
# MONO_PATH=$(CS_DIR) finds the glue without LD_LIBRARY_PATH (the glue's rpath finds
# libtpurt). Mono looks for Tpurt.dll itself only beside the .exe or on MONO_PATH.
$(CS_DIR)/Tpurt.dll.config: bindings/csharp/csharp.mk
	@mkdir -p $(@D)
	printf '<configuration>\n  <dllmap dll="tpurt_csharp" target="%s"/>\n</configuration>\n' '$(abspath $(CS_GLUE))' > $@

.PHONY: bindings-csharp test-csharp install-csharp example-csharp bench-csharp
bindings-csharp: $(CS_GLUE) $(CS_DLL) $(CS_DIR)/Tpurt.dll.config

$(CS_DIR)/Tpurt.Tests.dll: $(CS_DLL) $(CS_TESTS)
	$(CS_MCS) -nologo -target:library -unsafe -debug -out:$@ -r:$(CS_DLL) \
	  -r:$(CS_NUNIT_DIR)/nunit.framework.dll $(CS_TESTS)
# Programs the tests run as subprocesses (exit and late-replica behaviour).
CS_PROGRAMS := $(patsubst bindings/csharp/tests/programs/%.cs,$(CS_DIR)/%.exe,$(wildcard bindings/csharp/tests/programs/*.cs))
$(CS_DIR)/%.exe: bindings/csharp/tests/programs/%.cs $(CS_DLL)
	$(CS_MCS) -nologo -out:$@ -r:$(CS_DLL) $<
# The tool: `tpurt launch` runs EmbeddingTasks.exe as 2 tasks.
test-csharp: bindings-csharp $(CS_DIR)/Tpurt.Tests.dll $(CS_PROGRAMS) $(TOOL)
	cd $(CS_DIR) && rm -f TestResult.xml && \
	  LD_LIBRARY_PATH=$(abspath $(CS_DIR)):$(abspath $(BUILD)/lib) TPURT_CS_DIR=$(abspath $(CS_DIR)) TPURT_TOOL=$(abspath $(TOOL)) \
	  timeout 170 $(CS_NUNIT_CONSOLE) -nologo Tpurt.Tests.dll > nunit.log 2>&1; \
	  status=$$?; tail -30 nunit.log; \
	  bash $(abspath bindings/csharp/tests/summary.sh) TestResult.xml $$status

# Installed: the glue relinked with an rpath to $(LIBDIR) (not the build tree), and a
# Mono dllmap so Tpurt.dll finds it there without LD_LIBRARY_PATH.
$(CS_DIR)/install/libtpurt_csharp.so: $(CS_DIR)/tpurt_wrap.cxx $(BUILD)/lib/libtpurt.so
	@mkdir -p $(@D)
	$(CXX) -std=c++17 -O2 -shared -fPIC -w -Ibindings -Iinclude $< -o $@ \
	  -L$(BUILD)/lib -ltpurt -Wl,-rpath,$(LIBDIR)
install-csharp: bindings-csharp $(CS_DIR)/install/libtpurt_csharp.so
	install -d $(DESTDIR)$(PREFIX)/lib/cli/tpurt $(DESTDIR)$(LIBDIR)
	install -m 644 $(CS_DLL) $(DESTDIR)$(PREFIX)/lib/cli/tpurt/Tpurt.dll
	printf '<configuration>\n  <dllmap dll="tpurt_csharp" target="%s/libtpurt_csharp.so"/>\n</configuration>\n' \
	  '$(LIBDIR)' > $(DESTDIR)$(PREFIX)/lib/cli/tpurt/Tpurt.dll.config
	install -m 755 $(CS_DIR)/install/libtpurt_csharp.so $(DESTDIR)$(LIBDIR)/libtpurt_csharp.so

CS_EXAMPLES := $(CS_DIR)/LinearRegression.exe $(CS_DIR)/MeshStep.exe
$(CS_EXAMPLES): $(CS_DIR)/%.exe: examples/csharp/%.cs $(CS_DLL)
	$(CS_MCS) -nologo -optimize+ -out:$@ -r:$(CS_DLL) $<
# Both examples: the data-parallel regression, then a step over a 2 x 2 mesh.
example-csharp: bindings-csharp $(CS_EXAMPLES)
	cd $(CS_DIR) && $(CS_RUN) LinearRegression.exe && $(CS_RUN) MeshStep.exe

$(CS_DIR)/Bench.exe: bench/csharp/Bench.cs $(CS_DLL)
	$(CS_MCS) -nologo -optimize+ -unsafe -out:$@ -r:$(CS_DLL) $<
bench-csharp: bindings-csharp $(CS_DIR)/Bench.exe
	cd $(CS_DIR) && $(CS_RUN) Bench.exe
