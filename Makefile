# stacktop build and test entry points. `make test` is the README's test
# command and what CI runs (as root, CI=true).

GO ?= go
BIN ?= bin/stacktop

.PHONY: build generate check-generated lint test deps bench

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN) ./cmd/stacktop

generate:
	scripts/bpf-generate.sh

check-generated:
	scripts/check-generated.sh

deps:
	scripts/deps.sh

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) vet ./...

# Integration tests load real BPF programs and create network namespaces, so
# packages run one at a time (-p 1) to keep their traffic and checks apart.
test: deps lint check-generated
	$(GO) test -p 1 -count=1 -timeout 40m ./...

# The benchmark suite (docs/BENCHMARKS.md): root, about 20 minutes, not part
# of `make test`. Pass harness flags with BENCH_FLAGS="-suites overhead ...".
bench:
	bench/run.sh $(BENCH_FLAGS)
