# kvbatch - build, test, demo.
#
#   make                 libkvstore.so, libkvbatch.so, kvstored, kvbench, kvbatch-stat; and
#                        from mk/: kvstress, kvs-cli, libkvstore_mooncake.so, the Python modules
#   make test            unit + integration + preload tests (installs missing packages)
#   make test SAN=asan   the same under AddressSanitizer + UBSan (build-asan/)
#   make test SAN=tsan   the threaded tests under ThreadSanitizer (build-tsan/)
#   make demo            the shim batching a real workload against a local kvstored
#   make fuzz            libFuzzer on the wire decoder, the server, its auth gate and the
#                        env parser (tests/fuzz/fuzz_*.c), bounded in time (clang)
#   make install PREFIX=/usr/local   (also the Python modules, into the interpreter's path)
#   make uninstall PREFIX=/usr/local
#
# BUILD=dir puts every output under dir (default build/, build-$(SAN)/ with SAN).

SAN      ?=
ifeq ($(SAN),)
BUILD    ?= build
else
BUILD    ?= build-$(SAN)
endif
PREFIX   ?= /usr/local
CC       ?= cc
PKG_CONFIG ?= pkg-config

SAN_FLAGS_asan := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
SAN_FLAGS_tsan := -fsanitize=thread -fno-omit-frame-pointer
SAN_FLAGS      := $(SAN_FLAGS_$(SAN))
OPT            := $(if $(SAN),-O1,-O2)

VERBS_CFLAGS := $(shell $(PKG_CONFIG) --cflags libibverbs librdmacm 2>/dev/null)
VERBS_LIBS   := $(shell $(PKG_CONFIG) --libs libibverbs librdmacm 2>/dev/null || echo -libverbs -lrdmacm)
CMOCKA_LIBS  := $(shell $(PKG_CONFIG) --libs cmocka 2>/dev/null || echo -lcmocka)
SODIUM_LIBS  := $(shell $(PKG_CONFIG) --libs libsodium 2>/dev/null || echo -lsodium)

WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-missing-field-initializers
# One include-path list: product code sees the public API, common/ and the
# transport; what is built over Mooncake's API also sees its header
# (mk/mooncake.mk, mk/python.mk); tests (and the linters) see the internals of each room.
INCLUDE_DIRS      := include common transport
MOONCAKE_INCLUDE_DIRS := include/mooncake mooncake
TEST_INCLUDE_DIRS := tests/lib server client batcher shim $(MOONCAKE_INCLUDE_DIRS) tools
CPPFLAGS += $(addprefix -I,$(INCLUDE_DIRS)) -D_GNU_SOURCE
ALL_INCLUDES      := $(addprefix -I,$(INCLUDE_DIRS) $(TEST_INCLUDE_DIRS))
CFLAGS   ?= $(OPT) -g
CFLAGS   += -std=gnu11 $(WARN) -fPIC -fvisibility=hidden -pthread -MMD -MP $(SAN_FLAGS) $(VERBS_CFLAGS)
LDFLAGS  += -pthread $(SAN_FLAGS)

SONAME   := libkvstore.so.1
# The one version string: kvs_version(), every binary's --version, kvstore.pc, Python's __version__.
VERSION  := 0.1.0
CPPFLAGS += -DKVS_VERSION_STRING='"$(VERSION)"'

