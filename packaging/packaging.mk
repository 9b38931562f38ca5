# Packages for each ecosystem, all at the library's $(VERSION) (include/tpurt/common.h):
#   make deb        build/deb/{libtpurt1,libtpurt-dev,tpurt}_$(VERSION)-1_<arch>.deb (debhelper; lintian must pass)
#   make nupkg      build/nupkg/Tpurt.$(VERSION).nupkg (nuget pack, Mono)
#   make jar-pom    build/maven/tpurt-$(VERSION).jar + .pom (the jar carries libtpurt too)
#   make go-proxy   build/go-proxy: a GOPROXY=file:// directory holding tpurt.dev/go/tpurt v$(VERSION)
# Debian's files live in packaging/debian and are copied into the build directory.
.PHONY: deb nupkg jar-pom go-proxy packages print-version
STRIP ?= strip
# The first block of a language in README.md: $(call readme_block,csharp)
readme_block = awk '/^```$(1)$$/ { on = 1; next } on && /^```$$/ { exit } on { print }' README.md
packages: deb nupkg jar-pom go-proxy
print-version:
	@echo $(VERSION)

# ---- Debian ------------------------------------------------------------------------
DEB_ARCH := $(shell dpkg-architecture -qDEB_HOST_ARCH 2>/dev/null)
DEB_MULTIARCH := $(shell dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null)
DEB_VERSION := $(VERSION)-1
DEB_DIR := $(BUILD)/deb
DEB_SRC := $(DEB_DIR)/tpurt-$(VERSION)
DEB_PACKAGES := libtpurt1 libtpurt-dev tpurt
DEB_FILES := $(foreach p,$(DEB_PACKAGES),$(DEB_DIR)/$(p)_$(DEB_VERSION)_$(DEB_ARCH).deb)
# The changelog's date is the last commit's, so two builds of one commit are the same.
DEB_DATE = $(shell git log -1 --format=%cD 2>/dev/null || date -R)

# `make install` stages the tree into debian/stage (the CLI relinked without the build
# tree's rpath); dh splits it into the packages.
deb: lib
	@command -v dh >/dev/null && command -v lintian >/dev/null || \
	  { echo "make deb: needs debhelper and lintian (bash tools/install-deps.sh)" >&2; exit 1; }
	rm -rf $(DEB_DIR) && mkdir -p $(DEB_SRC)
	cp -r packaging/debian $(DEB_SRC)/debian
	sed -e 's|@VERSION@|$(VERSION)|' -e 's|@DATE@|$(DEB_DATE)|' packaging/debian/changelog.in > $(DEB_SRC)/debian/changelog
	rm $(DEB_SRC)/debian/changelog.in
	cp docs/ABI.md $(DEB_SRC)/debian/
	cp CHANGELOG.md $(DEB_SRC)/debian/upstream-changelog
	$(MAKE) --no-print-directory install DESTDIR=$(abspath $(DEB_SRC))/debian/stage PREFIX=/usr \
	  LIBDIR=/usr/lib/$(DEB_MULTIARCH) INSTALL_BINDINGS=no LDCONFIG=true TOOL=$(DEB_DIR)/bin/tpurt RPATH= >/dev/null
	@# Not packaged: make install's LICENSE/CHANGELOG copies (each package has its own
	@# copyright and changelog) and the MPI plugin, which would pull Open MPI into libtpurt1.
	rm -rf $(DEB_SRC)/debian/stage/usr/share/doc $(DEB_SRC)/debian/stage/usr/lib/$(DEB_MULTIARCH)/libtpurt_mpi.so
	cd $(DEB_SRC) && dpkg-buildpackage -b -nc -uc -us > ../dpkg-buildpackage.log 2>&1 || \
	  { tail -40 ../dpkg-buildpackage.log >&2; exit 1; }
	lintian --fail-on error,warning --tag-display-limit 0 $(DEB_FILES)
	@printf '%s\n' $(DEB_FILES)

# ---- Java (Maven) ------------------------------------------------------------------
# The binding's jar with the installed glue (no rpath) and libtpurt.so.1 beside it in
# the jar (NativeLoader loads the library first), plus its POM inside and beside it.
MVN_DIR := $(BUILD)/maven
MVN_JAR := $(MVN_DIR)/tpurt-$(VERSION).jar
MVN_POM := $(MVN_DIR)/tpurt-$(VERSION).pom
jar-pom: $(MVN_JAR) $(MVN_POM)
$(MVN_POM): packaging/maven/pom.xml.in include/tpurt/common.h
	@mkdir -p $(@D)
	sed 's|@VERSION@|$(VERSION)|' $< > $@
$(MVN_JAR): $(JAVA_JAR) $(JAVA_SO_INSTALL) $(SHLIB) $(MVN_POM)
	rm -rf $(MVN_DIR)/classes && mkdir -p $(MVN_DIR)/classes/META-INF/maven/org.tpurt/tpurt
	cd $(MVN_DIR)/classes && $(JAR) xf $(abspath $(JAVA_JAR))
	rm -rf $(MVN_DIR)/classes/META-INF/MANIFEST.MF
	$(STRIP) --strip-unneeded -o $(MVN_DIR)/classes/$(JAVA_NATIVE_RESOURCE)/libtpurt_java.so $(JAVA_SO_INSTALL)
	$(STRIP) --strip-unneeded -o $(MVN_DIR)/classes/$(JAVA_NATIVE_RESOURCE)/$(SONAME) $(SHLIB)
	cp $(MVN_POM) $(MVN_DIR)/classes/META-INF/maven/org.tpurt/tpurt/pom.xml
	printf 'groupId=org.tpurt\nartifactId=tpurt\nversion=%s\n' '$(VERSION)' > $(MVN_DIR)/classes/META-INF/maven/org.tpurt/tpurt/pom.properties
	$(JAR) cf $@ -C $(MVN_DIR)/classes .

