module github.com/thinlvm/thinlvm/scheduler/k8s1.34

go 1.26.0

// The thinlvm scheduler for Kubernetes 1.34: the scheduler of
// sigs.k8s.io/scheduler-plugins (which pins Kubernetes 1.34) with ThinLVM
// registered beside its plugins (main.go). Built with -tags k8s1.34 (the
// plugin's framework_k8s134.go). The tools are the 1.34 control plane the
// compatibility suite runs (e2e/compat), built from this module so that
// they share its compiled k8s.io packages.

tool (
	k8s.io/kubernetes/cmd/kube-apiserver
	k8s.io/kubernetes/cmd/kube-controller-manager
	k8s.io/kubernetes/cmd/kube-scheduler
	k8s.io/kubernetes/cmd/kubectl
)

require github.com/thinlvm/thinlvm v0.0.0

require (
	k8s.io/component-base v0.37.2
	k8s.io/kubernetes v1.37.2
	sigs.k8s.io/scheduler-plugins v0.34.7
)

require (
	cel.dev/expr v0.25.2 // indirect
	dario.cat/mergo v1.0.1 // indirect
	github.com/Azure/go-ansiterm v0.0.0-20250102033503-faa5f7b0171c // indirect
	github.com/JeffAshton/win_pdh v0.0.0-20161109143554-76bb4ee9f0ab // indirect
	github.com/MakeNowJust/heredoc v1.0.0 // indirect
	github.com/Microsoft/go-winio v0.6.2 // indirect
	github.com/NYTimes/gziphandler v1.1.1 // indirect
	github.com/OneOfOne/xxhash v1.2.8 // indirect
	github.com/antlr4-go/antlr/v4 v4.13.1 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/blang/semver/v4 v4.0.0 // indirect
	github.com/cenkalti/backoff/v4 v4.3.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/chai2010/gettext-go v1.0.2 // indirect
	github.com/container-storage-interface/spec v1.13.0 // indirect
	github.com/containerd/containerd/api v1.11.1 // indirect
	github.com/containerd/errdefs v1.0.0 // indirect
	github.com/containerd/errdefs/pkg v0.3.0 // indirect
	github.com/containerd/log v0.1.0 // indirect
	github.com/containerd/ttrpc v1.2.9 // indirect
	github.com/containerd/typeurl/v2 v2.2.3 // indirect
	github.com/containers/common v0.62.3 // indirect
	github.com/coreos/go-oidc v2.5.0+incompatible // indirect
	github.com/coreos/go-semver v0.3.1 // indirect
	github.com/coreos/go-systemd/v22 v22.7.0 // indirect
	github.com/crossplane/crossplane-runtime v1.20.0 // indirect
	github.com/cyphar/filepath-securejoin v0.7.0 // indirect
	github.com/davecgh/go-spew v1.1.2-0.20180830191138-d8f796af33cc // indirect
	github.com/diktyo-io/appgroup-api v1.0.1-alpha // indirect
	github.com/diktyo-io/networktopology-api v1.0.1-alpha // indirect
	github.com/distribution/reference v0.6.0 // indirect
	github.com/docker/go-units v0.5.0 // indirect
	github.com/dustin/go-humanize v1.0.1 // indirect
	github.com/emicklei/go-restful/v3 v3.13.0 // indirect
	github.com/euank/go-kmsg-parser v2.0.0+incompatible // indirect
	github.com/evanphx/json-patch/v5 v5.9.11 // indirect
	github.com/exponent-io/jsonpath v0.0.0-20210407135951-1de76d718b3f // indirect
	github.com/fatih/camelcase v1.0.0 // indirect
	github.com/felixge/httpsnoop v1.0.4 // indirect
	github.com/francoispqt/gojay v1.2.13 // indirect
	github.com/fsnotify/fsnotify v1.9.0 // indirect
	github.com/fxamacker/cbor/v2 v2.9.1 // indirect
	github.com/go-errors/errors v1.4.2 // indirect
	github.com/go-logr/logr v1.4.3 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/go-logr/zapr v1.3.0 // indirect
	github.com/go-openapi/jsonpointer v1.0.0 // indirect
	github.com/go-openapi/jsonreference v1.0.0 // indirect
	github.com/go-openapi/swag v0.27.1 // indirect
	github.com/godbus/dbus/v5 v5.2.2 // indirect
	github.com/gogo/protobuf v1.3.2 // indirect
	github.com/golang-jwt/jwt/v5 v5.3.1 // indirect
	github.com/golang/protobuf v1.5.4 // indirect
	github.com/google/btree v1.1.3 // indirect
	github.com/google/cadvisor v0.52.1 // indirect
	github.com/google/cel-go v0.29.2 // indirect
	github.com/google/gnostic-models v0.7.1 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/gorilla/websocket v1.5.4-0.20250319132907-e064f32e3674 // indirect
	github.com/gregjones/httpcache v0.0.0-20190611155906-901d90724c79 // indirect
	github.com/grpc-ecosystem/go-grpc-prometheus v1.2.0 // indirect
	github.com/grpc-ecosystem/grpc-gateway/v2 v2.29.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/jonboulle/clockwork v0.5.0 // indirect
	github.com/josharian/intern v1.0.0 // indirect
	github.com/jpillora/backoff v1.0.0 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/k8stopologyawareschedwg/noderesourcetopology-api v0.1.2 // indirect
	github.com/k8stopologyawareschedwg/podfingerprint v0.2.2 // indirect
	github.com/karrick/godirwalk v1.17.0 // indirect
	github.com/kylelemons/godebug v1.1.0 // indirect
	github.com/libopenstorage/openstorage v1.0.0 // indirect
	github.com/liggitt/tabwriter v0.0.0-20181228230101-89fcab3d43de // indirect
	github.com/lithammer/dedent v1.1.0 // indirect
	github.com/mailru/easyjson v0.7.7 // indirect
	github.com/mistifyio/go-zfs v2.1.2-0.20190413222219-f784269be439+incompatible // indirect
	github.com/mitchellh/go-wordwrap v1.0.1 // indirect
	github.com/moby/spdystream v0.5.1 // indirect
	github.com/moby/sys/mountinfo v0.7.2 // indirect
	github.com/moby/sys/userns v0.1.0 // indirect
	github.com/moby/term v0.5.2 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.3-0.20250322232337-35a7c28c31ee // indirect
	github.com/mohae/deepcopy v0.0.0-20170929034955-c48cc78d4826 // indirect
	github.com/monochromegane/go-gitignore v0.0.0-20200626010858-205db1a8cc00 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/mwitkow/go-conntrack v0.0.0-20190716064945-2f068394615f // indirect
	github.com/mxk/go-flowrate v0.0.0-20140419014527-cca7078d478f // indirect
	github.com/opencontainers/cgroups v0.0.7 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	github.com/opencontainers/runtime-spec v1.3.0 // indirect
	github.com/opencontainers/selinux v1.15.1 // indirect
	github.com/patrickmn/go-cache v2.1.0+incompatible // indirect
	github.com/paypal/load-watcher v0.2.4 // indirect
	github.com/peterbourgon/diskv v2.0.1+incompatible // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/pmezard/go-difflib v1.0.1-0.20181226105442-5d4384ee4fb2 // indirect
	github.com/pquerna/cachecontrol v0.1.0 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
	github.com/russross/blackfriday/v2 v2.1.0 // indirect
	github.com/seccomp/libseccomp-golang v0.10.0 // indirect
	github.com/sirupsen/logrus v1.9.4 // indirect
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.10 // indirect
	github.com/stoewer/go-strcase v1.3.0 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	github.com/xlab/treeprint v1.2.0 // indirect
	go.etcd.io/etcd/api/v3 v3.7.0 // indirect
	go.etcd.io/etcd/client/pkg/v3 v3.7.0 // indirect
	go.etcd.io/etcd/client/v3 v3.7.0 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc v0.68.0 // indirect
	go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp v0.69.0 // indirect
	go.opentelemetry.io/otel v1.44.0 // indirect
	go.opentelemetry.io/otel/exporters/otlp/otlptrace v1.44.0 // indirect
	go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc v1.44.0 // indirect
	go.opentelemetry.io/otel/metric v1.44.0 // indirect
	go.opentelemetry.io/otel/sdk v1.44.0 // indirect
	go.opentelemetry.io/otel/trace v1.44.0 // indirect
	go.opentelemetry.io/proto/otlp v1.10.0 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	go.uber.org/zap v1.27.1 // indirect
	go.yaml.in/yaml/v2 v2.4.4 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/exp v0.0.0-20260410095643-746e56fc9e2f // indirect
	golang.org/x/net v0.59.0 // indirect
	golang.org/x/oauth2 v0.37.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/term v0.46.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	golang.org/x/time v0.15.0 // indirect
	golang.org/x/tools v0.51.0 // indirect
	gonum.org/v1/gonum v0.17.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20260526163538-3dc84a4a5aaa // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260526163538-3dc84a4a5aaa // indirect
	google.golang.org/grpc v1.83.1 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
	gopkg.in/evanphx/json-patch.v4 v4.13.0 // indirect
	gopkg.in/go-jose/go-jose.v2 v2.6.3 // indirect
	gopkg.in/inf.v0 v0.9.1 // indirect
	gopkg.in/natefinch/lumberjack.v2 v2.2.1 // indirect
	gopkg.in/yaml.v2 v2.4.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
	k8s.io/api v0.37.2 // indirect
	k8s.io/apiextensions-apiserver v0.37.0 // indirect
	k8s.io/apimachinery v0.37.2 // indirect
	k8s.io/apiserver v0.37.2 // indirect
	k8s.io/cli-runtime v0.37.2 // indirect
	k8s.io/client-go v0.37.2 // indirect
	k8s.io/cloud-provider v0.37.2 // indirect
	k8s.io/cluster-bootstrap v0.0.0 // indirect
	k8s.io/component-helpers v0.37.2 // indirect
	k8s.io/controller-manager v0.37.2 // indirect
	k8s.io/cri-api v0.37.2 // indirect
	k8s.io/cri-client v0.0.0 // indirect
	k8s.io/csi-translation-lib v0.32.5 // indirect
	k8s.io/dynamic-resource-allocation v0.37.2 // indirect
	k8s.io/endpointslice v0.0.0 // indirect
	k8s.io/externaljwt v0.0.0 // indirect
	k8s.io/klog/v2 v2.140.0 // indirect
	k8s.io/kms v0.37.2 // indirect
	k8s.io/kube-aggregator v0.0.0 // indirect
	k8s.io/kube-controller-manager v0.0.0 // indirect
	k8s.io/kube-openapi v0.0.0-20260721132016-d427ff9ee9ad // indirect
	k8s.io/kube-scheduler v0.34.7 // indirect
	k8s.io/kubectl v0.0.0 // indirect
	k8s.io/kubelet v0.37.2 // indirect
	k8s.io/metrics v0.37.2 // indirect
	k8s.io/mount-utils v0.37.2 // indirect
	k8s.io/pod-security-admission v0.0.0 // indirect
	k8s.io/utils v0.0.0-20260626114624-be93311217bd // indirect
	sigs.k8s.io/apiserver-network-proxy/konnectivity-client v0.36.0 // indirect
	sigs.k8s.io/controller-runtime v0.25.2 // indirect
	sigs.k8s.io/json v0.0.0-20250730193827-2d320260d730 // indirect
	sigs.k8s.io/kustomize/api v0.21.1 // indirect
	sigs.k8s.io/kustomize/kustomize/v5 v5.8.1 // indirect
	sigs.k8s.io/kustomize/kyaml v0.21.1 // indirect
	sigs.k8s.io/randfill v1.0.0 // indirect
	sigs.k8s.io/release-utils v0.3.0 // indirect
	sigs.k8s.io/security-profiles-operator v0.4.0 // indirect
	sigs.k8s.io/structured-merge-diff/v6 v6.4.2 // indirect
	sigs.k8s.io/yaml v1.6.0 // indirect
)

