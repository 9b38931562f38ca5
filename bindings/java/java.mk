# The Java binding: SWIG (-java, package org.tpurt) over bindings/tpurt.i plus the
# hand-written layer in bindings/java/src, built with javac + jar (no Maven).
JAVA_HOME_DIR ?= $(shell dirname $$(dirname $$(readlink -f $$(command -v javac))))
JAVAC ?= javac
JAR ?= jar
JAVA ?= java
JAVA_DIR := $(BUILD)/bindings/java
JAVA_GEN := $(JAVA_DIR)/gen/org/tpurt
JAVA_WRAP := $(JAVA_DIR)/tpurt_wrap.cxx
JAVA_OBJ := $(JAVA_DIR)/tpurt_wrap.o
JAVA_SO := $(JAVA_DIR)/native/libtpurt_java.so
JAVA_SO_INSTALL := $(JAVA_DIR)/install/libtpurt_java.so
JAVA_JAR := $(JAVA_DIR)/tpurt.jar
JAVA_NATIVE_RESOURCE := org/tpurt/native/linux-x86_64
JAVA_SRCS := $(shell find bindings/java/src -name '*.java' 2>/dev/null)
JAVA_TEST_SRCS := $(shell find bindings/java/tests -name '*.java' 2>/dev/null)
JAVA_JUNIT_CP := /usr/share/java/junit4.jar:/usr/share/java/hamcrest-core.jar
# Debian's JNI directory: $(LIBDIR)/jni.
JAVA_JNIDIR ?= $(LIBDIR)/jni
JAVA_RUN := $(JAVA) -Djava.library.path=$(abspath $(JAVA_DIR)/native)

$(JAVA_WRAP): bindings/java/tpurt_java.i bindings/java/pool_java.i $(BINDING_SUPPORT)
	@rm -rf $(JAVA_GEN) && mkdir -p $(JAVA_GEN)
	$(SWIG) -c++ -java -package org.tpurt -Ibindings -outdir $(JAVA_GEN) -o $@ bindings/java/tpurt_java.i

# Workers attach as daemons and detach when they exit, so an unclosed system never holds up JVM exit.
# The wrapper compiles the one replica pool in (tpurt_java.i's glue): rebuilt when it changes.
$(JAVA_OBJ): $(JAVA_WRAP) bindings/replica_pool.hpp
	$(CXX) -std=c++17 -O2 -fPIC -w -Ibindings -Iinclude \
	  -I$(JAVA_HOME_DIR)/include -I$(JAVA_HOME_DIR)/include/linux \
	  -DSWIG_JAVA_ATTACH_CURRENT_THREAD_AS_DAEMON -DSWIG_JAVA_DETACH_ON_THREAD_END -c $< -o $@

# The build tree's copy finds libtpurt through an rpath; the installed one through ld.so.
$(JAVA_SO): $(JAVA_OBJ) $(BUILD)/lib/libtpurt.so
	@mkdir -p $(@D)
	$(CXX) -shared $< -o $@ -L$(BUILD)/lib -ltpurt -Wl,-rpath,$(abspath $(BUILD)/lib)
$(JAVA_SO_INSTALL): $(JAVA_OBJ) $(BUILD)/lib/libtpurt.so
	@mkdir -p $(@D)
	$(CXX) -shared $< -o $@ -L$(BUILD)/lib -ltpurt

$(JAVA_JAR): $(JAVA_SO) $(JAVA_SRCS)
	@rm -rf $(JAVA_DIR)/classes && mkdir -p $(JAVA_DIR)/classes/$(JAVA_NATIVE_RESOURCE)
	$(JAVAC) -nowarn -encoding UTF-8 -d $(JAVA_DIR)/classes $(JAVA_GEN)/*.java $(JAVA_SRCS)
	cp $(JAVA_SO) $(JAVA_DIR)/classes/$(JAVA_NATIVE_RESOURCE)/
	$(JAR) cf $@ -C $(JAVA_DIR)/classes .

.PHONY: bindings-java test-java install-java example-java bench-java
bindings-java: $(JAVA_JAR)

$(JAVA_DIR)/test-classes/.built: $(JAVA_JAR) $(JAVA_TEST_SRCS)
	@rm -rf $(JAVA_DIR)/test-classes && mkdir -p $(JAVA_DIR)/test-classes
	$(JAVAC) -nowarn -encoding UTF-8 -cp $(JAVA_JAR):$(JAVA_JUNIT_CP) -d $(JAVA_DIR)/test-classes $(JAVA_TEST_SRCS)
	@touch $@

test-java: $(JAVA_DIR)/test-classes/.built
	$(JAVA_RUN) -cp $(JAVA_JAR):$(JAVA_DIR)/test-classes:$(JAVA_JUNIT_CP) org.tpurt.TestMain

install-java: $(JAVA_JAR) $(JAVA_SO_INSTALL)
	install -d $(DESTDIR)$(PREFIX)/share/java $(DESTDIR)$(JAVA_JNIDIR)
	install -m 644 $(JAVA_JAR) $(DESTDIR)$(PREFIX)/share/java/tpurt.jar
	install -m 755 $(JAVA_SO_INSTALL) $(DESTDIR)$(JAVA_JNIDIR)/libtpurt_java.so

JAVA_EXAMPLES := examples/java/LinearRegression.java examples/java/MeshStep.java
$(JAVA_DIR)/example/.built: $(JAVA_JAR) $(JAVA_EXAMPLES)
	@rm -rf $(@D) && mkdir -p $(@D)
	$(JAVAC) -nowarn -cp $(JAVA_JAR) -d $(@D) $(JAVA_EXAMPLES)
	@touch $@
# Both examples: the data-parallel regression, then a step over a 2 x 2 mesh.
example-java: $(JAVA_DIR)/example/.built
	$(JAVA_RUN) -cp $(JAVA_JAR):$(JAVA_DIR)/example LinearRegression
	$(JAVA_RUN) -cp $(JAVA_JAR):$(JAVA_DIR)/example MeshStep

$(JAVA_DIR)/bench/.built: $(JAVA_JAR) bench/java/Bench.java
	@rm -rf $(@D) && mkdir -p $(@D)
	$(JAVAC) -nowarn -cp $(JAVA_JAR) -d $(@D) bench/java/Bench.java
	@touch $@
bench-java: $(JAVA_DIR)/bench/.built
	$(JAVA_RUN) -cp $(JAVA_JAR):$(JAVA_DIR)/bench Bench
