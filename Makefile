# thinlvm — run `make help` for the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

GO        ?= go
BIN       := $(CURDIR)/bin
# Build caches live outside the repo, keyed by what they hold.
CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/thinlvm
LVMVM_DIR ?= $(CACHE_DIR)/lvmvm
export LVMVM_DIR

# Tool versions are pinned in one place: the `tool` block of go.mod
# (protoc-gen-go, protoc-gen-go-grpc). protoc comes from Debian's
# protobuf-compiler package (see .ci/run).
PROTOC    ?= protoc

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN{FS=":.*## "} /^[a-zA-Z_-]+:.*## /{printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: generate
generate: ## Regenerate checked-in code: protobuf/gRPC, deepcopy, the scheduler args' conversion and defaults, the chart's CRDs and roles (the controller's, the node agent's, the kubectl plugin's read-only viewer), and deploy/'s kustomize tree rendered from the chart.
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
	$(GO) build -o $(BIN)/protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc
	$(PROTOC) --plugin=protoc-gen-go=$(BIN)/protoc-gen-go --plugin=protoc-gen-go-grpc=$(BIN)/protoc-gen-go-grpc \
		--go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative \
		lvmd/proto/lvmd.proto node/transfer/proto/transfer.proto
	$(GO) tool controller-gen object paths=./api/...
	$(GO) tool deepcopy-gen --output-file zz_generated.deepcopy.go ./scheduler/apis/config ./scheduler/apis/config/v1   # the scheduler plugin's args, as kube-scheduler's own
	$(GO) tool conversion-gen --output-file zz_generated.conversion.go ./scheduler/apis/config/v1
	$(GO) tool defaulter-gen --output-file zz_generated.defaults.go ./scheduler/apis/config/v1
	$(GO) tool controller-gen crd paths=./api/... output:crd:artifacts:config=deploy/chart/crds
	$(GO) tool controller-gen rbac:roleName=thinlvm-node paths=./node/... output:rbac:artifacts:config=deploy/chart/templates/rbac/node
	$(GO) tool controller-gen rbac:roleName=thinlvm-controller paths=./controller/... output:rbac:artifacts:config=deploy/chart/templates/rbac/controller
	$(GO) tool controller-gen rbac:roleName=thinlvm-viewer paths=./cmd/kubectl-thinlvm/... output:rbac:artifacts:config=deploy/chart/templates/rbac/viewer   # the kubectl plugin's reads
	sed -i 's/^  namespace: thinlvm-system$$/  namespace: {{ .Release.Namespace }}/' deploy/chart/templates/rbac/*/role.yaml   # the markers' namespace is the release's
	cd deploy/chart && CGO_ENABLED=0 $(GO) run -trimpath ./render -kube-version=v$(K8S_NEWEST).0   # deploy/'s kustomize tree from the chart (its own module: Helm's SDK)

.PHONY: verify
verify: generate lint ## Check formatting, vet, lint with the import boundaries, and that generated code is current.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet -race ./...   # -race: test-unit's build flags, so that the packages vet compiles are test-unit's too (a cold machine compiled them twice)
	$(GO) mod tidy -diff
	cd e2e/bench/topolvm && $(GO) vet ./... && $(GO) mod tidy -diff   # the TopoLVM benchmark's own module compiles
	cd e2e/cluster/addons && $(GO) mod tidy -diff   # the test cluster's add-ons' module
	cd e2e/conformance && $(GO) mod tidy -diff   # Kubernetes' storage suite's module (e2e.test, agnhost)
	cd hack/tools && $(GO) mod tidy -diff   # the linter's module
	cd deploy/chart && CGO_ENABLED=0 $(GO) vet -trimpath ./... && $(GO) mod tidy -diff   # the Helm chart's module
	for m in $(K8S_OLDER); do (cd scheduler/k8s$$m && $(GO) mod tidy -diff) || exit 1; done   # each older minor's scheduler module
	@git diff --exit-code -- . ':!go.sum' || { echo "generated code is stale: run 'make generate' and commit"; exit 1; }
	@test -z "$$(git status --porcelain --untracked-files=all -- lvmd/proto node/transfer/proto api scheduler/apis deploy)" || { echo "untracked generated files:"; git status --porcelain --untracked-files=all -- lvmd/proto node/transfer/proto api scheduler/apis deploy; exit 1; }

# golangci-lint, built from its module (hack/tools/go.mod, its own module so
# that the product's go.mod pins none of its dependencies) into the cache,
# keyed by that module's go.sum. .golangci.yml: staticcheck, errorlint,
# revive, govet, and depguard, whose rules are the one-way arrows between
# the packages (docs/architecture.md), over test files too.
LINT_DIR := $(CACHE_DIR)/tools
.PHONY: lint
lint: ## Lint (.golangci.yml): staticcheck, errorlint, revive, and the architecture's import boundaries (depguard) in code and tests.
	@key=$$(sha256sum hack/tools/go.sum | cut -c1-12); bin=$(LINT_DIR)/golangci-lint-$$key; \
	if [ ! -x "$$bin" ]; then echo "building golangci-lint (hack/tools) into $$bin"; mkdir -p $(LINT_DIR) && \
	  (cd hack/tools && $(GO) build -trimpath -o "$$bin.tmp" github.com/golangci/golangci-lint/v2/cmd/golangci-lint) && mv "$$bin.tmp" "$$bin" || exit 1; fi; \
	"$$bin" run ./...

.PHONY: build
build: ## Build the binaries into bin/.
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/ ./cmd/...

# The Kubernetes minors thinlvm supports (docs/install.md). The newest is
# the product module's (go.mod); each older one's scheduler is built in
# its own module, scheduler/k8s<minor> (docs/scheduler.md), with -tags
# k8s<minor>, and installed by deploy/k8s<minor>.
K8S_NEWEST := 1.37
K8S_OLDER  := 1.34 1.35 1.36

.PHONY: test
test: test-unit test-minors test-fuzz test-images test-monitoring test-vm ## Run all tests: unit and envtest, every minor's scheduler build, short fuzzing, images, alerts, then the suites that boot VMs (real-LVM, csi-sanity, end-to-end, the real node, volumes that move, golden images, faults) and the compatibility suite on the oldest and newest minors.

.PHONY: test-unit
test-unit: ## Unit tests (fakes at the lvm runner and lvmd client), reconciler tests on a real kube-apiserver + etcd, and the Helm chart's tests (lint, values, a server-side dry run).
	@assets=$$(e2e/cluster/build.sh etcd kube-apiserver) && \
	KUBEBUILDER_ASSETS=$$assets $(GO) test -race -count=1 $$($(GO) list ./... | grep -v -e /e2e/ -e /hack/images -e /hack/plugin -e /deploy/monitoring) && \
	cd deploy/chart && CGO_ENABLED=0 KUBEBUILDER_ASSETS=$$assets $(GO) test -trimpath -count=1 ./...   # the Helm chart: lint, values, a server-side dry run
# The chart module builds, vets and tests with build.sh's flags for its
# helm command (no cgo, -trimpath): Helm's packages compile once for all.

# The flags are hack/images' and build.sh's for the same minor
# (-trimpath, no cgo, -tags k8s<minor>): the k8s.io packages a minor's
# test compiles are those its scheduler image and control plane link.
.PHONY: test-minors
test-minors: ## The scheduler for each older Kubernetes minor: the plugin's and the command's unit tests, built in that minor's module.
	@for m in $(K8S_OLDER); do echo "== Kubernetes $$m (scheduler/k8s$$m)"; \
	  cmd=github.com/thinlvm/thinlvm/cmd/thinlvm-scheduler; [ ! -f scheduler/k8s$$m/main.go ] || cmd=.; \
	  (cd scheduler/k8s$$m && CGO_ENABLED=0 $(GO) test -trimpath -tags k8s$$m -count=1 github.com/thinlvm/thinlvm/scheduler/... $$cmd) || exit 1; \
	done

# go test fuzzes one target per package per run. The budgets are execution
# counts, about 10s each here: with a -fuzztime duration, runs with no
# failing input sometimes ended in "context deadline exceeded" from the fuzz
# coordinator (Go 1.26). The image header checks live in their own package,
# node/diskimage/imagefile, which imports no Kubernetes code: instrumented for
# fuzzing, node/golden's dependencies took 5 minutes to build cold.
.PHONY: test-fuzz
test-fuzz: ## Short fuzz runs (about 10s each) of the parsers and validators, seeds included.
	$(GO) test -run '^$$' -fuzz '^FuzzValidateNames$$' -fuzztime 150000x ./api/lvmname/
	$(GO) test -run '^$$' -fuzz '^FuzzParseFullReport$$' -fuzztime 120000x ./lvmd/lvm/
	$(GO) test -run '^$$' -fuzz '^FuzzParseThinDelta$$' -fuzztime 150000x ./lvmd/lvm/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime 50000x ./lvmd/config/
	$(GO) test -run '^$$' -fuzz '^FuzzImageHeader$$' -fuzztime 20000x ./node/diskimage/imagefile/

# The images: OCI layout in bin/images; PUSH=<registry>/<repo> also pushes
# them (<repo>/<name>:<tag>). The node images' Debian packages are pinned in
# hack/images/*.packages and cached in the user cache directory.
PUSH ?=
# The images' tag and the programs' version: VERSION, or for make release
# the tag vX.Y.Z that HEAD carries (git describe), else the chart's
# appVersion.
VERSION ?=
RELEASE_VERSION = $(or $(VERSION),$(shell git describe --tags --exact-match --match 'v[0-9]*' 2>/dev/null))
.PHONY: images
images: ## Build the container images (OCI layout in bin/images), reproducibly; PUSH=<registry>/<repo> pushes them, VERSION=vX.Y.Z tags them.
	$(GO) run ./hack/images -out $(BIN)/images $(if $(PUSH),-push $(PUSH)) $(if $(VERSION),-tag $(VERSION))

.PHONY: images-pin
images-pin: ## Re-pin the node images' Debian packages to what the machine's apt sources offer now.
	$(GO) run ./hack/images -pin

# Everyday tests build the images for this machine's arch only: the other
# arch is a cross-compile of every program, most of a cold build's time.
# `make release` builds and checks them all.
HOSTARCH := $(shell $(GO) env GOARCH)

# The images for this machine's arch in bin/images, built once per make
# run for what needs them: test-images checks them, the VM suites run them.
.PHONY: host-images
host-images:
	$(GO) run ./hack/images -arch $(HOSTARCH) -out $(BIN)/images

.PHONY: test-images
test-images: host-images krew ## The images (this machine's arch): reproducible digests, push and pull, every program starts from the image's own files; the kubectl plugin's archive (reproducible) and krew manifest, installed with krew.
	$(GO) test -count=1 -timeout 20m ./hack/images/ -args -images.arches=$(HOSTARCH) -images.layout=$(BIN)/images
	KREW_TOOLS=$(KREW_TOOLS) $(GO) test -count=1 ./hack/plugin/

.PHONY: plugin
plugin: ## The kubectl plugin's release archives for every platform and krew's manifest for them (bin/plugin/thinlvm.yaml), for VERSION=vX.Y.Z or HEAD's git tag.
	$(GO) run ./hack/plugin -out $(BIN)/plugin $(if $(RELEASE_VERSION),-version $(RELEASE_VERSION))

.PHONY: release
release: plugin ## The images for every arch (OCI layout in bin/images), checked as test-images checks one; tagged VERSION=vX.Y.Z or HEAD's git tag; PUSH=<registry>/<repo> pushes them and packages the chart with their digests pinned (bin/thinlvm-<version>.tgz); the kubectl plugin's archives and krew manifest (make plugin).
	$(GO) run ./hack/images -out $(BIN)/images $(if $(PUSH),-push $(PUSH) -release-file $(BIN)/release.json) $(if $(RELEASE_VERSION),-tag $(RELEASE_VERSION))
	$(if $(PUSH),cd deploy/chart && CGO_ENABLED=0 $(GO) run -trimpath ./package -release $(BIN)/release.json -out $(BIN))
	$(GO) test -count=1 -timeout 40m ./hack/images/ -args -images.arches=amd64,arm64

# promtool, built from its Go module (outside this module's go.mod) into the
# user cache; `go install` skips the build when it is current. The tests use
# no service discovery: remove_all_sd leaves out its cloud SDKs (a cold
# build took 7.3 minutes with them, 2.8 without, its modules downloaded).
PROMTOOL_VERSION := v0.316.0
TOOLS := $(HOME)/.cache/thinlvm/tools
.PHONY: promtool
promtool: ## Build (cached) promtool from github.com/prometheus/prometheus.
	@test -x $(TOOLS)/promtool-$(PROMTOOL_VERSION) || { mkdir -p $(TOOLS) && \
	  GOBIN=$(TOOLS) GOFLAGS=-mod=mod $(GO) install -tags remove_all_sd github.com/prometheus/prometheus/cmd/promtool@$(PROMTOOL_VERSION) && \
	  cp $(TOOLS)/promtool $(TOOLS)/promtool-$(PROMTOOL_VERSION); }

# krew and its manifest validator, built from sigs.k8s.io/krew (outside
# this module's go.mod) into the user cache, for the plugin's archive test.
KREW_VERSION := v0.4.3
KREW_TOOLS := $(TOOLS)/krew-$(KREW_VERSION)
.PHONY: krew
krew: ## Build (cached) krew and validate-krew-manifest from sigs.k8s.io/krew.
	@test -x $(KREW_TOOLS)/validate-krew-manifest || { mkdir -p $(KREW_TOOLS) && \
	  GOBIN=$(KREW_TOOLS) GOFLAGS=-mod=mod $(GO) install sigs.k8s.io/krew/cmd/krew@$(KREW_VERSION) sigs.k8s.io/krew/cmd/validate-krew-manifest@$(KREW_VERSION); }

.PHONY: test-monitoring
test-monitoring: promtool ## The alerts under promtool test rules; the rules, dashboard and PodMonitors against what thinlvm serves.
	PROMTOOL=$(TOOLS)/promtool-$(PROMTOOL_VERSION) $(GO) test -count=1 ./deploy/monitoring/

.PHONY: k8s-bin
k8s-bin: ## Build (cached) etcd and kube-apiserver from Go modules.
	e2e/cluster/build.sh etcd kube-apiserver

.PHONY: lvmvm-image
lvmvm-image: ## Build (cached) the kernel + initramfs of the real-LVM test VM.
	e2e/lvmvm/build-image.sh

# The tests of how lvmd runs lvm and reads what it says (codes from its
# messages, kills, reports, a full pool's metadata, restarts, process
# counts): the only ones whose outcome depends on the runner. The rest run
# the same lvm commands either way; they run once, on the default runner.
# TestVGMetadataFull is among the rest: lvmd refuses before lvm fails (the
# test asserts lvm never does), so no message of lvm's is read, and its 45
# lvcreates took 112 s of the exec run's 325. `make test-lvm-exec
# LVM_RUNNER_TESTS=.` runs every test with the exec runner.
LVM_RUNNER_TESTS := ^(TestIdempotencyAndCodes|TestLVMKilledMidBurst|TestFullReportFromRealLVM|TestPoolMetadataFull|TestReadsStartNoLVMProcess|TestMetrics|TestRestartLosesNothing|TestDeviceClassAppears)$$

.PHONY: test-lvm test-lvm-shell test-lvm-exec
test-lvm: test-lvm-shell test-lvm-exec ## Tests against real lvm2 in a qemu VM: all with lvmd's default lvm runner (the shell), the runner's own tests again with a process per command (one VM each).
test-lvm-shell: lvmvm-image
	$(GO) test -count=1 -timeout 30m ./e2e/lvmvm/... -args -lvmvm.runner=shell
test-lvm-exec: lvmvm-image
	$(GO) test -count=1 -timeout 30m -run '$(LVM_RUNNER_TESTS)' ./e2e/lvmvm/... -args -lvmvm.runner=exec

# The suites that boot VMs, in two lanes run at once, each lane's suites
# one after the other, every line prefixed with its lane. Alone, each
# suite leaves about 40% of the two cores idle (waiting on the API server,
# the kubelet's stand-in, the guests' timers); two at once fill them. The
# lanes are balanced by the suites' minutes in e2e/README.md; e2e, whose
# VM is a real node (on a fresh machine it first builds the kubelet,
# containerd and runc), is the longest suite. The compatibility suite
# (no VM: a control plane and simulated nodes) ends each lane: the newest
# minor's in lane 1, the oldest's (which first builds that minor's control
# plane) in lane 2.
VM_LANE_1 := e2e compat-$(K8S_NEWEST)
VM_LANE_2 := migration test-lvm-exec sanity chaos test-lvm-shell golden-images compat-$(firstword $(K8S_OLDER))
.PHONY: test-vm vm-lane-1 vm-lane-2
test-vm: lvmvm-image host-images ## The suites that boot VMs (real-LVM with both runners, csi-sanity, end-to-end with the real node, volumes that move, golden images, faults) and the compatibility suite on the oldest and newest minors, in two lanes at once.
	@THINLVM_E2E_IMAGES=$(BIN)/images $(MAKE) --no-print-directory -j2 vm-lane-1 vm-lane-2
# A suite that fails has its failed tests and their messages printed again
# at the lane's end (a long log's tail is often all a CI page shows), and
# its whole log is in bin/logs/.
vm-lane-1 vm-lane-2: vm-lane-%:
	@set -o pipefail; mkdir -p $(BIN)/logs; for t in $(VM_LANE_$*); do \
	  $(MAKE) --no-print-directory $$t 2>&1 | tee $(BIN)/logs/$$t.log || { \
	    echo "=== $$t failed; its failed tests (the whole log: bin/logs/$$t.log):"; \
	    awk -f e2e/failed-tests.awk $(BIN)/logs/$$t.log | cut -c1-400 | tail -200; exit 1; }; \
	done 2>&1 | sed -u 's/^/[lane $*] /'

.PHONY: sanity
sanity: lvmvm-image ## The csi-sanity suite: controller on envtest, node service on real lvm2 in the VM.
	@assets=$$(e2e/cluster/build.sh etcd kube-apiserver) && \
	KUBEBUILDER_ASSETS=$$assets $(GO) test -count=1 -timeout 30m ./e2e/sanity/... -ginkgo.no-color

.PHONY: e2e
e2e: lvmvm-image ## End-to-end: local control plane, CSI sidecars, kwok nodes, and the VM as a real node (the kubelet, containerd and runc run deploy/'s DaemonSet and the tests' pods on real lvm2), restarted, frozen and rebooted under its pods; a subset of Kubernetes' storage suite on it.
	$(GO) test -count=1 -timeout 80m -v -run 'Test' ./e2e/cluster/...

# Kubernetes' own storage suite, whole: every External Storage spec of
# thinlvm's test driver (e2e/conformance/driver.yaml) but those
# e2e/conformance/excluded.txt leaves out with its reasons, on the e2e
# suite's test bed (FOCUS=<regexp>: only the specs it matches). make test
# runs the specs of ci-specs.txt (in e2e).
.PHONY: conformance
conformance: lvmvm-image ## Kubernetes' storage end-to-end suite (e2e.test, External Storage) on the real node, every applicable spec (docs/conformance.md); make test runs a subset of it.
	$(GO) test -count=1 -timeout 300m -v -run 'TestKubernetesStorageSuite' ./e2e/cluster/ -args -storagesuite.all $(if $(FOCUS),-storagesuite.focus='$(FOCUS)')

.PHONY: migration
migration: lvmvm-image ## Volumes that move: clones and restores between two real-LVM nodes (two VMs).
	$(GO) test -count=1 -timeout 40m -v -run 'Test' ./e2e/migration/

.PHONY: golden-images
golden-images: lvmvm-image ## Golden images the KubeVirt way on two real-LVM nodes: registry, peers, pvc source, dataSourceRef, channels.
	$(GO) test -count=1 -timeout 40m -v -parallel 5 -run 'Test' ./e2e/images/

.PHONY: chaos
chaos: lvmvm-image ## The fault suite at CI size: operations while components are SIGKILLed; SEED=N replays a storm.
	$(GO) test -count=1 -timeout 40m -v -run 'TestStorm' ./e2e/chaos/ $(if $(SEED),-chaos.seed=$(SEED))

# The compatibility suite on one minor's control plane (compat-1.34, ...);
# `make compat` runs it on every supported minor. It installs through the
# Helm chart, as the other suites do, except on the oldest minor, where it
# applies deploy/k8s<minor> (the kustomize install stays tested).
.PHONY: compat
compat: host-images ## The compatibility suite on the control plane of every supported Kubernetes minor: install, placement and binding.
	@for m in $(K8S_OLDER) $(K8S_NEWEST); do THINLVM_E2E_IMAGES=$(BIN)/images $(MAKE) --no-print-directory compat-$$m || exit 1; done
compat-%:
	$(GO) test -count=1 -timeout 40m -v ./e2e/compat/ -args $(if $(filter $*,$(K8S_NEWEST)),,-compat.minor=$*) $(if $(filter $*,$(firstword $(K8S_OLDER))),-compat.kustomize)

.PHONY: bench
bench: lvmvm-image ## Benchmarks (and every arch's images, checked): lvmd on real lvm2 (ratios), a node full of LVs (about 30 min), lvmd beside TopoLVM's, 100 PVCs to Bound, golden-image VM disks, prewarm with and without peers (NODES=N VMs), scheduler throughput, the 200-operation storm, the controller's GetCapacity against 2,000 LVMNodes, hollow nodes at 1,000 and 2,500 (HOLLOW_SIZES=a,b).
	$(GO) test -count=1 -timeout 40m ./hack/images/ -args -images.arches=amd64,arm64   # every arch's images, as make release checks them
	$(GO) test -count=1 -timeout 75m -run '^$$' -bench . -benchtime 1x ./e2e/lvmvm/...
	cd e2e/bench/topolvm && $(GO) test -count=1 -timeout 40m -run '^$$' -bench . -benchtime 1x ./...
	$(GO) test -count=1 -timeout 45m -run '^$$' -bench . -benchtime 1x ./e2e/cluster/...
	$(GO) test -count=1 -timeout 60m -run '^$$' -bench . -benchtime 1x ./e2e/migration/
	$(GO) test -count=1 -timeout 60m -run '^$$' -bench . -benchtime 1x ./e2e/images/ $(if $(NODES),-images.nodes=$(NODES))
	$(GO) test -count=1 -timeout 90m -run '^$$' -bench . -benchtime 1x ./e2e/chaos/ $(if $(SEED),-chaos.seed=$(SEED))
	$(GO) test -count=1 -run '^$$' -bench . -benchtime 20000x ./scheduler/plugin/...
	$(GO) test -count=1 -timeout 150m -run '^$$' -bench . -benchtime 1x ./e2e/bench/hollow/ $(if $(HOLLOW_SIZES),-hollow.sizes=$(HOLLOW_SIZES))
	@assets=$$(e2e/cluster/build.sh etcd kube-apiserver) && \
	KUBEBUILDER_ASSETS=$$assets $(GO) test -count=1 -timeout 40m -run '^$$' -bench . -benchtime 1x ./e2e/bench/scheduler/...   # 1,000 and 5,000 nodes, about 10 min
	@assets=$$(e2e/cluster/build.sh etcd kube-apiserver) && \
	KUBEBUILDER_ASSETS=$$assets $(GO) test -count=1 -timeout 10m -run '^$$' -bench . -benchtime 2000x ./controller/csi/

.PHONY: demo
demo: lvmvm-image ## A local cluster and a real node (kubelet, containerd) on real lvm2 in a VM, thinlvm installed from deploy/, VM disks from a golden image read by pods.
	$(GO) run ./e2e/demo