replace github.com/thinlvm/thinlvm => ../..

// The product module's controller-runtime and Prometheus client are newer
// than Kubernetes 1.34 and scheduler-plugins' load-watcher compile
// against: back to the versions scheduler-plugins v0.34.7 pins.
replace (
	github.com/prometheus/client_golang => github.com/prometheus/client_golang v1.22.0
	github.com/prometheus/common => github.com/prometheus/common v0.62.0
	sigs.k8s.io/controller-runtime => sigs.k8s.io/controller-runtime v0.22.3
)

// Every k8s.io module at Kubernetes 1.34.7, but those the module proxy
// serves only at an earlier 1.34 patch, pinned to the newest it serves.
replace (
	k8s.io/api => k8s.io/api v0.34.7
	k8s.io/apiextensions-apiserver => k8s.io/apiextensions-apiserver v0.34.7
	k8s.io/apimachinery => k8s.io/apimachinery v0.34.7
	k8s.io/apiserver => k8s.io/apiserver v0.34.7
	k8s.io/cli-runtime => k8s.io/cli-runtime v0.34.5
	k8s.io/client-go => k8s.io/client-go v0.34.7
	k8s.io/cloud-provider => k8s.io/cloud-provider v0.34.7
	k8s.io/cluster-bootstrap => k8s.io/cluster-bootstrap v0.34.5
	k8s.io/code-generator => k8s.io/code-generator v0.34.6
	k8s.io/component-base => k8s.io/component-base v0.34.7
	k8s.io/component-helpers => k8s.io/component-helpers v0.34.7
	k8s.io/controller-manager => k8s.io/controller-manager v0.34.7
	k8s.io/cri-api => k8s.io/cri-api v0.34.5
	k8s.io/cri-client => k8s.io/cri-client v0.34.5
	k8s.io/csi-translation-lib => k8s.io/csi-translation-lib v0.34.5
	k8s.io/dynamic-resource-allocation => k8s.io/dynamic-resource-allocation v0.34.7
	k8s.io/endpointslice => k8s.io/endpointslice v0.34.5
	k8s.io/externaljwt => k8s.io/externaljwt v0.34.5
	k8s.io/kms => k8s.io/kms v0.34.7
	k8s.io/kube-aggregator => k8s.io/kube-aggregator v0.34.5
	k8s.io/kube-controller-manager => k8s.io/kube-controller-manager v0.34.5
	k8s.io/kube-proxy => k8s.io/kube-proxy v0.34.5
	k8s.io/kube-scheduler => k8s.io/kube-scheduler v0.34.7
	k8s.io/kubectl => k8s.io/kubectl v0.34.5
	k8s.io/kubelet => k8s.io/kubelet v0.34.7
	k8s.io/kubernetes => k8s.io/kubernetes v1.34.7
	k8s.io/metrics => k8s.io/metrics v0.34.7
	k8s.io/mount-utils => k8s.io/mount-utils v0.34.7
	k8s.io/pod-security-admission => k8s.io/pod-security-admission v0.34.7
	k8s.io/sample-apiserver => k8s.io/sample-apiserver v0.34.3
	k8s.io/sample-cli-plugin => k8s.io/sample-cli-plugin v0.34.1
	k8s.io/sample-controller => k8s.io/sample-controller v0.34.3
)

