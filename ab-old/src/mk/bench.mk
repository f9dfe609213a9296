# bench.mk - kvbatch side by side with iperf3 (the link's limit) and Redis:
#   make bench          full run (~10-15 min): $(BUILD)/bench/results.md + PNGs
#   make bench-quick    the same, fewer sizes, windows and seconds (~3-4 min)
.PHONY: bench bench-quick
bench:
	@scripts/deps.sh bench
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) scripts/bench-compare.sh

bench-quick:
	@scripts/deps.sh bench
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) scripts/bench-compare.sh --quick
