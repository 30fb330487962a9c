package collnet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"

	"github.com/shoalml/shoal/collective"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/secure"
)

// reportTimeout bounds FirstFailure's call to rank 0.
const reportTimeout = 3 * time.Second

// FirstFailure reports err, a collective's failure on transport tr (a
// transport from Connect) that names a peer, to the job's record on rank 0,
// and returns err annotated with the first failure any rank reported. A
// rank must call it before closing tr: in a ring, a rank further along
// sees only the neighbour that exited because of the dead rank, and the
// record lets it name the dead rank instead. If rank 0 cannot be reached,
// the annotation says so (rank 0 may be the rank that failed). Errors that
// name no peer, and other transports, are returned unchanged.
func FirstFailure(tr collective.Transport, err error) error {
	t, ok := tr.(*transport)
	var pe *collective.PeerError
	if !ok || !errors.As(err, &pe) || t.size < 2 {
		return err
	}
	req := &pb.FailureReport{JobId: t.jobID, Reporter: int32(t.rank), FailedRank: int32(pe.Rank), Message: err.Error()}
	ctx, cancel := context.WithTimeout(context.Background(), reportTimeout)
	defer cancel()
	var first *pb.FailureReport
	var rerr error
	if t.rv != nil {
		first, rerr = t.rv.Report(ctx, req)
	} else {
		first, rerr = reportRemote(ctx, t.master, req, t.sec)
	}
	switch {
	case rerr != nil && t.rank != 0 && pe.Rank == 0:
		return err
	case rerr != nil:
		return fmt.Errorf("%w (rank 0, which keeps the job's record of failures, did not answer: it may be the rank that failed: %v)", err, rerr)
	case first.Reporter == req.Reporter && first.FailedRank == req.FailedRank:
		return err // this rank saw the first failure itself
	}
	return fmt.Errorf("%w (the first failure: rank %d, reported by rank %d: %s)", err, first.FailedRank, first.Reporter, first.Message)
}

func reportRemote(ctx context.Context, master string, req *pb.FailureReport, sec *secure.Credentials) (*pb.FailureReport, error) {
	cc, err := grpc.NewClient(master, sec.DialOptions()...)
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	return pb.NewRendezvousClient(cc).Report(ctx, req)
}
