//go:build !cgo

// Command libshoal needs cgo: it is built with -buildmode=c-shared (see
// main.go). Without cgo it is an empty program, so that CGO_ENABLED=0
// builds of ./... pass.
package main

func main() {}
