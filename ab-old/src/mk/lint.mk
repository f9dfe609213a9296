# lint.mk - static analysis and a leak check of kvstored.
#   make lint       cppcheck + clang-tidy (.clang-tidy) over every C file of the tree;
#                   findings minus the reasoned suppressions in .lint-suppressions
#                   (scripts/lint-filter.py); exit 1 if any finding is left
#   make valgrind   kvstored under valgrind --leak-check=full --error-exitcode=1 through a
#                   real client workload (scripts/valgrind.sh), then SIGTERM
# clang-tidy runs per file into $(BUILD)/lint/tidy/, so a second `make lint` redoes only
# the files that changed (or all of them if .clang-tidy did).

LINT_DIR   := $(BUILD)/lint
LINT_SRCS  := $(shell git ls-files -co --exclude-standard '*.c' 2>/dev/null)
LINT_TIDY  := $(patsubst %.c,$(LINT_DIR)/tidy/%.txt,$(LINT_SRCS))
LINT_FLAGS := -std=gnu11 $(CPPFLAGS) $(TEST_CPPFLAGS) $(VERBS_CFLAGS)
CLANG_TIDY ?= clang-tidy
CPPCHECK   ?= cppcheck

# The CPython extension needs the interpreter's headers (PY_INCLUDE: mk/python.mk).
$(LINT_DIR)/tidy/python/%.txt: TIDY_EXTRA = $(if $(PY_INCLUDE),-I$(PY_INCLUDE))

$(LINT_DIR)/tidy/%.txt: %.c .clang-tidy
	@mkdir -p $(dir $@)
	@echo "clang-tidy $<"
	@m=$$(stat -c %Y $<); $(CLANG_TIDY) --quiet $< -- $(LINT_FLAGS) $(TIDY_EXTRA) > $@.tmp 2>&1; \
	if [ "$$(stat -c %Y $<)" = "$$m" ]; then mv $@.tmp $@; else rm -f $@.tmp; \
	    echo "lint: $< changed while it was analysed; run make lint again"; fi

# One cppcheck run over the tree: it follows calls across files.
$(LINT_DIR)/cppcheck.txt: $(LINT_SRCS) $(wildcard */*.h)
	@mkdir -p $(dir $@)
	@echo "cppcheck ($(words $(LINT_SRCS)) files)"
	@$(CPPCHECK) -q --std=c11 --enable=warning,performance,portability --inline-suppr --library=python \
	    -D_GNU_SOURCE -D__linux__ $(ALL_INCLUDES) -j2 --template='{file}:{line}:{column}: {severity}: {message} [{id}]\n{code}' \
	    $(LINT_SRCS) > $@.tmp 2>&1; mv $@.tmp $@

.PHONY: lint lint-reports valgrind
lint-reports: $(LINT_DIR)/cppcheck.txt $(LINT_TIDY)

lint:
	@for t in $(CLANG_TIDY) $(CPPCHECK); do command -v $$t >/dev/null || \
	    { echo "make lint needs $$t (Debian: apt-get install clang-tidy cppcheck)"; exit 2; }; done
	@$(MAKE) --no-print-directory -j2 lint-reports
	@scripts/lint-filter.py .lint-suppressions $(LINT_DIR)/cppcheck.txt $(LINT_TIDY)

valgrind: all
	@command -v valgrind >/dev/null || scripts/deps.sh test
	@BUILD=$(BUILD) scripts/valgrind.sh
