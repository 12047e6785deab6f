module github.com/thinlvm/thinlvm/e2e/bench/topolvm

go 1.26.0

require (
	github.com/google/go-cmp v0.7.0
	github.com/thinlvm/thinlvm v0.0.0
	github.com/topolvm/topolvm v0.41.0
	google.golang.org/grpc v1.83.1
)

require (
	github.com/container-storage-interface/spec v1.13.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	golang.org/x/net v0.59.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260526163538-3dc84a4a5aaa // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace github.com/thinlvm/thinlvm => ../../..
