# cli.mk - kvs-cli, the command-line client of kvstored (tools/kvs-cli.c): put, get,
# exists, remove, remove-matching, stats and a readable info view, for shells and scripts.
# Linked against libkvstore.so like kvbench.
KVSCLI := $(BUILD)/bin/kvs-cli

all: $(KVSCLI)
tests: $(KVSCLI)

$(KVSCLI): $(call obj,tools/kvs-cli.c $(TOOLS_SRCS)) $(AR_COMMON) $(LIBKVSTORE)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $(call obj,tools/kvs-cli.c $(TOOLS_SRCS)) $(AR_COMMON) $(LDFLAGS) -L$(BUILD)/lib \
	    -lkvstore -Wl,-rpath,'$$ORIGIN/../lib' -lm

.PHONY: install-kvs-cli uninstall-kvs-cli
install: install-kvs-cli
install-kvs-cli: $(KVSCLI)
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(KVSCLI) $(DESTDIR)$(PREFIX)/bin/
uninstall: uninstall-kvs-cli
uninstall-kvs-cli:
	rm -f $(DESTDIR)$(PREFIX)/bin/$(notdir $(KVSCLI))