// Every other module Kubernetes 1.34.7 requires at the version it
// requires: the product module's newer ones do not build 1.34's
// kube-apiserver and kube-controller-manager (the CSI spec, runc's
// cgroups).
replace (
	bitbucket.org/bertimus9/systemstat => bitbucket.org/bertimus9/systemstat v0.5.0
	cel.dev/expr => cel.dev/expr v0.24.0
	github.com/Azure/go-ansiterm => github.com/Azure/go-ansiterm v0.0.0-20230124172434-306776ec8161
	github.com/JeffAshton/win_pdh => github.com/JeffAshton/win_pdh v0.0.0-20161109143554-76bb4ee9f0ab
	github.com/MakeNowJust/heredoc => github.com/MakeNowJust/heredoc v1.0.0
	github.com/Microsoft/go-winio => github.com/Microsoft/go-winio v0.6.2
	github.com/Microsoft/hnslib => github.com/Microsoft/hnslib v0.1.1
	github.com/NYTimes/gziphandler => github.com/NYTimes/gziphandler v1.1.1
	github.com/antlr4-go/antlr/v4 => github.com/antlr4-go/antlr/v4 v4.13.0
	github.com/armon/circbuf => github.com/armon/circbuf v0.0.0-20190214190532-5111143e8da2
	github.com/armon/go-socks5 => github.com/armon/go-socks5 v0.0.0-20160902184237-e75332964ef5
	github.com/beorn7/perks => github.com/beorn7/perks v1.0.1
	github.com/blang/semver/v4 => github.com/blang/semver/v4 v4.0.0
	github.com/cenkalti/backoff/v4 => github.com/cenkalti/backoff/v4 v4.3.0
	github.com/cespare/xxhash/v2 => github.com/cespare/xxhash/v2 v2.3.0
	github.com/chai2010/gettext-go => github.com/chai2010/gettext-go v1.0.2
	github.com/container-storage-interface/spec => github.com/container-storage-interface/spec v1.9.0
	github.com/containerd/containerd/api => github.com/containerd/containerd/api v1.8.0
	github.com/containerd/errdefs => github.com/containerd/errdefs v1.0.0
	github.com/containerd/errdefs/pkg => github.com/containerd/errdefs/pkg v0.3.0
	github.com/containerd/log => github.com/containerd/log v0.1.0
	github.com/containerd/ttrpc => github.com/containerd/ttrpc v1.2.6
	github.com/containerd/typeurl/v2 => github.com/containerd/typeurl/v2 v2.2.2
	github.com/coredns/caddy => github.com/coredns/caddy v1.1.1
	github.com/coredns/corefile-migration => github.com/coredns/corefile-migration v1.0.26
	github.com/coreos/go-oidc => github.com/coreos/go-oidc v2.3.0+incompatible
	github.com/coreos/go-semver => github.com/coreos/go-semver v0.3.1
	github.com/coreos/go-systemd/v22 => github.com/coreos/go-systemd/v22 v22.5.0
	github.com/cpuguy83/go-md2man/v2 => github.com/cpuguy83/go-md2man/v2 v2.0.6
	github.com/cyphar/filepath-securejoin => github.com/cyphar/filepath-securejoin v0.4.1
	github.com/davecgh/go-spew => github.com/davecgh/go-spew v1.1.1
	github.com/distribution/reference => github.com/distribution/reference v0.6.0
	github.com/docker/go-units => github.com/docker/go-units v0.5.0
	github.com/dustin/go-humanize => github.com/dustin/go-humanize v1.0.1
	github.com/emicklei/go-restful/v3 => github.com/emicklei/go-restful/v3 v3.12.2
	github.com/euank/go-kmsg-parser => github.com/euank/go-kmsg-parser v2.0.0+incompatible
	github.com/exponent-io/jsonpath => github.com/exponent-io/jsonpath v0.0.0-20210407135951-1de76d718b3f
	github.com/fatih/camelcase => github.com/fatih/camelcase v1.0.0
	github.com/felixge/httpsnoop => github.com/felixge/httpsnoop v1.0.4
	github.com/fsnotify/fsnotify => github.com/fsnotify/fsnotify v1.9.0
	github.com/fxamacker/cbor/v2 => github.com/fxamacker/cbor/v2 v2.9.0
	github.com/go-errors/errors => github.com/go-errors/errors v1.4.2
	github.com/go-logr/logr => github.com/go-logr/logr v1.4.3
	github.com/go-logr/stdr => github.com/go-logr/stdr v1.2.2
	github.com/go-logr/zapr => github.com/go-logr/zapr v1.3.0
	github.com/go-openapi/jsonpointer => github.com/go-openapi/jsonpointer v0.21.0
	github.com/go-openapi/jsonreference => github.com/go-openapi/jsonreference v0.20.2
	github.com/go-openapi/swag => github.com/go-openapi/swag v0.23.0
	github.com/go-task/slim-sprig/v3 => github.com/go-task/slim-sprig/v3 v3.0.0
	github.com/godbus/dbus/v5 => github.com/godbus/dbus/v5 v5.1.0
	github.com/gogo/protobuf => github.com/gogo/protobuf v1.3.2
	github.com/golang-jwt/jwt/v5 => github.com/golang-jwt/jwt/v5 v5.2.2
	github.com/golang/protobuf => github.com/golang/protobuf v1.5.4
	github.com/google/btree => github.com/google/btree v1.1.3
	github.com/google/cadvisor => github.com/google/cadvisor v0.52.1
	github.com/google/cel-go => github.com/google/cel-go v0.26.0
	github.com/google/gnostic-models => github.com/google/gnostic-models v0.7.0
	github.com/google/go-cmp => github.com/google/go-cmp v0.7.0
	github.com/google/pprof => github.com/google/pprof v0.0.0-20241029153458-d1b30febd7db
	github.com/google/uuid => github.com/google/uuid v1.6.0
	github.com/gorilla/websocket => github.com/gorilla/websocket v1.5.4-0.20250319132907-e064f32e3674
	github.com/gregjones/httpcache => github.com/gregjones/httpcache v0.0.0-20190611155906-901d90724c79
	github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus => github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus v1.0.1
	github.com/grpc-ecosystem/go-grpc-middleware/v2 => github.com/grpc-ecosystem/go-grpc-middleware/v2 v2.3.0
	github.com/grpc-ecosystem/go-grpc-prometheus => github.com/grpc-ecosystem/go-grpc-prometheus v1.2.0
	github.com/grpc-ecosystem/grpc-gateway/v2 => github.com/grpc-ecosystem/grpc-gateway/v2 v2.26.3
	github.com/inconshreveable/mousetrap => github.com/inconshreveable/mousetrap v1.1.0
	github.com/ishidawataru/sctp => github.com/ishidawataru/sctp v0.0.0-20250521072954-ae8eb7fa7995
	github.com/jonboulle/clockwork => github.com/jonboulle/clockwork v0.5.0
	github.com/josharian/intern => github.com/josharian/intern v1.0.0
	github.com/json-iterator/go => github.com/json-iterator/go v1.1.12
	github.com/karrick/godirwalk => github.com/karrick/godirwalk v1.17.0
	github.com/kylelemons/godebug => github.com/kylelemons/godebug v1.1.0
	github.com/libopenstorage/openstorage => github.com/libopenstorage/openstorage v1.0.0
	github.com/liggitt/tabwriter => github.com/liggitt/tabwriter v0.0.0-20181228230101-89fcab3d43de
	github.com/lithammer/dedent => github.com/lithammer/dedent v1.1.0
	github.com/mailru/easyjson => github.com/mailru/easyjson v0.7.7
	github.com/mistifyio/go-zfs => github.com/mistifyio/go-zfs v2.1.2-0.20190413222219-f784269be439+incompatible
	github.com/mitchellh/go-wordwrap => github.com/mitchellh/go-wordwrap v1.0.1
	github.com/moby/ipvs => github.com/moby/ipvs v1.1.0
	github.com/moby/spdystream => github.com/moby/spdystream v0.5.1
	github.com/moby/sys/mountinfo => github.com/moby/sys/mountinfo v0.7.2
	github.com/moby/sys/userns => github.com/moby/sys/userns v0.1.0
	github.com/moby/term => github.com/moby/term v0.5.0
	github.com/modern-go/concurrent => github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd
	github.com/modern-go/reflect2 => github.com/modern-go/reflect2 v1.0.3-0.20250322232337-35a7c28c31ee
	github.com/mohae/deepcopy => github.com/mohae/deepcopy v0.0.0-20170929034955-c48cc78d4826
	github.com/monochromegane/go-gitignore => github.com/monochromegane/go-gitignore v0.0.0-20200626010858-205db1a8cc00
	github.com/mrunalp/fileutils => github.com/mrunalp/fileutils v0.5.1
	github.com/munnerz/goautoneg => github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822
	github.com/mxk/go-flowrate => github.com/mxk/go-flowrate v0.0.0-20140419014527-cca7078d478f
	github.com/onsi/ginkgo/v2 => github.com/onsi/ginkgo/v2 v2.21.0
	github.com/onsi/gomega => github.com/onsi/gomega v1.35.1
	github.com/opencontainers/cgroups => github.com/opencontainers/cgroups v0.0.1
	github.com/opencontainers/go-digest => github.com/opencontainers/go-digest v1.0.0
	github.com/opencontainers/image-spec => github.com/opencontainers/image-spec v1.1.1
	github.com/opencontainers/runtime-spec => github.com/opencontainers/runtime-spec v1.2.0
	github.com/opencontainers/selinux => github.com/opencontainers/selinux v1.11.1
	github.com/peterbourgon/diskv => github.com/peterbourgon/diskv v2.0.1+incompatible
	github.com/pkg/errors => github.com/pkg/errors v0.9.1
	github.com/pmezard/go-difflib => github.com/pmezard/go-difflib v1.0.0
	github.com/pquerna/cachecontrol => github.com/pquerna/cachecontrol v0.1.0
	github.com/prometheus/client_model => github.com/prometheus/client_model v0.6.1
	github.com/prometheus/procfs => github.com/prometheus/procfs v0.15.1
	github.com/robfig/cron/v3 => github.com/robfig/cron/v3 v3.0.1
	github.com/russross/blackfriday/v2 => github.com/russross/blackfriday/v2 v2.1.0
	github.com/sirupsen/logrus => github.com/sirupsen/logrus v1.9.3
	github.com/soheilhy/cmux => github.com/soheilhy/cmux v0.1.5
	github.com/spf13/cobra => github.com/spf13/cobra v1.9.1
	github.com/spf13/pflag => github.com/spf13/pflag v1.0.6
	github.com/stoewer/go-strcase => github.com/stoewer/go-strcase v1.3.0
	github.com/stretchr/objx => github.com/stretchr/objx v0.5.2
	github.com/stretchr/testify => github.com/stretchr/testify v1.11.1
	github.com/tmc/grpc-websocket-proxy => github.com/tmc/grpc-websocket-proxy v0.0.0-20220101234140-673ab2c3ae75
	github.com/vishvananda/netlink => github.com/vishvananda/netlink v1.3.1
	github.com/vishvananda/netns => github.com/vishvananda/netns v0.0.5
	github.com/x448/float16 => github.com/x448/float16 v0.8.4
	github.com/xiang90/probing => github.com/xiang90/probing v0.0.0-20221125231312-a49e3df8f510
	github.com/xlab/treeprint => github.com/xlab/treeprint v1.2.0
	go.etcd.io/bbolt => go.etcd.io/bbolt v1.4.2
	go.etcd.io/etcd/api/v3 => go.etcd.io/etcd/api/v3 v3.6.4
	go.etcd.io/etcd/client/pkg/v3 => go.etcd.io/etcd/client/pkg/v3 v3.6.4
	go.etcd.io/etcd/client/v3 => go.etcd.io/etcd/client/v3 v3.6.4
	go.etcd.io/etcd/pkg/v3 => go.etcd.io/etcd/pkg/v3 v3.6.4
	go.etcd.io/etcd/server/v3 => go.etcd.io/etcd/server/v3 v3.6.4
	go.etcd.io/raft/v3 => go.etcd.io/raft/v3 v3.6.0
	go.opentelemetry.io/auto/sdk => go.opentelemetry.io/auto/sdk v1.2.1
	go.opentelemetry.io/contrib/instrumentation/github.com/emicklei/go-restful/otelrestful => go.opentelemetry.io/contrib/instrumentation/github.com/emicklei/go-restful/otelrestful v0.44.0
	go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc => go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc v0.60.0
	go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp => go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp v0.58.0
	go.opentelemetry.io/otel => go.opentelemetry.io/otel v1.41.0
	go.opentelemetry.io/otel/exporters/otlp/otlptrace => go.opentelemetry.io/otel/exporters/otlp/otlptrace v1.34.0
	go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc => go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc v1.34.0
	go.opentelemetry.io/otel/metric => go.opentelemetry.io/otel/metric v1.41.0
	go.opentelemetry.io/otel/sdk => go.opentelemetry.io/otel/sdk v1.34.0
	go.opentelemetry.io/otel/trace => go.opentelemetry.io/otel/trace v1.41.0
	go.opentelemetry.io/proto/otlp => go.opentelemetry.io/proto/otlp v1.5.0
	go.uber.org/goleak => go.uber.org/goleak v1.3.0
	go.uber.org/multierr => go.uber.org/multierr v1.11.0
	go.uber.org/zap => go.uber.org/zap v1.27.0
	go.yaml.in/yaml/v2 => go.yaml.in/yaml/v2 v2.4.2
	go.yaml.in/yaml/v3 => go.yaml.in/yaml/v3 v3.0.4
	golang.org/x/crypto => golang.org/x/crypto v0.36.0
	golang.org/x/exp => golang.org/x/exp v0.0.0-20240719175910-8a7402abbf56
	golang.org/x/mod => golang.org/x/mod v0.21.0
	golang.org/x/net => golang.org/x/net v0.38.0
	golang.org/x/oauth2 => golang.org/x/oauth2 v0.27.0
	golang.org/x/sync => golang.org/x/sync v0.12.0
	golang.org/x/sys => golang.org/x/sys v0.31.0
	golang.org/x/term => golang.org/x/term v0.30.0
	golang.org/x/text => golang.org/x/text v0.23.0
	golang.org/x/time => golang.org/x/time v0.9.0
	golang.org/x/tools => golang.org/x/tools v0.26.0
	google.golang.org/genproto/googleapis/api => google.golang.org/genproto/googleapis/api v0.0.0-20250303144028-a0af3efb3deb
	google.golang.org/genproto/googleapis/rpc => google.golang.org/genproto/googleapis/rpc v0.0.0-20250303144028-a0af3efb3deb
	google.golang.org/grpc => google.golang.org/grpc v1.72.1
	google.golang.org/protobuf => google.golang.org/protobuf v1.36.5
	gopkg.in/evanphx/json-patch.v4 => gopkg.in/evanphx/json-patch.v4 v4.12.0
	gopkg.in/go-jose/go-jose.v2 => gopkg.in/go-jose/go-jose.v2 v2.6.3
	gopkg.in/inf.v0 => gopkg.in/inf.v0 v0.9.1
	gopkg.in/natefinch/lumberjack.v2 => gopkg.in/natefinch/lumberjack.v2 v2.2.1
	gopkg.in/yaml.v3 => gopkg.in/yaml.v3 v3.0.1
	k8s.io/gengo/v2 => k8s.io/gengo/v2 v2.0.0-20250604051438-85fd79dbfd9f
	k8s.io/klog/v2 => k8s.io/klog/v2 v2.130.1
	k8s.io/kube-openapi => k8s.io/kube-openapi v0.0.0-20250710124328-f3f2b991d03b
	k8s.io/system-validators => k8s.io/system-validators v1.10.2
	k8s.io/utils => k8s.io/utils v0.0.0-20250604170112-4c0f3b243397
	sigs.k8s.io/apiserver-network-proxy/konnectivity-client => sigs.k8s.io/apiserver-network-proxy/konnectivity-client v0.31.2
	sigs.k8s.io/json => sigs.k8s.io/json v0.0.0-20241014173422-cfa47c3a1cc8
	sigs.k8s.io/knftables => sigs.k8s.io/knftables v0.0.21
	sigs.k8s.io/kustomize/api => sigs.k8s.io/kustomize/api v0.20.1
	sigs.k8s.io/kustomize/kustomize/v5 => sigs.k8s.io/kustomize/kustomize/v5 v5.7.1
	sigs.k8s.io/kustomize/kyaml => sigs.k8s.io/kustomize/kyaml v0.20.1
	sigs.k8s.io/randfill => sigs.k8s.io/randfill v1.0.0
	sigs.k8s.io/structured-merge-diff/v6 => sigs.k8s.io/structured-merge-diff/v6 v6.3.0
	sigs.k8s.io/yaml => sigs.k8s.io/yaml v1.6.0
)
