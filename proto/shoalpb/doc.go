// Package shoalpb holds Shoal's wire API: ps.proto and the Go code protoc
// generates from it (committed; regenerate with `make generate`).
package shoalpb
