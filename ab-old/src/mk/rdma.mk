# RDMA: the soft-RoCE VM (scripts/rxe-vm.sh) and the tests that run in it.
#
#   make rxe-image    build the cached VM image ($KVBATCH_RXE_CACHE, default
#                     /var/cache/kvbatch-rxe) if it is missing or stale
#   make test-rdma    build, then inside the VM: a verbs smoke check and the
#                     RDMA tests (tests/rdma/test_*.c), then the client
#                     integration tests over rdma (scripts/rxe-tests.sh)
#   make bench-rdma   the RDMA figures of docs/rdma.md (scripts/rxe-bench.sh)
#
# Root is needed (debootstrap, chroot). BUILD must lie inside the source
# tree: the VM sees the tree over 9p at the same path.

RDMA_TEST_SRCS := $(wildcard tests/rdma/test_*.c)
RDMA_TEST_BINS := $(patsubst tests/rdma/%.c,$(BUILD)/rdma-tests/%,$(RDMA_TEST_SRCS))
RXE_VM_TIMEOUT ?= 1080

# The binaries live outside $(BUILD)/tests so that `make test` on a host
# without a device does not pick them up.
#
# Test hooks (KVS_RDMA_TEST_*: a stall between round trips, wrong tokens,
# a small send queue, a kvstored without PUSH) exist only in objects built
# with -DKVS_TEST_HOOKS, under $(BUILD)/obj/hooks/: the RDMA tests link the
# transport's, and start $(BUILD)/rdma-tests/bin/kvstored, built with the
# server's (scripts/rxe-tests.sh points KVS_TEST_BUILD there). Release
# builds never read those variables (tests/integration/test_release_hooks).
HOOKS_OBJ = $(patsubst %.c,$(BUILD)/obj/hooks/%.o,$(1))
$(BUILD)/obj/hooks/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -DKVS_TEST_HOOKS $(CFLAGS) -c $< -o $@

RDMA_CLIENT_SRCS := $(wildcard transport/rdma*.c) transport/auto.c
RDMA_SERVER_SRCS := $(wildcard server/rdma*.c)
KVSTORED_HOOKS   := $(BUILD)/rdma-tests/bin/kvstored

# kvstored with the hooks: its own rdma objects come first, so the archive's
# (release) copies are never pulled in.
$(KVSTORED_HOOKS): $(call obj,server/main.c) $(call HOOKS_OBJ,$(RDMA_SERVER_SRCS)) $(AR_SERVER) $(AR_WIRE) $(AR_COMMON)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(LDFLAGS) $(VERBS_LIBS) $(SODIUM_LIBS) -lm

# RDMA tests link the internal archives (they drive the transport and the
# server directly) plus tests/lib, which starts real kvstored processes.
# The transport's objects are named (the hooks build): the archive's only
# references to them are weak.
RDMA_OBJ := $(call HOOKS_OBJ,$(RDMA_CLIENT_SRCS))
$(BUILD)/rdma-tests/%: $(BUILD)/obj/tests/rdma/%.o $(call obj,$(TLIB_SRCS)) $(RDMA_OBJ) $(AR_SERVER) $(AR_CLIENT) $(AR_WIRE) $(AR_COMMON) $(KVSTORED_HOOKS)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(call obj,$(TLIB_SRCS)) $(RDMA_OBJ) -Wl,--start-group $(AR_SERVER) $(AR_CLIENT) \
	    $(AR_WIRE) $(AR_COMMON) -Wl,--end-group $(LDFLAGS) $(CMOCKA_LIBS) $(VERBS_LIBS) $(SODIUM_LIBS) -ldl -lm

.PHONY: rxe-image test-rdma rdma-tests
rdma-tests: tests $(RDMA_TEST_BINS) $(KVSTORED_HOOKS)

rxe-image:
	@scripts/deps.sh rdma
	@scripts/rxe-vm.sh image

test-rdma:
	@scripts/deps.sh rdma
	@$(MAKE) --no-print-directory rdma-tests
	@scripts/rxe-vm.sh image
	@BUILD=$(BUILD) scripts/rxe-vm.sh run -t $(RXE_VM_TIMEOUT) -- scripts/rxe-tests.sh

# The RDMA figures (docs/rdma.md): kvbench over rdma vs perftest, one VM run.
.PHONY: bench-rdma
bench-rdma:
	@scripts/deps.sh rdma
	@$(MAKE) --no-print-directory all
	@scripts/rxe-vm.sh image
	@BUILD=$(BUILD) scripts/rxe-vm.sh run -t $(RXE_VM_TIMEOUT) -- scripts/rxe-bench.sh
