package shoalpb

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/shoalml/shoal/wire"
)

func TestEncodingWire(t *testing.T) {
	tests := []struct {
		name   string
		in     Encoding
		want   wire.Encoding
		wantOK bool
	}{
		{name: "float32", in: Encoding_FLOAT32, want: wire.Float32, wantOK: true},
		{name: "float16", in: Encoding_FLOAT16, want: wire.Float16, wantOK: true},
		{name: "bfloat16", in: Encoding_BFLOAT16, want: wire.BFloat16, wantOK: true},
		{name: "int8", in: Encoding_INT8, want: wire.Int8, wantOK: true},
		{name: "unknown", in: Encoding(7), want: wire.Float32, wantOK: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.in.Wire()
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.wantOK, ok)
		})
	}
	assert.Len(t, Encoding_name, 4, "every Encoding of ps.proto has a case in Wire")
}
