package ps

import (
	"context"
	"encoding/binary"
	"math"
	"testing"

	"github.com/shoalml/shoal/shard"
)

// FuzzPush feeds the shard arbitrary pushes (ranges and values decoded
// from the fuzzer's bytes, as they would arrive off the wire): it must
// never panic, and a rejected push must change nothing.
func FuzzPush(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 16, 0, 0, 0}, []byte{0, 0, 128, 63})
	f.Add([]byte{4, 0, 0, 0, 4, 0, 0, 0, 12, 0, 0, 0, 4, 0, 0, 0}, []byte{0, 0, 192, 127})
	f.Add([]byte{255, 255, 255, 127, 1, 0, 0, 0}, []byte{})
	f.Fuzz(func(t *testing.T, rangeBytes, gradBytes []byte) {
		s := newTestServer(t, 16, 2, 0, 4) // owns [0,4) and [8,12)
		var rs []shard.Range
		for len(rangeBytes) >= 8 && len(rs) < 8 {
			off := int(int32(binary.LittleEndian.Uint32(rangeBytes)))
			n := int(int32(binary.LittleEndian.Uint32(rangeBytes[4:])))
			rs = append(rs, shard.Range{Off: off, Len: n})
			rangeBytes = rangeBytes[8:]
		}
		grads := make([]float32, len(gradBytes)/4)
		for i := range grads {
			grads[i] = math.Float32frombits(binary.LittleEndian.Uint32(gradBytes[4*i:]))
		}
		before := readAll(t, s)
		_, err := s.Push(context.Background(), signed(s, Push{WorkerID: 1, Step: 1, Ranges: rs, Grads: grads}))
		if err != nil {
			after := readAll(t, s)
			for i := range before {
				if math.Float32bits(before[i]) != math.Float32bits(after[i]) {
					t.Fatalf("rejected push (%v) changed index %d: %v -> %v", err, i, before[i], after[i])
				}
			}
			if s.Clock() != 0 {
				t.Fatalf("rejected push advanced the clock")
			}
		}
	})
}