# ---- C# (NuGet) --------------------------------------------------------------------
# lib/net45: Tpurt.dll and its dllmap; runtimes/linux-x64/native: the glue, whose
# $$ORIGIN rpath finds libtpurt.so.1 beside it; build/Tpurt.targets copies both beside
# the program (Mono looks for P/Invoke libraries beside the assembly); README.md: the
# README's C# example.
NUPKG_DIR := $(BUILD)/nupkg
NUPKG_STAGE := $(NUPKG_DIR)/stage
NUPKG_NATIVE := $(NUPKG_STAGE)/runtimes/linux-x64/native
NUPKG := $(NUPKG_DIR)/Tpurt.$(VERSION).nupkg
NUGET ?= nuget
nupkg: $(NUPKG)
$(NUPKG_NATIVE)/libtpurt_csharp.so: $(CS_DIR)/tpurt_wrap.cxx $(BUILD)/lib/libtpurt.so
	@mkdir -p $(@D)
	$(CXX) -std=c++17 -O2 -shared -fPIC -w -s -Ibindings -Iinclude $< -o $@ \
	  -L$(BUILD)/lib -ltpurt -Wl,-rpath,'$$ORIGIN'
$(NUPKG): $(CS_DLL) $(NUPKG_NATIVE)/libtpurt_csharp.so $(SHLIB) packaging/nuget/Tpurt.nuspec.in \
          packaging/nuget/Tpurt.targets README.md
	@command -v $(NUGET) >/dev/null || { echo "make nupkg: needs nuget (bash tools/install-deps.sh)" >&2; exit 1; }
	rm -rf $(NUPKG_STAGE)/lib $(NUPKG_STAGE)/build $(NUPKG_DIR)/*.nupkg
	mkdir -p $(NUPKG_STAGE)/lib/net45 $(NUPKG_STAGE)/build
	cp $(CS_DLL) $(NUPKG_STAGE)/lib/net45/
	printf '<configuration>\n  <dllmap dll="tpurt_csharp" target="libtpurt_csharp.so"/>\n</configuration>\n' \
	  > $(NUPKG_STAGE)/lib/net45/Tpurt.dll.config
	$(STRIP) --strip-unneeded -o $(NUPKG_NATIVE)/$(SONAME) $(SHLIB)
	cp packaging/nuget/Tpurt.targets $(NUPKG_STAGE)/build/
	{ printf '%s\n' '# Tpurt $(VERSION)' '' 'TPU-style SPMD programs on CPUs, from C# (Mono, linux-x64).' '' '```csharp'; \
	  $(call readme_block,csharp); printf '%s\n' '```'; } > $(NUPKG_STAGE)/README.md
	grep -q tpu $(NUPKG_STAGE)/README.md || { echo "make nupkg: README.md has no csharp block" >&2; exit 1; }
	sed -e 's|@VERSION@|$(VERSION)|' -e 's|@STAGE@|stage|' packaging/nuget/Tpurt.nuspec.in \
	  > $(NUPKG_DIR)/Tpurt.nuspec
	cd $(NUPKG_DIR) && HOME=$(abspath $(NUPKG_DIR)) $(NUGET) pack Tpurt.nuspec -OutputDirectory . -NonInteractive >pack.log 2>&1 || \
	  { cat pack.log >&2; exit 1; }

# ---- Go (a module proxy directory) ---------------------------------------------------
# install-go's module files, with cgo flags from pkg-config (the installed library's
# tpurt.pc) instead of paths, zipped as the proxy protocol wants: GOPROXY=file://$(abspath
# $(GO_PROXY)) serves tpurt.dev/go/tpurt v$(VERSION) without a replace line.
GO_PROXY := $(BUILD)/go-proxy
GO_PROXY_V := $(GO_PROXY)/$(GO_MODULE)/@v
GO_PROXY_STAGE := $(BUILD)/go-proxy-stage
GO_PROXY_ROOT := $(GO_PROXY_STAGE)/$(GO_MODULE)@v$(VERSION)
go-proxy: $(GO_PROXY_V)/v$(VERSION).zip
$(GO_PROXY_V)/v$(VERSION).zip: $(GO_MOD)/.stamp packaging/packaging.mk
	rm -rf $(GO_PROXY) $(GO_PROXY_STAGE) && mkdir -p $(GO_PROXY_V) $(GO_PROXY_ROOT)/support
	install -m 644 $(GO_MODULE_FILES) $(GO_PROXY_ROOT)/
	install -m 644 $(GO_MOD)/support/*.hpp $(GO_PROXY_ROOT)/support/
	printf '%s\n' 'package tpurt' '' '// #cgo CXXFLAGS: -std=c++17 -w -I$${SRCDIR}' '// #cgo pkg-config: tpurt' \
	  'import "C"' > $(GO_PROXY_ROOT)/cgo_flags.go
	cp $(GO_PROXY_ROOT)/go.mod $(GO_PROXY_V)/v$(VERSION).mod
	printf '{"Version":"v%s","Time":"%s"}\n' '$(VERSION)' "$$(git log -1 --format=%cI 2>/dev/null || date -Iseconds)" \
	  > $(GO_PROXY_V)/v$(VERSION).info
	echo v$(VERSION) > $(GO_PROXY_V)/list
	cd $(GO_PROXY_STAGE) && zip -qrXD $(abspath $@) $(GO_MODULE)@v$(VERSION)
