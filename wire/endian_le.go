//go:build 386 || amd64 || amd64p32 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm

package wire

// NativeLittleEndian reports whether this host stores float32 values
// little-endian in memory, so that a []float32 already is its wire form
// (see Float32Bytes).
const NativeLittleEndian = true
