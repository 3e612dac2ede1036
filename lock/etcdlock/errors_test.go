package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpuexec/gpuexec/lock"
)

// A first contact that failed is told by the error's code, as the etcd
// client gives it (a context error, a gRPC status or an etcd server
// error), never by its words.
func TestUnreachableIsToldByCode(t *testing.T) {
	for _, tc := range []struct {
		err         error
		unreachable bool
		words       string
	}{
		{context.DeadlineExceeded, true, "did not answer within 2s"},
		{fmt.Errorf("dialing: %w", context.DeadlineExceeded), true, "did not answer within 2s"},
		{status.Error(codes.DeadlineExceeded, "context deadline exceeded"), true, "did not answer within 2s"},
		{status.Error(codes.Unavailable, "connection refused"), true, "connection refused"},
		{rpctypes.ErrNoLeader, true, "no leader"},
		{rpctypes.ErrPermissionDenied, false, "permission denied"},
		{errors.New("at least one Endpoint is required in client config"), false, "at least one Endpoint"},
	} {
		err := unreachable("h:2379", 2*time.Second, tc.err)
		if errors.Is(err, lock.ErrUnreachable) != tc.unreachable || !strings.Contains(err.Error(), tc.words) {
			t.Errorf("unreachable(%v) = %v", tc.err, err)
		}
	}
}

func TestCodeOf(t *testing.T) {
	if c := codeOf(rpctypes.ErrLeaseNotFound); c != codes.NotFound {
		t.Errorf("codeOf(ErrLeaseNotFound) = %v", c)
	}
	if c := codeOf(fmt.Errorf("x: %w", status.Error(codes.Unavailable, "y"))); c != codes.Unavailable {
		t.Errorf("codeOf(a wrapped status) = %v", c)
	}
	if c := codeOf(errors.New("z")); c != codes.Unknown {
		t.Errorf("codeOf(a plain error) = %v", c)
	}
}
