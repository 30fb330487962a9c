// Package archtest holds tests of the tree's shape: which package may
// import which (ARCHITECTURE.md's layers, bottom up), and how thin the
// top layer, cmd/shoal, stays. It has no code of its own; its tests read
// the sources with go/build and go/parser, so they need no built binary.
package archtest
