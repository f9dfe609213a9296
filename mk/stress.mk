# stress.mk - kvstress, the fault-injection stress program (tools/kvstress.c):
# self-verifying values from many threads while kvstored is SIGKILLed and
# restarted; docs/stress.md. Linked against libkvstore.so like kvbench (so
# LD_PRELOAD=libkvbatch.so interposes on it) plus tests/lib/kvtest.c.
#   make stress          scripts/stress.sh: loopback phases, and netns + netem phases as root
KVSTRESS := $(BUILD)/bin/kvstress

all: $(KVSTRESS)
tests: $(KVSTRESS)

$(BUILD)/obj/tools/kvstress.o: CPPFLAGS += -Itests/lib

$(KVSTRESS): $(call obj,tools/kvstress.c) $(call obj,tests/lib/kvtest.c) $(LIBKVSTORE)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $(call obj,tools/kvstress.c) $(call obj,tests/lib/kvtest.c) $(LDFLAGS) \
	    -L$(BUILD)/lib -lkvstore -Wl,-rpath,'$$ORIGIN/../lib' -lm

.PHONY: stress
stress: all
	@BUILD=$(BUILD) scripts/stress.sh
