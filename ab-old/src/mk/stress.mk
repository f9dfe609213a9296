# stress.mk - kvstress, the fault-injection stress program (tools/kvstress*.c):
# self-verifying values from many threads while kvstored is SIGKILLed and
# restarted; docs/stress.md. Linked against libkvstore.so like kvbench (so
# LD_PRELOAD=libkvbatch.so interposes on it) and the tools' own modules.
#   make stress          scripts/stress.sh: loopback phases, and netns + netem phases as root
KVSTRESS := $(BUILD)/bin/kvstress

all: $(KVSTRESS)
tests: $(KVSTRESS)

KVSTRESS_SRCS := $(wildcard tools/kvstress*.c) $(TOOLS_SRCS)

$(KVSTRESS): $(call obj,$(KVSTRESS_SRCS)) $(AR_COMMON) $(LIBKVSTORE)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $(call obj,$(KVSTRESS_SRCS)) $(AR_COMMON) $(LDFLAGS) -L$(BUILD)/lib -lkvstore \
	    -Wl,-rpath,'$$ORIGIN/../lib' -lm

.PHONY: stress
stress: all
	@BUILD=$(BUILD) scripts/stress.sh

.PHONY: install-kvstress uninstall-kvstress
install: install-kvstress
install-kvstress: $(KVSTRESS)
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(KVSTRESS) $(DESTDIR)$(PREFIX)/bin/
uninstall: uninstall-kvstress
uninstall-kvstress:
	rm -f $(DESTDIR)$(PREFIX)/bin/$(notdir $(KVSTRESS))
