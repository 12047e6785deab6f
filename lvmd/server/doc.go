// Package server is lvmd's gRPC services (LVService, VGService) over the lvm
// command layer. It serialises every lvm mutation, answers every read from one
// cached lvm report refreshed after mutations, and makes gRPC status codes at
// its edge only. It imports nothing of Kubernetes.
package server
