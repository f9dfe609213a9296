# auth.mk - the libFuzzer target for kvstored's authentication gate
# (tests/fuzz/fuzz_auth.c): the protocol state machine with a secret.
FUZZ_DEPS_fuzz_auth := $(WIRE_SRCS) $(SERVER_SRCS) $(COMMON_SRCS)
