# libasp - plain Makefile (hiredis style). `make help` lists the targets.

PREFIX      ?= /usr/local
LIBDIR      ?= $(PREFIX)/lib
INCLUDEDIR  ?= $(PREFIX)/include
BINDIR      ?= $(PREFIX)/bin
MANDIR      ?= $(PREFIX)/share/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
DESTDIR     ?=

CC          ?= cc
# SAN=1 builds everything with ASan+UBSan into build-san/.
ifeq ($(SAN),1)
BUILD       ?= build-san
SANFLAGS    := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
else
BUILD       ?= build
SANFLAGS    :=
endif

# The SONAME comes from asp.h and nowhere else.
VERSION     := $(shell sed -n 's/^\#define ASP_VERSION "\(.*\)"/\1/p' include/asp.h)
MAJOR       := $(shell sed -n 's/^\#define ASP_VERSION_MAJOR //p' include/asp.h)
SONAME      := libasp.so.$(MAJOR)

PKGS        := libssh2 libcjson openssl
DEP_CFLAGS  := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
DEP_LIBS    := $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lpthread
CHECK_LIBS  := $(shell pkg-config --libs check 2>/dev/null)

WARN        := -Wall -Wextra -Wpedantic -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
               -Wno-unused-parameter
OPT         ?= -O2 -g
CFLAGS_ALL  := -std=c11 -D_GNU_SOURCE $(WARN) $(OPT) $(SANFLAGS) -Iinclude -Ilibasp $(DEP_CFLAGS) $(CFLAGS)
LDFLAGS_ALL := $(SANFLAGS) $(LDFLAGS)

