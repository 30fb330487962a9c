# Shoal — build, run, test. See README.md.

GO        ?= go
BIN       := bin/shoal
DATA_DIR  ?= /usr/share/datasets/fashion-mnist
# protoc is pinned to Debian bookworm's protobuf-compiler; the Go plugins
# are pinned by the tool directives in go.mod.
PROTOC_VERSION := libprotoc 3.21.12
PROTOS    := proto/shoalpb/ps.proto proto/shoalpb/collective.proto

.PHONY: all build run test test-race lint generate verify-generate fuzz fuzz-short clean bench bench-quick bench-fusion bench-allreduce bench-compute bench-ps bench-faults test-nocgo images test-cluster bench-cluster

all: build

build:
	$(GO) build -o $(BIN) ./cmd/shoal

# Installs the dataset if missing, builds, and trains the default: MLP,
# one parameter server, two async workers.
run: build
	@scripts/ensure-dataset.sh $(DATA_DIR)
	$(BIN) train --data $(DATA_DIR)

test: lint verify-generate test-nocgo test-race fuzz-short test-cluster

# Everything but the docker-compose cluster, which test-cluster runs on its
# own (its containers would load the machine under the timing-sensitive
# tests of the other packages).
test-race:
	$(GO) test -race -shuffle=on -count=1 -timeout 20m $$($(GO) list ./... | grep -v /internal/clustertest)

# The fault-injection tests across containers: a worker killed, or cut off
# the network for 20 s, in each mode; a server killed and restarted; a
# paused straggler in sync. About 12 minutes here. They build the image
# themselves and skip, saying why, where no Docker engine answers.
test-cluster:
	$(GO) test -count=1 -timeout 25m -v ./internal/clustertest

# Shoal's container image, FROM scratch: the binary (cgo, OpenBLAS), the
# libraries it loads, the Fashion-MNIST files. docker-compose.yml runs it.
images:
	scripts/image.sh shoal:latest

# The static build (containers): no cgo, OpenBLAS unavailable, gonum used.
test-nocgo:
	CGO_ENABLED=0 $(GO) build ./...
	CGO_ENABLED=0 $(GO) vet ./nn/

# gofmt, go vet and staticcheck (pinned by the tool directive in go.mod;
# `go tool` fetches it through the module proxy on first use). Any finding
# fails the target.
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

generate:
	@command -v protoc >/dev/null || { echo "protoc not found: apt-get install protobuf-compiler"; exit 1; }
	@v=$$(protoc --version); [ "$$v" = "$(PROTOC_VERSION)" ] || \
		echo "warning: protoc is '$$v', the committed code was generated with '$(PROTOC_VERSION)'"
	protoc --plugin=protoc-gen-go=$$($(GO) tool -n protoc-gen-go) \
		--plugin=protoc-gen-go-grpc=$$($(GO) tool -n protoc-gen-go-grpc) \
		--go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative $(PROTOS)

# Fails if the committed generated code differs from what `make generate`
# writes. Skips, saying why, where protoc is not installed.
verify-generate:
	@if ! command -v protoc >/dev/null; then \
		echo "verify-generate: SKIPPED: protoc not installed (apt-get install protobuf-compiler)"; exit 0; fi; \
	$(MAKE) --no-print-directory generate >/dev/null && \
	git diff --exit-code -- proto/ && echo "verify-generate: generated code is up to date"

# Fuzz runs of every parser of outside input and of the shard's RPC
# handlers, FUZZTIME each. make test runs each for 20000 executions: a
# count, not a duration, because Go 1.26's fuzz coordinator can fail a
# target with a bare "context deadline exceeded" when -fuzztime's clock
# runs out while a worker is mid-call (go.dev/issue/75804, fixed in 1.27).
FUZZTIME ?= 30s
FUZZ := FuzzReadIDX:./data/ FuzzReadSafetensors:./nn/ FuzzPush:./ps/ FuzzReadJournalRecord:./ps/ \
	FuzzTensorUnmarshal:./proto/shoalpb/ FuzzReadHello:./collective/collnet/ FuzzReadOffer:./collective/collnet/ \
	FuzzReadVerdict:./collective/collnet/ FuzzDecodeMeta:./cluster/ FuzzPushStream:./rpc/ FuzzPullRequest:./rpc/
fuzz:
	@set -e; for t in $(FUZZ); do echo "fuzz $${t%%:*} $${t#*:} for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$${t%%:*}$$" -fuzztime $(FUZZTIME) $${t#*:}; done

fuzz-short:
	$(MAKE) fuzz FUZZTIME=20000x

# The modes side by side (shoal bench train's built-in plan, about ten
# minutes on 2 cores, NIC modelled at 1 Gbit/s) with the PyTorch DDP peer;
# writes docs/bench-train/ and its report into docs/BENCHMARKS.md.
bench: build
	scripts/bench-train.sh

# The same in under a minute, into bench-out/ (not the docs).
bench-quick: build
	scripts/ensure-dataset.sh $(DATA_DIR)
	$(BIN) bench train --quick --out bench-out --data $(DATA_DIR)

# Ring allreduce with and without overlap of communication and backward
# (--fusion-bytes), over shared memory and a 1 Gbit/s NIC model.
bench-fusion: build
	scripts/bench-fusion.sh

# Shoal's allreduce against PyTorch gloo's (python3-torch), same sizes and
# process counts, one run; writes the table into docs/BENCHMARKS.md.
bench-allreduce: build
	scripts/bench-allreduce.sh

# Shoal's training step against PyTorch's (python3-torch), one thread,
# batch 64, alternating; writes the table into docs/BENCHMARKS.md.
bench-compute: build
	scripts/bench-compute.sh

# Shoal's parameter server (async and sync) against a PyTorch RPC parameter
# server (python3-torch) and a raw TCP round trip of the same 2.7 MB vector,
# 2 workers, 2 epochs, 3 rounds alternating; writes the table into
# docs/BENCHMARKS.md. BENCH_PS_ROUNDS, BENCH_PS_EPOCHS, BENCH_PS_STEPS
# shorten it (scripts/bench-ps.sh lists the knobs).
bench-ps: build
	scripts/bench-ps.sh

# How long the survivors take to go on after a worker is SIGKILLed, per
# mode: 5 kills each on loopback (median and max in docs/BENCHMARKS.md).
bench-faults:
	$(GO) test -run '^$$' -bench KillRecovery -benchtime 5x ./cmd/shoal

# The modes side by side across containers (docker-compose), into
# docs/BENCHMARKS.md.
bench-cluster: images
	scripts/bench-cluster.sh

clean:
	rm -rf bin
