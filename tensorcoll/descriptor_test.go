package tensorcoll

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDescriptorRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		d    Descriptor
	}{
		{"allreduce", Descriptor{Kind: KindAllreduce, DType: Float16, Op: Max, Compression: 2, Bytes: 1 << 40, Name: "grad.bucket.0.fc1.weight"}},
		{"broadcast", Descriptor{Kind: KindBroadcast, DType: Int64, Root: 3, Bytes: 8, Name: "n"}},
		{"allgather", Descriptor{Kind: KindAllgather, DType: Uint8, Bytes: 12, RowBytes: 3}},
		{"barrier", Descriptor{Kind: KindBarrier}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := make([]byte, descriptorBytes)
			tc.d.put(b)
			got, err := parseDescriptor(b)
			require.NoError(t, err)
			assert.Equal(t, tc.d, got)
		})
	}
}

func TestDescribeTruncatesLongNames(t *testing.T) {
	long := make([]byte, 2*MaxNameLen)
	for i := range long {
		long[i] = 'a'
	}
	d := describe(&Request{Kind: KindBarrier, Name: string(long)})
	assert.Len(t, d.Name, MaxNameLen)
}

// FuzzParseDescriptor feeds parseDescriptor what a peer could send: it
// must return an error or a descriptor that puts back to the same bytes
// it was read from (up to the unused bytes), never panic.
func FuzzParseDescriptor(f *testing.F) {
	seed := make([]byte, descriptorBytes)
	Descriptor{Kind: KindAllreduce, DType: Float32, Bytes: 4096, Name: "x"}.put(seed)
	f.Add(seed)
	bad := make([]byte, descriptorBytes)
	bad[39] = 255
	f.Add(bad)
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < descriptorBytes {
			return
		}
		d, err := parseDescriptor(b[:descriptorBytes])
		if err != nil {
			return
		}
		again := make([]byte, descriptorBytes)
		d.put(again)
		d2, err := parseDescriptor(again)
		require.NoError(t, err)
		assert.Equal(t, d, d2)
		_ = d.String()
	})
}
