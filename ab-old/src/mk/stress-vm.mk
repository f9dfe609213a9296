# stress-vm.mk - the netem stress phases in the Debian VM (docs/stress.md).
#   make stress-vm    scripts/stress-vm.sh: scripts/stress.sh inside the VM of
#                     scripts/rxe-vm.sh, whose kernel has sch_netem; fails if
#                     netem does not work there. Root; BUILD inside the tree.
# Not part of make test or .ci/run: about 2.5 min under TCG.
.PHONY: stress-vm
stress-vm: all
	@scripts/deps.sh rdma
	@scripts/rxe-vm.sh image
	@BUILD=$(BUILD) scripts/stress-vm.sh
