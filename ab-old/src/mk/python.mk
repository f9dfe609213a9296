# python.mk - the `kvstore` CPython extension (python/kvstoremodule.c), built
# by `make` against Debian's python3-dev headers into $(BUILD)/python/.
# It links libkvstore.so dynamically (DT_NEEDED) so that an LD_PRELOADed
# libkvbatch.so interposes on the calls it makes. Sanitizer builds skip it
# (the interpreter is not built with the sanitizer runtime).
#   PYTHON=/usr/bin/python3 (the Debian interpreter; not a pyenv shim on PATH)

PYTHON ?= /usr/bin/python3
PY_INCLUDE := $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)
PY_EXT     := $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))' 2>/dev/null)
PYMOD      := $(BUILD)/python/kvstore$(PY_EXT)

ifeq ($(SAN),)
ifneq ($(and $(PY_EXT),$(wildcard $(PY_INCLUDE)/Python.h)),)
all: $(PYMOD)

$(BUILD)/obj/python/kvstoremodule.o: CPPFLAGS += -I$(PY_INCLUDE)

# One link line for the build tree's copy (rpath: the tree's lib/) and the installed one
# (rpath: PREFIX/lib), as for mooncake.store below.
PYLINK = $(CC) -shared $(call obj,python/kvstoremodule.c) $(LDFLAGS) -L$(BUILD)/lib \
    -Wl,--no-as-needed -lkvstore -Wl,--as-needed

$(PYMOD): $(call obj,python/kvstoremodule.c) $(LIBKVSTORE)
	@mkdir -p $(dir $@)
	$(PYLINK) -o $@ -Wl,-rpath,'$$ORIGIN/../lib'

# mooncake.store (python/mooncake_store.c): Mooncake's Python API over the C drop-in
# (libkvs_mooncake.a from mk/mooncake.mk, linked privately), as the package
# $(BUILD)/python/mooncake/. make install puts both modules into PYTHON_SITEDIR.
MC_PYDIR := $(BUILD)/python/mooncake
MC_PYMOD := $(MC_PYDIR)/store$(PY_EXT)
all: $(MC_PYMOD) $(MC_PYDIR)/__init__.py

$(BUILD)/obj/python/mooncake_store.o: CPPFLAGS += -I$(PY_INCLUDE) $(addprefix -I,$(MOONCAKE_INCLUDE_DIRS))

# One link line for the build tree's copy (rpath: the tree's lib/) and the installed
# one (rpath: PREFIX/lib), so that either finds libkvstore.so.1 beside it.
MC_PYLINK = $(CC) -shared $(call obj,python/mooncake_store.c) $(AR_MOONCAKE) $(AR_COMMON) $(LDFLAGS) \
    -Wl,--version-script=python/mooncake_store.map -L$(BUILD)/lib \
    -Wl,--no-as-needed -lkvstore -Wl,--as-needed

$(MC_PYMOD): $(call obj,python/mooncake_store.c) $(AR_MOONCAKE) $(AR_COMMON) python/mooncake_store.map $(LIBKVSTORE)
	@mkdir -p $(dir $@)
	$(MC_PYLINK) -o $@ -Wl,-rpath,'$$ORIGIN/../../lib'

$(MC_PYDIR)/__init__.py: python/mooncake/__init__.py
	@mkdir -p $(dir $@)
	cp $< $@

# Debian's interpreter looks in /usr/local/lib/python3.X/dist-packages (its default
# scheme) for PREFIX=/usr/local; any other PREFIX gets PREFIX/lib/python3.X/site-packages.
PYTHON_SITEDIR ?= $(shell $(PYTHON) -c 'import sysconfig; d = sysconfig.get_path("platlib"); \
    p = "$(PREFIX)".rstrip("/"); print(d if d.startswith(p + "/") else \
    sysconfig.get_paths(scheme="posix_prefix", vars={"base": p, "platbase": p})["platlib"])')

.PHONY: install-python uninstall-python
install: install-python
install-python: $(PYMOD) $(MC_PYMOD) $(MC_PYDIR)/__init__.py
	install -d $(DESTDIR)$(PYTHON_SITEDIR)/mooncake
	$(PYLINK) -o $(DESTDIR)$(PYTHON_SITEDIR)/kvstore$(PY_EXT) -Wl,-rpath,$(PREFIX)/lib
	install -m 644 $(MC_PYDIR)/__init__.py $(DESTDIR)$(PYTHON_SITEDIR)/mooncake/
	$(MC_PYLINK) -o $(DESTDIR)$(PYTHON_SITEDIR)/mooncake/store$(PY_EXT) -Wl,-rpath,$(PREFIX)/lib

uninstall: uninstall-python
uninstall-python:
	rm -f $(DESTDIR)$(PYTHON_SITEDIR)/kvstore$(PY_EXT) $(DESTDIR)$(PYTHON_SITEDIR)/mooncake/__init__.py \
	    $(DESTDIR)$(PYTHON_SITEDIR)/mooncake/store$(PY_EXT)
	rm -rf $(DESTDIR)$(PYTHON_SITEDIR)/mooncake/__pycache__
	-rmdir $(DESTDIR)$(PYTHON_SITEDIR)/mooncake 2>/dev/null

.PHONY: python
python: $(PYMOD) $(MC_PYMOD)
endif
endif
