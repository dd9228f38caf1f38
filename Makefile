# libasp - plain Makefile (hiredis style). `make help` lists the targets.

PREFIX      ?= /usr/local
LIBDIR      ?= $(PREFIX)/lib
INCLUDEDIR  ?= $(PREFIX)/include
BINDIR      ?= $(PREFIX)/bin
MANDIR      ?= $(PREFIX)/share/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
DESTDIR     ?=

CC          ?= cc
# SAN=1 builds everything with ASan+UBSan into build-san/, TSAN=1 with ThreadSanitizer into build-tsan/.
ifeq ($(SAN),1)
BUILD       ?= build-san
SANFLAGS    := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
else ifeq ($(TSAN),1)
BUILD       ?= build-tsan
SANFLAGS    := -fsanitize=thread -fno-omit-frame-pointer
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

# libasp/ has a folder per layer (libasp/LAYERS gives their order, tests/check-layers.sh
# holds them to it) and the public API (sandbox.c) at its top. Every folder is on the
# include path, so a file includes a header by its name alone ("common.h").
LIB_DIRS    := $(patsubst %/,%,$(sort $(dir $(wildcard libasp/*/*.[ch]))))
LIB_INC     := $(LIB_DIRS:%=-I%)
WARN        := -Wall -Wextra -Wpedantic -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
               -Wno-unused-parameter
OPT         ?= -O2 -g
CFLAGS_ALL  := -std=c11 -D_GNU_SOURCE $(WARN) $(OPT) $(SANFLAGS) -Iinclude $(LIB_INC) $(DEP_CFLAGS) $(CFLAGS)
LDFLAGS_ALL := $(SANFLAGS) $(LDFLAGS)

LIB_SRC     := $(wildcard libasp/*.c libasp/*/*.c)
LIB_HDR     := $(wildcard libasp/*/*.h)
# The objects mirror the folders (build/obj/core/common.o); ar keys a member by its file
# name alone, so two .c files of one name would lose one in libasp.a.
LIB_OBJ     := $(LIB_SRC:libasp/%.c=$(BUILD)/obj/%.o)
ifneq ($(words $(notdir $(LIB_SRC))),$(words $(sort $(notdir $(LIB_SRC)))))
$(error libasp: two .c files share a name (libasp.a would keep one): $(sort $(notdir $(LIB_SRC))))
endif
SHARED      := $(BUILD)/libasp.so.$(VERSION)
STATIC      := $(BUILD)/libasp.a

UNIT_SRC    := $(wildcard tests/unit/test_*.c)
INTEG_SRC   := $(wildcard tests/integration/test_*.c)
FIXTURE_SRC := $(filter-out tests/fixture/fixture_main.c,$(wildcard tests/fixture/*.c))
# Shared by the integration suites: tests/helpers.h (assertions, sandbox helpers) and
# tests/integration/cli_run.h (running asp-exec, its masters, for the test_cli*.c suites).
INTEG_LIB_SRC := tests/helpers.c tests/integration/cli_run.c

# Every target that is not a file, in one place.
.PHONY: all lib tools tests check check-deep check-slow check-san check-tsan check-valgrind check-alloc \
        check-makefile check-fuzz-replay fuzz fuzz-build fuzz-have-clang soak check-wipe \
        check-python check-node check-node-binding check-node-pi check-provision \
        check-shfs check-routes check-build check-deep-build check-build-san check-build-tsan \
        alloc-build npm-deps bench bench-smoke bench-build bench-bins install install-lib install-asp-exec \
        install-asf-provision uninstall uninstall-lib uninstall-asp-exec \
        uninstall-asf-provision clean demo deps help FORCE

all: lib tools

lib: $(SHARED) $(STATIC) $(BUILD)/libasp.so $(BUILD)/$(SONAME) $(BUILD)/libasp.pc

$(BUILD)/obj/%.o: libasp/%.c $(LIB_HDR) include/asp.h | $(BUILD)/obj
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -fPIC -fvisibility=hidden -DASP_BUILDING -c $< -o $@

$(BUILD)/obj $(BUILD)/obj-hooks $(BUILD)/tests $(BUILD)/bin:
	mkdir -p $@

# libasp/libasp.map: asp_* global, everything else local.
$(SHARED): $(LIB_OBJ) libasp/libasp.map
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--no-undefined -Wl,--version-script=libasp/libasp.map \
	    -o $@ $(LIB_OBJ) $(LDFLAGS_ALL) $(DEP_LIBS)

$(BUILD)/$(SONAME): $(SHARED)
	ln -sf $(notdir $(SHARED)) $@

$(BUILD)/libasp.so: $(BUILD)/$(SONAME)
	ln -sf $(SONAME) $@

$(STATIC): $(LIB_OBJ)
	rm -f $@
	ar rcs $@ $(LIB_OBJ)

# Generated into the build directory. PREFIX, LIBDIR and INCLUDEDIR are baked
# in: libasp.pc.vars records them and changes (regenerating the .pc) only when
# they do, so `make install PREFIX=/opt` after a plain `make` installs a .pc
# that says /opt.
PC_VARS := $(PREFIX) $(LIBDIR) $(INCLUDEDIR) $(VERSION)
$(BUILD)/libasp.pc.vars: FORCE | $(BUILD)/obj
	@echo '$(PC_VARS)' | cmp -s - $@ || echo '$(PC_VARS)' > $@

$(BUILD)/libasp.pc: pkgconfig/libasp.pc.in $(BUILD)/libasp.pc.vars | $(BUILD)/obj
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
ASP_EXEC_FRONT  := $(ASP_EXEC_DIR)/front.c libasp/config/discover.c
ASP_EXEC_CORE   := $(addprefix $(ASP_EXEC_DIR)/,core.c run.c json.c pump.c tty.c check.c master.c progress.c bg.c)
ASP_EXEC        := $(BUILD)/bin/asp-exec $(BUILD)/bin/asp-exec-core

tools: $(ASP_EXEC)
tests: $(ASP_EXEC)

$(BUILD)/bin/asp-exec: $(ASP_EXEC_FRONT) $(ASP_EXEC_COMMON) $(wildcard $(ASP_EXEC_DIR)/*.h) libasp/config/discover.h include/asp.h | $(BUILD)/bin
	$(CC) $(CFLAGS_ALL) -o $@ $(ASP_EXEC_FRONT) $(ASP_EXEC_COMMON) $(LDFLAGS_ALL) \
	    $(shell pkg-config --libs libcjson 2>/dev/null)

$(BUILD)/bin/asp-exec-core: $(ASP_EXEC_CORE) $(ASP_EXEC_COMMON) $(wildcard $(ASP_EXEC_DIR)/*.h) $(STATIC) | $(BUILD)/bin
	$(CC) $(CFLAGS_ALL) -o $@ $(ASP_EXEC_CORE) $(ASP_EXEC_COMMON) $(STATIC) $(LDFLAGS_ALL) $(DEP_LIBS)

install-asp-exec: $(ASP_EXEC)
	install -d $(DESTDIR)$(BINDIR)
	install -m 0755 $(ASP_EXEC) $(DESTDIR)$(BINDIR)/

uninstall-asp-exec:
	rm -f $(DESTDIR)$(BINDIR)/asp-exec $(DESTDIR)$(BINDIR)/asp-exec-core
# ---- end asp-exec

# ---- the C examples (examples/c): built with the library's warnings for
# the tests, which run them (tests/integration/test_cli.c); the demo builds
# tool_loop against the installed library through pkg-config.
EXAMPLES := $(patsubst examples/c/%.c,$(BUILD)/examples/%,$(wildcard examples/c/*.c))
tests: $(EXAMPLES)

$(BUILD)/examples/%: examples/c/%.c include/asp.h $(STATIC)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(STATIC) $(LDFLAGS_ALL) $(DEP_LIBS)

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

# Real Podman (runc) and Docker (Debian's docker.io; the test starts its own
# dockerd when none answers) end to end, the same tests for each, ~2.5 min.
# An engine without root or that does not work prints SKIPPED and passes;
# ASF_REQUIRE_PODMAN=1 / ASF_REQUIRE_DOCKER=1 (.ci/run sets both) turn that
# into a failure. ASF_TEST_ENGINES=podman or docker runs one.
check-provision: $(ASF_PROVISION) $(BUILD)/tests/test-provision
	ASF_PROVISION=$(ASF_PROVISION) ./$(BUILD)/tests/test-provision

install-asf-provision: $(ASF_PROVISION)
	install -d $(DESTDIR)$(BINDIR)
	install -m 0755 $(ASF_PROVISION) $(DESTDIR)$(BINDIR)/asf-provision

uninstall-asf-provision:
	rm -f $(DESTDIR)$(BINDIR)/asf-provision

# ---- man pages: asp-exec(1), asf-provision(1) and libasp(3), converted from
# docs/NAME.N.md by tools/md2man.py (python3's standard library only) into
# $(BUILD)/man; `make install` puts them in MANDIR. tests/man.sh checks them.
MANDIR    ?= $(PREFIX)/share/man
MAN_PAGES := $(BUILD)/man/asp-exec.1 $(BUILD)/man/asf-provision.1 $(BUILD)/man/libasp.3
.PHONY: man install-man uninstall-man

man: $(MAN_PAGES)

$(BUILD)/man/%: docs/%.md tools/md2man.py
	@mkdir -p $(BUILD)/man
	python3 tools/md2man.py $< > $@.tmp && mv $@.tmp $@

install: install-man
check-build: man
uninstall: uninstall-man

install-man: $(MAN_PAGES)
	install -d $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3
	install -m 0644 $(BUILD)/man/asp-exec.1 $(BUILD)/man/asf-provision.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 0644 $(BUILD)/man/libasp.3 $(DESTDIR)$(MANDIR)/man3/

uninstall-man:
	rm -f $(DESTDIR)$(MANDIR)/man1/asp-exec.1 $(DESTDIR)$(MANDIR)/man1/asf-provision.1 \
	      $(DESTDIR)$(MANDIR)/man3/libasp.3
# ---- end man pages

# The probe suite, part of check-provision: every verify check broken in turn
# on a live sandbox, the egress allow-list, rootless Podman (~2-3 min; root
# and Podman, or SKIPPED - a failure under ASF_REQUIRE_PODMAN=1).
tests: $(BUILD)/tests/test-probes
check-provision: check-probes
.PHONY: check-probes
check-probes: $(ASF_PROVISION) $(BUILD)/tests/test-probes
	ASF_PROVISION=$(ASF_PROVISION) ./$(BUILD)/tests/test-probes

$(BUILD)/tests/test-probes: tests/provision/test_probes.c | $(BUILD)/tests
	$(CC) $(TEST_CFLAGS) -o $@ $< $(LDFLAGS_ALL) $(DEP_LIBS) $(CHECK_LIBS)
# ---- end asf-provision

# ------------------------------------------------------------------ tests
# Each tests/unit/test_X.c defines `Suite *suite_X(void)`; the list is generated.
$(BUILD)/tests/unit_suites.h: $(UNIT_SRC) | $(BUILD)/tests
	for f in $(UNIT_SRC); do b=$$(basename $$f .c); echo "ASP_SUITE(suite_$${b#test_})"; done > $@

$(BUILD)/tests/integration_suites.h: $(INTEG_SRC) | $(BUILD)/tests
	for f in $(INTEG_SRC); do b=$$(basename $$f .c); echo "ASP_SUITE(suite_$${b#test_})"; done > $@

TEST_CFLAGS := $(CFLAGS_ALL) -Wno-missing-prototypes -Itests -I$(BUILD)/tests $(shell pkg-config --cflags check 2>/dev/null) \
               -DASP_TEST_HOOKS

# The test hooks (common.h): the release library ($(STATIC), $(SHARED)) has none; test-unit
# and test-integration link HOOKS_LIB, the release objects with the few files that have a
# hook (they say ASP_TEST_) compiled again, with -DASP_TEST_HOOKS, into $(BUILD)/obj-hooks/.
HOOKS_SRC := $(shell grep -l ASP_TEST_ $(LIB_SRC))
HOOKS_OBJ := $(HOOKS_SRC:libasp/%.c=$(BUILD)/obj-hooks/%.o)
HOOKS_LIB := $(BUILD)/tests/libasp-hooks.a

$(BUILD)/obj-hooks/%.o: libasp/%.c $(LIB_HDR) include/asp.h | $(BUILD)/obj-hooks
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -fPIC -fvisibility=hidden -DASP_BUILDING -DASP_TEST_HOOKS -c $< -o $@

$(HOOKS_LIB): $(filter-out $(HOOKS_SRC:libasp/%.c=$(BUILD)/obj/%.o),$(LIB_OBJ)) $(HOOKS_OBJ) | $(BUILD)/tests
	rm -f $@
	ar rcs $@ $^

$(BUILD)/tests/test-unit: tests/main.c $(UNIT_SRC) $(BUILD)/tests/unit_suites.h $(HOOKS_LIB) $(wildcard tests/*.h)
	$(CC) $(TEST_CFLAGS) -DASP_SUITES='"unit_suites.h"' -o $@ tests/main.c $(UNIT_SRC) \
	    $(HOOKS_LIB) $(LDFLAGS_ALL) $(DEP_LIBS) $(CHECK_LIBS)

$(BUILD)/tests/test-integration: tests/main.c $(INTEG_SRC) $(INTEG_LIB_SRC) $(FIXTURE_SRC) $(BUILD)/tests/integration_suites.h $(HOOKS_LIB) $(wildcard tests/*.h tests/integration/*.h tests/fixture/*.h)
	$(CC) $(TEST_CFLAGS) -DASP_SUITES='"integration_suites.h"' -o $@ tests/main.c $(INTEG_SRC) \
	    $(INTEG_LIB_SRC) $(FIXTURE_SRC) $(HOOKS_LIB) $(LDFLAGS_ALL) $(DEP_LIBS) $(CHECK_LIBS)

$(BUILD)/tests/config-lint: tests/tools/config_lint.c $(STATIC) | $(BUILD)/tests
	$(CC) $(CFLAGS_ALL) $< $(STATIC) $(LDFLAGS_ALL) $(DEP_LIBS) -o $@

tests: $(BUILD)/tests/test-unit $(BUILD)/tests/test-integration $(BUILD)/tests/config-lint

# The sshd fixture as a program for the Python and Node tests (tests/fixture/fixture_main.c):
# prints the server's facts as JSON, obeys commands on stdin, cleans up when stdin closes.
SSHD_FIXTURE := $(BUILD)/tests/sshd-fixture
$(SSHD_FIXTURE): tests/fixture/fixture_main.c tests/fixture/fixture.c tests/fixture/fixture.h | $(BUILD)/tests
	$(CC) $(TEST_CFLAGS) -o $@ tests/fixture/fixture_main.c tests/fixture/fixture.c $(LDFLAGS_ALL) $(DEP_LIBS)

tests: $(SSHD_FIXTURE)
check-python check-node check-node-binding check-node-pi: $(SSHD_FIXTURE)
check-python check-node check-node-binding check-node-pi: export ASP_SSHD_FIXTURE := $(abspath $(SSHD_FIXTURE))

# Fuzz targets: replayed over their corpus by `make check` (any compiler),
# fuzzed for real by `make fuzz` (clang's libFuzzer, FUZZ_SECONDS each; `make
# check` runs 30 s per target). The config target's corpus is the repository's
# own configs (tests/configs, the examples), not a copy of them; the others
# have seeds in tests/fuzz/corpus/TARGET. An empty corpus fails (replay.c).
FUZZ_TARGETS       := config hostkey kexinit quote sftp
FUZZ_SECONDS       ?= 60
FUZZ_REPLAY        := $(FUZZ_TARGETS:%=$(BUILD)/fuzz/replay-%)
FUZZ_CORPUS_config := tests/configs $(wildcard examples/*.asp.json)
FUZZ_CORPUS_hostkey := tests/fuzz/corpus/hostkey
FUZZ_CORPUS_kexinit := tests/fuzz/corpus/kexinit
FUZZ_CORPUS_quote  := tests/fuzz/corpus/quote
FUZZ_CORPUS_sftp   := tests/fuzz/corpus/sftp
FUZZ_BUILD         := build-fuzz

$(BUILD)/fuzz/replay-%: tests/fuzz/fuzz_%.c tests/fuzz/replay.c $(HOOKS_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -o $@ $< tests/fuzz/replay.c $(HOOKS_LIB) $(LDFLAGS_ALL) $(DEP_LIBS)

# FUZZ_RUNNER runs each replay (check-deep: valgrind).
FUZZ_RUNNER ?=
check-fuzz-replay: $(FUZZ_REPLAY)
	$(foreach t,$(FUZZ_TARGETS),$(FUZZ_RUNNER) ./$(BUILD)/fuzz/replay-$(t) $(FUZZ_CORPUS_$(t)) &&) true

# The fuzzers share one instrumented build of the library (FUZZ_OBJ; check-deep
# builds them before its jobs start, which then only run them). Each run starts
# from the seeds (copied under their hashes, as libFuzzer names its own finds)
# and keeps what it finds in $(FUZZ_BUILD)/corpus-TARGET.
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -DASP_TEST_HOOKS -g -O1 -Iinclude $(LIB_INC) $(DEP_CFLAGS)
FUZZ_OBJ    := $(LIB_SRC:libasp/%.c=$(FUZZ_BUILD)/obj/%.o)

fuzz-have-clang:
	@command -v clang >/dev/null || { echo "fuzz: clang is missing (make deps installs it)"; exit 1; }

$(FUZZ_BUILD)/obj/%.o: libasp/%.c $(LIB_HDR) include/asp.h | fuzz-have-clang
	@mkdir -p $(@D)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link,address,undefined -c $< -o $@

$(FUZZ_BUILD)/fuzz-%: tests/fuzz/fuzz_%.c $(FUZZ_OBJ)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer,address,undefined -o $@ $< $(FUZZ_OBJ) $(DEP_LIBS)

fuzz-build: $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz-%)
.SECONDARY: $(FUZZ_OBJ)

fuzz: fuzz-build
	$(foreach t,$(FUZZ_TARGETS),$(call fuzz_one,$(t)))

define fuzz_one
	mkdir -p $(FUZZ_BUILD)/corpus-$(1)
	n=0; for f in $$(find $(FUZZ_CORPUS_$(1)) -type f ! -name '*.expect'); do \
	  cp "$$f" $(FUZZ_BUILD)/corpus-$(1)/$$(sha1sum < "$$f" | cut -c1-40) && n=$$((n + 1)); \
	done; [ $$n -gt 0 ] || { echo "fuzz: no seed for $(1) in $(FUZZ_CORPUS_$(1))"; exit 1; }
	./$(FUZZ_BUILD)/fuzz-$(1) -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	    -artifact_prefix=$(FUZZ_BUILD)/crash-$(1)- $(FUZZ_BUILD)/corpus-$(1)

endef

# ---- the two tiers (tests/tiers.sh lists their jobs; tests/run-jobs.sh runs them
# in parallel and prints each one's time).
# `make check`: install what is missing, build, run every functional test (~5 min):
# unit, integration (less the test cases tagged slow), static checks, fuzz corpus
# replay, the Python and Node bindings.
# `make check-deep`: the slow-tagged cases, the suites again over the shell
# transport, on far-link routes, under ASan+UBSan and valgrind; allocation
# failure, provisioning, the pi example, bench smoke, soak, key wiping, 30 s of
# fuzzing per target. .ci/run runs both. TIER_JOBS jobs run at a time.
TIER_JOBS ?= 6
TIERS     := bash tests/tiers.sh -j $(TIER_JOBS)

check: deps
	$(MAKE) -j2 check-build
	$(TIERS) check

check-deep: deps
	$(MAKE) -j2 check-build check-deep-build
	$(MAKE) -j2 SAN=1 check-build-san
	$(MAKE) -j2 TSAN=1 check-build-tsan
	$(MAKE) -j2 alloc-build fuzz-build
	$(TIERS) deep

# What the tiers run, built before any job starts (jobs never build, so
# parallel jobs never race on a build or an npm install).
check-build: all tests $(FUZZ_REPLAY) npm-deps
check-deep-build: $(BUILD)/tests/soak $(BUILD)/tests/wipe bench-bins
check-build-san: all tests $(FUZZ_REPLAY) $(BUILD)/tests/soak
check-build-tsan: all $(BUILD)/tests/test-integration $(BUILD)/tests/soak
alloc-build:
	$(MAKE) SAN=1 BUILD=$(ALLOC_BUILD) CFLAGS="$(CFLAGS) -DASP_ALLOC_TEST" $(ALLOC_BUILD)/tests/torture

# One at a time: npm installs into bindings/node, the pi example, bench and
# tests/kube (the Kubernetes API schema the manifests are checked against).
npm-deps:
	cd bindings/node && npm install --no-audit --no-fund --loglevel=error
	cd bench && npm install --no-audit --no-fund --loglevel=error
	cd tests/kube && npm ci --no-audit --no-fund --loglevel=error
	rc=0; sh tools/setup-deps.sh --check-node || rc=$$?; \
	if [ $$rc -eq 0 ]; then \
		cd examples/node/pi-asp && npm install --no-audit --no-fund --loglevel=error; \
	elif [ $$rc -ne 3 ]; then exit $$rc; fi

# One group of either tier, each built as the tier builds it.
check-shfs check-routes check-slow: check-build
	$(TIERS) $(@:check-%=%)
check-san: deps
	$(MAKE) -j2 SAN=1 check-build-san
	$(TIERS) san
check-valgrind: check-build check-deep-build
	$(TIERS) valgrind
check-tsan: deps
	$(MAKE) -j2 TSAN=1 check-build-tsan
	$(TIERS) tsan

# Every rule whose name is a plain word (no '/', no '.') must be in .PHONY:
# make's own database says which are not.
check-makefile:
	@bad=$$($(MAKE) -pRrq -f Makefile : 2>/dev/null | awk ' \
	  /^# Not a target:/ { skip = 1; next } \
	  /^[A-Za-z0-9_-]+:/ { if (skip) { skip = 0; next } t = $$1; sub(/:.*/, "", t); \
	                       cur = t; seen[t] = 1; next } \
	  /^#  Phony target/ { phony[cur] = 1 } \
	  /^$$/ { skip = 0 } \
	  END { for (t in seen) if (!phony[t]) print t }'); \
	[ -z "$$bad" ] || { echo "Makefile: not in .PHONY:" $$bad; exit 1; }

# Allocation-failure torture (tests/alloc/torture.c): the library rebuilt into
# build-alloc/ with -DASP_ALLOC_TEST (the n-th allocation fails) and ASan+UBSan;
# the driver fails each allocation of each scenario in turn against a real sshd,
# once and sticky. Bounded: every scenario stops by itself (at most MAX_N
# runs); the whole torture takes about two minutes on two cores.
ALLOC_BUILD := build-alloc
check-alloc: alloc-build
	LSAN_OPTIONS=suppressions=tests/alloc/lsan.supp:print_suppressions=0 \
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:fast_unwind_on_malloc=0 ./$(ALLOC_BUILD)/tests/torture

$(BUILD)/tests/torture: tests/alloc/torture.c $(FIXTURE_SRC) $(STATIC) $(wildcard tests/fixture/*.h) | $(BUILD)/tests
	$(CC) $(TEST_CFLAGS) -o $@ tests/alloc/torture.c $(FIXTURE_SRC) $(STATIC) $(LDFLAGS_ALL) $(DEP_LIBS)

# Soak (tests/soak/soak.c): SOAK_THREADS threads, one asp_sandbox, SOAK_OPS mixed
# operations, every result checked, an sshd restart midway, RSS and fds flat.
# `make check` runs a short one (SOAK_OPS=3000).
SOAK_OPS     ?= 100000
SOAK_THREADS ?= 16
$(BUILD)/tests/soak: tests/soak/soak.c $(FIXTURE_SRC) $(STATIC) $(wildcard tests/fixture/*.h) | $(BUILD)/tests
	$(CC) $(TEST_CFLAGS) -o $@ tests/soak/soak.c $(FIXTURE_SRC) $(STATIC) $(LDFLAGS_ALL) $(DEP_LIBS)

soak: $(BUILD)/tests/soak
	SOAK_OPS=$(SOAK_OPS) SOAK_THREADS=$(SOAK_THREADS) ./$(BUILD)/tests/soak

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

# The Python binding and the example harness (Debian's python3: the stdlib only).
PYTHON ?= /usr/bin/python3
check-python: lib
	$(PYTHON) -m unittest discover -s bindings/python/tests

# `make python-wheel`: a wheel of bindings/python that carries libasp.so.0 (tagged
# py3-none-<platform>), into WHEEL_DIR; built from a copy, so the tree stays as it is.
WHEEL_DIR ?= $(BUILD)/python
.PHONY: python-wheel
python-wheel: lib
	rm -rf $(WHEEL_DIR)/src && mkdir -p $(WHEEL_DIR)/src
	cd bindings/python && cp -r asp pyproject.toml setup.py README.md $(abspath $(WHEEL_DIR))/src/
	rm -rf $(WHEEL_DIR)/src/asp/__pycache__ && cp $(SHARED) $(WHEEL_DIR)/src/asp/$(SONAME)
	$(PYTHON) -m pip wheel --no-build-isolation --no-index --no-deps -q -w $(WHEEL_DIR) $(WHEEL_DIR)/src

# `make deb`: the Debian packages of debian/ (libasp0, libasp-dev, asp-exec, asf-provision,
# python3-libasp), built by dpkg-buildpackage in a copy of the tree; the .debs land in DEB_DIR,
# lintian checks them (an error fails). tests/deb/test-deb.sh installs and uses them.
DEB_DIR ?= $(BUILD)/deb
.PHONY: deb
deb:
	test "$$(dpkg-parsechangelog -S Version)" = "$(VERSION)" || \
		{ echo "deb: debian/changelog is not at asp.h's version $(VERSION)"; exit 1; }
	rm -rf $(DEB_DIR) && mkdir -p $(DEB_DIR)/libasp-$(VERSION)
	tar --exclude=./build --exclude='./build-*' --exclude=./$(BUILD) --exclude=node_modules --exclude=./.git \
		-cf - . | tar -C $(DEB_DIR)/libasp-$(VERSION) -xf -
	cd $(DEB_DIR)/libasp-$(VERSION) && dpkg-buildpackage -us -uc -b -J2
	lintian --fail-on error $(DEB_DIR)/libasp_$(VERSION)_*.changes

# The Node binding and the pi example, against the sshd fixture program (build/tests/sshd-fixture).
# The pi example needs a newer Node than Debian 12's (make deps installs one): with an older
# node its tests are SKIPPED, loudly; ASP_REQUIRE_NODE20=1 (or CI=true) makes that a failure.
# npm-deps (above) installs their packages; the test targets install nothing.
check-node: check-node-binding check-node-pi
check-node-binding: lib npm-deps
	cd bindings/node && npm test
check-node-pi: lib npm-deps
	rc=0; sh tools/setup-deps.sh --check-node || rc=$$?; \
	if [ $$rc -eq 0 ]; then \
		cd examples/node/pi-asp && npm test; \
	elif [ $$rc -ne 3 ]; then exit $$rc; fi

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

bench-bins: $(BENCH_BIN)

bench-build: lib bench-bins
	$(MAKE) tools || echo "bench: the tools did not build: the asp-exec rows will be skipped"
	cd bench && npm install --no-audit --no-fund --loglevel=error
	cd tests/kube && npm ci --no-audit --no-fund --loglevel=error
	cd bindings/node && npm install --no-audit --no-fund --loglevel=error

bench: deps
	$(MAKE) bench-build
	/usr/bin/python3 bench/run.py --scale $(BENCH_SCALE)

bench-smoke: bench-build
	/usr/bin/python3 bench/run.py --scale smoke


deps:
	sh tools/setup-deps.sh

demo:
	sh tools/demo.sh

help:
	@echo "make            build libasp.so, libasp.a and the tools into $(BUILD)/"
	@echo "make check      install missing packages, build, run every functional test (~5 min)"
	@echo "make check-deep slow cases, shell transport, far routes, ASan, valgrind, alloc, provisioning, ..."
	@echo "make demo       install missing packages, run the examples against a local sandbox"
	@echo "make install    PREFIX=$(PREFIX) DESTDIR=... ; make uninstall reverses it"
	@echo "make SAN=1 ...  the same with ASan+UBSan (into build-san/); TSAN=1 ThreadSanitizer (build-tsan/)"
	@echo "make check-alloc  fail every allocation in turn (ASan build in build-alloc/)"
	@echo "make soak       SOAK_OPS=100000 SOAK_THREADS=16 mixed operations, an sshd restart"
	@echo "make check-shfs the file-call suites again over exec channels (no SFTP)"
	@echo "make check-san | check-tsan | check-valgrind | check-routes | check-slow   one group of check-deep"
	@echo "TIER_JOBS=N     how many test jobs run at once (default 6)"

# ---------------------------------------------------------------- install
# One install and one uninstall; each part (the library, asp-exec,
# asf-provision) has its own install-X and uninstall-X above or here.
install: install-lib install-asp-exec install-asf-provision
uninstall: uninstall-lib uninstall-asp-exec uninstall-asf-provision

install-lib: lib
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR)
	install -m 0755 $(SHARED) $(DESTDIR)$(LIBDIR)/
	ln -sf $(notdir $(SHARED)) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libasp.so
	install -m 0644 $(STATIC) $(DESTDIR)$(LIBDIR)/
	install -m 0644 include/asp.h $(DESTDIR)$(INCLUDEDIR)/
	install -m 0644 $(BUILD)/libasp.pc $(DESTDIR)$(PKGCONFIGDIR)/libasp.pc

uninstall-lib:
	rm -f $(DESTDIR)$(LIBDIR)/$(notdir $(SHARED)) $(DESTDIR)$(LIBDIR)/$(SONAME) \
	      $(DESTDIR)$(LIBDIR)/libasp.so $(DESTDIR)$(LIBDIR)/libasp.a \
	      $(DESTDIR)$(INCLUDEDIR)/asp.h $(DESTDIR)$(PKGCONFIGDIR)/libasp.pc

clean:
	rm -rf build build-san build-tsan build-fuzz build-alloc bindings/python/build bindings/python/asp.egg-info
