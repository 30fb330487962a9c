package collnet

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/shoalml/shoal/proto/shoalpb"
)

// rawJoin calls Join on the rendezvous at master as a hand-made client.
func rawJoin(t *testing.T, ctx context.Context, master string, req *pb.JoinRequest) (*pb.JoinResponse, error) {
	cc, err := grpc.NewClient(master, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer cc.Close()
	return pb.NewRendezvousClient(cc).Join(ctx, req, grpc.WaitForReady(true))
}

func assertStatus(t *testing.T, err error, code codes.Code, contains string, msgAndArgs ...any) {
	t.Helper()
	if assert.Equal(t, code, status.Code(err), append([]any{"%v"}, err)...) {
		assert.ErrorContains(t, err, contains, msgAndArgs...)
	}
}

func TestRendezvousErrors(t *testing.T) {
	tests := []struct {
		name string
		edit func(cfgs []Config) []Config
		// wantCode and wantMsg by rank (of the edited configs).
		wantCode []codes.Code
		wantMsg  []string
	}{
		{
			name:     "world size differs",
			edit:     func(c []Config) []Config { c[1].Size = 3; return c },
			wantCode: []codes.Code{codes.DeadlineExceeded, codes.InvalidArgument},
			wantMsg:  []string{"ranks [1] of 2 never joined", "world size 3, rank 0 has 2"},
		},
		{
			name:     "job id differs",
			edit:     func(c []Config) []Config { c[1].JobID = "other"; return c },
			wantCode: []codes.Code{codes.DeadlineExceeded, codes.InvalidArgument},
			wantMsg:  []string{"ranks [1] of 2 never joined", `joins job "other"`},
		},
		{
			name: "missing rank",
			edit: func(c []Config) []Config {
				for i := range c {
					c[i].Size = 4
				}
				return c[:2] // ranks 2 and 3 never come
			},
			wantCode: []codes.Code{codes.DeadlineExceeded, codes.DeadlineExceeded},
			wantMsg:  []string{"ranks [2 3] of 4 never joined", "ranks [2 3] of 4 never joined"},
		},
		{
			name: "duplicate rank",
			edit: func(c []Config) []Config {
				for i := range c {
					c[i].Size = 3
				}
				return append(c, c[1]) // two rank 1s, no rank 2
			},
			// One of the two rank 1s is refused at once; which one is a
			// race, so both are checked together below.
			wantCode: []codes.Code{codes.DeadlineExceeded},
			wantMsg:  []string{"ranks [2] of 3 never joined"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // each waits for its deadline
			cfgs := tt.edit(groupConfigs(t, 2, false))
			ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
			defer cancel()
			// The answers carry the server's message (checked below), so
			// they came before the callers' deadline.
			ts, errs := connectAll(t, ctx, cfgs)
			for r, err := range errs {
				assert.Nil(t, ts[r], "rank %d", r)
				if r < len(tt.wantCode) {
					assertStatus(t, err, tt.wantCode[r], tt.wantMsg[r], "rank %d", r)
				}
			}
			if tt.name == "duplicate rank" {
				got := []codes.Code{status.Code(errs[1]), status.Code(errs[2])}
				assert.ElementsMatch(t, []codes.Code{codes.InvalidArgument, codes.DeadlineExceeded}, got)
				for _, err := range errs[1:] {
					if status.Code(err) == codes.InvalidArgument {
						assert.ErrorContains(t, err, "two processes were given rank 1")
					}
				}
			}
		})
	}
}

// TestRendezvousBadRequests sends requests no Config can make.
func TestRendezvousBadRequests(t *testing.T) {
	cfgs := groupConfigs(t, 2, false)
	master := cfgs[0].MasterListener.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var rank0Err error
	wg.Go(func() {
		var tr interface{ Close() error }
		tr, rank0Err = Connect(ctx, cfgs[0])
		if tr != nil {
			tr.Close()
		}
	})
	defer wg.Wait()
	defer cancel()
	tests := []struct {
		name string
		req  *pb.JoinRequest
		want string
	}{
		{"rank too big", &pb.JoinRequest{JobId: t.Name(), Rank: 2, WorldSize: 2, DataAddress: "127.0.0.1:1"}, "rank 2 not in [0, 2)"},
		{"negative rank", &pb.JoinRequest{JobId: t.Name(), Rank: -1, WorldSize: 2, DataAddress: "127.0.0.1:1"}, "rank -1 not in [0, 2)"},
		{"no address", &pb.JoinRequest{JobId: t.Name(), Rank: 1, WorldSize: 2}, "gave no data address"},
		{"bad address", &pb.JoinRequest{JobId: t.Name(), Rank: 1, WorldSize: 2, DataAddress: "nope"}, "missing port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := rawJoin(t, ctx, master, tt.req)
			assertStatus(t, err, codes.InvalidArgument, tt.want)
		})
	}
	cancel()
	wg.Wait()
	assert.Error(t, rank0Err)
}

