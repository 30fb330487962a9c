package elastic

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/shoalml/shoal/proto/shoalpb"
)

// Secret derives the job's Elastic secret from its gossip key: the members
// that gossip under the key (and only they) can sign their Reform requests.
func Secret(gossipKey []byte) []byte {
	m := hmac.New(sha256.New, gossipKey)
	m.Write([]byte("shoal elastic reform v1"))
	return m.Sum(nil)
}

// sign sets req.Auth: HMAC-SHA256 under secret of req's other fields,
// marshalled deterministically. A nil secret leaves req unsigned.
func sign(secret []byte, req *pb.ReformRequest) error {
	req.Auth = nil
	if secret == nil {
		return nil
	}
	mac, err := reformMAC(secret, req)
	req.Auth = mac
	return err
}

// verify checks req.Auth under secret (nil: anything goes).
func verify(secret []byte, req *pb.ReformRequest) error {
	if secret == nil {
		return nil
	}
	auth := req.Auth
	req.Auth = nil
	want, err := reformMAC(secret, req)
	req.Auth = auth
	if err != nil {
		return status.Errorf(codes.Internal, "elastic: %v", err)
	}
	if !hmac.Equal(auth, want) {
		return status.Errorf(codes.PermissionDenied, "elastic: a Reform for member %d without the job's signature (its members sign with a secret from the job's gossip key): refused", req.Member)
	}
	return nil
}

func reformMAC(secret []byte, req *pb.ReformRequest) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("signing a Reform: %w", err)
	}
	m := hmac.New(sha256.New, secret)
	m.Write(b)
	return m.Sum(nil), nil
}
