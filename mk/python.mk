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

$(PYMOD): $(call obj,python/kvstoremodule.c) $(LIBKVSTORE)
	@mkdir -p $(dir $@)
	$(CC) -shared -o $@ $(call obj,python/kvstoremodule.c) $(LDFLAGS) -L$(BUILD)/lib \
	    -Wl,--no-as-needed -lkvstore -Wl,--as-needed -Wl,-rpath,'$$ORIGIN/../lib'

.PHONY: python
python: $(PYMOD)
endif
endif