// TestRendezvousRetry: a Join repeated word for word waits with the first
// instead of being refused as a duplicate; a Join whose caller gives up
// no longer counts.
func TestRendezvousRetry(t *testing.T) {
	r := newRendezvous("job", 3, testLogger(t))
	req := func(rank int) *pb.JoinRequest {
		return &pb.JoinRequest{JobId: "job", Rank: int32(rank), WorldSize: 3, DataAddress: "10.0.0.1:1", HostId: "h"}
	}
	// Rank 2 joins and gives up.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err := r.Join(ctx, req(2))
	cancel()
	assertStatus(t, err, codes.DeadlineExceeded, "ranks [0 1] of 3 never joined")

	ctx = ctxT(t, 10*time.Second)
	var wg sync.WaitGroup
	resps := make([]*pb.JoinResponse, 4)
	errs := make([]error, 4)
	for i, rank := range []int{0, 1, 1, 2} {
		wg.Go(func() { resps[i], errs[i] = r.Join(ctx, req(rank)) })
	}
	wg.Wait()
	for i := range errs {
		require.NoError(t, errs[i])
		require.Len(t, resps[i].Ranks, 3)
		for rank, ri := range resps[i].Ranks {
			assert.Equal(t, int32(rank), ri.Rank)
			assert.Equal(t, "10.0.0.1:1", ri.DataAddress)
		}
	}
}

func TestFillHost(t *testing.T) {
	tests := []struct{ addr, ip, want string }{
		{":80", "10.0.0.2", "10.0.0.2:80"},
		{"0.0.0.0:80", "10.0.0.2", "10.0.0.2:80"},
		{"[::]:80", "fe80::1", "[fe80::1]:80"},
		{"10.0.0.3:80", "10.0.0.2", "10.0.0.3:80"},
		{"node7:80", "10.0.0.2", "node7:80"},
		{":80", "", ":80"},
	}
	for _, tt := range tests {
		t.Run(tt.addr+"/"+tt.ip, func(t *testing.T) {
			assert.Equal(t, tt.want, fillHost(tt.addr, tt.ip))
		})
	}
}

// TestMasterNotUp: a rank that starts before rank 0 retries until rank 0
// serves the rendezvous.
func TestMasterNotUp(t *testing.T) {
	cfgs := groupConfigs(t, 2, false)
	lis := cfgs[0].MasterListener
	cfgs[0].MasterListener = nil
	cfgs[0].Master = lis.Addr().String()

	ctx := ctxT(t, 20*time.Second)
	var wg sync.WaitGroup
	var tr1 interface{ Close() error }
	var err1 error
	wg.Go(func() { tr1, err1 = Connect(ctx, cfgs[1]) })
	// Until rank 0 is up, the master's port drops every connection; once
	// rank 1 has been turned away, rank 0 takes the port over.
	c, err := lis.Accept()
	require.NoError(t, err)
	c.Close()
	require.NoError(t, lis.Close())
	tr0, err0 := Connect(ctx, cfgs[0])
	wg.Wait()
	require.NoError(t, err0)
	require.NoError(t, err1)
	assert.NoError(t, tr0.Close())
	assert.NoError(t, tr1.Close())
}
