//go:build 386 || amd64 || amd64p32 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm

package collective

// nativeLittleEndian reports whether float32 values are stored
// little-endian in memory, so that a []float32 already is its wire form.
const nativeLittleEndian = true