LIB_SRC     := $(wildcard libasp/*.c)
LIB_OBJ     := $(LIB_SRC:libasp/%.c=$(BUILD)/obj/%.o)
SHARED      := $(BUILD)/libasp.so.$(VERSION)
STATIC      := $(BUILD)/libasp.a

UNIT_SRC    := $(wildcard tests/unit/test_*.c)
INTEG_SRC   := $(wildcard tests/integration/test_*.c)
FIXTURE_SRC := $(wildcard tests/fixture/*.c)

.PHONY: all lib tools tests check check-all check-san check-valgrind \
        install uninstall clean demo deps help

all: lib tools

lib: $(SHARED) $(STATIC) $(BUILD)/libasp.so $(BUILD)/$(SONAME) pkgconfig/libasp.pc

$(BUILD)/obj/%.o: libasp/%.c libasp/*.h include/asp.h | $(BUILD)/obj
	$(CC) $(CFLAGS_ALL) -fPIC -fvisibility=hidden -DASP_BUILDING -c $< -o $@

$(BUILD)/obj $(BUILD)/tests $(BUILD)/bin:
	mkdir -p $@

$(SHARED): $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--no-undefined -o $@ $(LIB_OBJ) $(LDFLAGS_ALL) $(DEP_LIBS)

$(BUILD)/$(SONAME): $(SHARED)
	ln -sf $(notdir $(SHARED)) $@

$(BUILD)/libasp.so: $(BUILD)/$(SONAME)
	ln -sf $(SONAME) $@

$(STATIC): $(LIB_OBJ)
	rm -f $@
	ar rcs $@ $(LIB_OBJ)

pkgconfig/libasp.pc: pkgconfig/libasp.pc.in include/asp.h Makefile
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' \
	    -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' -e 's|@VERSION@|$(VERSION)|g' $< > $@

# ------------------------------------------------------------------ tools
tools: lib

# ---- asp-exec (tools/asp-exec): the CLI and its connection-sharing master.
# asp-exec is a small front (libc + cJSON only, so it starts fast); it hands
# what needs libasp to asp-exec-core, which links the static library (it
# uses asp__quote_argv and asp__base64_encode).
ASP_EXEC_DIR    := tools/asp-exec
ASP_EXEC_COMMON := $(addprefix $(ASP_EXEC_DIR)/,opts.c client.c proto.c rundir.c sha256.c signals.c util.c)
# libasp's discovery is libc only; the front compiles it, the core links it from libasp.
ASP_EXEC_FRONT  := $(ASP_EXEC_DIR)/front.c libasp/discover.c
ASP_EXEC_CORE   := $(addprefix $(ASP_EXEC_DIR)/,core.c run.c json.c pump.c check.c master.c)
ASP_EXEC        := $(BUILD)/bin/asp-exec $(BUILD)/bin/asp-exec-core

tools: $(ASP_EXEC)
tests: $(ASP_EXEC)

$(BUILD)/bin/asp-exec: $(ASP_EXEC_FRONT) $(ASP_EXEC_COMMON) $(wildcard $(ASP_EXEC_DIR)/*.h) libasp/discover.h include/asp.h | $(BUILD)/bin
	$(CC) $(CFLAGS_ALL) -o $@ $(ASP_EXEC_FRONT) $(ASP_EXEC_COMMON) $(LDFLAGS_ALL) \
	    $(shell pkg-config --libs libcjson 2>/dev/null)

$(BUILD)/bin/asp-exec-core: $(ASP_EXEC_CORE) $(ASP_EXEC_COMMON) $(wildcard $(ASP_EXEC_DIR)/*.h) $(STATIC) | $(BUILD)/bin
	$(CC) $(CFLAGS_ALL) -o $@ $(ASP_EXEC_CORE) $(ASP_EXEC_COMMON) $(STATIC) $(LDFLAGS_ALL) $(DEP_LIBS)

install: install-asp-exec
install-asp-exec: $(ASP_EXEC)
	install -d $(DESTDIR)$(BINDIR)
	install -m 0755 $(ASP_EXEC) $(DESTDIR)$(BINDIR)/

uninstall: uninstall-asp-exec
uninstall-asp-exec:
	rm -f $(DESTDIR)$(BINDIR)/asp-exec $(DESTDIR)$(BINDIR)/asp-exec-core
.PHONY: install-asp-exec uninstall-asp-exec
# ---- end asp-exec

# ---- asf-provision (tools/asf-provision): provisions the far end - a hardened
# Podman sandbox running sshd with no egress - and writes its .asp.json.
# Links the static library: verify uses asp_open/asp_exec, up asp_config_check.
ASF_PROVISION_SRC := $(wildcard tools/asf-provision/*.c)
ASF_PROVISION     := $(BUILD)/bin/asf-provision

tools: $(ASF_PROVISION)
tests: $(BUILD)/tests/test-provision

$(ASF_PROVISION): $(ASF_PROVISION_SRC) $(wildcard tools/asf-provision/*.h) $(STATIC) | $(BUILD)/bin
	$(CC) $(CFLAGS_ALL) -o $@ $(ASF_PROVISION_SRC) $(STATIC) $(LDFLAGS_ALL) $(DEP_LIBS)

$(BUILD)/tests/test-provision: tests/provision/test_provision.c $(STATIC) | $(BUILD)/tests
	$(CC) $(TEST_CFLAGS) -o $@ $< $(STATIC) $(LDFLAGS_ALL) $(DEP_LIBS) $(CHECK_LIBS)

# Real Podman (runc) end to end, ~30 s. Without root or Podman it prints
# SKIPPED and passes; ASF_REQUIRE_PODMAN=1 turns that into a failure.
check-provision: $(ASF_PROVISION) $(BUILD)/tests/test-provision
	ASF_PROVISION=$(ASF_PROVISION) ./$(BUILD)/tests/test-provision
check-all: check-provision

install: install-asf-provision
install-asf-provision: $(ASF_PROVISION)
	install -d $(DESTDIR)$(BINDIR)
	install -m 0755 $(ASF_PROVISION) $(DESTDIR)$(BINDIR)/asf-provision

uninstall: uninstall-asf-provision
uninstall-asf-provision:
	rm -f $(DESTDIR)$(BINDIR)/asf-provision
.PHONY: check-provision install-asf-provision uninstall-asf-provision
# ---- end asf-provision

# ------------------------------------------------------------------ tests
# Each tests/unit/test_X.c defines `Suite *suite_X(void)`; the list is generated.
$(BUILD)/tests/unit_suites.h: $(UNIT_SRC) | $(BUILD)/tests
	for f in $(UNIT_SRC); do b=$$(basename $$f .c); echo "ASP_SUITE(suite_$${b#test_})"; done > $@

$(BUILD)/tests/integration_suites.h: $(INTEG_SRC) | $(BUILD)/tests
	for f in $(INTEG_SRC); do b=$$(basename $$f .c); echo "ASP_SUITE(suite_$${b#test_})"; done > $@

TEST_CFLAGS := $(CFLAGS_ALL) -Wno-missing-prototypes -Itests -I$(BUILD)/tests $(shell pkg-config --cflags check 2>/dev/null)

$(BUILD)/tests/test-unit: tests/main.c $(UNIT_SRC) $(BUILD)/tests/unit_suites.h $(STATIC) $(wildcard tests/*.h)
	$(CC) $(TEST_CFLAGS) -DASP_SUITES='"unit_suites.h"' -o $@ tests/main.c $(UNIT_SRC) \
	    $(STATIC) $(LDFLAGS_ALL) $(DEP_LIBS) $(CHECK_LIBS)

$(BUILD)/tests/test-integration: tests/main.c $(INTEG_SRC) $(FIXTURE_SRC) $(BUILD)/tests/integration_suites.h $(STATIC) $(wildcard tests/*.h tests/fixture/*.h)
	$(CC) $(TEST_CFLAGS) -DASP_SUITES='"integration_suites.h"' -o $@ tests/main.c $(INTEG_SRC) \
	    $(FIXTURE_SRC) $(STATIC) $(LDFLAGS_ALL) $(DEP_LIBS) $(CHECK_LIBS)

$(BUILD)/tests/config-lint: tests/tools/config_lint.c $(STATIC) | $(BUILD)/tests
	$(CC) $(CFLAGS_ALL) $< $(STATIC) $(LDFLAGS_ALL) $(DEP_LIBS) -o $@

tests: $(BUILD)/tests/test-unit $(BUILD)/tests/test-integration $(BUILD)/tests/config-lint

# Fuzz targets: replayed over their corpus by `make check` (any compiler),
# fuzzed for real by `make fuzz` (clang's libFuzzer, FUZZ_SECONDS each).
FUZZ_TARGETS := config hostkey quote sftp
FUZZ_SECONDS ?= 60
FUZZ_REPLAY  := $(FUZZ_TARGETS:%=$(BUILD)/fuzz/replay-%)

$(BUILD)/fuzz/replay-%: tests/fuzz/fuzz_%.c tests/fuzz/replay.c $(STATIC)
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -o $@ $< tests/fuzz/replay.c $(STATIC) $(LDFLAGS_ALL) $(DEP_LIBS)

check-fuzz-replay: $(FUZZ_REPLAY)
	for t in $(FUZZ_TARGETS); do ./$(BUILD)/fuzz/replay-$$t tests/fuzz/corpus/$$t || exit 1; done

fuzz:
	@mkdir -p build-fuzz
	for t in $(FUZZ_TARGETS); do \
	  clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Ilibasp \
	    $(DEP_CFLAGS) -o build-fuzz/fuzz-$$t tests/fuzz/fuzz_$$t.c $(LIB_SRC) $(DEP_LIBS) || exit 1; \
	  mkdir -p build-fuzz/corpus-$$t && cp -n tests/fuzz/corpus/$$t/* build-fuzz/corpus-$$t/ 2>/dev/null; \
	  ./build-fuzz/fuzz-$$t -max_total_time=$(FUZZ_SECONDS) -artifact_prefix=build-fuzz/crash-$$t- \
	    build-fuzz/corpus-$$t || exit 1; \
	done

# `make check`: install what is missing, build, run every test.
check: deps
	$(MAKE) check-all
	$(MAKE) check-san
	$(MAKE) check-valgrind

check-all: all tests
	./$(BUILD)/tests/test-unit
	./$(BUILD)/tests/test-integration
	$(MAKE) soak SOAK_OPS=3000
	$(MAKE) check-wipe
	BUILD=$(BUILD) sh tests/meta.sh
	/usr/bin/python3 tests/schema_agree.py
	$(MAKE) check-fuzz-replay
	$(MAKE) check-node
	$(MAKE) bench-smoke
	$(MAKE) check-python

# The same suites under ASan+UBSan (leaks included).
check-san:
	$(MAKE) SAN=1 tests
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 ./build-san/tests/test-unit
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 ./build-san/tests/test-integration

# valgrind on the unit suite, the integration suites that do not measure
# deadlines (valgrind slows everything ~30x; pool, faults and cli do, and
# run plain and under ASan), the fuzz corpus replay and a short soak.
VALGRIND := valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite
check-valgrind: tests $(FUZZ_REPLAY) $(BUILD)/tests/soak
	CK_FORK=no $(VALGRIND) ./$(BUILD)/tests/test-unit
	for s in core trust hostile security fixture; do ASP_TEST_SUITE=$$s $(VALGRIND) ./$(BUILD)/tests/test-integration || exit 1; done
	for t in $(FUZZ_TARGETS); do $(VALGRIND) ./$(BUILD)/fuzz/replay-$$t tests/fuzz/corpus/$$t || exit 1; done
	SOAK_OPS=300 SOAK_THREADS=4 SOAK_NO_RSS_CHECK=1 $(VALGRIND) ./$(BUILD)/tests/soak

# Allocation-failure torture (tests/alloc/torture.c): the library rebuilt into
# build-alloc/ with -DASP_ALLOC_TEST (the n-th allocation fails) and ASan+UBSan;
# the driver fails each allocation of each scenario in turn against a real sshd.
ALLOC_BUILD := build-alloc
check-alloc:
	$(MAKE) SAN=1 BUILD=$(ALLOC_BUILD) CFLAGS="$(CFLAGS) -DASP_ALLOC_TEST" $(ALLOC_BUILD)/tests/torture
	LSAN_OPTIONS=suppressions=tests/alloc/lsan.supp:print_suppressions=0 \
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:fast_unwind_on_malloc=0 ./$(ALLOC_BUILD)/tests/torture

$(BUILD)/tests/torture: tests/alloc/torture.c $(FIXTURE_SRC) $(STATIC) $(wildcard tests/fixture/*.h) | $(BUILD)/tests
	$(CC) $(TEST_CFLAGS) -o $@ tests/alloc/torture.c $(FIXTURE_SRC) $(STATIC) $(LDFLAGS_ALL) $(DEP_LIBS)
.PHONY: check-alloc

# Soak (tests/soak/soak.c): SOAK_THREADS threads, one asp_sandbox, SOAK_OPS mixed
# operations, every result checked, an sshd restart midway, RSS and fds flat.
# `make check` runs a short one (SOAK_OPS=3000).
SOAK_OPS     ?= 100000
SOAK_THREADS ?= 16
$(BUILD)/tests/soak: tests/soak/soak.c $(FIXTURE_SRC) $(STATIC) $(wildcard tests/fixture/*.h) | $(BUILD)/tests
	$(CC) $(TEST_CFLAGS) -o $@ tests/soak/soak.c $(FIXTURE_SRC) $(STATIC) $(LDFLAGS_ALL) $(DEP_LIBS)

soak: $(BUILD)/tests/soak
	SOAK_OPS=$(SOAK_OPS) SOAK_THREADS=$(SOAK_THREADS) ./$(BUILD)/tests/soak
.PHONY: soak

# Key wiping (tests/secrets/wipe.c): replaces free() and looks for the private
# key in every block freed while a sandbox opens, works and closes. Not under
# SAN=1 (ASan replaces free itself).
$(BUILD)/tests/wipe: tests/secrets/wipe.c $(FIXTURE_SRC) $(STATIC) $(wildcard tests/fixture/*.h) | $(BUILD)/tests
	$(CC) $(TEST_CFLAGS) -o $@ tests/secrets/wipe.c $(FIXTURE_SRC) $(STATIC) $(LDFLAGS_ALL) $(DEP_LIBS)

ifeq ($(SAN),1)
check-wipe:
	@echo "check-wipe: skipped with SAN=1 (ASan replaces free() itself)"
else
check-wipe: $(BUILD)/tests/wipe
	./$(BUILD)/tests/wipe
endif
.PHONY: check-wipe

# The Python binding and the example harness (Debian's python3: the stdlib only).
PYTHON ?= /usr/bin/python3
check-python: lib
	$(PYTHON) -m unittest discover -s bindings/python/tests

# The Node binding and the pi example, against their own sshd fixture.
check-node: lib
	cd bindings/node && npm install --no-audit --no-fund --loglevel=error && npm test
	cd examples/node/pi-asp && npm install --no-audit --no-fund --loglevel=error && npm test

# ------------------------------------------------------------------ bench
# `make bench`: libasp and its peers side by side against one local sshd
# (bench/run.py); writes docs/PERFORMANCE.md. BENCH_SCALE=quick|full (the
# counts live in bench/run.py). `make bench-smoke` (run by `make check`): every
# peer with tiny counts; it asserts only that each produced numbers.
BENCH_SCALE ?= full
BENCH_BIN   := $(BUILD)/bench/bench_asp $(BUILD)/bench/bench_libssh2 $(BUILD)/bench/delayproxy \
               $(BUILD)/bench/rusage

$(BUILD)/bench:
	mkdir -p $@

$(BUILD)/bench/bench_asp: bench/bench_asp.c bench/bench_common.h $(STATIC) | $(BUILD)/bench
	$(CC) $(CFLAGS_ALL) -o $@ $< $(STATIC) $(LDFLAGS_ALL) $(DEP_LIBS)

$(BUILD)/bench/bench_libssh2 $(BUILD)/bench/delayproxy $(BUILD)/bench/rusage: $(BUILD)/bench/%: bench/%.c bench/bench_common.h | $(BUILD)/bench
	$(CC) $(CFLAGS_ALL) -o $@ $< $(LDFLAGS_ALL) $(DEP_LIBS)

bench-build: lib $(BENCH_BIN)
	$(MAKE) tools || echo "bench: the tools did not build: the asp-exec rows will be skipped"
	cd bench && npm install --no-audit --no-fund --loglevel=error
	cd bindings/node && npm install --no-audit --no-fund --loglevel=error

bench: deps
	$(MAKE) bench-build
	/usr/bin/python3 bench/run.py --scale $(BENCH_SCALE)

bench-smoke: bench-build
	/usr/bin/python3 bench/run.py --scale smoke

.PHONY: bench bench-smoke bench-build

deps:
	sh tools/setup-deps.sh

demo:
	sh tools/demo.sh

help:
	@echo "make            build libasp.so, libasp.a and the tools into $(BUILD)/"
	@echo "make check      install missing packages, build, run every test"
	@echo "make demo       install missing packages, run the examples against a local sandbox"
	@echo "make install    PREFIX=$(PREFIX) DESTDIR=... ; make uninstall reverses it"
	@echo "make SAN=1 ...  the same with ASan+UBSan (into build-san/)"
	@echo "make check-alloc  fail every allocation in turn (ASan build in build-alloc/)"
	@echo "make soak       SOAK_OPS=100000 SOAK_THREADS=16 mixed operations, an sshd restart"

# ---------------------------------------------------------------- install
install: lib
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR)
	install -m 0755 $(SHARED) $(DESTDIR)$(LIBDIR)/
	ln -sf $(notdir $(SHARED)) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libasp.so
	install -m 0644 $(STATIC) $(DESTDIR)$(LIBDIR)/
	install -m 0644 include/asp.h $(DESTDIR)$(INCLUDEDIR)/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' \
	    -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' -e 's|@VERSION@|$(VERSION)|g' \
	    pkgconfig/libasp.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/libasp.pc
	chmod 0644 $(DESTDIR)$(PKGCONFIGDIR)/libasp.pc

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/$(notdir $(SHARED)) $(DESTDIR)$(LIBDIR)/$(SONAME) \
	      $(DESTDIR)$(LIBDIR)/libasp.so $(DESTDIR)$(LIBDIR)/libasp.a \
	      $(DESTDIR)$(INCLUDEDIR)/asp.h $(DESTDIR)$(PKGCONFIGDIR)/libasp.pc

clean:
	rm -rf build build-san build-fuzz build-alloc pkgconfig/libasp.pc bindings/python/build bindings/python/asp.egg-info
