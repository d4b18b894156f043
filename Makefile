# SPDX-License-Identifier: Apache-2.0
# stacktop build and test entry points. `make test` is the README's test
# command and what CI runs (as root, CI=true).

GO ?= go
# Go's release tarball installs into /usr/local/go/bin, which sudo's
# secure_path leaves out: `sudo make test` and the scripts it runs find go
# all the same.
export PATH := $(PATH):/usr/local/go/bin
BIN ?= bin/stacktop

.PHONY: build generate check-generated lint test fuzz deps matrix nic-guest bench cli-docs

# The version is the VERSION file's (the binary embeds it), the commit git's
# (`stacktop --version` prints both); -s -w strips the symbol table and DWARF
# (about a third of the size).
VERSION := $(shell cat VERSION)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X main.commit=$(COMMIT)" -o $(BIN) ./cmd/stacktop

generate:
	scripts/bpf-generate.sh

# The command line reference, docs/cli/, written from the commands' flags
# and help (cmd/stacktop's TestCLIReferenceIsCurrent fails when it drifts).
cli-docs:
	rm -f docs/cli/*.md
	$(GO) run ./cmd/stacktop markdown docs/cli

check-generated:
	scripts/check-generated.sh

deps:
	scripts/deps.sh

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) vet ./...

# Integration tests load real BPF programs and create network namespaces, so
# packages run one at a time (-p 1) to keep their traffic and checks apart.
# Then the same suites run inside every kernel of the matrix.
test: deps lint check-generated
	$(GO) test -p 1 -count=1 -timeout 40m ./...
	$(MAKE) fuzz
	$(MAKE) matrix
	$(MAKE) nic-guest

# Every fuzz target of user input (flags, selectors, durations, probe names,
# the --log file check, the web config) for FUZZTIME each, beyond the seed
# corpora that `go test` runs.
FUZZTIME ?= 3s
fuzz:
	FUZZTIME=$(FUZZTIME) GO=$(GO) scripts/fuzz.sh

# The kernel matrix (docs/MATRIX.md): every integration suite, with every
# backend, inside Debian's 5.10, 6.1, 6.12 and sid kernels booted under qemu
# (TCG). Two guests at a time on the two cores; a guest that runs past
# MATRIX_TIMEOUT is killed and reported as hung. Kernels are cached in
# /var/cache/stacktop-kernels. One kernel: make matrix MATRIX_FLAGS='-kernel 6.1';
# regenerate docs/KERNELS.md: MATRIX_FLAGS='-write-kernels-md docs/KERNELS.md'.
MATRIX_TIMEOUT ?= 30m
MATRIX_FLAGS ?=
matrix:
	$(GO) run ./test/kernels -parallel 2 -retries 3 -timeout $(MATRIX_TIMEOUT) $(MATRIX_FLAGS)

# The latency nic probe against emulated NIC hardware stamps: one qemu guest
# (Debian's generic kernel, two igb NICs), about two minutes (docs/LATENCY.md).
nic-guest:
	test/nicguest/run.sh

# The benchmark suite (docs/PERFORMANCE.md): root, at most 50 minutes, not part
# of `make test`. Pass harness flags with BENCH_FLAGS="-suites overhead ...".
bench:
	bench/run.sh $(BENCH_FLAGS)

# Packaging (docs/PACKAGING.md): a .deb, a FROM scratch image and a Helm
# chart, all from the binary `make build` made, reproducible for one commit
# (SOURCE_DATE_EPOCH defaults to the last commit's time). CI builds and checks
# all three in deploy/packaging_test.go.
.PHONY: deb image chart packages
DIST ?= build
IMAGE ?= localhost/stacktop:$(VERSION)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct)

deb: build
	VERSION=$(VERSION) SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) scripts/deb.sh $(BIN) $(DIST)

image: build
	buildah bud --timestamp $(SOURCE_DATE_EPOCH) --build-arg VERSION=$(VERSION) \
		-f deploy/container/Containerfile -t $(IMAGE) $(dir $(BIN))

chart:
	$(GO) tool helm lint --strict deploy/helm/stacktop
	$(GO) tool helm package --app-version $(VERSION) -d $(DIST) deploy/helm/stacktop

packages: deb image chart
