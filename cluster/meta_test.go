package cluster

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMetaRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		meta Meta
	}{
		{"worker", Meta{Role: RoleWorker, Rank: 3, GRPCAddr: "10.0.0.7:7001", DataAddr: "10.0.0.7:7101", ModelFingerprint: 0xdeadbeefcafef00d, PlanVersion: 2}},
		{"ps without data plane", Meta{Role: RolePS, Rank: 0, GRPCAddr: "[::1]:6000"}},
		{"leaving", Meta{Role: RoleWorker, Rank: 1, GRPCAddr: "h:1", Leaving: true}},
		{"largest rank", Meta{Role: RoleWorker, Rank: 1<<31 - 1, GRPCAddr: "h:1", PlanVersion: 1 << 63}},
		{"addresses filling the cap", Meta{Role: RolePS, Rank: 1, GRPCAddr: strings.Repeat("a", 240), DataAddr: strings.Repeat("b", 240)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.meta.Encode()
			require.NoError(t, err)
			assert.LessOrEqual(t, len(b), MaxMetaSize)
			got, err := DecodeMeta(b)
			require.NoError(t, err)
			assert.Equal(t, tt.meta, got)
		})
	}
}

func TestMetaEncodeRefuses(t *testing.T) {
	tests := []struct {
		name    string
		meta    Meta
		wantErr error
		wantMsg string
	}{
		{"no role", Meta{Rank: 1, GRPCAddr: "h:1"}, ErrMetaInvalid, "role Role(0), want ps or worker"},
		{"negative rank", Meta{Role: RoleWorker, Rank: -1}, ErrMetaInvalid, "rank -1"},
		{"rank over int32", Meta{Role: RoleWorker, Rank: 1 << 31}, ErrMetaInvalid, "rank 2147483648"},
		{"too large", Meta{Role: RolePS, GRPCAddr: strings.Repeat("a", 300), DataAddr: strings.Repeat("b", 300)}, ErrMetaTooLarge, "want at most 512"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.meta.Encode()
			require.ErrorIs(t, err, tt.wantErr)
			assert.Contains(t, err.Error(), tt.wantMsg)
		})
	}
}

func TestDecodeMetaRefuses(t *testing.T) {
	good, err := Meta{Role: RoleWorker, Rank: 2, GRPCAddr: "h:1", DataAddr: "h:2", ModelFingerprint: 7, PlanVersion: 1}.Encode()
	require.NoError(t, err)
	tests := []struct {
		name    string
		in      []byte
		wantErr error
		wantMsg string
	}{
		{"empty", nil, ErrMetaInvalid, "empty"},
		{"unknown version", append([]byte{2}, good[1:]...), ErrMetaVersion, "version 2, want 1"},
		{"version zero", []byte{0}, ErrMetaVersion, "version 0, want 1"},
		{"truncated after version", good[:1], ErrMetaInvalid, "role at offset 1: truncated"},
		{"truncated fingerprint", good[:len(good)-3], ErrMetaInvalid, "model fingerprint"},
		{"trailing bytes", append(bytes.Clone(good), 0), ErrMetaInvalid, "1 trailing bytes"},
		{"unknown role", append([]byte{1, 9}, good[2:]...), ErrMetaInvalid, "role Role(9)"},
		{"unknown flags", append([]byte{1, 2, 0x82}, good[3:]...), ErrMetaInvalid, "flags 0x82, want only 0x01 set"},
		{"address longer than input", []byte{1, 2, 0, 0, 50, 'h'}, ErrMetaInvalid, "gRPC address at offset 5: length 50, only 1 bytes left"},
		{"non-minimal varint", []byte{1, 2, 0, 0x80, 0x00}, ErrMetaInvalid, "want the minimal encoding"},
		{"oversized", make([]byte, MaxMetaSize+1), ErrMetaTooLarge, "513 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeMeta(tt.in)
			require.ErrorIs(t, err, tt.wantErr)
			assert.Contains(t, err.Error(), tt.wantMsg)
		})
	}
}

// FuzzDecodeMeta: Decode never panics, and whatever it accepts re-encodes to
// the same bytes (so there is one encoding per Meta).
func FuzzDecodeMeta(f *testing.F) {
	for _, m := range []Meta{
		{Role: RoleWorker, Rank: 3, GRPCAddr: "10.0.0.7:7001", DataAddr: "10.0.0.7:7101", ModelFingerprint: 1<<64 - 1, PlanVersion: 300},
		{Role: RolePS, GRPCAddr: "h:1"},
	} {
		b, err := m.Encode()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{2, 1})
	f.Add([]byte{1, 2, 0, 0x80, 0x00})
	f.Add([]byte{1, 1, 1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := DecodeMeta(in)
		if err != nil {
			if !errors.Is(err, ErrMetaInvalid) && !errors.Is(err, ErrMetaVersion) && !errors.Is(err, ErrMetaTooLarge) {
				t.Fatalf("DecodeMeta(%x): error %v wraps none of the sentinels", in, err)
			}
			return
		}
		out, err := m.Encode()
		if err != nil {
			t.Fatalf("DecodeMeta(%x) = %+v, which Encode refuses: %v", in, m, err)
		}
		if !bytes.Equal(out, in) {
			t.Fatalf("DecodeMeta(%x) = %+v re-encodes as %x", in, m, out)
		}
	})
}
