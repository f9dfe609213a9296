# mooncake.mk - the Mooncake Store drop-in (docs/mooncake.md):
#   $(BUILD)/lib/libkvstore_mooncake.so  Mooncake's C API (include/mooncake/store_c.h) over
#                                        libkvstore; exports only mooncake_store_*
#   $(BUILD)/lib/libkvs_mooncake.a       the same objects, for what links them privately
#                                        (the mooncake.store Python module, unit tests)
# Both link libkvstore.so dynamically (DT_NEEDED), so that LD_PRELOAD=libkvbatch.so sees
# the kvs_* calls they make.

MC_SRCS     := $(wildcard mooncake/*.c)
MC_SONAME   := libkvstore_mooncake.so.1
LIBMOONCAKE := $(BUILD)/lib/libkvstore_mooncake.so
AR_MOONCAKE := $(BUILD)/lib/libkvs_mooncake.a

all: $(LIBMOONCAKE)

$(call obj,$(MC_SRCS)): CPPFLAGS += $(addprefix -I,$(MOONCAKE_INCLUDE_DIRS))

$(AR_MOONCAKE): $(call obj,$(MC_SRCS))

$(LIBMOONCAKE): $(call obj,$(MC_SRCS)) $(AR_COMMON) mooncake/libkvstore_mooncake.map $(LIBKVSTORE)
	$(CC) -shared -o $(BUILD)/lib/$(MC_SONAME) $(call obj,$(MC_SRCS)) $(AR_COMMON) $(LDFLAGS) \
	    -Wl,-soname,$(MC_SONAME) -Wl,--version-script=mooncake/libkvstore_mooncake.map \
	    -Wl,-Bsymbolic-functions -Wl,-z,defs -L$(BUILD)/lib -Wl,--no-as-needed -lkvstore \
	    -Wl,--as-needed -Wl,-rpath,'$$ORIGIN'
	ln -sf $(MC_SONAME) $@

# Tests written against Mooncake's header (tests/integration/test_mooncake_*.c; the
# Makefile's TEST_INCLUDE_DIRS has include/mooncake) also link the drop-in.
MC_TESTS := $(patsubst tests/integration/%.c,%,$(wildcard tests/integration/test_mooncake_*.c))
$(patsubst %,$(BUILD)/tests/integration/%,$(MC_TESTS)): $(LIBMOONCAKE)
$(patsubst %,$(BUILD)/tests/integration/%,$(MC_TESTS)): private LDFLAGS += -L$(BUILD)/lib \
    -lkvstore_mooncake

# tests/integration/test_kvsmc.c: the drop-in's internal calls (kvsmc.h), from the archive.
$(BUILD)/tests/integration/test_kvsmc: $(AR_MOONCAKE)
$(BUILD)/tests/integration/test_kvsmc: private LDFLAGS += $(AR_MOONCAKE) $(AR_COMMON)

.PHONY: install-mooncake
install: install-mooncake
install-mooncake: $(LIBMOONCAKE)
	install -d $(DESTDIR)$(PREFIX)/include/mooncake $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 include/mooncake/store_c.h $(DESTDIR)$(PREFIX)/include/mooncake/
	install -m 755 $(BUILD)/lib/$(MC_SONAME) $(DESTDIR)$(PREFIX)/lib/
	ln -sf $(MC_SONAME) $(DESTDIR)$(PREFIX)/lib/libkvstore_mooncake.so
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' mooncake/kvstore_mooncake.pc.in \
	    > $(DESTDIR)$(PREFIX)/lib/pkgconfig/kvstore_mooncake.pc

.PHONY: uninstall-mooncake
uninstall: uninstall-mooncake
uninstall-mooncake:
	rm -f $(DESTDIR)$(PREFIX)/include/mooncake/store_c.h $(DESTDIR)$(PREFIX)/lib/$(MC_SONAME) \
	    $(DESTDIR)$(PREFIX)/lib/libkvstore_mooncake.so $(DESTDIR)$(PREFIX)/lib/pkgconfig/kvstore_mooncake.pc
	-rmdir $(DESTDIR)$(PREFIX)/include/mooncake 2>/dev/null

# tests/preload/mc_workload.c knows only store_c.h: built over the drop-in (mc_workload) and
# over a library that is not libkvstore (mc_workload_double, over tests/preload/libmc_double.c);
# tests/preload/mc_nolib.c links the shim itself, with no Mooncake library under it.
MC_DOUBLE := $(BUILD)/tests/preload/libmc_double.so
$(BUILD)/tests/preload/mc_workload: $(LIBMOONCAKE)
$(BUILD)/tests/preload/mc_workload: private LDFLAGS += -L$(BUILD)/lib -lkvstore_mooncake
$(MC_DOUBLE): private LDFLAGS += -Wl,-soname,libmc_double.so
$(BUILD)/tests/preload/mc_workload_double: $(BUILD)/obj/tests/preload/mc_workload.o $(MC_DOUBLE)
	$(CC) -o $@ $< $(LDFLAGS) -L$(BUILD)/tests/preload -l:libmc_double.so -Wl,-rpath,'$$ORIGIN'
$(BUILD)/tests/preload/mc_nolib: $(LIBKVBATCH)
$(BUILD)/tests/preload/mc_nolib: private LDFLAGS += -L$(BUILD)/lib -l:libkvbatch.so
tests: $(BUILD)/tests/preload/mc_workload_double
# tests/preload/libmc_local.c: a library over the double that mc_dlopen loads RTLD_LOCAL.
$(BUILD)/tests/preload/libmc_local.so: $(MC_DOUBLE)
$(BUILD)/tests/preload/libmc_local.so: private LDFLAGS += -L$(BUILD)/tests/preload \
    -l:libmc_double.so -Wl,-rpath,'$$ORIGIN'
