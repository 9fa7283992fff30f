// Package dsortpb holds the distributed sort's protocol: dsort.proto and the
// Go code protoc generates from it, committed: dsort.pb.go (the messages)
// and dsort_grpc.pb.go (the Master and Worker services). Regenerate them
// with `go generate ./dsort/...`, which needs protoc on PATH.
package dsortpb

//go:generate protoc --plugin=protoc-gen-go=./protoc-gen-go.sh --plugin=protoc-gen-go-grpc=./protoc-gen-go-grpc.sh --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative dsort.proto