# ---- sources, by module (one folder, one job) ----
COMMON_SRCS := $(wildcard common/*.c)
WIRE_SRCS   := transport/wire.c transport/auth.c
LIB_SRCS    := $(wildcard client/*.c) $(wildcard transport/*.c)
SERVER_SRCS := $(filter-out server/main.c,$(wildcard server/*.c))
BATCH_SRCS  := $(wildcard batcher/*.c)
SHIM_SRCS   := $(wildcard shim/*.c)
TOOLS_SRCS  := tools/values.c # self-checking values, which every tool links (options: common/opts.c)
KVBENCH_SRCS := $(wildcard tools/kvbench*.c) $(TOOLS_SRCS)

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))

LIBKVSTORE := $(BUILD)/lib/libkvstore.so
LIBKVBATCH := $(BUILD)/lib/libkvbatch.so
KVSTORED   := $(BUILD)/bin/kvstored
KVBENCH    := $(BUILD)/bin/kvbench
KVSTAT     := $(BUILD)/bin/kvbatch-stat

# Internal archives: what unit tests link (the .so files export only the API).
AR_COMMON  := $(BUILD)/lib/libkvs_common.a
AR_WIRE    := $(BUILD)/lib/libkvs_wire.a
AR_SERVER  := $(BUILD)/lib/libkvs_server.a
AR_CLIENT  := $(BUILD)/lib/libkvs_client.a
AR_BATCH   := $(BUILD)/lib/libkvs_batcher.a
AR_SHIM    := $(BUILD)/lib/libkvs_shim.a
AR_TOOLS   := $(BUILD)/lib/libkvs_tools.a

TARGETS := $(LIBKVSTORE) $(LIBKVBATCH) $(KVSTORED) $(KVBENCH) $(KVSTAT)

.PHONY: all
# Keep objects make would see as intermediate (test objects), so rebuilds stay incremental.
.SECONDARY:
all: $(TARGETS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

# An archive is made again when the Makefile changes, so that an object
# moved to another archive is not left behind in the old one.
$(BUILD)/lib/%.a: Makefile
	@mkdir -p $(dir $@)
	rm -f $@ && $(AR) rcs $@ $(filter %.o,$^)

$(AR_COMMON): $(call obj,$(COMMON_SRCS))
$(AR_WIRE):   $(call obj,$(WIRE_SRCS))
$(AR_SERVER): $(call obj,$(SERVER_SRCS))
$(AR_CLIENT): $(call obj,$(filter-out $(WIRE_SRCS),$(LIB_SRCS)))
$(AR_BATCH):  $(call obj,$(BATCH_SRCS))
$(AR_SHIM):   $(call obj,$(filter-out shim/preload%.c,$(SHIM_SRCS)))
$(AR_TOOLS):  $(call obj,$(TOOLS_SRCS))

# libkvstore exports only kvs_* (client/libkvstore.map); its own calls bind
# inside the library, so an LD_PRELOAD shim sees only the application's calls.
$(LIBKVSTORE): $(call obj,$(LIB_SRCS)) $(AR_COMMON) client/libkvstore.map
	@mkdir -p $(dir $@)
	$(CC) -shared -o $(BUILD)/lib/$(SONAME) $(call obj,$(LIB_SRCS)) $(AR_COMMON) $(LDFLAGS) \
	    -Wl,-soname,$(SONAME) -Wl,--version-script=client/libkvstore.map \
	    -Wl,-Bsymbolic-functions -Wl,-z,defs $(VERBS_LIBS) $(SODIUM_LIBS)
	ln -sf $(SONAME) $@

# The shim needs libkvstore loaded in the global scope (DT_NEEDED) so that
# dlsym(RTLD_NEXT) finds it even when the program dlopen()s libkvstore
# RTLD_LOCAL, as CPython does with extension modules.
$(LIBKVBATCH): $(call obj,$(SHIM_SRCS) $(BATCH_SRCS)) $(AR_COMMON) shim/libkvbatch.map $(LIBKVSTORE)
	$(CC) -shared -o $@ $(call obj,$(SHIM_SRCS) $(BATCH_SRCS)) $(AR_COMMON) $(LDFLAGS) \
	    -Wl,--version-script=shim/libkvbatch.map -Wl,-z,defs \
	    -L$(BUILD)/lib -Wl,--no-as-needed -lkvstore -Wl,--as-needed \
	    -Wl,-rpath,'$$ORIGIN' -ldl -lm

$(KVSTORED): $(call obj,server/main.c) $(AR_SERVER) $(AR_WIRE) $(AR_COMMON)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(LDFLAGS) $(VERBS_LIBS) $(SODIUM_LIBS) -lm

$(KVBENCH): $(call obj,$(KVBENCH_SRCS)) $(AR_COMMON) $(LIBKVSTORE)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $(call obj,$(KVBENCH_SRCS)) $(AR_COMMON) $(LDFLAGS) -L$(BUILD)/lib -lkvstore \
	    -Wl,-rpath,'$$ORIGIN/../lib' -lm

$(KVSTAT): $(call obj,tools/kvbatch-stat.c $(TOOLS_SRCS)) $(AR_COMMON)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(LDFLAGS) -lm

# ---- tests ----
# tests/unit/test_X.c        links the internal archives (+ cmocka)
# tests/integration/test_X.c links libkvstore.so and tests/lib (starts kvstored)
# tests/preload/*.c          programs built only against libkvstore, run with and without the shim
#                            (lib*.c: test doubles preloaded beside it, built as .so)
UNIT_SRCS  := $(wildcard tests/unit/test_*.c)
INTEG_SRCS := $(wildcard tests/integration/test_*.c)
TLIB_SRCS  := $(wildcard tests/lib/*.c) tools/values.c
PRELOAD_LIB_SRCS := $(wildcard tests/preload/lib*.c)
PRELOAD_SRCS := $(filter-out $(PRELOAD_LIB_SRCS),$(wildcard tests/preload/*.c))
UNIT_BINS  := $(patsubst tests/unit/%.c,$(BUILD)/tests/unit/%,$(UNIT_SRCS))
INTEG_BINS := $(patsubst tests/integration/%.c,$(BUILD)/tests/integration/%,$(INTEG_SRCS))
PRELOAD_BINS := $(patsubst tests/preload/%.c,$(BUILD)/tests/preload/%,$(PRELOAD_SRCS))
PRELOAD_LIBS := $(patsubst tests/preload/%.c,$(BUILD)/tests/preload/%.so,$(PRELOAD_LIB_SRCS))
TEST_CPPFLAGS := $(addprefix -I,$(TEST_INCLUDE_DIRS))

$(BUILD)/obj/tests/%.o: tests/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(TEST_CPPFLAGS) $(CFLAGS) -Wno-missing-prototypes -c $< -o $@

# UNIT_LDFLAGS_test_X: extra link flags of one unit test (test_ops fails malloc at will);
# UNIT_OBJS_test_X: extra objects (test_tcp_drop starts a kvstored with tests/lib).
UNIT_LDFLAGS_test_ops := -Wl,--wrap=malloc -Wl,--wrap=calloc
UNIT_OBJS_test_tcp_drop := $(call obj,tests/lib/kvtest.c tools/values.c)
$(BUILD)/tests/unit/test_tcp_drop: $(UNIT_OBJS_test_tcp_drop)

$(BUILD)/tests/unit/%: $(BUILD)/obj/tests/unit/%.o $(AR_SERVER) $(AR_CLIENT) $(AR_BATCH) $(AR_SHIM) $(AR_WIRE) $(AR_TOOLS) $(AR_COMMON)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(UNIT_OBJS_$(notdir $@)) -Wl,--start-group $(AR_SERVER) $(AR_CLIENT) $(AR_BATCH) $(AR_SHIM) $(AR_WIRE) $(AR_TOOLS) $(AR_COMMON) \
	    -Wl,--end-group $(LDFLAGS) $(UNIT_LDFLAGS_$(notdir $@)) $(CMOCKA_LIBS) $(VERBS_LIBS) \
	    $(SODIUM_LIBS) -ldl -lm

$(BUILD)/tests/integration/%: $(BUILD)/obj/tests/integration/%.o $(call obj,$(TLIB_SRCS)) $(AR_WIRE) $(AR_COMMON) $(LIBKVSTORE)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(call obj,$(TLIB_SRCS)) $(AR_WIRE) $(AR_COMMON) $(LDFLAGS) -L$(BUILD)/lib -lkvstore \
	    -Wl,-rpath,'$$ORIGIN/../../lib' $(CMOCKA_LIBS) $(SODIUM_LIBS) -lm

$(BUILD)/tests/preload/%: $(BUILD)/obj/tests/preload/%.o $(call obj,$(TLIB_SRCS)) $(AR_COMMON) $(LIBKVSTORE)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(call obj,$(TLIB_SRCS)) $(AR_COMMON) $(LDFLAGS) -L$(BUILD)/lib -lkvstore \
	    -Wl,-rpath,'$$ORIGIN/../../lib' -lm

# tests/preload/libX.c: test doubles preloaded beside the shim; their calls of
# kvs_* bind at run time, to whichever library comes first (the shim).
$(BUILD)/tests/preload/%.so: $(BUILD)/obj/tests/preload/%.o
	@mkdir -p $(dir $@)
	$(CC) -shared -o $@ $< $(LDFLAGS)

.PHONY: tests test check-deps
tests: all $(UNIT_BINS) $(INTEG_BINS) $(PRELOAD_BINS) $(PRELOAD_LIBS)

check-deps:
	@scripts/deps.sh test

# Runs every test binary (each bounded by a timeout) and prints one
# "N passed, N failed" line; TESTS=pattern narrows the set. The client tests
# reach kvstored over its local socket (KVSTORE_TRANSPORT auto, the default),
# their values through a shared region (docs/shm.md); then the client
# integration tests run again over TCP (KVSTORE_TRANSPORT=tcp).
TCP_TESTS ?= tests/integration/test_client tests/integration/test_auth
test: check-deps
	@$(MAKE) --no-print-directory tests
	@BUILD=$(BUILD) SAN=$(SAN) scripts/run-tests.sh $(TESTS)
	@$(if $(TESTS),true,echo "=== again over TCP: $(TCP_TESTS)" && KVSTORE_TRANSPORT=tcp BUILD=$(BUILD) SAN=$(SAN) scripts/run-tests.sh $(TCP_TESTS))

# ---- demo ----
.PHONY: demo
demo:
	@scripts/deps.sh build
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) scripts/demo.sh

# ---- fuzzing (clang + libFuzzer) ----
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BINS := $(patsubst tests/fuzz/%.c,build-fuzz/%,$(FUZZ_SRCS))
FUZZ_SECONDS ?= 60
# No UBSan alignment checks here: -fsanitize=fuzzer traces every compare, including
# the ~320 pointer-alignment compares UBSan adds to server/proto.c alone, and that
# tracing was 40 % of fuzz_auth's CPU (docs/fuzzing.md). The code reads the wire and
# the pool only through memcpy; make test SAN=asan replays every stored input with
# gcc's full UBSan, and test_fuzz_<target> DIR replays a campaign's corpus with it.
FUZZ_CFLAGS := -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize=alignment $(ALL_INCLUDES) -D_GNU_SOURCE -pthread \
    -DKVS_VERSION_STRING='"$(VERSION)"'

# What each target links: FUZZ_DEPS_<name> (a new target adds its own line).
FUZZ_DEPS_fuzz_wire   := $(WIRE_SRCS) $(COMMON_SRCS)
FUZZ_DEPS_fuzz_server := $(WIRE_SRCS) $(SERVER_SRCS) $(COMMON_SRCS)
FUZZ_DEPS_fuzz_auth   := $(WIRE_SRCS) $(SERVER_SRCS) $(COMMON_SRCS)
FUZZ_DEPS_fuzz_env    := shim/config.c $(COMMON_SRCS)
# Targets that build a server per input keep one pool mapping (tests/fuzz/pool_reuse.c).
FUZZ_POOL_REUSE := tests/fuzz/pool_reuse.c
FUZZ_WRAP_MMAP  := -Wl,--wrap=mmap -Wl,--wrap=munmap
FUZZ_EXTRA_fuzz_server := $(FUZZ_POOL_REUSE)
FUZZ_EXTRA_fuzz_auth   := $(FUZZ_POOL_REUSE)

.SECONDEXPANSION:
build-fuzz/%: tests/fuzz/%.c $$(FUZZ_DEPS_%) $$(FUZZ_EXTRA_%) Makefile
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -o $@ $(filter %.c,$^) $(if $(filter $(FUZZ_POOL_REUSE),$^),$(FUZZ_WRAP_MMAP)) \
	    -lm $(VERBS_LIBS) $(SODIUM_LIBS)

.PHONY: fuzz fuzz-long
fuzz: $(FUZZ_BINS)
	@scripts/fuzz.sh $(FUZZ_SECONDS) $(FUZZ_BINS)

fuzz-long: $(FUZZ_BINS)
	@FUZZ_RUNS=10000000 scripts/fuzz.sh 0 $(FUZZ_BINS)

# make test replays each target's seed corpus and its regression inputs
# (tests/fuzz/regress/<target>/) with the test build's compiler and sanitizers:
# test_fuzz_<target> is the target linked with tests/fuzz/replay.c instead of libFuzzer.
FUZZ_REPLAY_BINS := $(patsubst tests/fuzz/fuzz_%.c,$(BUILD)/tests/fuzz/test_fuzz_%,$(FUZZ_SRCS))
$(BUILD)/obj/tests/fuzz/replay.o: CPPFLAGS += -DKVS_FUZZ_DIR='"$(CURDIR)/tests/fuzz"'

$(BUILD)/tests/fuzz/test_fuzz_%: $(BUILD)/obj/tests/fuzz/fuzz_%.o $(BUILD)/obj/tests/fuzz/replay.o \
    $(AR_SERVER) $(AR_SHIM) $(AR_WIRE) $(AR_COMMON)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $(filter %.o,$^) -Wl,--start-group $(AR_SERVER) $(AR_SHIM) $(AR_WIRE) $(AR_COMMON) \
	    -Wl,--end-group $(LDFLAGS) $(CMOCKA_LIBS) $(VERBS_LIBS) $(SODIUM_LIBS) -ldl -lm

tests: $(FUZZ_REPLAY_BINS)

# ---- style ----
.PHONY: format format-check
format:
	clang-format -i $$(git ls-files '*.c' '*.h')
format-check:
	clang-format --dry-run -Werror $$(git ls-files '*.c' '*.h')

# ---- install ----
# What make install puts under $(DESTDIR)$(PREFIX), and make uninstall removes again: the
# headers, libraries and programs, kvstore.pc (with the shim's path: pkg-config
# --variable=shim kvstore), the man pages (docs/man/NAME.SECTION) and the docs
# (README.md, docs/*.md) in share/doc/kvbatch; mk/*.mk add their own pieces (kvstress,
# kvs-cli, the Mooncake drop-in, the Python modules).
# tests/integration/test_install.c checks the installed file list both ways.
MANDIR   ?= $(PREFIX)/share/man
DOCDIR   ?= $(PREFIX)/share/doc/kvbatch
MAN_PAGES := $(wildcard docs/man/*.[0-9])
MAN_SECTIONS := $(sort $(subst .,,$(suffix $(MAN_PAGES))))
DOC_FILES := README.md $(wildcard docs/*.md)
# Programs that are not built here (scripts), installed beside the binaries.
INSTALL_SCRIPTS := scripts/kvbatch-tune

.PHONY: install
install: all
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/bin \
	    $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(DOCDIR) \
	    $(addprefix $(DESTDIR)$(MANDIR)/man,$(MAN_SECTIONS))
	install -m 644 include/kvstore.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(BUILD)/lib/$(SONAME) $(DESTDIR)$(PREFIX)/lib/
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/libkvstore.so
	install -m 755 $(LIBKVBATCH) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(filter $(BUILD)/bin/%,$(TARGETS)) $(INSTALL_SCRIPTS) $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' kvstore.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/kvstore.pc
	$(foreach m,$(MAN_PAGES),sed -e "s|/usr/share/doc/kvbatch|$(DOCDIR)|g" $(m) \
	    > $(DESTDIR)$(MANDIR)/man$(subst .,,$(suffix $(m)))/$(notdir $(m)) &&) true
	install -m 644 $(DOC_FILES) $(DESTDIR)$(DOCDIR)/

# Removes what install put there (mk/*.mk add their own pieces).
.PHONY: uninstall
uninstall:
	rm -f $(DESTDIR)$(PREFIX)/include/kvstore.h $(DESTDIR)$(PREFIX)/lib/$(SONAME) \
	    $(DESTDIR)$(PREFIX)/lib/libkvstore.so $(DESTDIR)$(PREFIX)/lib/$(notdir $(LIBKVBATCH)) \
	    $(addprefix $(DESTDIR)$(PREFIX)/bin/,$(notdir $(filter $(BUILD)/bin/%,$(TARGETS)) $(INSTALL_SCRIPTS))) \
	    $(DESTDIR)$(PREFIX)/lib/pkgconfig/kvstore.pc \
	    $(foreach m,$(MAN_PAGES),$(DESTDIR)$(MANDIR)/man$(subst .,,$(suffix $(m)))/$(notdir $(m))) \
	    $(addprefix $(DESTDIR)$(DOCDIR)/,$(notdir $(DOC_FILES)))
	-rmdir $(DESTDIR)$(DOCDIR) 2>/dev/null

.PHONY: clean
clean:
	rm -rf build build-asan build-tsan build-fuzz

# Pieces with a room of their own keep their rules in mk/: kvstress and make stress, the
# Mooncake drop-in, the Python module, the RDMA VM, benchmarks, lint.
-include $(wildcard mk/*.mk)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
